#!/usr/bin/env bash
# `make bench`: criterion benches of the core (and of the client's local fallback), then the
# server benchmarks (scripts/bench.py) against INCR/GET/SET PXAT, the design's Lua script and
# redis-cell, written to benches/RESULTS.md. Expects `cargo build --release` done (make does it).
#
# Environment (all optional):
#   BENCH_SECONDS=5 BENCH_QUICK_SECONDS=1 BENCH_REPS=3 BENCH_CLIENTS=50 BENCH_KEYS=100000
#   BENCH_MEMORY_KEYS=100000 BENCH_ONLY="SET 25 B PXAT,RL.SLIDING"   (see scripts/bench.py)
#   BENCH_CRITERION=0   skip the criterion benches
#   BENCH_SERVER=0      skip the server benches (criterion only)
#   RL_SERVER=redis-server   the server binary
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARGO=${CARGO:-cargo}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
CELL_VERSION=0.2.2
CELL_SO=$TARGET/redis-cell-$CELL_VERSION/libredis_cell.so

# redis-cell from crates.io, built once and cached under target/ (its code is never committed).
build_redis_cell() {
  [ -f "$CELL_SO" ] && return 0
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
if [ "${BENCH_CRITERION:-1}" != 0 ]; then
  echo "== criterion: core decisions"
  $CARGO bench -q -p redis-rl-core --bench core
  if [ -f client/benches/fallback.rs ] && grep -q '"client"' Cargo.toml; then
    echo "== criterion: client local fallback"
    $CARGO bench -q -p redis-rl-client --bench fallback
  fi
fi

if [ "${BENCH_SERVER:-1}" != 0 ]; then
  echo "== server benchmarks on $(${RL_SERVER:-redis-server} --version)"
  RL_MODULE="$TARGET/release/libredis_rl.so" RL_CELL="$CELL_SO" \
    BENCH_CRITERION_SINCE="$since" BENCH_CRITERION_DIR="$TARGET/criterion" \
    BENCH_RAW="$TARGET/bench/results.json" \
    python3 scripts/bench.py
else
  BENCH_CRITERION_SINCE="$since" BENCH_CRITERION_DIR="$TARGET/criterion" \
    BENCH_RAW="$TARGET/bench/results.json" python3 scripts/bench.py --report-only
fi
