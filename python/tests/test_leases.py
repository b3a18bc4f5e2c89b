"""Leases in the ASGI middleware (the ``hot`` dimensions and ``[leases]``, as rl-gateway's): a
hot key is served from batches taken with ``UPTO``, so it costs Redis fewer commands than
requests; a lease's unspent units go back after its lifetime; a request another dimension
refuses spends nothing. On the module and on its Lua twin."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, List, Tuple

import pytest
import redis
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from redis_rl import LeaseConfig, Limiter, Policy, Source, SyncLimiter
from redis_rl.asgi import RateLimitMiddleware

from conftest import PATIENT

GLOBAL = Policy.sliding(1000, 60_000)


@pytest.fixture(params=["module", "twin"])
def any_server(request: Any) -> Any:
    return request.getfixturevalue("server" if request.param == "module" else "bare_server")


def _app(server: Any, config: Dict[str, Any]) -> RateLimitMiddleware:
    async def hello(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("hi")

    return RateLimitMiddleware(Starlette(routes=[Route("/", hello)]), redis_url=server.url, config=config,
                               timeout=PATIENT)


def _config(prefix: str, lifetime_ms: int, **more: Any) -> Dict[str, Any]:
    return {
        "key_prefix": prefix,
        "dimensions": ["global"],
        "global": {"limit": 1000, "algorithm": "sliding"},
        "hot": ["global"],
        "fleet": {"membership": False},
        "leases": {"lifetime_ms": lifetime_ms, "demand_ms": 2000},
        **more,
    }


def _limiter_calls(r: redis.Redis) -> int:
    """The limiter's commands the server ran so far: the module's, or the twin's scripts. Any
    case: Redis keeps a module command's name as registered (``cmdstat_RL.ALL``), Valkey
    lowercases it."""
    stats = {k.lower(): v for k, v in r.info("commandstats").items()}
    return sum(v["calls"] for k, v in stats.items() if k.startswith("cmdstat_rl.") or k in ("cmdstat_evalsha", "cmdstat_eval"))


def _remaining(server: Any, key: str) -> int:
    """The units left of ``key`` (a peek of one unit reads what would be left after it)."""
    peek = SyncLimiter.from_url(server.url, timeout=PATIENT)
    try:
        return peek.peek(key, GLOBAL).remaining + 1
    finally:
        peek.close()


def _until(read: Any, want: Any, seconds: float = 5.0) -> Any:
    deadline = time.monotonic() + seconds
    got = read()
    while got != want and time.monotonic() < deadline:
        time.sleep(0.05)
        got = read()
    return got


def test_a_hot_key_served_from_a_lease_costs_fewer_commands_than_requests(any_server, prefix):
    r = redis.Redis(port=any_server.port)
    # The second batch is sized from the demand measured since the first take: one request over
    # the time between the two, which a loaded machine stretches. Ten minutes of demand make any
    # measure of at least a request a second ask for the largest lease (10% of 1000: 100 units),
    # so the batches no longer depend on how fast the requests came.
    config = _config(prefix, 60_000, leases={"lifetime_ms": 60_000, "demand_ms": 600_000})
    app = _app(any_server, config)
    try:
        with TestClient(app) as client:
            assert client.get("/").status_code == 200  # the first take (and the twin's loading)
            before = _limiter_calls(r)
            assert before > 0, "the first take is counted"
            statuses = [client.get("/").status_code for _ in range(40)]
            sent = _limiter_calls(r) - before
            stats = app.limiter.lease_stats()
            counted = _remaining(any_server, f"{prefix}:{{global}}")
        # The application's shutdown gave the leases' unspent units back.
        after_shutdown = _remaining(any_server, f"{prefix}:{{global}}")
    finally:
        r.close()
    counts = {"sent": sent, **stats}
    assert statuses == [200] * 40
    assert sent < 5, f"{sent} limiter commands for 40 requests: {counts}"
    # Every command after the first take was a take, and every request that took nothing was
    # served from a lease: nothing went to Redis the ordinary way.
    assert sent == stats["takes"] - 1, counts
    assert stats["hits"] == 41 - stats["takes"], counts
    # Redis counted the units when the batches were taken: more than the 41 requests served (a
    # batch of 100 in at most 5 takes), exactly what the leases were granted.
    assert stats["granted"] > 41, counts
    assert counted == 1000 - stats["granted"], counts
    assert after_shutdown == 1000 - 41, counts


def test_a_lease_s_unspent_units_are_given_back_after_its_lifetime(any_server, prefix):
    app = _app(any_server, _config(prefix, 200))
    with TestClient(app) as client:
        statuses = [client.get("/").status_code for _ in range(10)]
        # The middleware's timer ends the lease and refunds what was not spent.
        remaining = _until(lambda: _remaining(any_server, f"{prefix}:{{global}}"), 990)
        stats = app.limiter.lease_stats()
    assert statuses == [200] * 10
    assert remaining == 990, "only the 10 requests served stay counted"
    assert stats["refunded"] > 0 and stats["dropped"] == 0


def test_a_request_another_dimension_refuses_spends_nothing_of_the_lease(any_server, prefix):
    config = _config(prefix, 200, dimensions=["ip", "global"], ip={"limit": 3, "algorithm": "sliding"})
    app = _app(any_server, config)
    with TestClient(app) as client:
        statuses = [client.get("/").status_code for _ in range(8)]
        remaining = _until(lambda: _remaining(any_server, f"{prefix}:{{global}}"), 997)
    assert statuses == [200] * 3 + [429] * 5
    assert remaining == 997, "all or nothing: the refused requests' global units went back"


def test_bans_still_apply_to_a_hot_key_s_requests(any_server, prefix):
    rule = {"name": "login", "paths": ["/"], "key": ["ip"], "limits": ["2/minute"], "algorithm": "gcra",
            "ban": {"after": 2, "within_ms": 60000, "for_ms": 600000}}
    app = _app(any_server, _config(prefix, 200, rules=[rule]))
    r = redis.Redis(port=any_server.port)
    try:
        with TestClient(app) as client:
            first = [client.get("/").status_code for _ in range(4)]
            banned = _until(lambda: len(r.keys(f"{prefix}:*:ban")), 1)
            after = client.get("/")
            # Only the 2 admitted requests stay counted on the hot key once the leases end.
            remaining = _until(lambda: _remaining(any_server, f"{prefix}:{{global}}"), 998)
    finally:
        r.close()
    assert first == [200, 200, 429, 429]
    assert banned == 1, "two refusals ban the subject"
    assert after.status_code == 429 and "ban" in after.text.lower()
    assert remaining == 998


@pytest.mark.parametrize("asynchronous", [False, True])
def test_release_leases_gives_the_unspent_units_back(any_server, prefix, asynchronous):
    # What the ASGI middleware runs at shutdown, from a limiter of one's own (sync or asyncio);
    # a hot key is served from leases by check_all.
    plain = Policy.fixed(1000, 10**12)  # no window ends during the test
    hot = plain.with_hot()
    key = f"{prefix}:hot"
    leases = LeaseConfig(lifetime_ms=600_000, demand_ms=600_000)

    def remaining() -> int:
        peek = SyncLimiter.from_url(any_server.url, timeout=PATIENT, deny_cache=0)
        try:
            return peek.peek(key, plain, 0).remaining
        finally:
            peek.close()

    if asynchronous:
        async def run() -> Tuple[List[Any], Dict[str, int], int]:
            lim = Limiter.from_url(any_server.url, timeout=PATIENT, deny_cache=0, leases=leases)
            try:
                sources = [(await lim.check_all([(key, hot)])).decisions[0].source for _ in range(20)]
                stats = lim.lease_stats()
                held = remaining()
                await lim.release_leases()
                return sources, stats, held
            finally:
                await lim.aclose()

        sources, stats, held = asyncio.run(run())
    else:
        lim = SyncLimiter.from_url(any_server.url, timeout=PATIENT, deny_cache=0, leases=leases)
        try:
            sources = [lim.check_all([(key, hot)]).decisions[0].source for _ in range(20)]
            stats = lim.lease_stats()
            held = remaining()
            lim.release_leases()
        finally:
            lim.close()
    assert Source.LEASE in sources, sources
    assert held == 1000 - stats["granted"] and stats["granted"] > 20, stats
    assert remaining() == 1000 - 20, stats
