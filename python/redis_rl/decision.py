"""Decisions (the replies are parsed by the Rust client, in the extension)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import List, Optional

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
