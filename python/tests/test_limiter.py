"""The limiters against a real server: every policy and reply field, PEEK, COST, shadow,
check_all, the deny cache and bad input. Each test runs on the sync and the async limiter."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest
import redis
import redis.asyncio as aioredis

from redis_rl import Decision, Grant, Limiter, MultiDecision, Policy, Source, SyncLimiter

from conftest import PATIENT


class Both:
    """Runs the same calls on the blocking or the asyncio limiter."""

    def __init__(self, kind: str, port: int, **kwargs: Any) -> None:
        self.kind = kind
        self.port = port
        self.kwargs = {"timeout": PATIENT, **kwargs}

    def run(self, body: Callable[[Any], Any]) -> Any:
        if self.kind == "sync":
            limiter = SyncLimiter(redis.Redis(port=self.port), **self.kwargs)
            try:
                return body(_SyncFacade(limiter))
            finally:
                limiter.close()

        async def main() -> Any:
            limiter = Limiter(aioredis.Redis(port=self.port), **self.kwargs)
            try:
                return await body(limiter)
            finally:
                await limiter.aclose()

        return asyncio.run(main())


class _SyncFacade:
    """Lets one test body `await` the sync limiter's results."""

    def __init__(self, limiter: SyncLimiter) -> None:
        self.limiter = limiter

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.limiter, name)
        if name not in ("check", "peek", "check_all", "take_upto", "peek_upto", "refund", "settle", "reset"):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            return _Done(method(*args, **kwargs))

        return call


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self):  # type: ignore[no-untyped-def]
        return self.value
        yield  # pragma: no cover


def run(kind: str, port: int, body: Callable[[Any], Any], **kwargs: Any) -> Any:
    if kind == "sync":
        return Both(kind, port, **kwargs).run(lambda lim: _drive(body(lim)))
    return Both(kind, port, **kwargs).run(body)


