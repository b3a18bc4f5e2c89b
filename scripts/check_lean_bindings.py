"""make lint: the Node.js addon and the Python extension build no async I/O stack.

Both drive the client's sans-I/O op (the host's own Redis client does the I/O), so they take
redis-rl-client without its feature `transport` and redis-rl-middleware without `service`.
A default feature turned back on (directly, or through a new dependency) would bring tokio,
a TLS stack and an HTTP stack back into their release builds, minutes of CPU each: this
fails naming the crates and the binding. Usage: check_lean_bindings.py (CARGO: cargo)"""

import os
import subprocess
import sys

BINDINGS = ["redis-rl-node", "redis-rl-python"]
# Crate names (or their prefixes, as `tokio-util`, `rustls-webpki`) that mean async I/O,
# TLS or HTTP.
HEAVY = ["tokio", "rustls", "ring", "webpki", "hyper", "tower", "axum", "h2"]


def heavy(crate: str) -> bool:
    return any(crate == h or crate.startswith(h + "-") for h in HEAVY)


def crates(package: str, cargo: str) -> set:
    """The names of the package's normal (run time) dependencies, all levels."""
    out = subprocess.run(
        [cargo, "tree", "-q", "-p", package, "-e", "normal", "--prefix", "none"],
        check=True, capture_output=True, text=True,
    ).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def main() -> int:
    cargo = os.environ.get("CARGO", "cargo")
    failed = False
    for package in BINDINGS:
        found = sorted(c for c in crates(package, cargo) if heavy(c))
        if found:
            failed = True
            print(f"{package} depends on {', '.join(found)}: it must build redis-rl-client "
                  "with default-features = false (no `transport`) and redis-rl-middleware "
                  "without `service` (`cargo tree -p " + package + " -e normal -i "
                  + found[0] + "` shows the path)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
