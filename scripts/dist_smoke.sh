#!/usr/bin/env bash
# make test-dist: the artifacts of dist/ as a user gets them. Checks SHA256SUMS, starts
# redis-server from the module tarball's redis.conf, installs the wheel into a fresh virtual
# environment with no cargo or rustc on PATH, and runs scripts/dist_smoke.py against it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIST=${DIST:-$root/dist}
SERVER=${RL_SERVER:-redis-server}
work=$(mktemp -d)
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

(cd "$DIST" && sha256sum --quiet -c SHA256SUMS)
tar -C "$work" -xzf "$DIST"/libredis_rl-*-linux-x86_64.tar.gz
moddir=$(echo "$work"/libredis_rl-*)
port=$(python3 "$root/scripts/ports.py")
(cd "$moddir" && exec "$SERVER" ./redis.conf --port "$port" --bind 127.0.0.1 --daemonize no >"$work/server.log" 2>&1) &
server_pid=$!
for _ in $(seq 100); do redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -p "$port" MODULE LIST | grep -q '^rl$' || { cat "$work/server.log"; echo "the module tarball did not load" >&2; exit 1; }

# A PATH with the system's tools only: no ~/.cargo/bin.
clean_path=/usr/local/bin:/usr/bin:/bin
if env PATH=$clean_path sh -c 'command -v cargo || command -v rustc' >/dev/null; then
  clean_path=/usr/bin:/bin
fi
python=$(command -v python3)
env PATH=$clean_path "$python" -m venv "$work/venv"
env PATH="$work/venv/bin:$clean_path" "$work/venv/bin/pip" install -q --disable-pip-version-check "$DIST"/redis_rl-*.whl
cd "$work" && env PATH="$work/venv/bin:$clean_path" "$work/venv/bin/python" "$root/scripts/dist_smoke.py" "$port"
