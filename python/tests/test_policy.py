"""Policies are validated when built, with the server's ranges and error texts."""

import pytest

from redis_rl import FailureMode, Policy
from redis_rl._core import check_cost

COUNT = "must be an integer between 1 and 1000000000000000"
DURATION = "must be an integer between 1 and 1000000000000"


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Policy.token_bucket(0, 1, 1), f"capacity {COUNT}"),
        (lambda: Policy.token_bucket(10**15 + 1, 1, 1), f"capacity {COUNT}"),
        (lambda: Policy.token_bucket(-1, 1, 1), f"capacity {COUNT}"),
        (lambda: Policy.token_bucket(1, 0, 1), f"refill_tokens {COUNT}"),
        (lambda: Policy.token_bucket(1, 1, 0), f"refill_ms {DURATION}"),
        (lambda: Policy.token_bucket(1, 1, 10**12 + 1), f"refill_ms {DURATION}"),
        (lambda: Policy.token_bucket(1, 1, 2**80), f"refill_ms {DURATION}"),
        (lambda: Policy.sliding(0, 1000), f"limit {COUNT}"),
        (lambda: Policy.sliding(1, 0), f"window_ms {DURATION}"),
        (lambda: Policy.fixed(0, 1000), f"limit {COUNT}"),
        (lambda: Policy.fixed(1, -1000), f"window_ms {DURATION}"),
        (lambda: Policy.gcra(0, 1000), f"limit {COUNT}"),
        (lambda: Policy.gcra(1, 0), f"period_ms {DURATION}"),
        (lambda: Policy.gcra(1, 1000, 0), f"burst {COUNT}"),
        (lambda: Policy.gcra(1, 1000, 10**15 + 1), f"burst {COUNT}"),
        (lambda: Policy.log(10_001, 1000), "limit must be an integer between 1 and 10000"),
        (lambda: Policy.log(0, 1000), "limit must be an integer between 1 and 10000"),
        (lambda: Policy.log(1, 0), f"window_ms {DURATION}"),
    ],
)
def test_out_of_range_gets_the_servers_text(build, message):
    with pytest.raises(ValueError) as e:
        build()
    assert str(e.value) == message


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Policy.token_bucket(1.0, 1, 1), "capacity must be an int, not float"),
        (lambda: Policy.sliding("10", 1000), "limit must be an int, not str"),
        (lambda: Policy.fixed(True, 1000), "limit must be an int, not bool"),
        (lambda: Policy.gcra(1, 1000, burst=2.5), "burst must be an int, not float"),
        (lambda: Policy.log(1, None), "window_ms must be an int, not NoneType"),
    ],
)
def test_wrong_types_raise_type_error(build, message):
    with pytest.raises(TypeError) as e:
        build()
    assert str(e.value) == message


def test_the_largest_values_are_accepted():
    Policy.token_bucket(10**15, 10**15, 10**12)
    Policy.gcra(10**15, 10**12, 10**15)
    Policy.log(10_000, 10**12)
    assert check_cost(0) == 0 and check_cost(10**15) == 10**15
    with pytest.raises(ValueError, match="^cost must be an integer between 0 and 1000000000000000$"):
        check_cost(-1)


def test_policy_fields_and_commands():
    tb = Policy.token_bucket(100, 10, 6_000)
    assert (tb.command, tb.spec_name, tb.spec(), tb.limit, tb.window_ms) == (
        "RL.TOKENBUCKET", "TOKENBUCKET", [100, 10, 6000], 100, 60_000)
    g = Policy.gcra(10, 1000, burst=20)
    # q and w as the Rust client's: a GCRA is a bucket of `burst` units, w its time to fill.
    assert (g.command, g.spec(), g.limit, g.window_ms) == ("RL.GCRA", [10, 1000, "BURST", 20], 20, 2000)
    small = Policy.gcra(10, 1000, burst=2)
    assert (small.limit, small.window_ms) == (2, 200)
    assert (Policy.gcra(10, 1000).limit, Policy.gcra(10, 1000).window_ms) == (10, 1000)
    assert Policy.gcra(10, 1000).spec() == [10, 1000]
    assert Policy.log(5, 900).command == "RL.LOG"
    assert Policy.fixed(5, 900).spec_name == "FIXED"
    assert tb.failure_mode == FailureMode.LOCAL and not tb.shadow
    closed = tb.on_failure("closed").with_shadow()
    assert closed.failure_mode == FailureMode.CLOSED and closed.shadow
    assert tb.on_failure(FailureMode.local(4)).failure_mode.instances == 4
    with pytest.raises(ValueError):
        tb.on_failure("sometimes")
    with pytest.raises(ValueError):
        FailureMode.local(0)
