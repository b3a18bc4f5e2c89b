"""Cost settled after the response, on a real server: ``Limiter.settle`` (refund or
``FORCE`` charge, blocking and asyncio), and the ASGI middleware reserving a rule's cost
header and settling it from the application's response header or trailer (a missing or
garbage one keeps the reservation; a bad cost header is a 400)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest
import redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from redis_rl import Policy, Settled, SyncLimiter
from redis_rl.asgi import RateLimitMiddleware

from conftest import PATIENT, patient_limiter


class Finishing:
    """The ASGI app with a count of its unfinished HTTP calls. Starlette's TestClient hands a
    response back as soon as it is sent, while the middleware goes on to settle its cost: a
    test that reads what a settle wrote, or sends the next request after it, waits for the
    call to finish (``served``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.unfinished = 0

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.unfinished += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.unfinished -= 1

    def served(self, response: Any, seconds: float = 10.0) -> Any:
        """``response``, once every call has finished (bounded: fails after ``seconds``)."""
        deadline = time.monotonic() + seconds
        while self.unfinished:
            assert time.monotonic() < deadline, "an ASGI call did not finish"
            time.sleep(0.002)
        return response


def left(r: redis.Redis, key: str, limit: int, window_ms: int) -> int:
    return int(r.execute_command("RL.FIXED", key, limit, window_ms, "COST", 0)[2])


def test_sync_settle_refunds_or_charges_the_difference(server, prefix):
    r = redis.Redis(port=server.port)
    limiter = SyncLimiter(r)
    # A fixed window of 10^12 ms: none turns between the calls (they turn on the clock).
    policy = Policy.fixed(1000, 10**12)
    key = f"{prefix}:tokens"
    try:
        assert limiter.check(key, policy, 100).allowed
        assert limiter.settle(key, policy, 100, 40) == Settled("refunded", 60)
        assert left(r, key, 1000, 10**12) == 960
        assert limiter.check(key, policy, 900).allowed
        settled = limiter.settle(key, policy, 900, 1000)
        assert (settled.kind, settled.units) == ("charged", 100)
        assert settled.decision is not None and settled.decision.allowed and settled.decision.remaining == 0
        assert left(r, key, 1000, 10**12) == 0, "60 over the limit: a debt"
        assert limiter.settle(key, policy, 5, 5) == Settled("exact", 0)
    finally:
        limiter.close()


def test_async_settle_refunds_or_charges_the_difference(server, prefix):
    async def main() -> None:
        limiter = patient_limiter(server.port)
        policy = Policy.gcra(100, 60_000)
        key = f"{prefix}:gcra"
        try:
            assert (await limiter.check(key, policy, 50)).allowed
            assert await limiter.settle(key, policy, 50, 20) == Settled("refunded", 30)
            charged = await limiter.settle(key, policy, 10, 200)
            assert (charged.kind, charged.units) == ("charged", 190)
            # In debt: the next unit waits.
            assert not (await limiter.check(key, policy, 1)).allowed
        finally:
            await limiter.aclose()

    asyncio.run(main())


def config(prefix: str) -> Dict[str, Any]:
    return {
        "key_prefix": prefix,
        "dimensions": ["ip"],
        "ip": {"limit": 1000},
        "rules": [
            {
                "name": "tokens",
                "paths": ["/chat"],
                "key": ["global"],
                "limits": ["1000/hour"],
                "algorithm": "fixed",
                "cost": "header:X-Max-Tokens",
                "settle": "response-header:X-Tokens-Used",
            }
        ],
    }


async def chat(request: Request) -> PlainTextResponse:
    used = request.headers.get("x-used")
    return PlainTextResponse("done", headers={"x-tokens-used": used} if used is not None else {})


def test_the_asgi_middleware_settles_from_the_response_header(server, prefix):
    r = redis.Redis(port=server.port)
    app = Finishing(Starlette(
        routes=[Route("/chat", chat)],
        middleware=[Middleware(RateLimitMiddleware, redis_url=server.url, timeout=PATIENT, config=config(prefix))],
    ))
    key = f"{prefix}:{{global}}:r:tokens"
    with TestClient(app) as client:
        def call(reserve: Optional[str], used: Optional[str]) -> int:
            h = {}
            if reserve is not None:
                h["x-max-tokens"] = reserve
            if used is not None:
                h["x-used"] = used
            return int(app.served(client.get("/chat", headers=h)).status_code)

        assert call("100", "40") == 200
        assert left(r, key, 1000, 3_600_000) == 960
        assert call("100", "250") == 200
        assert left(r, key, 1000, 3_600_000) == 710
        assert call("100", None) == 200, "no header: the reservation stands"
        assert call("100", "lots") == 200, "garbage: the reservation stands"
        assert left(r, key, 1000, 3_600_000) == 510
        assert call(None, "11") == 200, "no cost header: one unit, settled"
        assert left(r, key, 1000, 3_600_000) == 499
        res = client.get("/chat", headers={"x-max-tokens": "0", "x-used": "1"})
        assert res.status_code == 400
        assert "header x-max-tokens must be one positive integer" in res.json()["detail"]
        assert call("600", "1") == 429, "more than is left: refused, nothing taken"
        assert left(r, key, 1000, 3_600_000) == 499


@pytest.mark.parametrize("module", [True, False], ids=["module", "twin"])
def test_a_settled_overage_holds_the_subject_until_the_debt_is_paid(server, bare_server, prefix, module):
    """Declared 1, used 5,000 against a fixed 1000/minute: refused past the window's end, for
    the rest of it and four more windows (as rl-gateway), not the rest of the minute alone;
    with the module and with the Lua twin (its RL.STATE)."""
    if not module:
        server = bare_server
    r = redis.Redis(port=server.port)
    cfg = config(prefix)
    cfg["rules"][0]["limits"] = ["1000/minute"]
    app = Finishing(Starlette(
        routes=[Route("/chat", chat)],
        middleware=[Middleware(RateLimitMiddleware, redis_url=server.url, timeout=PATIENT, config=cfg)],
    ))
    with TestClient(app) as client:
        assert app.served(client.get("/chat", headers={"x-max-tokens": "1", "x-used": "5000"})).status_code == 200
        res = client.get("/chat", headers={"x-max-tokens": "1"})
        assert res.status_code == 429
        assert 240 <= int(res.headers["retry-after"]) <= 301, res.headers["retry-after"]
        assert res.json()["banned"] is True
        assert "held by rule 'tokens' until a settled overage is paid" in res.json()["detail"]
    hold = int(r.pttl(f"{prefix}:{{global}}:r:tokens:ban"))
    assert 240_000 <= hold <= 301_000, hold


def test_the_asgi_middleware_settles_from_a_trailer(server, prefix):
    """An application that reports its cost after the body (``http.response.trailers``)."""
    r = redis.Redis(port=server.port)

    async def streaming(scope: Dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [], "trailers": True})
        await send({"type": "http.response.body", "body": b"text", "more_body": False})
        await send({"type": "http.response.trailers", "headers": [(b"x-tokens-used", b"30")]})

    middleware = RateLimitMiddleware(streaming, redis_url=server.url, timeout=PATIENT, config=config(prefix))
    sent: List[Dict[str, Any]] = []

    async def main() -> None:
        async def receive() -> Dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http", "method": "GET", "path": "/chat", "raw_path": b"/chat", "query_string": b"",
            "headers": [(b"x-max-tokens", b"100")], "client": ("192.0.2.9", 5000),
        }
        await middleware(scope, receive, send)
        await middleware.limiter.aclose()

    asyncio.run(main())
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.trailers"]
    assert left(r, f"{prefix}:{{global}}:r:tokens", 1000, 3_600_000) == 970


