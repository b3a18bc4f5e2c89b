#!/usr/bin/env bash
# make dist: release artifacts in dist/ (docs/src/operations.md, "Release artifacts"), every
# binary linked for x86_64 glibc 2.17 and later (RHEL/CentOS 7, Amazon Linux 2, Debian 11,
# Ubuntu 20.04 and newer) without containers: zig as the C compiler and linker, from PyPI
# (cargo-zigbuild and ziglang for the module and rl-gateway, maturin --zig for the wheel).
#   libredis_rl-<version>-linux-x86_64.tar.gz   the module, install.sh PREFIX, a systemd unit,
#                                               README, CHANGELOG, LICENSE, THIRD-PARTY-NOTICES
#   rl-gateway-<version>-linux-x86_64.tar.gz    the gateway binary (TLS by rustls), an example
#                                               gateway.toml, systemd units per mode, the same docs
#   redis_rl-<version>-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
#                                               the Python package (CPython 3.9+), no Rust needed
#   SHA256SUMS                                  sha256sum -c SHA256SUMS
# The version is [workspace.package] version in Cargo.toml (scripts/check_versions.py).
# The zig builds have their own target directory (target/x86_64-unknown-linux-gnu), shared by
# the three parts and kept between runs. A source tree without .git: set RL_GIT_COMMIT.
# Usage: scripts/dist.sh [module] [gateway] [wheel]   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
PYTHON=${PYTHON:-python3}
DIST=${DIST:-dist}
parts=${*:-module gateway wheel}
TRIPLE=x86_64-unknown-linux-gnu
GLIBC=2.17
OUT=target/$TRIPLE/release

python3 scripts/check_versions.py >/dev/null
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "${RL_GIT_COMMIT:-unknown}")

# The build tools, pinned, in a virtual environment of their own (the artifacts' users need
# none of them): about 25 s to install, once.
venv=target/dist-venv
DIST_PIP=("maturin==1.16.0" "cargo-zigbuild==0.24.0" "ziglang==0.17.0")
if ! "$venv/bin/python" -m pip show -q "${DIST_PIP[@]%%==*}" >/dev/null 2>&1; then
  echo "dist: installing ${DIST_PIP[*]} (PyPI) into $venv"
  [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${DIST_PIP[@]}"
fi
export PATH="$PWD/$venv/bin:$PATH"
# redis-module generates its bindings with libclang at build time; under zig its headers are
# not found, so bindgen reads the host's (the types redismodule.h uses have one layout on
# x86_64 glibc whatever its version). Linking is zig's, against glibc 2.17.
clang_include="$(clang -print-resource-dir)/include"
export "BINDGEN_EXTRA_CLANG_ARGS_$TRIPLE=-I$clang_include -I/usr/include/x86_64-linux-gnu -I/usr/include"

mkdir -p "$DIST"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
docs=(README.md CHANGELOG.md LICENSE THIRD-PARTY-NOTICES.md)

for part in $parts; do
  case $part in
  module)
    echo "dist: the module for glibc $GLIBC"
    $CARGO zigbuild --release --target "$TRIPLE.$GLIBC"
    name=libredis_rl-$version-linux-x86_64
    mkdir -p "$stage/$name"
    cp "$OUT/libredis_rl.so" "${docs[@]}" deploy/install.sh deploy/systemd/redis-rl.service "$stage/$name/"
    echo "$version (commit $commit)" > "$stage/$name/VERSION"
    tar -C "$stage" -czf "$DIST/$name.tar.gz" "$name"
    ;;
  gateway)
    echo "dist: rl-gateway for glibc $GLIBC"
    $CARGO zigbuild --release -p rl-gateway --target "$TRIPLE.$GLIBC"
    name=rl-gateway-$version-linux-x86_64
    mkdir -p "$stage/$name"
    cp "$OUT/rl-gateway" "${docs[@]}" deploy/gateway/gateway.toml deploy/systemd/rl-gateway-*.service "$stage/$name/"
    echo "$version (commit $commit)" > "$stage/$name/VERSION"
    strip "$stage/$name/rl-gateway" 2>/dev/null || true
    tar -C "$stage" -czf "$DIST/$name.tar.gz" "$name"
    ;;
  wheel)
    echo "dist: the Python wheel (manylinux2014: glibc $GLIBC)"
    rm -f "$DIST"/redis_rl-*.whl
    maturin build --release --quiet --zig --compatibility manylinux2014 --target "$TRIPLE" \
      -m python/Cargo.toml --out "$DIST"
    ;;
  *) echo "dist: unknown part '$part' (module, gateway or wheel)" >&2; exit 1 ;;
  esac
done
(cd "$DIST" && sha256sum -- *.tar.gz *.whl 2>/dev/null > SHA256SUMS) || true
echo "dist: version $version (commit $commit)"
(cd "$DIST" && cat SHA256SUMS)
