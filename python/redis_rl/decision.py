"""Decisions, and the parsers of the server's replies."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, List, Optional, Sequence, Tuple

__all__ = ["Source", "Decision", "MultiDecision", "ReplyError"]


class Source(str, Enum):
    """Who made a decision."""

    REDIS = "redis"
    """The server."""
    LOCAL = "local"
    """The in-process fallback (Redis unavailable, failure mode local)."""
    FAIL_OPEN = "fail_open"
    """Redis unavailable, failure mode open: allowed without a decision."""
    FAIL_CLOSED = "fail_closed"
    """Redis unavailable, failure mode closed: denied without a decision."""
    DENY_CACHE = "deny_cache"
    """Redis denied this key recently and the wait has not passed."""
    UNCHECKED = "unchecked"
    """Not checked: another key of the same ``check_all`` decided first (a denial in an
    earlier hash slot of a cluster), so nothing is known of this key's count."""

    @property
    def is_fallback(self) -> bool:
        """True when Redis did not decide because it was unavailable."""
        return self in (Source.LOCAL, Source.FAIL_OPEN, Source.FAIL_CLOSED)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Decision:
    """The answer for one key.

    ``retry_after_ms`` is 0 when allowed, the true wait when denied, and ``None`` when no
    wait helps (the cost is above the limit; the server's ``-1``).
    """

    allowed: bool
    limit: int
    remaining: int
    retry_after_ms: Optional[int]
    reset_after_ms: int
    source: Source = Source.REDIS
    shadow: bool = False
    """The policy is in shadow mode: a denial is recorded, not enforced."""

    @property
    def allows(self) -> bool:
        """True when the caller may proceed: allowed, or denied by a shadow policy."""
        return self.allowed or self.shadow

    @property
    def denied(self) -> bool:
        """True when the limiter said no (enforced or not)."""
        return not self.allowed

    @property
    def never(self) -> bool:
        """True when the cost can never be allowed."""
        return self.retry_after_ms is None

    @staticmethod
    def from_reply(fields: Sequence[Any], source: Source = Source.REDIS) -> "Decision":
        """From ``(allowed, limit, remaining, retry_after_ms, reset_after_ms)``."""
        allowed, limit, remaining, retry, reset = fields
        retry = int(retry)
        return Decision(
            allowed=bool(allowed) and retry != -1,
            limit=int(limit),
            remaining=int(remaining),
            retry_after_ms=None if retry == -1 else retry,
            reset_after_ms=int(reset),
            source=source,
        )

    def with_shadow(self, shadow: bool) -> "Decision":
        return self if self.shadow == shadow else replace(self, shadow=shadow)


@dataclass(frozen=True)
class MultiDecision:
    """The answer for several keys checked together (``check_all``): all or nothing."""

    denied_index: Optional[int]
    """The index (into the request) of the first enforced key that denied, else ``None``."""
    decisions: List[Decision]
    """One decision per key, in request order; on a denial the others say what they would
    have answered (nothing was taken on any of them)."""

    @property
    def allowed(self) -> bool:
        """True when every enforced key allowed the request (units were taken on all)."""
        return self.denied_index is None

    @property
    def retry_after_ms(self) -> Optional[int]:
        """The longest wait among the enforced denying keys: 0 when allowed, ``None`` when
        one can never allow the call."""
        longest = 0
        for d in self.decisions:
            if d.shadow or d.allowed:
                continue
            if d.retry_after_ms is None:
                return None
            longest = max(longest, d.retry_after_ms)
        return longest


@dataclass(frozen=True)
class Grant:
    """The answer to ``take_upto`` (``COST n UPTO``): a batch of units, as many as were
    available."""

    granted: int
    """Units taken, ``min(n, available)``: 0 when nothing was available (or ``n`` was 0).
    For ``peek_upto``, what a take would get (nothing is taken)."""
    decision: Decision
    """Allowed when ``granted > 0`` (``remaining``: what is left after the grant); denied
    when nothing was available, with the wait until one unit is (``retry_after_ms``)."""


class ReplyError(Exception):
    """A reply of an unexpected shape (a server without the module, or a newer one)."""


def _ints(value: Any, n: int, what: str) -> List[int]:
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise ReplyError(f"{what}: expected {n} integers, got {value!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ReplyError(f"{what}: expected integers, got {value!r}")
    return list(value)


def parse_single(command: str, reply: Any) -> Decision:
    """Parses ``[allowed, limit, remaining, retry_after_ms, reset_after_ms]``."""
    fields = _ints(reply, 5, command)
    if fields[1] < 0 or fields[2] < 0 or fields[3] < -1 or fields[4] < 0:
        raise ReplyError(f"{command}: unexpected values {reply!r}")
    return Decision.from_reply(fields)


def parse_upto(command: str, reply: Any) -> Grant:
    """Parses a partial grant's reply: the five fields of ``parse_single``, then ``granted``."""
    fields = _ints(reply, 6, command)
    if fields[5] < 0:
        raise ReplyError(f"{command}: unexpected values {reply!r}")
    return Grant(granted=fields[5], decision=parse_single(command, fields[:5]))


def parse_refund(reply: Any) -> int:
    """Parses ``RL.REFUND``'s ``[refunded, limit, remaining, 0, reset_after_ms]``: the units
    given back."""
    fields = _ints(reply, 5, "RL.REFUND")
    if fields[0] < 0:
        raise ReplyError(f"RL.REFUND: unexpected values {reply!r}")
    return fields[0]


def parse_all(reply: Any, n: int) -> Tuple[Optional[int], List[Decision]]:
    """Parses ``[allowed, denied_index, [[limit, remaining, retry_after_ms, reset_after_ms],
    ...]]`` into the 0-based index of the first denying key and one decision per key."""
    if not isinstance(reply, (list, tuple)) or len(reply) != 3:
        raise ReplyError(f"RL.ALL: unexpected shape {reply!r}")
    allowed, denied_index, per_key = reply
    if not isinstance(per_key, (list, tuple)) or len(per_key) != n:
        raise ReplyError(f"RL.ALL: expected {n} entries, got {per_key!r}")
    decisions = []
    for entry in per_key:
        limit, remaining, retry, reset = _ints(entry, 4, "RL.ALL")
        if limit < 0 or remaining < 0 or retry < -1 or reset < 0:
            raise ReplyError(f"RL.ALL: unexpected values {entry!r}")
        # Inside RL.ALL a key that would allow reports retry_after 0.
        decisions.append(Decision.from_reply((retry == 0, limit, remaining, retry, reset)))
    if allowed == 1:
        return None, decisions
    if not isinstance(denied_index, int) or not 1 <= denied_index <= n:
        raise ReplyError(f"RL.ALL: bad denied_index {denied_index!r}")
    return denied_index - 1, decisions
