"""Processes the scripts (bench.py, gameday.py) start on loopback: a free port, and a stop
that waits a bounded time. The standard library only."""

import socket
import subprocess


def free_port():
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc, grace_s=5):
    """Stops `proc` (SIGTERM), or kills it (SIGKILL) if it has not exited within `grace_s`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
