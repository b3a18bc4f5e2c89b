"""Typed policies: one per server command, validated when built (by the core, with the
server's ranges and error texts)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, List, Optional, Tuple, Union

from redis_rl._core import Params

__all__ = ["FailureMode", "Policy"]


@dataclass(frozen=True)
class FailureMode:
    """What to do when Redis cannot answer (error, timeout, or the breaker is open).

    - ``FailureMode.OPEN``: allow (availability first; unlimited over-admission while down).
    - ``FailureMode.CLOSED``: deny (protection first; a limiter outage is an API outage).
    - ``FailureMode.local(instances=1)`` (the default, ``FailureMode.LOCAL``): decide in this
      process with the same core algorithm, the limit divided by ``instances``.
    """

    name: str
    instances: int = 1

    OPEN: ClassVar["FailureMode"]
    CLOSED: ClassVar["FailureMode"]
    LOCAL: ClassVar["FailureMode"]

    def __post_init__(self) -> None:
        if self.name not in ("open", "closed", "local"):
            raise ValueError(f"failure mode must be open, closed or local, not {self.name!r}")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int):
            raise TypeError("instances must be an int")
        if not 1 <= self.instances <= 2**32 - 1:
            raise ValueError("instances must be an integer between 1 and 4294967295")

    @staticmethod
    def local(instances: int = 1) -> "FailureMode":
        """The local fallback, for ``instances`` processes sharing the limit."""
        return FailureMode("local", instances)

    @staticmethod
    def parse(mode: Union[str, "FailureMode"], instances: int = 1) -> "FailureMode":
        """``"open"``, ``"closed"``, ``"local"`` or a ``FailureMode``."""
        if isinstance(mode, FailureMode):
            return mode
        if mode == "local":
            return FailureMode("local", instances)
        return FailureMode(mode)


FailureMode.OPEN = FailureMode("open")
FailureMode.CLOSED = FailureMode("closed")
FailureMode.LOCAL = FailureMode("local")

_COMMANDS = {
    "token_bucket": ("RL.TOKENBUCKET", "TOKENBUCKET"),
    "sliding": ("RL.SLIDING", "SLIDING"),
    "fixed": ("RL.FIXED", "FIXED"),
    "gcra": ("RL.GCRA", "GCRA"),
    "log": ("RL.LOG", "LOG"),
}


@dataclass(frozen=True)
class Policy:
    """An algorithm with its parameters, what to do when Redis fails, and whether to enforce.

    Build it with a constructor; invalid numbers raise ``ValueError`` with the server's text
    (``capacity must be an integer between 1 and 1000000000000000``), other types
    ``TypeError``::

        free = Policy.token_bucket(100, 100, 60_000)          # 100/min, burst 100
        strict = Policy.sliding(10, 1_000).on_failure(FailureMode.CLOSED)
    """

    algorithm: str
    """``token_bucket``, ``sliding``, ``fixed``, ``gcra`` or ``log``."""
    numbers: Tuple[int, ...]
    """The positional parameters, as the command takes them."""
    burst: Optional[int] = None
    """GCRA only: units that may pass at once (``None``: the server's default, ``limit``)."""
    failure_mode: FailureMode = FailureMode("local")
    shadow: bool = False
    """Decide and record, but never deny (``Decision.allows`` is true)."""
    params: Params = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    @staticmethod
    def token_bucket(capacity: int, refill_tokens: int, refill_ms: int) -> "Policy":
        """``RL.TOKENBUCKET``: ``capacity`` tokens, ``refill_tokens`` more every ``refill_ms``."""
        p = Params.token_bucket(capacity, refill_tokens, refill_ms)
        return Policy("token_bucket", (capacity, refill_tokens, refill_ms), params=p)

    @staticmethod
    def sliding(limit: int, window_ms: int) -> "Policy":
        """``RL.SLIDING``: a sliding window counter, ``limit`` units per ``window_ms``."""
        p = Params.sliding(limit, window_ms)
        return Policy("sliding", (limit, window_ms), params=p)

    @staticmethod
    def fixed(limit: int, window_ms: int) -> "Policy":
        """``RL.FIXED``: ``limit`` units per epoch-aligned window of ``window_ms``."""
        p = Params.fixed(limit, window_ms)
        return Policy("fixed", (limit, window_ms), params=p)

    @staticmethod
    def gcra(limit: int, period_ms: int, burst: Optional[int] = None) -> "Policy":
        """``RL.GCRA``: ``limit`` units per ``period_ms``, at most ``burst`` at once."""
        p = Params.gcra(limit, period_ms, burst)
        return Policy("gcra", (limit, period_ms), burst=burst, params=p)

    @staticmethod
    def log(limit: int, window_ms: int) -> "Policy":
        """``RL.LOG``: an exact sliding log, ``limit`` (at most 10000) per ``window_ms``."""
        p = Params.log(limit, window_ms)
        return Policy("log", (limit, window_ms), params=p)

    def on_failure(self, mode: Union[str, FailureMode]) -> "Policy":
        """The same policy with another failure mode (``"open"``, ``"closed"``, ``"local"``)."""
        return replace(self, failure_mode=FailureMode.parse(mode))

    def with_shadow(self, shadow: bool = True) -> "Policy":
        """The same policy in (or out of) shadow mode."""
        return replace(self, shadow=bool(shadow))

    @property
    def command(self) -> str:
        """The single-key command, e.g. ``RL.TOKENBUCKET``."""
        return _COMMANDS[self.algorithm][0]

    @property
    def spec_name(self) -> str:
        """The spec word of ``RL.ALL`` and ``RL.REFUND``, e.g. ``TOKENBUCKET``."""
        return _COMMANDS[self.algorithm][1]

    def spec(self) -> List[Union[str, int]]:
        """The parameters as the server reads them after the key or spec word."""
        words: List[Union[str, int]] = list(self.numbers)
        if self.burst is not None:
            words += ["BURST", self.burst]
        return words

    @property
    def limit(self) -> int:
        """The quota a client sees (``X-RateLimit-Limit``, ``q`` of ``RateLimit-Policy``):
        a token bucket's capacity, a GCRA's burst (default ``limit``), else ``limit``."""
        if self.algorithm == "gcra" and self.burst is not None:
            return self.burst
        return self.numbers[0]

    @property
    def window_ms(self) -> int:
        """The window over which ``limit`` applies (``w`` of ``RateLimit-Policy``); for a
        token bucket, and a GCRA (a bucket of ``burst`` units), the time from empty to full."""
        if self.algorithm == "token_bucket":
            capacity, refill_tokens, refill_ms = self.numbers
            return capacity * refill_ms // refill_tokens
        if self.algorithm == "gcra":
            limit, period_ms = self.numbers
            return self.limit * period_ms // max(1, limit)
        return self.numbers[1]

    def local_params(self) -> Params:
        """The core parameters of this process's share (``FailureMode.local(instances)``)."""
        return self.params.share(self.failure_mode.instances)
