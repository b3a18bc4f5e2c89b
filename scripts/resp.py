"""A minimal blocking RESP2 client for the scripts (bench.py, gameday.py).

The standard library only, so `make bench` and `make gameday` run on a bare python3 with
no virtualenv: the scripts send a handful of commands and pipelines to one loopback server,
which does not need a full client (redis-py's connection pools, retries and RESP3).
"""

import socket


class ReplyError(RuntimeError):
    """An error reply (`-ERR ...`): its text, without the leading `-`."""


def encode(args):
    """One command as a RESP array of bulk strings (str, int or bytes arguments)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read(f):
    """One reply from the buffered binary reader `f`: str (simple string), int, bytes or None
    (bulk string), list or None (array), or a ReplyError, returned rather than raised so that
    a pipeline can read every reply."""
    line = f.readline()
    if not line:
        raise ConnectionError("server closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return ReplyError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        return f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read(f) for _ in range(n)]
    raise ConnectionError("not a RESP reply: %r" % line)


class Connection:
    """One connection to a loopback server. `timeout` (seconds) bounds every socket call."""

    def __init__(self, port, timeout=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb", buffering=1 << 16)

    def call(self, *args):
        """Sends one command and returns its reply; raises ReplyError on an error reply."""
        self.sock.sendall(encode(args))
        reply = read(self.reader)
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    def pipeline(self, commands, batch=2000):
        """Sends many commands, `batch` at a time; returns the number of error replies."""
        errors = 0
        for i in range(0, len(commands), batch):
            chunk = commands[i:i + batch]
            self.sock.sendall(b"".join(encode(c) for c in chunk))
            for _ in chunk:
                errors += isinstance(read(self.reader), ReplyError)
        return errors

    def info(self, section):
        """`INFO section` as a dict of its `name:value` lines."""
        text = self.call("INFO", section).decode()
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def close(self):
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass


def call(port, *args, timeout=1.0):
    """One command on a new connection, closed afterwards."""
    c = Connection(port, timeout)
    try:
        return c.call(*args)
    finally:
        c.close()
