#!/usr/bin/env bash
# make dist-node: the npm package of node/ with its prebuilt addon (Linux x86_64, glibc) as
# dist/redis-rl-<version>.tgz (npm pack: the files node/package.json lists).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIST=${DIST:-$root/dist}
mkdir -p "$DIST"
cd "$root/node"
[ -f redis-rl.linux-x64-gnu.node ] || { echo "node/redis-rl.linux-x64-gnu.node missing: run make node-build" >&2; exit 1; }
npm pack --silent --pack-destination "$DIST" >/dev/null
ls "$DIST"/redis-rl-*.tgz
