"""The extension decides exactly as the module: the same calls, at the same instants.

The module reads the server's clock, so each call is sent as ``MULTI; TIME; RL.X ...; TIME;
EXEC``: the instant the module used lies between the two TIME replies (microseconds apart).
The extension (the local fallback's store) must then give the module's reply, all five fields
exactly, at an instant inside that bracket (searched outward from its middle, with a little
slack because the extension's state was written at its own matching instant). A wrong
algorithm, parameter, rounding or state transition finds no such instant and fails.
Calls are spaced by short random pauses so refill, window turns and expiries all happen.
"""

from __future__ import annotations

import random
import time
from typing import List, Tuple

import pytest
import redis

from redis_rl import Policy
from redis_rl._core import LocalStore
from redis_rl._registry import LIMITERS

SLACK_US = 3_000
CALLS = 40

POLICIES = [
    Policy.token_bucket(10, 3, 100),
    Policy.sliding(8, 150),
    Policy.fixed(6, 120),
    Policy.gcra(5, 100, burst=3),
    Policy.gcra(4, 90),
    Policy.log(5, 130),
    Policy.quota(6, 1),
]


def _us(reply: List[bytes]) -> int:
    return int(reply[0]) * 1_000_000 + int(reply[1])


def _server_call(r: redis.Redis, command: Tuple) -> Tuple[int, int, tuple]:
    with r.pipeline(transaction=True) as pipe:
        pipe.execute_command("TIME")
        pipe.execute_command(*command)
        pipe.execute_command("TIME")
        before, reply, after = pipe.execute()
    allowed, limit, remaining, retry, reset = reply
    return _us(before), _us(after), (bool(allowed), limit, remaining, retry, reset)


def _instant(store: LocalStore, key: str, policy: Policy, cost: int, lo: int, hi: int, want: tuple) -> int:
    mid = (lo + hi) // 2
    for delta in range((hi - lo) // 2 + SLACK_US + 1):
        for t in (mid - delta, mid + delta):
            if store.check(key, policy.params, cost, t, True) == want:
                return t
    raise AssertionError(f"no instant in [{lo - SLACK_US}, {hi + SLACK_US}] us gives the module's reply {want}")


def _command(key: str, policy: Policy, cost: int, peek: bool) -> tuple:
    """``RL.<ALG> key params... [COST n] [PEEK]``."""
    return (policy.command, key, *policy.spec(), *(("COST", cost) if cost != 1 else ()), *(("PEEK",) if peek else ()))


def test_every_rate_limiter_of_the_registry_is_compared() -> None:
    """POLICIES is a list of its own (each algorithm needs parameters that turn its windows
    within a test): it must name every rate limiter of the registry, or a new algorithm's
    extension would never be compared with the module."""
    assert sorted({p.algorithm for p in POLICIES}) == sorted(LIMITERS)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.algorithm}{list(p.spec())}")
def test_extension_equals_module_on_the_same_calls_and_times(server, prefix, policy):
    rng = random.Random(f"{policy}")
    r = redis.Redis(port=server.port)
    store = LocalStore()
    key = f"{prefix}:diff"
    outcomes = {"allowed": 0, "denied": 0, "never": 0}
    try:
        for _ in range(CALLS):
            cost = rng.choice([0, 1, 1, 1, 2, 3, policy.limit + 1])
            peek = rng.random() < 0.15
            lo, hi, want = _server_call(r, _command(key, policy, cost, peek))
            t = _instant(store, key, policy, cost, lo, hi, want)
            assert store.check(key, policy.params, cost, t, peek) == want
            outcomes["never" if want[3] == -1 else "allowed" if want[0] else "denied"] += 1
            time.sleep(rng.choice([0, 0, 0.002, 0.01, 0.03]))
    finally:
        r.close()
    # The sequence exercised every kind of answer.
    assert all(n > 0 for n in outcomes.values()), outcomes
