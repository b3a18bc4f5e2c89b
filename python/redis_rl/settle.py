"""Reserve, then settle: a cost known only after the work (the tokens an LLM used) is
reserved as an estimate before it, and the difference settled after it, either way: what
was over-reserved is given back (``RL.REFUND``), what was under-reserved is taken even over
the limit (``FORCE``), so the budget neither leaks nor refuses work that already happened.
The Python twin of the Rust client's ``Limiter::settle``.

::

    budget = Policy.gcra(100_000, 60_000)  # tokens per minute
    if (await limiter.check("tokens:acme", budget, cost=4096)).allowed:
        used = 812  # the response's usage.total_tokens
        settled = await limiter.settle("tokens:acme", budget, reserved=4096, actual=used)
        assert settled == Settled("refunded", 3284)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple, Union

from redis_rl.decision import Decision
from redis_rl.policy import Policy

__all__ = ["Settled", "forced_command"]


@dataclass(frozen=True)
class Settled:
    """What ``settle`` did: ``kind`` is ``exact`` (nothing sent), ``refunded`` (``units``
    given back: at most the difference, see RL.REFUND) or ``charged`` (``units`` taken with
    ``FORCE``; ``decision`` shows the limiter afterwards, ``remaining`` 0 when in debt)."""

    kind: str
    units: int
    decision: Optional[Decision] = None


def forced_command(key: str, policy: Policy, cost: int) -> Tuple[Union[str, int], ...]:
    """``RL.<ALG> key params... COST n FORCE``: takes ``n`` units even over the limit."""
    return (policy.command, key, *policy.spec(), "COST", cost, "FORCE")