def _drive(coro: Any) -> Any:
    """Runs a coroutine whose awaits are all already done (the sync facade)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the sync limiter suspended")


@pytest.fixture(params=["sync", "async"])
def kind(request: Any) -> str:
    return request.param


def fields(d: Decision) -> tuple:
    return (d.allowed, d.limit, d.remaining, d.retry_after_ms, d.reset_after_ms, d.source)


def test_token_bucket_every_field(server, prefix, kind):
    # A token every 6 minutes: no refill between the calls, however slow the machine (the
    # resets count down from 6 and 60 minutes; 10 s of margin for the calls).
    p = Policy.token_bucket(10, 10, 3_600_000)

    async def body(lim):
        key = f"{prefix}:tb"
        first = await lim.check(key, p)
        assert fields(first) == (True, 10, 9, 0, 360_000, Source.REDIS)
        rest = await lim.check(key, p, cost=9)
        assert fields(rest)[:4] == (True, 10, 0, 0) and 3_590_000 <= rest.reset_after_ms <= 3_600_000
        denied = await lim.check(key, p)
        assert (denied.allowed, denied.limit, denied.remaining) == (False, 10, 0)
        assert 1 <= denied.retry_after_ms <= 360_000 and denied.reset_after_ms <= 3_600_000
        assert not denied.allows and denied.denied and not denied.never
        never = await lim.check(f"{prefix}:tb2", p, cost=11)
        assert (never.allowed, never.retry_after_ms, never.never, never.remaining) == (False, None, True, 10)

    run(kind, server.port, body, deny_cache=0)


def test_sliding_fixed_log_gcra_every_field(server, prefix, kind):
    async def body(lim):
        s = Policy.sliding(5, 60_000)
        d = await lim.check(f"{prefix}:s", s, cost=5)
        assert (d.allowed, d.limit, d.remaining, d.retry_after_ms) == (True, 5, 0, 0)
        assert 0 < d.reset_after_ms <= 120_000
        d = await lim.check(f"{prefix}:s", s)
        assert (d.allowed, d.limit, d.remaining) == (False, 5, 0) and 0 < d.retry_after_ms <= 120_000
        assert (await lim.check(f"{prefix}:s", s, cost=6)).never

        # Fixed windows turn on the clock's multiples of their length: one of 10^12 ms turns
        # in 2033, not between two calls.
        f = Policy.fixed(3, 10**12)
        d = await lim.check(f"{prefix}:f", f)
        assert (d.allowed, d.limit, d.remaining, d.retry_after_ms) == (True, 3, 2, 0)
        assert 0 < d.reset_after_ms <= 10**12
        d = await lim.check(f"{prefix}:f", f, cost=3)
        assert (d.allowed, d.remaining) == (False, 2) and d.retry_after_ms == d.reset_after_ms

        # One every 6 minutes: the calls cannot outlast an emission interval; the reset
        # counts down from 12 minutes (10 s of margin for the calls).
        g = Policy.gcra(10, 3_600_000, burst=2)
        a, b, c = [await lim.check(f"{prefix}:g", g) for _ in range(3)]
        assert fields(a) == (True, 2, 1, 0, 360_000, Source.REDIS)
        assert (b.allowed, b.remaining) == (True, 0) and 710_000 <= b.reset_after_ms <= 720_000
        assert (c.allowed, c.limit, c.remaining) == (False, 2, 0) and 1 <= c.retry_after_ms <= 360_000
        assert (await lim.check(f"{prefix}:g", g, cost=3)).never
        assert (await lim.check(f"{prefix}:g2", Policy.gcra(10, 1000))).limit == 10

        lg = Policy.log(2, 60_000)
        d = await lim.check(f"{prefix}:l", lg)
        assert (d.allowed, d.limit, d.remaining, d.retry_after_ms) == (True, 2, 1, 0)
        assert 59_000 < d.reset_after_ms <= 60_000
        await lim.check(f"{prefix}:l", lg)
        d = await lim.check(f"{prefix}:l", lg)
        assert (d.allowed, d.remaining) == (False, 0) and 59_000 < d.retry_after_ms <= 60_000

    run(kind, server.port, body, deny_cache=0)


def test_peek_and_cost_zero_take_nothing(server, prefix, kind):
    p = Policy.token_bucket(5, 1, 60_000)

    async def body(lim):
        key = f"{prefix}:k"
        peeked = await lim.peek(key, p, cost=2)
        assert (peeked.allowed, peeked.remaining) == (True, 3)
        looked = await lim.check(key, p, cost=0)
        assert (looked.allowed, looked.remaining) == (True, 5)
        taken = await lim.check(key, p, cost=2)
        assert taken.remaining == 3

    run(kind, server.port, body)


def test_take_upto_takes_a_batch_and_refund_gives_back(server, prefix, kind, client):
    policies = [
        Policy.sliding(100, 1_000_000_000),
        Policy.fixed(100, 1_000_000_000),
        Policy.token_bucket(100, 1, 1_000_000_000),
        Policy.gcra(100, 1_000_000_000),
    ]

    async def body(lim):
        for i, p in enumerate(policies):
            key = f"{prefix}:g{i}"
            g = await lim.take_upto(key, p, 60)
            assert isinstance(g, Grant)
            assert (g.granted, g.decision.allowed, g.decision.remaining) == (60, True, 40)
            assert (await lim.peek_upto(key, p, 60)).granted == 40
            g = await lim.take_upto(key, p, 60)
            assert (g.granted, g.decision.remaining) == (40, 0)
            g = await lim.take_upto(key, p, 60)
            assert g.granted == 0 and not g.decision.allowed and g.decision.retry_after_ms > 1000
            assert await lim.refund(key, p, 25) == 25
            assert (await lim.peek(key, p, cost=0)).remaining == 25
            assert await lim.refund(key, p, 0) == 0
        with pytest.raises(ValueError):
            await lim.take_upto(f"{prefix}:log", Policy.log(10, 1000), 5)

    run(kind, server.port, body, deny_cache=0)
    # The commands as sent: COST always named, UPTO after it.
    key = f"{prefix}:cmd"
    reply = client.execute_command("RL.SLIDING", key, 10, 60_000, "COST", 4, "UPTO")
    assert reply[5] == 4


def test_shadow_records_but_allows(server, prefix, kind):
    p = Policy.fixed(1, 10**12).with_shadow()  # no window turns between the checks

    async def body(lim):
        await lim.check(f"{prefix}:k", p)
        d = await lim.check(f"{prefix}:k", p)
        assert d.shadow and not d.allowed and d.allows

    run(kind, server.port, body, deny_cache=0)


def test_check_all_is_all_or_nothing(server, prefix, kind, client):
    tag = "{" + prefix + "}"
    wide = Policy.sliding(100, 60_000)
    narrow = Policy.fixed(1, 10**12)  # no window turns between the calls

    async def body(lim):
        items = [(f"{tag}:a", wide), (f"{tag}:b", narrow), (f"{tag}:c", Policy.gcra(100, 1000))]
        ok = await lim.check_all(items)
        assert isinstance(ok, MultiDecision) and ok.allowed and ok.denied_index is None
        assert [d.remaining for d in ok.decisions] == [99, 0, 99] and ok.retry_after_ms == 0
        refused = await lim.check_all(items)
        assert not refused.allowed and refused.denied_index == 1
        assert refused.retry_after_ms == refused.decisions[1].retry_after_ms > 0
        # Nothing was taken on the keys that would have allowed.
        assert (await lim.peek(f"{tag}:a", wide)).remaining == 98
        assert (await lim.peek(f"{tag}:c", Policy.gcra(100, 1000))).remaining >= 98
        never = await lim.check_all([(f"{tag}:d", wide), (f"{tag}:e", narrow)], cost=2)
        assert never.denied_index == 1 and never.retry_after_ms is None
        assert (await lim.check_all([])).allowed

    run(kind, server.port, body, deny_cache=0)


def test_check_all_shadow_key_never_denies(server, prefix, kind):
    tag = "{" + prefix + "}"

    async def body(lim):
        shadow = Policy.fixed(1, 10**12).with_shadow()  # no window turns between the calls
        items = [(f"{tag}:a", Policy.sliding(10, 60_000)), (f"{tag}:s", shadow)]
        await lim.check_all(items)
        md = await lim.check_all(items)
        assert md.allowed and md.decisions[1].shadow and md.decisions[1].denied

    run(kind, server.port, body, deny_cache=0)


def calls(client: redis.Redis, command: str) -> int:
    """How many times ``command`` ran, any case: Redis keeps a module command's name as
    registered (``cmdstat_RL.FIXED``), Valkey lowercases it."""
    stats = {k.lower(): v for k, v in client.info("commandstats").items()}.get(f"cmdstat_{command.lower()}")
    return int(stats["calls"]) if stats else 0


def test_a_refund_or_reset_ends_the_cached_refusal(server, prefix, kind, client):
    # A month's quota: a cached refusal would last weeks.
    p = Policy.fixed(1_000, 30 * 86_400_000)
    key = f"{prefix}:quota"

    async def refused_and_cached(lim):
        assert (await lim.check(key, p)).denied
        assert (await lim.check(key, p)).source is Source.DENY_CACHE

    async def body(lim):
        assert (await lim.check(key, p, cost=1_000)).allowed
        await refused_and_cached(lim)
        # The work used 10: 990 go back, and the refusal with them.
        await lim.settle(key, p, 1_000, 10)
        assert (await lim.check(key, p)).allowed
        assert (await lim.check(key, p, cost=989)).allowed
        await refused_and_cached(lim)
        # Deleted behind the limiter's back: still refused from the cache...
        client.delete(key)
        assert (await lim.check(key, p)).source is Source.DENY_CACHE
        # ...until reset through the limiter (RL.RESET, the module's or the twin's).
        assert await lim.reset(key) is False
        d = await lim.check(key, p)
        assert d.allowed and d.source is Source.REDIS
        assert await lim.reset(key) is True

    run(kind, server.port, body)


def test_deny_cache_keeps_a_flood_off_redis(server, prefix, kind, client):
    p = Policy.fixed(1, 10**12)  # no window turns between the calls

    async def body(lim):
        await lim.check(f"{prefix}:k", p)
        first = await lim.check(f"{prefix}:k", p)
        assert first.source is Source.REDIS and first.denied
        before = calls(client, "rl.fixed")
        assert before >= 2, "the two checks before were counted"
        flood = [await lim.check(f"{prefix}:k", p) for _ in range(50)]
        assert all(d.source is Source.DENY_CACHE and d.denied for d in flood)
        assert all(0 < d.retry_after_ms <= first.retry_after_ms for d in flood)
        assert calls(client, "rl.fixed") == before
        assert lim.stats().deny_cache == 50
        # A cost over the limit is Redis's "never", not the cache's.
        assert (await lim.check(f"{prefix}:k", p, cost=2)).source is Source.REDIS

    run(kind, server.port, body)


def test_bad_input_raises_before_sending(server, prefix, kind):
    p = Policy.sliding(10, 1000)

    async def body(lim):
        with pytest.raises(TypeError, match="key must be a str, not bytes"):
            await lim.check(b"k", p)
        with pytest.raises(ValueError, match="key must not be empty"):
            await lim.check("", p)
        with pytest.raises(TypeError, match="policy must be a Policy, not tuple"):
            await lim.check("k", (10, 1000))
        with pytest.raises(ValueError, match="^cost must be an integer between 0 and 1000000000000000$"):
            await lim.check("k", p, cost=-1)
        with pytest.raises(ValueError, match="^cost must be an integer between 0 and 1000000000000000$"):
            await lim.check("k", p, cost=10**16)
        with pytest.raises(TypeError, match="cost must be an int, not float"):
            await lim.check("k", p, cost=1.5)
        with pytest.raises(ValueError, match="item 1: key 'a' repeats an earlier key"):
            await lim.check_all([("a", p), ("a", p)])
        with pytest.raises(ValueError, match="at most 16 keys"):
            await lim.check_all([(f"k{i}", p) for i in range(17)])
        with pytest.raises(TypeError, match="item 0 must be a"):
            await lim.check_all(["a"])
        assert lim.stats().redis_calls == 0

    run(kind, server.port, body)


def test_the_sources_are_the_cores_names() -> None:
    from redis_rl import _core

    assert {s.value for s in Source} <= set(_core.SOURCES), _core.SOURCES
    assert _core.SOURCES[0] == "redis"
