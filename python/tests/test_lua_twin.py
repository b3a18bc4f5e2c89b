"""On a server without the module the limiters run its Lua twin (lua/rl.lua) and answer as
the module does."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
import redis

from redis_rl import Policy, Source, SyncLimiter

from conftest import patient_limiter


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_twin_answers_like_the_module(server, bare_server, prefix, protocol):
    """The module's and the twin's decisions, read alike by the limiter over RESP2 and over
    RESP3 (redis-py 8's default)."""
    prefix = f"{prefix}:{protocol}"
    policies = [
        # Refills slow enough (per hour) that the calls' distance in time changes no count.
        Policy.token_bucket(10, 10, 3_600_000),
        Policy.sliding(5, 3_600_000),
        Policy.fixed(3, 10**12),  # fixed windows turn on the clock's multiples: none does here
        Policy.gcra(10, 3_600_000, burst=2),
        Policy.log(2, 3_600_000),
    ]
    with_module = SyncLimiter(redis.Redis(port=server.port, protocol=protocol), deny_cache=0)
    twin = SyncLimiter(redis.Redis(port=bare_server.port, protocol=protocol), deny_cache=0)
    try:
        for i, p in enumerate(policies):
            for cost in (1, 2, 0, 1, 11):
                a = with_module.check(f"{prefix}:{i}", p, cost)
                b = twin.check(f"{prefix}:{i}", p, cost)
                assert b.source is Source.REDIS
                # Waits of the time-based policies may differ by the calls' distance in time.
                assert (a.allowed, a.limit, a.remaining, a.retry_after_ms is None) == (
                    b.allowed, b.limit, b.remaining, b.retry_after_ms is None), (p, cost)
        assert twin._engine.layers.route == "lua" and with_module._engine.layers.route == "module"
        tag = "{" + prefix + "}"
        items = [(f"{tag}:a", Policy.sliding(100, 60_000)), (f"{tag}:b", Policy.fixed(1, 10**12))]
        assert twin.check_all(items).allowed
        refused = twin.check_all(items)
        assert refused.denied_index == 1 and twin.peek(f"{tag}:a", items[0][1]).remaining == 98
        assert twin.stats().errors == 0  # the switch to the twin happens inside the first call
    finally:
        with_module.close()
        twin.close()


def test_async_twin_sends_the_script_again_after_a_flush(bare_server, prefix):
    """The twin goes as a script (EVALSHA, keyed, so a cluster client routes it); after a
    SCRIPT FLUSH the NOSCRIPT reply makes the same call an EVAL of the whole script, which
    caches it again. No FUNCTION is needed (managed services and ACLs refuse it)."""
    from redis_rl._core import LUA_TWIN

    sha = hashlib.sha1(("#!lua" + LUA_TWIN[LUA_TWIN.find("\n"):]).encode()).hexdigest()

    async def main() -> None:
        lim = patient_limiter(bare_server.port, deny_cache=0)
        policy = Policy.fixed(3, 10**12)  # no window turns between the two checks
        try:
            await lim.client.execute_command("ACL", "SETUSER", "default", "-function")
            try:
                assert (await lim.check(f"{prefix}:k", policy)).remaining == 2
                assert await lim.client.execute_command("SCRIPT", "EXISTS", sha) == [1]
                await lim.client.execute_command("SCRIPT", "FLUSH")
                d = await lim.check(f"{prefix}:k", policy)
            finally:
                await lim.client.execute_command("ACL", "SETUSER", "default", "+@all")
            assert (d.source, d.remaining) == (Source.REDIS, 1)
            assert await lim.client.execute_command("SCRIPT", "EXISTS", sha) == [1]
            assert lim.stats().errors == 0
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


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_embedded_twin_has_the_module_s_other_commands(server, bare_server, prefix, protocol):
    """RL.THROTTLE, RL.CONCURRENCY, RL.STATE and RL.RESET through the twin the package embeds
    (on a server without the module) reply as the module does, over RESP2 and RESP3."""
    from redis_rl._core import LUA_TWIN

    prefix = f"{prefix}:{protocol}"
    module = redis.Redis(port=server.port, protocol=protocol)
    bare = redis.Redis(port=bare_server.port, protocol=protocol)
    try:
        bare.function_load(LUA_TWIN, replace=True)
        calls = [
            ["RL.THROTTLE", "2", "1", "3600"],
            ["RL.THROTTLE", "2", "1", "3600", "3"],
            ["RL.CONCURRENCY", "2", "600000", "ACQUIRE", "a"],
            ["RL.CONCURRENCY", "2", "600000", "ACQUIRE", "b"],
            ["RL.CONCURRENCY", "2", "600000", "ACQUIRE", "c"],
            ["RL.CONCURRENCY", "RELEASE", "a"],
            ["RL.CONCURRENCY", "2", "600000", "ACQUIRE", "c", "PEEK"],
            ["RL.STATE"],
            ["RL.RESET"],
            ["RL.RESET"],
            ["RL.STATE"],
            ["RL.CONCURRENCY", "0", "1000", "ACQUIRE", "a"],
        ]
        for argv in calls:
            key = f"{prefix}:c" if argv[0] != "RL.THROTTLE" else f"{prefix}:t"
            try:
                a = module.execute_command(argv[0], key, *argv[1:])
            except redis.ResponseError as e:
                a = str(e)
            try:
                b = bare.fcall("rl", 1, key, *argv)
            except redis.ResponseError as e:
                b = str(e)
            if argv[0] == "RL.STATE" and a is not None:
                # A map from both in RESP3, its pairs in RESP2 (the twin's in its Lua table's
                # order); expiry instants and the TTL move with the clock, the rest is equal.
                assert type(a) is type(b), (protocol, a, b)
                a, b = _timeless(a), _timeless(b)
            elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b) == 5:
                # The two calls run a moment apart: their waits (the last two fields) may
                # differ by the time between them, never by more than a second.
                assert all(abs(x - y) <= 1000 for x, y in zip(a[3:], b[3:])), (argv, a, b)
                a, b = a[:3], b[:3]
            assert a == b, (argv, a, b)
    finally:
        module.close()
        bare.close()


def _timeless(reply: object) -> dict[object, object]:
    """RL.STATE's names and values (a map in RESP3, a flat array in RESP2), without the
    values of the `*_ms` instants and TTL."""
    if isinstance(reply, dict):
        pairs = list(reply.items())
    else:
        assert isinstance(reply, list)
        pairs = list(zip(reply[::2], reply[1::2]))
    return {name: None if isinstance(name, bytes) and name.endswith(b"ms") else value for name, value in pairs}
