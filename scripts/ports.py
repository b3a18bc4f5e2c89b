"""Listening ports for the servers that scripts and tests start on loopback, outside the
kernel's ephemeral range. The standard library only.

Asking the kernel for a free port (bind port 0) always yields an ephemeral one: the range it
also picks local ports of outgoing connections from. A server stopped for a restart then races
every client, replica and gateway that connects meanwhile; one of them can get the server's
port (or a cluster node's bus port, +10000) as its local port, and the restart cannot bind.
Ports from here lie outside /proc/sys/net/ipv4/ip_local_port_range, bus ports too.

Several processes allocate at once on one machine (test suites, `make fleet`, benchmarks):
each starts at a random point of the candidate list, checks that the port binds now and holds
a lock file per port ($TMPDIR/redis-rl-ports/<port>, flock) until it exits. testkit's Rust
allocator (testkit/src/ports.rs) uses the same rules and the same lock files.

`python3 scripts/ports.py [--cluster]` prints one port for a shell script (its lock ends with
the command, so only the range and the random start protect it from then on).
"""

import fcntl
import os
import random
import socket
import sys
import tempfile
import threading

LOWEST_PORT = 10000  # below: well-known and commonly configured services (Redis's 6379)
BUS_OFFSET = 10000  # a cluster node also listens on its port + 10000
DEFAULT_EPHEMERAL = (32768, 60999)


def ephemeral_range():
    """The kernel's ephemeral port range, as (low, high) inclusive."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return parse_range(f.read()) or DEFAULT_EPHEMERAL
    except OSError:
        return DEFAULT_EPHEMERAL


def parse_range(text):
    """'32768\\t60999\\n' -> (32768, 60999); None when malformed."""
    try:
        lo, hi = (int(x) for x in text.split()[:2])
    except ValueError:
        return None
    return (lo, hi) if 0 < lo <= hi <= 65535 else None


def candidates(ephemeral, bus=False):
    """Every port that may be handed out: at least LOWEST_PORT, outside `ephemeral`, and with
    `bus` its port + BUS_OFFSET too."""
    lo, hi = ephemeral

    def usable(p):
        return LOWEST_PORT <= p <= 65535 and not lo <= p <= hi

    return [p for p in range(LOWEST_PORT, 65536) if usable(p) and (not bus or usable(p + BUS_OFFSET))]


_lock = threading.Lock()
_cursor = None
_held = []  # lock files of the ports handed out, open for the life of the process


def _lock_dir():
    path = os.path.join(tempfile.gettempdir(), "redis-rl-ports")
    if not os.path.isdir(path):
        try:
            os.makedirs(path, exist_ok=True)
            os.chmod(path, 0o1777)  # shared by every user of the machine, like /tmp
        except OSError:
            return None
    return path


def _lock_file(port):
    """The lock on `port`'s file (an open file), or None when another holder has it."""
    d = _lock_dir()
    if d is None:
        return open(os.devnull)  # no lock directory: the bind check and random start remain
    path = os.path.join(d, str(port))
    try:
        f = open(path, "rb") if os.path.exists(path) else open(path, "ab")
    except OSError:
        return None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


def _binds(port):
    with socket.socket() as s:
        # As redis-server does: connections lingering in TIME_WAIT do not make it busy.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _claim(ports):
    locks = []
    for p in ports:
        f = _lock_file(p)
        if f is None or not _binds(p):
            for x in locks + ([f] if f else []):
                x.close()
            return None
        locks.append(f)
    return locks


def is_claimed(port):
    """Whether `port`'s lock file is held (by another process, or this one)."""
    d = _lock_dir()
    if d is None or not os.path.exists(os.path.join(d, str(port))):
        return False
    with open(os.path.join(d, str(port)), "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def _take(bus):
    global _cursor
    ephemeral = ephemeral_range()
    ports = candidates(ephemeral, bus)
    if not ports:
        raise RuntimeError(f"no port from {LOWEST_PORT} up lies outside the ephemeral range "
                           f"{ephemeral[0]}-{ephemeral[1]} (/proc/sys/net/ipv4/ip_local_port_range)")
    with _lock:
        if _cursor is None:
            _cursor = random.SystemRandom().randrange(1 << 30)
        start = _cursor
        for step in range(len(ports)):
            i = (start + step) % len(ports)
            p = ports[i]
            locks = _claim([p, p + BUS_OFFSET] if bus else [p])
            if locks is not None:
                _held.extend(locks)
                _cursor = i + 1
                return p
    raise RuntimeError(f"no free port outside the ephemeral range {ephemeral[0]}-{ephemeral[1]}")


def listen_port():
    """A loopback port to listen on: outside the ephemeral range, free now, and handed to no
    other caller in this or another process using this allocator while this process lives."""
    return _take(False)


def cluster_port():
    """A port for a cluster node: it and its bus port (+10000), as listen_port promises."""
    return _take(True)


if __name__ == "__main__":
    print(cluster_port() if "--cluster" in sys.argv[1:] else listen_port())
