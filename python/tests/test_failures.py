"""When Redis fails: timeouts, fail open / closed / local, the breaker, and recovery."""

from __future__ import annotations

import asyncio
import time

import redis
import redis.asyncio as aioredis

from redis_rl import BreakerConfig, BreakerState, FailureMode, Limiter, Policy, Source, SyncLimiter

from conftest import PATIENT


def test_redis_killed_mid_run_falls_back_to_local_limits(own_server, prefix):
    policy = Policy.fixed(5, 10**12)  # one window for the whole test
    limiter = SyncLimiter.from_url(
        own_server.url, timeout=PATIENT, breaker=BreakerConfig(failure_threshold=2, open_for=60.0)
    )
    try:
        before = [limiter.check(f"{prefix}:k", policy) for _ in range(3)]
        assert [d.source for d in before] == [Source.REDIS] * 3
        own_server.kill()
        during = [limiter.check(f"{prefix}:k", policy) for _ in range(20)]
        # The local store starts from idle (it never saw Redis's count): exactly the limit
        # more is admitted locally, then it denies with the core's retry_after.
        assert all(d.source is Source.LOCAL for d in during)
        assert sum(d.allowed for d in during) == 5
        assert [d.remaining for d in during[:5]] == [4, 3, 2, 1, 0]
        assert all(d.retry_after_ms and d.retry_after_ms > 0 for d in during[5:])
        assert limiter.breaker_state is BreakerState.OPEN
        stats = limiter.stats()
        assert stats.local == 20 and stats.breaker_opened == 1
        assert stats.redis_calls == 3 + 2  # the breaker stopped calling after 2 failures
    finally:
        limiter.close()


def test_fail_open_and_fail_closed(own_server, prefix):
    open_policy = Policy.sliding(1, 60_000).on_failure("open")
    closed_policy = Policy.sliding(1, 60_000).on_failure(FailureMode.CLOSED)
    limiter = SyncLimiter.from_url(own_server.url, breaker=BreakerConfig(1, 5.0))
    try:
        own_server.kill()
        d = limiter.check(f"{prefix}:o", open_policy)
        assert (d.allowed, d.source, d.limit, d.remaining) == (True, Source.FAIL_OPEN, 1, 1)
        d = limiter.check(f"{prefix}:c", closed_policy)
        assert (d.allowed, d.source, d.remaining) == (False, Source.FAIL_CLOSED, 0)
        assert d.retry_after_ms >= 1000
        md = limiter.check_all([(f"{prefix}:o2", open_policy), (f"{prefix}:c2", closed_policy)])
        assert md.denied_index == 1 and md.decisions[0].source is Source.FAIL_OPEN
    finally:
        limiter.close()


def test_a_paused_redis_costs_a_call_at_most_the_timeout_and_the_breaker_recovers(own_server, prefix):
    policy = Policy.token_bucket(100, 100, 60_000)

    async def main() -> None:
        limiter = Limiter(
            aioredis.Redis(port=own_server.port),
            timeout=0.2,
            breaker=BreakerConfig(failure_threshold=2, open_for=0.3),
        )
        try:
            assert (await limiter.check(f"{prefix}:k", policy)).source is Source.REDIS
            own_server.pause()
            try:
                during = [await limiter.check(f"{prefix}:k", policy) for _ in range(10)]
            finally:
                own_server.resume()
            assert all(d.source is Source.LOCAL and d.allowed for d in during)
            assert limiter.stats().errors == 2  # two timeouts, then the breaker
            # After open_for, the probe finds Redis and closes the breaker. Bounded wait.
            deadline = time.monotonic() + 20
            while limiter.breaker_state is not BreakerState.CLOSED and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                await limiter.check(f"{prefix}:k", policy)
            assert limiter.breaker_state is BreakerState.CLOSED
            assert (await limiter.check(f"{prefix}:k", policy)).source is Source.REDIS
        finally:
            await limiter.aclose()

    asyncio.run(main())


def test_started_while_redis_is_down_then_moves_to_redis(own_server, prefix):
    port = own_server.port
    own_server.kill()
    limiter = SyncLimiter(
        redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.5),
        breaker=BreakerConfig(failure_threshold=1, open_for=0.2),
    )
    policy = Policy.log(3, 60_000)
    try:
        assert limiter.check(f"{prefix}:k", policy).source is Source.LOCAL
        own_server.start(port)
        deadline = time.monotonic() + 20
        source = Source.LOCAL
        while source is not Source.REDIS and time.monotonic() < deadline:
            time.sleep(0.05)
            source = limiter.check(f"{prefix}:k", policy).source
        assert source is Source.REDIS
    finally:
        limiter.close()


def test_local_fallback_divides_the_limit_by_instances(own_server, prefix):
    policy = Policy.token_bucket(10, 10, 10**9).on_failure(FailureMode.local(instances=4))
    limiter = SyncLimiter.from_url(own_server.url, breaker=BreakerConfig(1, 60.0))
    try:
        own_server.kill()
        ds = [limiter.check(f"{prefix}:k", policy) for _ in range(5)]
        assert [d.allowed for d in ds] == [True, True, False, False, False]
        assert ds[0].limit == 2
    finally:
        limiter.close()
