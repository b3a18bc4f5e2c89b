"""`make run` (part of make test-ops): `make run PORT=<port>` starts Redis with the module on
that port, and a port already taken is refused at once with a message that says how to pick
another (a Debian host with redis-server installed runs a Redis on 6379). The standard library
and redis-cli only; ports from scripts/ports.py (outside the ephemeral range)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import ports  # noqa: E402


def cli(port, *args):
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=10
    ).stdout.strip()


def taken_port_is_refused():
    port = ports.listen_port()
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    try:
        run = subprocess.run(
            ["make", "-s", "run", f"PORT={port}"], cwd=ROOT, capture_output=True, text=True, timeout=600
        )
    finally:
        squatter.close()
    assert run.returncode != 0, f"make run started on a taken port: {run.stdout}{run.stderr}"
    expected = f"make run: port {port} is taken"
    assert expected in run.stderr and "make run PORT=" in run.stderr, run.stderr
    print(f"ok   make run PORT={port} on a taken port: refused ({expected})")


def given_port_is_used():
    port = ports.listen_port()
    env = dict(os.environ, PORT="1")  # a PORT in the environment does not count
    proc = subprocess.Popen(
        ["make", "-s", "run", f"PORT={port}"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 600
        while cli(port, "PING") != "PONG":
            assert proc.poll() is None, f"make run exited: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "no Redis on the port"
            time.sleep(0.2)
        reply = cli(port, "RL.FIXED", "make-run:k", "5", "60000")
        assert reply.split()[:3] == ["1", "5", "4"], reply
        print(f"ok   make run PORT={port}: Redis with the module on {port}")
    finally:
        cli(port, "SHUTDOWN", "NOSAVE")
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    taken_port_is_refused()
    given_port_is_used()