def paced_config(prefix: str, max_held: int) -> Dict[str, Any]:
    return {
        "key_prefix": prefix,
        "dimensions": ["ip"],
        "ip": {"limit": 1000},
        "delay_max_held": max_held,
        "rules": [
            {"name": "paced", "paths": ["/paced"], "key": ["global"], "limits": [{"limit": 1, "window_ms": 600}],
             "algorithm": "gcra", "delay_max_ms": 2000},
            {"name": "strict", "paths": ["/strict"], "key": ["global"], "limits": [{"limit": 1, "window_ms": 5000}],
             "algorithm": "gcra", "delay_max_ms": 1000},
        ],
    }


async def call_many(
    middleware: RateLimitMiddleware, paths: List[str], started: Optional[float] = None
) -> List[Tuple[int, float]]:
    """Sends requests for ``paths`` at once straight to the ASGI middleware: (status, seconds
    since ``started``, a ``time.monotonic()`` reading, by default this call's start)."""

    async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware.app = app
    if started is None:
        started = time.monotonic()

    async def one(path: str) -> Tuple[int, float]:
        statuses: List[int] = []

        async def receive() -> Dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "headers": [], "client": ("192.0.2.9", 5000)}
        await middleware(scope, receive, send)
        return statuses[0], time.monotonic() - started

    return list(await asyncio.gather(*(one(p) for p in paths)))


