"""On a server without the module the limiters run its Lua twin (lua/rl.lua) and answer as
the module does."""

from __future__ import annotations

import asyncio

import redis
import redis.asyncio as aioredis

from redis_rl import Limiter, Policy, Source, SyncLimiter
from redis_rl._engine import LuaTwin


def test_the_twin_answers_like_the_module(server, bare_server, prefix):
    policies = [
        Policy.token_bucket(10, 10, 1000),
        Policy.sliding(5, 3_600_000),
        Policy.fixed(3, 3_600_000),
        Policy.gcra(10, 1000, burst=2),
        Policy.log(2, 3_600_000),
    ]
    with_module = SyncLimiter(redis.Redis(port=server.port), deny_cache=0)
    twin = SyncLimiter(redis.Redis(port=bare_server.port), deny_cache=0)
    try:
        for i, p in enumerate(policies):
            for cost in (1, 2, 0, 1, 11):
                a = with_module.check(f"{prefix}:{i}", p, cost)
                b = twin.check(f"{prefix}:{i}", p, cost)
                assert b.source is Source.REDIS
                # Waits of the time-based policies may differ by the calls' distance in time.
                assert (a.allowed, a.limit, a.remaining, a.retry_after_ms is None) == (
                    b.allowed, b.limit, b.remaining, b.retry_after_ms is None), (p, cost)
        assert twin._engine.twin.active and not with_module._engine.twin.active
        tag = "{" + prefix + "}"
        items = [(f"{tag}:a", Policy.sliding(100, 60_000)), (f"{tag}:b", Policy.fixed(1, 60_000))]
        assert twin.check_all(items).allowed
        refused = twin.check_all(items)
        assert refused.denied_index == 1 and twin.peek(f"{tag}:a", items[0][1]).remaining == 98
        assert twin.stats().errors == 0  # the switch to the twin happens inside the first call
    finally:
        with_module.close()
        twin.close()


def test_async_twin_loads_the_library_again_after_a_flush_and_falls_back_to_a_script(bare_server, prefix):
    async def main() -> None:
        lim = Limiter(aioredis.Redis(port=bare_server.port), deny_cache=0)
        policy = Policy.fixed(3, 60_000)
        try:
            assert (await lim.check(f"{prefix}:k", policy)).remaining == 2
            await lim.client.execute_command("FUNCTION", "FLUSH")
            d = await lim.check(f"{prefix}:k", policy)
            assert (d.source, d.remaining) == (Source.REDIS, 1)
            # Where FUNCTION is refused (here: by an ACL), the same file runs as a script.
            await lim.client.execute_command("FUNCTION", "FLUSH")
            await lim.client.execute_command("ACL", "SETUSER", "default", "-function")
            try:
                d = await lim.check(f"{prefix}:other", policy)
            finally:
                await lim.client.execute_command("ACL", "SETUSER", "default", "+@all")
            assert not lim._engine.twin.use_function
            assert (d.source, d.remaining) == (Source.REDIS, 2)
            assert await lim.client.execute_command("SCRIPT", "EXISTS", LuaTwin.sha) == [1]
        finally:
            await lim.aclose()

    asyncio.run(main())


def test_the_twin_can_be_turned_off(bare_server, prefix):
    lim = SyncLimiter(redis.Redis(port=bare_server.port), lua=False)
    try:
        d = lim.check(f"{prefix}:k", Policy.fixed(2, 60_000))
        assert d.source is Source.LOCAL  # an error reply: the failure mode decides
    finally:
        lim.close()
