"""One configuration, one scripted sequence of requests, every front end: rl-gateway's proxy
(the tower layer of the client crate), its forward auth, the Python ASGI middleware and the
Node.js Express middleware (an Express 5 app in a node process), each
under a key prefix of its own on the same server (with the module, and without it: the Lua
twin). Every front end drives the same request flow (the Rust crate ``redis-rl-flow``), so the
statuses, the quota headers, the problem bodies and the Redis keys (bans, top offenders and
all) must be the same; a front end that skipped a step (the ban check, the cost header, the
delay) would answer or write differently here."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route
from starlette.testclient import TestClient

from conftest import PATIENT, ROOT, free_port
from redis_rl.asgi import RateLimitMiddleware
from test_asgi_parity import COMPARED, Peer, _same_but_the_clock, gateway_binary, ok, write

# The configuration the Node.js middleware's tests read too.
CONFIG = (ROOT / "testdata" / "flow" / "one_flow.toml").read_text()
# Every front end runs the sequence in turn, seconds apart: GCRA and the token bucket answer
# from the time since a key's first request (a sliding window's from the clock's minute), so
# their waits compare within a second.

# (method, path, headers); None: wait until every front end's ban of the login rule is in Redis
# (refusals count towards a ban off the request's path).
Step = Optional[Tuple[str, str, Dict[str, str]]]

SEQUENCE: List[Step] = (
    [("POST", "/login", {})] * 4  # 2 per minute: the third and fourth refused, two strikes: banned
    + [None]
    + [("POST", "/login", {}), ("GET", "/login", {})]  # banned; GET is no login (methods)
    + [("POST", "/llm", {"x-max-tokens": "60"})] * 2  # 60 of 100, then 60 more: refused
    + [("POST", "/llm", {"x-max-tokens": "abc"})]  # not a number: 400, nothing taken
    + [("GET", "/slow", {})] * 2  # 1 per second: the second is held for its slot, then served
    + [("GET", "/items/1", {"x-api-key": "free-key"})] * 3  # the free tier: 2 per minute
    + [("GET", "/items/1", {"x-api-key": "a b"})]  # a key with a space inside: 400
)
EXPECTED = [200, 200, 429, 429, 429, 200, 200, 429, 400, 200, 200, 200, 200, 429, 400]

Answer = Tuple[int, Dict[str, str], bytes]
Send = Callable[[str, str, Dict[str, str]], Answer]


def wait_healthy(proc: "subprocess.Popen[bytes]", port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, OSError):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)


def http(port: int, method: str, url: str, headers: Dict[str, str]) -> Answer:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{url}", headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, {k.lower(): v for k, v in res.headers.items()}, b""
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


class Served:
    """A server process answering on ``port`` (healthy once ``/healthz`` answers)."""

    def __init__(self, args: List[str], port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_healthy(self.proc, port)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Gateway(Served):
    """rl-gateway on ``config``; ``auth``: with a forward-auth listener, the port asked."""

    def __init__(self, server: Any, config: Path, tiers: str, auth: bool) -> None:
        binary = gateway_binary()
        assert binary is not None
        port = free_port()
        self.auth_port = free_port() if auth else None
        args = [str(binary), "--listen", f"127.0.0.1:{port}", "--redis", server.url, "--config", str(config),
                "--tier-hash", tiers, "--timeout-ms", "2000", "--log", "warn"]
        if self.auth_port is not None:
            args += ["--auth-listen", f"127.0.0.1:{self.auth_port}"]
        super().__init__(args, port)


NODE_APP = ROOT / "node" / "scripts" / "express-app.mjs"


class ExpressApp(Served):
    """An Express 5 app behind the Node.js middleware (``node/scripts/express-app.mjs``; the
    package built by ``make node-build``)."""

    def __init__(self, server: Any, config: Path, tiers: str) -> None:
        assert (ROOT / "node" / "dist" / "esm" / "index.js").exists(), "the Node package is not built: make node-build"
        port = free_port()
        super().__init__(["node", str(NODE_APP), str(port), server.url, str(config), tiers], port)


def forward_auth(port: int) -> Send:
    """The proxy in front asks with the original request in X-Forwarded-* headers."""

    def send(method: str, url: str, headers: Dict[str, str]) -> Answer:
        described = {**headers, "X-Forwarded-Method": method, "X-Forwarded-Uri": url}
        return http(port, "GET", "/auth", described)

    return send


_MINUTE = re.compile(r"(:\{top\}:[^:]+:)\d+$")


def keys(r: redis.Redis, prefix: str) -> List[str]:
    """The prefix's keys without it, each once; a top-offender set's minute as ``#`` (front
    ends a moment apart may write in two minutes, and one whose run crosses a minute writes in
    both)."""
    return sorted({_MINUTE.sub(r"\1#", k[len(prefix):]) for k in r.keys(f"{prefix}:*")})


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


# The rows of the book's table of features per front end that the sequence exercises.
EXERCISED = ("dimensions, tiers, rules, several windows", "cost header", "bans", "delay", "top offenders")
FRONT_ENDS = ("proxy", "forward auth", "ASGI (Python)", "Express (Node)")
# Rows other tests exercise, for the front ends they run (the ASGI middleware's leases:
# test_leases.py; the Express middleware's: node/test/leases.test.mjs; rl-gateway's: the
# gateway's tests).
ELSEWHERE = {"leases": ("proxy", "forward auth", "ASGI (Python)", "Express (Node)")}


def feature_table() -> Dict[str, Dict[str, str]]:
    """The book's table: feature -> front end -> cell."""
    lines = [ln for ln in (ROOT / "docs" / "src" / "rules.md").read_text().splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        table[cells[0]] = dict(zip(header[1:], cells[1:]))
    return table


def test_the_books_table_says_what_the_sequence_shows() -> None:
    table = feature_table()
    for feature in EXERCISED:
        row = next(cells for name, cells in table.items() if name.startswith(feature))
        for front_end in FRONT_ENDS:
            assert row[front_end].startswith("yes"), (feature, front_end, row[front_end])
    for feature, front_ends in ELSEWHERE.items():
        row = next(cells for name, cells in table.items() if name.startswith(feature))
        for front_end in front_ends:
            assert row[front_end].startswith("yes"), (feature, front_end, row[front_end])


@pytest.fixture(params=["module", "twin"])
def where(request: Any) -> Any:
    return request.getfixturevalue("server" if request.param == "module" else "bare_server")


@pytest.mark.skipif(gateway_binary() is None, reason="rl-gateway not built or older than its sources (cargo build -p rl-gateway)")
def test_every_front_end_answers_and_writes_the_same(where: Any, prefix: str, tmp_path: Path) -> None:
    r = redis.Redis(port=where.port, decode_responses=True)
    tiers = f"{prefix}:tiers"
    r.hset(tiers, "free-key", "free")
    prefixes = {"proxy": f"{prefix}g", "auth": f"{prefix}a", "python": f"{prefix}y", "express": f"{prefix}x"}
    configs = {name: write(tmp_path / f"{name}.toml", f'key_prefix = "{p}"\n{CONFIG}') for name, p in prefixes.items()}
    proxy = Gateway(where, configs["proxy"], tiers, auth=False)
    auth = Gateway(where, configs["auth"], tiers, auth=True)
    node = ExpressApp(where, configs["express"], tiers)
    try:
        assert auth.auth_port is not None
        # Every path and method answers, as rl-gateway's own handler does.
        mw = Starlette(routes=[Route("/{path:path}", ok, methods=["GET", "POST"])], middleware=[
            Middleware(Peer),
            Middleware(RateLimitMiddleware, redis_url=where.url, config=configs["python"], tier_hash=tiers, timeout=PATIENT),
        ])
        with TestClient(mw) as client:

            def python(method: str, url: str, headers: Dict[str, str]) -> Answer:
                res = client.request(method, url, headers={**headers, "x-test-peer": "127.0.0.1"})
                return res.status_code, {k.lower(): v for k, v in res.headers.items()}, res.content

            fronts: Dict[str, Send] = {
                "proxy": lambda m, u, h: http(proxy.port, m, u, h),
                "auth": forward_auth(auth.auth_port),
                "python": python,
                "express": lambda m, u, h: http(node.port, m, u, h),
            }
            # Each front end runs the whole sequence in turn (interleaved, a held request of one
            # would give the next front end a different clock).
            answers: Dict[str, List[Answer]] = {}
            for name, send in fronts.items():
                answers[name] = []
                for i, step in enumerate(SEQUENCE):
                    if step is None:
                        p = prefixes[name]
                        until(lambda: r.exists(f"{p}:{{ip:127.0.0.1}}:r:login:ban") == 1, f"{name}: no ban")
                        continue
                    method, url, headers = step
                    traced = {**headers, "X-Request-Id": f"flow-{i}", "traceparent": f"00-{i + 1:032x}-{i + 1:016x}-01"}
                    answers[name].append(send(method, url, traced))
            statuses = [status for status, _, _ in answers["proxy"]]
            for name, got in answers.items():
                for i, ((st, h, body), (status, g_headers, g_body)) in enumerate(zip(got, answers["proxy"])):
                    assert st == status, (i, name, st, status, body, g_body)
                    for header in COMPARED:
                        if status == 200 and header == "content-type":
                            continue
                        assert _same_but_the_clock(h.get(header), g_headers.get(header), header), (
                            i, name, header, h.get(header), g_headers.get(header))
                    if status != 200:
                        assert _same_but_the_clock(body.decode(), g_body.decode()), (i, name, body, g_body)
            assert statuses == EXPECTED
            # The refusals reach the top offenders within a second (written off the path).
            expected = keys(r, prefixes["proxy"])
            assert any(":{top}:login:" in k for k in expected), expected
            assert any(k.endswith(":r:login:ban") for k in expected), expected
            for name in ("auth", "python", "express"):
                until(lambda: keys(r, prefixes[name]) == keys(r, prefixes["proxy"]),
                      f"{name}: {keys(r, prefixes[name])} != {keys(r, prefixes['proxy'])}")
    finally:
        proxy.stop()
        auth.stop()
        node.stop()
        r.close()
