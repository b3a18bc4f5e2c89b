#!/usr/bin/env bash
# The Python wheel (manylinux2014: linked for glibc 2.17 by zig, CPython 3.9+ abi3) into the
# directory given. One build serves both its users: `make venv` installs it, so the Python tests
# run the wheel `make dist` ships, and scripts/dist.sh ships it; the second finds the build
# fresh in target/zig-wheel and only packs the wheel again.
# A target directory of its own: maturin links through its own copy of cargo-zigbuild, whose
# linker wrapper has another path, so in target/zig the build scripts and proc macros it shares
# with the other zig builds would be rebuilt each time either side runs.
# Usage: scripts/build_wheel.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/build_wheel.sh OUT_DIR}
# shellcheck source=scripts/zig_env.sh
source scripts/zig_env.sh
CARGO_TARGET_DIR=$CARGO_TARGET_DIR-wheel maturin build --release --quiet --zig --compatibility manylinux2014 \
  --target "${ZIG_TRIPLE%%.*}" -m python/Cargo.toml --out "$out"