@pytest.mark.parametrize("where", ["server", "bare_server"])
def test_the_asgi_middleware_holds_a_refused_request_for_its_slot(where, request, prefix):
    """With the module, and with the Lua twin on a server without it (``bare_server``): the
    held request's look (``PEEK``) and booking (``FORCE``) go over the same wire: one
    ``RL.ALL`` each for its two keys (the ip dimension's and the rule's), as rl-gateway, the
    tower middleware and the Node.js middleware send them, never a command per key."""
    server = request.getfixturevalue(where)
    r = redis.Redis(port=server.port)

    def per_key() -> int:
        stats = r.info("commandstats")
        return sum(v["calls"] for k, v in stats.items() if k.lower() in ("cmdstat_rl.gcra", "cmdstat_rl.sliding"))

    per_key_before = per_key()

    async def main() -> None:
        middleware = RateLimitMiddleware(_unused, redis_url=server.url, timeout=PATIENT, config=paced_config(prefix, 10))
        first_sent = time.monotonic()
        assert (await call_many(middleware, ["/paced"]))[0][0] == 200
        # Two at once: each booked for its own slot, 600 ms apart, both served. The first
        # request took the slot of its own arrival (at first_sent or later), so measured from
        # first_sent the two are served 0.6 s and 1.2 s later at the earliest: a slow machine
        # only adds time. (Measured from the second call instead, the time the first took
        # came off both and a loaded machine failed the test.)
        (a, ta), (b, tb) = await call_many(middleware, ["/paced", "/paced"], started=first_sent)
        assert (a, b) == (200, 200)
        assert min(ta, tb) >= 0.55 and max(ta, tb) >= 1.15, (ta, tb)
        # Beyond delay_max_ms (5 s per request, 1 s of delay): refused at once.
        statuses = sorted(s for s, _ in await call_many(middleware, ["/strict", "/strict"]))
        assert statuses == [200, 429]
        await middleware.limiter.aclose()

    asyncio.run(main())
    assert per_key() == per_key_before, "no command per key (on the module; the twin has none)"
    r.close()


def test_the_asgi_middleware_caps_held_requests(server, prefix):
    async def main() -> None:
        middleware = RateLimitMiddleware(_unused, redis_url=server.url, timeout=PATIENT, config=paced_config(prefix, 1))
        assert (await call_many(middleware, ["/paced"]))[0][0] == 200
        statuses = sorted(s for s, _ in await call_many(middleware, ["/paced", "/paced"]))
        assert statuses == [200, 429], "one held, the other over the cap"
        await middleware.limiter.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("where", ["server", "bare_server"])
def test_peek_and_force_all_units_take_one_call_each_with_each_items_units(where, request, prefix):
    """A held request's look and booking on every key, one ``RL.ALL`` each (the twin's
    ``EVALSHA`` on a server without the module), asyncio and blocking."""
    server = request.getfixturevalue(where)
    a, b = Policy.sliding(10, 3_600_000), Policy.fixed(3, 10**12)  # no fixed window turns here
    r = redis.Redis(port=server.port)
    decides_with = "RL.ALL" if where == "server" else "EVALSHA"

    def calls() -> int:
        stats = r.info("commandstats")
        return sum(v["calls"] for k, v in stats.items() if k.lower() == f"cmdstat_{decides_with.lower()}")

    async def main() -> None:
        limiter = patient_limiter(server.port)
        items = [(f"{prefix}:{{t}}:a", a), (f"{prefix}:{{t}}:b", b)]
        assert (await limiter.peek(items[0][0], a, 0)).remaining == 10  # the wire chosen first
        before = calls()
        looks = await limiter.peek_all_units(items, [4, 5])
        assert calls() - before == 1
        assert [d.allowed for d in looks] == [True, False]
        assert (await limiter.peek(items[0][0], a, 0)).remaining == 10, "a look takes nothing"
        before = calls()
        forced = await limiter.force_all_units(items, [12, 1])
        assert calls() - before == 1
        assert all(d.allowed for d in forced)
        assert [d.remaining for d in forced] == [0, 2]
        assert (await limiter.peek(items[0][0], a, 1)).denied, "a is in debt"
        await limiter.aclose()

    asyncio.run(main())
    sync = SyncLimiter(r)
    items = [(f"{prefix}:{{s}}:a", a), (f"{prefix}:{{s}}:b", b)]
    assert [d.remaining for d in sync.force_all_units(items, [2, 4])] == [8, 0]
    assert [d.allowed for d in sync.peek_all_units(items, [1, 1])] == [True, False]
    assert sync.settle(items[0][0], a, 0, 9).kind == "charged", "FORCE on the twin too"


async def _unused(scope: Dict[str, Any], receive: Any, send: Any) -> None:
    raise AssertionError("replaced by call_many")
