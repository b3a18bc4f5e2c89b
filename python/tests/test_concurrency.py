"""Many callers on one key admit exactly the budget: the module decides atomically."""

from __future__ import annotations

import asyncio
import threading

import redis
import redis.asyncio as aioredis

from redis_rl import Limiter, Policy, Source, SyncLimiter

from conftest import PATIENT

TASKS = 32
CALLS = 10


def test_32_async_tasks_on_one_key_admit_exactly_the_budget(server, prefix):
    budget = 100  # fewer than 32 x 10 calls; no refill within the test (1 per ~11.6 days)
    policy = Policy.token_bucket(budget, 1, 10**12)

    async def main() -> list:
        # One connection per task, as separate gateway workers would have (and a timeout
        # generous enough for a loaded machine: this test is about counts, not latency).
        clients = [aioredis.Redis(port=server.port) for _ in range(TASKS)]
        limiters = [Limiter(c, timeout=PATIENT, deny_cache=0) for c in clients]

        async def worker(lim: Limiter) -> list:
            return [await lim.check(f"{prefix}:hot", policy) for _ in range(CALLS)]

        try:
            results = await asyncio.gather(*(worker(lim) for lim in limiters))
        finally:
            for lim in limiters:
                await lim.aclose()
        return [d for r in results for d in r]

    decisions = asyncio.run(main())
    assert len(decisions) == TASKS * CALLS
    assert all(d.source is Source.REDIS for d in decisions)
    assert sum(d.allowed for d in decisions) == budget
    # Each admission saw a distinct remaining count: no two callers took the same unit.
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(budget))


def test_32_threads_on_one_key_admit_exactly_the_budget(server, prefix):
    budget = 50
    policy = Policy.gcra(budget, 10**12)
    results: list = []
    lock = threading.Lock()

    def worker() -> None:
        lim = SyncLimiter(redis.Redis(port=server.port, socket_timeout=PATIENT), timeout=PATIENT)
        try:
            mine = [lim.check(f"{prefix}:hot", policy) for _ in range(CALLS)]
        finally:
            lim.close()
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(TASKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == TASKS * CALLS
    assert sum(d.allowed for d in results) == budget
    assert all(d.source in (Source.REDIS, Source.DENY_CACHE) for d in results)
