"""Fleet membership on the Rust client's op: limiters naming one fleet key count each other
(an ``RL.CONCURRENCY`` lease each, renewed by ``heartbeat()``), the local fallback divides
each limit by the live fleet size, and the ASGI middleware joins the fleet its ``[fleet]``
configures."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from redis_rl import BreakerConfig, FleetConfig, Policy, Source, SyncLimiter
from redis_rl.asgi import RateLimitMiddleware

from conftest import PATIENT


def _until(sizes, want, seconds: float = 5.0):
    """Heartbeats (bounded in time) until ``sizes()`` reads ``want``."""
    deadline = time.monotonic() + seconds
    got = sizes()
    while got != want and time.monotonic() < deadline:
        time.sleep(0.05)
        got = sizes()
    return got


def test_the_local_fallback_divides_each_limit_by_the_live_fleet_size(own_server, prefix):
    fleet = FleetConfig(f"{prefix}:{{fleet}}", heartbeat_ms=100, ttl_ms=2000)
    a, b = (SyncLimiter.from_url(own_server.url, timeout=PATIENT, breaker=BreakerConfig(1, 60.0), fleet=fleet)
            for _ in range(2))
    try:
        assert _until(lambda: (a.heartbeat(), b.heartbeat()), (2, 2)) == (2, 2)
        own_server.kill()
        policy = Policy.fixed(10, 10**12)  # local failure mode, instances not given
        during = [a.check(f"{prefix}:k", policy) for _ in range(12)]
        assert all(d.source is Source.LOCAL for d in during)
        assert sum(d.allowed for d in during) == 5, "10 shared by 2 live members"
        assert a.heartbeat() == 2, "a failed heartbeat keeps the last size"
    finally:
        a.close()
        b.close()


def test_a_member_that_leaves_is_no_longer_counted(server, prefix):
    fleet = FleetConfig(f"{prefix}:{{fleet}}", heartbeat_ms=100, ttl_ms=2000)
    a, b = (SyncLimiter.from_url(server.url, timeout=PATIENT, fleet=fleet) for _ in range(2))
    try:
        assert _until(lambda: (a.heartbeat(), b.heartbeat()), (2, 2)) == (2, 2)
        b.leave_fleet()
        assert _until(a.heartbeat, 1) == 1
    finally:
        a.close()
        b.close()


def test_the_asgi_middleware_joins_its_configured_fleet(server, prefix):
    async def hello(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("hi")

    # A member lives a minute without renewal: only leaving ends it within the test.
    config = {"key_prefix": prefix, "hot": [], "fleet": {"membership": True, "heartbeat_ms": 100, "ttl_ms": 60_000}}
    app = RateLimitMiddleware(Starlette(routes=[Route("/", hello)]), redis_url=server.url, config=config,
                              timeout=PATIENT)
    other = SyncLimiter.from_url(server.url, timeout=PATIENT, fleet=FleetConfig(f"{prefix}:{{fleet}}", heartbeat_ms=100, ttl_ms=60_000))
    try:
        with TestClient(app) as client:
            assert client.get("/").status_code == 200
            assert app.limiter.fleet == FleetConfig(f"{prefix}:{{fleet}}", 100, 60_000, divides=True)
            # The middleware's member (renewed by its own task) and this one.
            assert _until(other.heartbeat, 2) == 2
            assert _until(lambda: app.limiter.fleet_size, 2) == 2
        # The application's shutdown (the lifespan) left the fleet and stopped the task.
        assert _until(other.heartbeat, 1) == 1
        assert app._heartbeats is None
    finally:
        other.close()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling is Python 3.11+")
def test_the_heartbeat_task_ends_when_its_cancellation_was_swallowed(server, prefix):
    # asyncio.wait_for before Python 3.12 can swallow a cancellation landing as its call
    # completes; the heartbeat loop must still end, or the event loop's shutdown (which
    # waits for every cancelled task: Starlette's TestClient, uvicorn) hangs.
    config = {"key_prefix": prefix, "hot": [], "fleet": {"membership": True, "heartbeat_ms": 40, "ttl_ms": 2000}}
    app = RateLimitMiddleware(Starlette(routes=[]), redis_url=server.url, config=config, timeout=PATIENT)

    async def scenario() -> None:
        beats = []

        async def swallowing_heartbeat() -> None:
            beats.append(1)
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if len(beats) > 2:
                    raise
                # The first two (one per scenario): what wait_for does when the call
                # completes as the cancellation lands.

        app.limiter.heartbeat = swallowing_heartbeat  # type: ignore[method-assign]
        app._beat()
        task = app._heartbeats
        assert task is not None
        while not beats:
            await asyncio.sleep(0.01)
        task.cancel()
        # A bound against a hang, not a timing check: the loop ends at its next turn (before
        # the fix it calls the heartbeat again and waits there; the next cancellation, at
        # asyncio.run's end, then ends it).
        for _ in range(300):
            if task.done():
                break
            await asyncio.sleep(0.1)
        assert task.done() and len(beats) == 1, beats
        # close() (the lifespan's shutdown) ends it as well, the cancellation swallowed again,
        # whatever the Python version.
        app._closed = False
        app._beat()
        again = app._heartbeats
        assert again is not None and again is not task
        while len(beats) < 2:
            await asyncio.sleep(0.01)
        await asyncio.wait_for(app.close(), 30)
        assert again.done() and app._heartbeats is None

    asyncio.run(scenario())
