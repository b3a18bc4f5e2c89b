#!/usr/bin/env bash
# make dist-node: the npm package of node/ with its prebuilt addon (Linux x86_64, glibc 2.17 and
# later: make node-build links it with zig) as dist/redis-rl-<version>.tgz. npm pack runs in a
# copy of the files node/package.json lists, beside the repository's LICENSE and
# THIRD-PARTY-NOTICES.md (npm packs no file from outside the package's directory), then
# dist/SHA256SUMS is written again over every artifact.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIST=${DIST:-$root/dist}
mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
addon=$root/node/redis-rl.linux-x64-gnu.node
[ -f "$addon" ] || { echo "$addon missing: run make node-build" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
files=$(node -p 'require(process.argv[1]).files.join("\n")' "$root/node/package.json")
cp "$root/node/package.json" "$stage/"
while read -r f; do
  [ -e "$root/node/$f" ] && cp -r "$root/node/$f" "$stage/"
done <<<"$files"
cp "$root/LICENSE" "$root/THIRD-PARTY-NOTICES.md" "$stage/"
rm -f "$DIST"/redis-rl-*.tgz
(cd "$stage" && npm pack --silent --pack-destination "$DIST" >/dev/null)
bash "$root/scripts/dist_sums.sh" "$DIST"
ls "$DIST"/redis-rl-*.tgz
