#!/usr/bin/env bash
# make dist: release artifacts in dist/ (docs/src/operations.md, "Release artifacts"), every
# binary linked for x86_64 glibc 2.17 and later (RHEL/CentOS 7, Amazon Linux 2, Debian 11,
# Ubuntu 20.04 and newer) without containers: zig as the C compiler and linker, from PyPI
# (cargo-zigbuild and ziglang for the module and rl-gateway, maturin --zig for the wheel;
# the Node addon is built so by make node-build).
#   libredis_rl-<version>-linux-x86_64.tar.gz   the module, install.sh PREFIX, a systemd unit,
#                                               README, CHANGELOG, LICENSE, THIRD-PARTY-NOTICES
#   rl-gateway-<version>-linux-x86_64.tar.gz    the gateway binary (TLS by rustls), an example
#                                               gateway.toml, systemd units per mode, the same docs
#   redis_rl-<version>-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
#                                               the Python package (CPython 3.9+), no Rust needed
#   redis-rl-<version>.tgz                      the npm package with its prebuilt addon
#                                               (scripts/dist_node.sh)
#   SHA256SUMS                                  sha256sum -c SHA256SUMS
# The version is [workspace.package] version in Cargo.toml (scripts/check_versions.py).
# The zig builds share one target directory, target/zig (scripts/zig_env.sh), kept between
# runs. A source tree without .git: set RL_GIT_COMMIT.
# Usage: scripts/dist.sh [module] [gateway] [wheel] [node]   (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
PYTHON=${PYTHON:-python3}
DIST=${DIST:-dist}
parts=" ${*:-module gateway wheel node} "
GLIBC=2.17

python3 scripts/check_versions.py >/dev/null
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "${RL_GIT_COMMIT:-unknown}")

# shellcheck source=scripts/zig_env.sh
source scripts/zig_env.sh
# redis-module generates its bindings with libclang at build time; under zig its headers are
# not found, so bindgen reads the host's (the types redismodule.h uses have one layout on
# x86_64 glibc whatever its version). Linking is zig's, against glibc 2.17.
clang_include="$(clang -print-resource-dir)/include"
# (The variable's name holds dashes, which bash cannot export: env passes it.)
bindgen_env=(env "BINDGEN_EXTRA_CLANG_ARGS_${ZIG_TRIPLE%%.*}=-I$clang_include -I/usr/include/x86_64-linux-gnu -I/usr/include")

# dist/ holds exactly what this run builds: no artifact of another commit stays beside them.
rm -rf "$DIST"
mkdir -p "$DIST"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
docs=(README.md CHANGELOG.md LICENSE THIRD-PARTY-NOTICES.md)

# The module and rl-gateway in one cargo invocation: their crates compile side by side on
# every core, where one after the other leaves a core idle while each links.
packages=()
case $parts in *" module "*) packages+=(-p redis-rl) ;; esac
case $parts in *" gateway "*) packages+=(-p rl-gateway) ;; esac
if [ ${#packages[@]} -gt 0 ]; then
  echo "dist: ${packages[*]} for glibc $GLIBC"
  "${bindgen_env[@]}" $CARGO zigbuild --release --target "$ZIG_TRIPLE" "${packages[@]}"
fi

for part in $parts; do
  case $part in
  module)
    name=libredis_rl-$version-linux-x86_64
    mkdir -p "$stage/$name"
    cp "$ZIG_OUT/libredis_rl.so" "${docs[@]}" deploy/install.sh deploy/systemd/redis-rl.service "$stage/$name/"
    echo "$version (commit $commit)" > "$stage/$name/VERSION"
    tar -C "$stage" -czf "$DIST/$name.tar.gz" "$name"
    ;;
  gateway)
    name=rl-gateway-$version-linux-x86_64
    mkdir -p "$stage/$name"
    cp "$ZIG_OUT/rl-gateway" "${docs[@]}" deploy/gateway/gateway.toml deploy/systemd/rl-gateway-*.service "$stage/$name/"
    echo "$version (commit $commit)" > "$stage/$name/VERSION"
    strip "$stage/$name/rl-gateway" 2>/dev/null || true
    tar -C "$stage" -czf "$DIST/$name.tar.gz" "$name"
    ;;
  wheel)
    echo "dist: the Python wheel (manylinux2014: glibc $GLIBC)"
    bash scripts/build_wheel.sh "$DIST"
    ;;
  node)
    DIST=$DIST bash scripts/dist_node.sh
    ;;
  *) echo "dist: unknown part '$part' (module, gateway, wheel or node)" >&2; exit 1 ;;
  esac
done
bash scripts/dist_sums.sh "$DIST"
echo "dist: version $version (commit $commit)"
(cd "$DIST" && cat SHA256SUMS)
