# Sourced by scripts/dist.sh and `make node-build`: the environment of every build linked for
# x86_64 glibc 2.17 by zig (docs/src/development.md, "Release builds").
# - The build tools, pinned, in a virtual environment of their own (the artifacts' users need
#   none of them): about 25 s to install, once. cargo-zigbuild finds zig through that
#   environment's `python3 -m ziglang`.
# - A target directory of their own, target/zig: with `--target` equal to the host's triple,
#   cargo-zigbuild's linker setting applies to the build scripts and proc macros too, and cargo
#   rebuilds a unit whose linker changed. Sharing target/release with the host builds (make build)
#   made each side rebuild what the other built last, about 60 crates per switch.
# Exports ZIG_TRIPLE (the target as cargo-zigbuild takes it) and ZIG_OUT (where the artifacts land).
ZIG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZIG_VENV=$ZIG_ROOT/target/dist-venv
ZIG_PIP=("maturin==1.16.0" "cargo-zigbuild==0.24.0" "ziglang==0.17.0")
if ! "$ZIG_VENV/bin/python" -m pip show -q "${ZIG_PIP[@]%%==*}" >/dev/null 2>&1; then
  echo "installing ${ZIG_PIP[*]} (PyPI) into $ZIG_VENV"
  [ -x "$ZIG_VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$ZIG_VENV"
  "$ZIG_VENV/bin/pip" install -q --disable-pip-version-check "${ZIG_PIP[@]}"
fi
export PATH="$ZIG_VENV/bin:$PATH"
export CARGO_TARGET_DIR=$ZIG_ROOT/target/zig
export ZIG_TRIPLE=x86_64-unknown-linux-gnu.2.17
export ZIG_OUT=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release
