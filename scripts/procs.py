"""Processes the scripts (bench.py, fleet.py, gameday.py) start on loopback (their ports come
from ports.py): the end of a log for an error, a wait for a server's first PING, and a stop
that waits a bounded time. The standard library only."""

import os
import subprocess
import time

import resp


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


def wait_for_ping(proc, port, logpath, log_start, limit_s=10):
    """Waits until the redis-server `proc` on `port` answers PING. Raises RuntimeError with
    the end of its log `logpath` (from byte `log_start`: this start's lines) when it exits
    first or does not answer within `limit_s`; the caller kills it then."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited ({proc.returncode}); "
                               f"the end of {logpath}:\n" + log_tail(logpath, start=log_start))
        try:
            if resp.call(port, "PING", timeout=0.2) == "PONG":
                return
        except (OSError, RuntimeError):
            pass
        time.sleep(0.01)
    raise RuntimeError(f"redis-server on port {port} did not answer PING within {limit_s} s; "
                       f"the end of {logpath}:\n" + log_tail(logpath, start=log_start))
