#!/usr/bin/env bash
# Where does the server's time go for one command? Builds the module with debug info, starts
# redis-server on a free loopback port, drives the command with redis-benchmark (50 clients,
# pipeline 16, 100k random keys) and samples the server with `perf record --call-graph dwarf`,
# then prints the call tree under the module's command handler.
#
#   scripts/profile.sh RL.TOKENBUCKET 'rl:__rand_int__' 1000000000 1 1000
#   PROFILE_ROOT=RM_Replicate PROFILE_DEPTH=4 scripts/profile.sh RL.SLIDING 'rl:__rand_int__' 1000000000 60000
#
# Needs `perf` (Debian: linux-perf). Output: target/profile/<command>.{data,txt}.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,10p "$0"; exit 2; }
TARGET=${CARGO_TARGET_DIR:-$PWD/target}/profile-build
OUT=$PWD/target/profile
mkdir -p "$OUT"
CARGO_TARGET_DIR=$TARGET CARGO_PROFILE_RELEASE_DEBUG=true ${CARGO:-cargo} build --release -q
name=$(echo "$1" | tr 'A-Z.' 'a-z_')
port=$(python3 scripts/ports.py)  # outside the kernel's ephemeral range
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning --logfile /dev/null \
  --loadmodule "$TARGET/release/libredis_rl.so" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
bench() { redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -P 16 -r 100000 -q -n "$1" "${@:2}"; }
bench 300000 "$@" >/dev/null                       # warm-up: create the keys
bench 100000000 "$@" >/dev/null 2>&1 & load=$!
sleep 1
perf record -F 2000 --call-graph dwarf,16384 -o "$OUT/$name.data" -p "$server" -- sleep "${PROFILE_SECONDS:-5}" \
  >/dev/null 2>&1
kill "$load" 2>/dev/null || true
perf script -i "$OUT/$name.data" 2>/dev/null > "$OUT/$name.txt"
python3 scripts/perf_tree.py "$OUT/$name.txt" "${PROFILE_ROOT:-RedisModuleCommandDispatcher}" "${PROFILE_DEPTH:-14}" "${PROFILE_MIN_PCT:-0.4}"
