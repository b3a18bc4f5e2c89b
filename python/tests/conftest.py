"""Real servers for the tests: ``$RL_SERVER`` (default ``redis-server``) with the module
(``$RL_MODULE``, default the workspace's ``target/release/libredis_rl.so``) on free loopback
ports outside the kernel's ephemeral range (scripts/ports.py), stopped when the session (or the
test that owns one) ends."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, List, Optional

import pytest
import redis
import redis.asyncio as aioredis

from redis_rl import Limiter

ROOT = Path(__file__).resolve().parents[2]


PATIENT = 5.0
"""The timeout (seconds) of every limiter and middleware a test builds, unless the test is
about timeouts or failure modes: the library's default (50 ms) is a production figure that a
loaded test machine exceeds (the suites run on both servers at once), and a call past it is
decided by the failure mode instead of by Redis. A blocking limiter given a client without a
socket timeout has none to pass (it waits as long as the client does)."""


def patient_limiter(port: int, **options: Any) -> Limiter:
    """An asyncio limiter on the server at ``port`` with the tests' timeout (``PATIENT``)."""
    return Limiter(aioredis.Redis(port=port), timeout=PATIENT, **options)


def server_binary() -> str:
    return os.environ.get("RL_SERVER", "redis-server")


def module_path() -> str:
    path = os.environ.get("RL_MODULE") or str(ROOT / "target" / "release" / "libredis_rl.so")
    if not os.path.exists(path):
        pytest.exit(f"module not built: {path} (run `cargo build --release` or `make test`)", 2)
    return path


sys.path.insert(0, str(ROOT / "scripts"))
import ports  # noqa: E402  (scripts/ports.py: the allocator the scripts and testkit share)
import procs  # noqa: E402


def free_port() -> int:
    """A loopback port to listen on, outside the kernel's ephemeral range and unique among the
    test processes of the machine: a server restarted on it later finds it still free."""
    return ports.listen_port()


class Server:
    """One server process with the module loaded; ``stop()`` kills it and removes its dir."""

    def __init__(self, extra: Optional[List[str]] = None, env: Optional[dict] = None, module: bool = True) -> None:
        self.extra = extra or []
        self.module = module
        self.env = env
        self.dir = tempfile.mkdtemp(prefix="rl-py-")
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    @property
    def log_path(self) -> str:
        """The server's output, appended across restarts."""
        return os.path.join(self.dir, "server.log")

    def start(self, port: Optional[int] = None) -> None:
        """Starts (or restarts, on the same port when given) and waits until it answers; the
        error of a failed start carries the end of the server's log."""
        last = ""
        # A cluster node listens on its bus port (+10000) too.
        node = "--cluster-enabled" in self.extra
        for _ in range(5):
            self.port = port or (ports.cluster_port() if node else free_port())
            args = [
                server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                *(["--loadmodule", module_path()] if self.module else []), *self.extra,
            ]
            log_start = procs.log_size(self.log_path)
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    redis.Redis(port=self.port, socket_timeout=1).ping()
                    return
                except redis.exceptions.ConnectionError:
                    time.sleep(0.02)
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=5)
            last = (f"{server_binary()} on port {self.port}: the end of {self.log_path}:\n"
                    + procs.log_tail(self.log_path, start=log_start))
            if port is not None:
                break
        raise RuntimeError(f"server did not start: {last}")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def kill(self) -> None:
        """SIGKILL (an outage); ``start(self.port)`` brings it back on the same port."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A server this test may kill or pause."""
    s = Server()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def bare_server() -> Iterator[Server]:
    """A server without the module (the Lua twin's ground)."""
    s = Server(module=False)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def client(server: Server) -> Iterator[redis.Redis]:
    c = redis.Redis(port=server.port, socket_timeout=5)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix of its own for each test (they share the session's server)."""
    return f"t{uuid.uuid4().hex[:12]}"
