#!/usr/bin/env bash
# make dist: release artifacts in dist/ (docs/src/operations.md, "Release artifacts").
#   libredis_rl-<version>-linux-x86_64.tar.gz   the module, a redis.conf that loads it, README.md
#   rl-gateway-<version>-linux-x86_64.tar.gz    the gateway binary (glibc only; TLS by rustls)
#   redis_rl-<version>-cp39-abi3-<platform>.whl the Python package, built by maturin (one wheel
#                                               for CPython 3.9+, the manylinux tag it detects)
#   SHA256SUMS                                  sha256sum -c SHA256SUMS
# The version is [workspace.package] version in Cargo.toml; the Python package must agree.
# Usage: scripts/dist.sh [module] [gateway] [wheel]   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
PYTHON=${PYTHON:-python3}
DIST=${DIST:-dist}
parts=${*:-module gateway wheel}

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
python_version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' python/Cargo.toml | head -1)
[ -n "$version" ] || { echo "dist: no [workspace.package] version in Cargo.toml" >&2; exit 1; }
if [ "$python_version" != "$version" ] && ! grep -q '^version.workspace *= *true' python/Cargo.toml; then
  echo "dist: python/Cargo.toml has version $python_version, Cargo.toml $version: make them agree" >&2
  exit 1
fi
mkdir -p "$DIST"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

for part in $parts; do
  case $part in
  module)
    $CARGO build --release
    name=libredis_rl-$version-linux-x86_64
    mkdir -p "$stage/$name"
    cp target/release/libredis_rl.so README.md CHANGELOG.md "$stage/$name/"
    sed 's#^loadmodule .*#loadmodule ./libredis_rl.so#' redis.conf > "$stage/$name/redis.conf"
    tar -C "$stage" -czf "$DIST/$name.tar.gz" "$name"
    ;;
  gateway)
    $CARGO build --release -p rl-gateway
    name=rl-gateway-$version-linux-x86_64
    mkdir -p "$stage/$name"
    cp target/release/rl-gateway README.md CHANGELOG.md deploy/gateway/gateway.toml "$stage/$name/"
    strip "$stage/$name/rl-gateway" 2>/dev/null || true
    tar -C "$stage" -czf "$DIST/$name.tar.gz" "$name"
    ;;
  wheel)
    # maturin from PyPI in a build environment of its own (the wheel's users need neither it
    # nor Rust); its Rust build shares python/target with `pip install ./python`.
    venv=target/dist-venv
    [ -x $venv/bin/maturin ] || { $PYTHON -m venv $venv && $venv/bin/pip install -q --disable-pip-version-check 'maturin>=1.5,<2'; }
    rm -f "$DIST"/redis_rl-*.whl
    $venv/bin/maturin build --release --quiet -m python/Cargo.toml --out "$DIST"
    ;;
  *) echo "dist: unknown part '$part' (module, gateway or wheel)" >&2; exit 1 ;;
  esac
done
(cd "$DIST" && sha256sum -- *.tar.gz *.whl 2>/dev/null > SHA256SUMS)
echo "dist: version $version"
(cd "$DIST" && cat SHA256SUMS)
