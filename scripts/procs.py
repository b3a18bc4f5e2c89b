"""Processes the scripts (bench.py, fleet.py, gameday.py) start on loopback (their ports come
from ports.py): the end of a log for an error, and a stop that waits a bounded time. The
standard library only."""

import os
import subprocess


def log_tail(path, lines=20, start=0):
    """The last `lines` lines `path` got from byte `start` on, indented, for an error message
    (the reason a server did not start)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"    (no log: {e})"
    tail = text.splitlines()[-lines:]
    return "\n".join("    " + line for line in tail) if tail else "    (empty)"


def log_size(path):
    """The current size of `path` (0 when missing): where the next start's lines begin."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def stop(proc, grace_s=5):
    """Stops `proc` (SIGTERM), or kills it (SIGKILL) if it has not exited within `grace_s`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
