"""A Redis Cluster (one node holding every slot) through redis-py's cluster clients: single
keys are routed, and check_all sends one RL.ALL per hash slot, refunding the slots already
taken when a later one denies."""

from __future__ import annotations

import asyncio
import time
from typing import Iterator

import pytest
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.crc import key_slot

from conftest import PATIENT, Server
from redis_rl import LeaseConfig, Limiter, Policy, Source, SyncLimiter
from redis_rl.asgi import RedisHashTiers


@pytest.fixture(scope="module")
def cluster() -> Iterator[Server]:
    s = Server(extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
    try:
        r = redis.Redis(port=s.port)
        r.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 20
        while b"cluster_state:ok" not in r.execute_command("CLUSTER", "INFO") and time.monotonic() < deadline:
            time.sleep(0.05)
        r.close()
        yield s
    finally:
        s.stop()


def test_check_all_across_slots_refunds_the_slots_taken(cluster, prefix):
    # The narrow window is of 10^12 ms: fixed windows are aligned to the clock, and a shorter
    # one could turn between the calls and allow the second.
    keys = [f"{prefix}:a", f"{prefix}:b", f"{prefix}:c"]
    assert len({key_slot(k.encode()) for k in keys}) == 3
    wide, narrow = Policy.sliding(10, 60_000), Policy.fixed(1, 10**12)
    items = [(keys[0], wide), (keys[1], wide), (keys[2], narrow)]
    lim = SyncLimiter(RedisCluster(host="127.0.0.1", port=cluster.port), deny_cache=0)
    try:
        assert lim.check(f"{prefix}:single", wide).source is Source.REDIS
        ok = lim.check_all(items)
        assert ok.allowed and [d.remaining for d in ok.decisions] == [9, 9, 0]
        refused = lim.check_all(items)
        assert refused.denied_index == 2 and all(d.source is Source.REDIS for d in refused.decisions)
        # The first two slots were taken, then given back with RL.REFUND.
        assert [lim.peek(k, wide, 0).remaining for k in keys[:2]] == [9, 9]
        assert lim.stats().errors == 0
    finally:
        lim.close()


def test_a_slot_served_from_a_lease_is_not_given_back_when_a_later_slot_denies(cluster, prefix):
    hot, cold = f"{prefix}:hot", f"{prefix}:cold"
    assert key_slot(hot.encode()) != key_slot(cold.encode())
    # Windows of 10^12 ms: no window ends during the test.
    wide, narrow = Policy.fixed(1000, 10**12).with_hot(), Policy.fixed(1, 10**12)
    items = [(hot, wide), (cold, narrow)]
    leases = LeaseConfig(lifetime_ms=600_000)
    lim = SyncLimiter(RedisCluster(host="127.0.0.1", port=cluster.port), deny_cache=0, leases=leases)
    try:
        # The hot key's demand, seen first in Redis, then served from a lease.
        sources = [lim.check_all([(hot, wide)]).decisions[0].source for _ in range(20)]
        assert sources[-1] is Source.LEASE, sources
        assert lim.check_all([(cold, narrow)]).allowed
        refused = lim.check_all(items)
        assert refused.denied_index == 1 and refused.decisions[0].source is Source.LEASE
        # Redis counted the lease's batches (the first requests took them) and nothing else
        # on the hot key: nothing of it is given back (a refund would hand back a unit the
        # lease still holds).
        assert lim.peek(hot, wide, 0).remaining == 1000 - lim.lease_stats()["granted"]
    finally:
        lim.close()


def test_check_all_reports_keys_of_later_slots_as_unchecked(cluster, prefix):
    keys = [f"{prefix}:a", f"{prefix}:b", f"{prefix}:c"]
    wide, narrow = Policy.sliding(10, 60_000), Policy.fixed(1, 10**12)
    lim = SyncLimiter(RedisCluster(host="127.0.0.1", port=cluster.port), deny_cache=0)
    try:
        assert lim.check(keys[0], narrow).allowed
        # The first slot denies: the later ones are never sent, so nothing is known of them.
        md = lim.check_all([(keys[0], narrow), (keys[1], wide), (keys[2], wide)])
        assert md.denied_index == 0
        assert md.decisions[0].source is Source.REDIS and not md.decisions[0].allowed
        assert [d.source for d in md.decisions[1:]] == [Source.UNCHECKED, Source.UNCHECKED]
        assert [lim.peek(k, wide, 0).remaining for k in keys[1:]] == [10, 10]
    finally:
        lim.close()


def test_async_cluster_client(cluster, prefix):
    async def main() -> None:
        lim = Limiter(AsyncRedisCluster(host="127.0.0.1", port=cluster.port), timeout=PATIENT)
        try:
            tag = "{" + prefix + "}"
            md = await lim.check_all([(f"{tag}:x", Policy.gcra(5, 1000)), (f"{tag}:y", Policy.log(2, 1000))])
            assert md.allowed and [d.remaining for d in md.decisions] == [4, 1]
            assert (await lim.check(f"{prefix}:z", Policy.token_bucket(3, 1, 1000))).remaining == 2
            # The tier hash's snapshot (HSCAN) and lookups go to the hash's slot.
            await lim.query("HSET", f"{prefix}:tiers", "pro-key", "pro")
            tiers = RedisHashTiers(lim, f"{prefix}:tiers", ttl=60.0)
            assert await tiers.refresh() == 1
            assert [await tiers("pro-key"), await tiers("nobody")] == ["pro", None]
            assert tiers.stats()["redis_lookups"] == 1
        finally:
            await lim.aclose()

    asyncio.run(main())
