"""Circuit breaker: after N consecutive failures stop calling Redis for a while, then let
one probe through. Only the probe closes it (a late reply of a call made before it opened
proves little), as in the Rust client."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from enum import Enum

__all__ = ["BreakerConfig", "BreakerState", "Breaker"]

log = logging.getLogger("redis_rl.breaker")


@dataclass(frozen=True)
class BreakerConfig:
    """``failure_threshold`` consecutive failures (unavailable or timed out) open the
    breaker for ``open_for`` seconds; then one probe goes through."""

    failure_threshold: int = 5
    open_for: float = 1.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        if not self.open_for > 0:
            raise ValueError("open_for must be positive")


class BreakerState(str, Enum):
    CLOSED = "closed"
    """Calls go to Redis."""
    OPEN = "open"
    """Calls do not go to Redis; every decision uses the failure mode."""
    HALF_OPEN = "half_open"
    """One probe is in flight; the other calls use the failure mode."""

    def __str__(self) -> str:
        return self.value


class Breaker:
    """Thread-safe; state changes are logged once each and counted (``opened``, ``closed``)."""

    def __init__(self, config: BreakerConfig = BreakerConfig()) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._until = 0.0  # open: when a probe may go; half-open: when another probe may go
        self.opened = 0
        self.closed = 0

    def permit(self) -> bool:
        """True when this call may go to Redis (it may be the probe)."""
        now = time.monotonic()
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return True
            if now < self._until:
                return False
            if self._state is BreakerState.OPEN:
                log.info("circuit breaker half-open: probing redis")
            # Open and its time is up, or a probe that never reported (cancelled): probe.
            self._state = BreakerState.HALF_OPEN
            self._until = now + self.config.open_for
            return True

    def on_success(self) -> None:
        """A call reached a healthy Redis (any reply, an error reply included)."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                self._failures = 0
            elif self._state is BreakerState.HALF_OPEN:
                self._state = BreakerState.CLOSED
                self._failures = 0
                self.closed += 1
                log.warning("circuit breaker closed: redis is back")

    def on_failure(self) -> None:
        """A call failed because Redis is unavailable (or timed out)."""
        now = time.monotonic()
        with self._lock:
            if self._state is BreakerState.CLOSED:
                self._failures += 1
                if self._failures < self.config.failure_threshold:
                    return
                log.warning(
                    "circuit breaker opened after %d failures: redis unavailable, "
                    "using the failure mode for %.3f s",
                    self._failures,
                    self.config.open_for,
                )
            elif self._state is BreakerState.HALF_OPEN:
                log.info("circuit breaker probe failed: open again")
            else:
                return  # calls made before it opened change nothing
            self._state = BreakerState.OPEN
            self._until = now + self.config.open_for
            self.opened += 1

    @property
    def state(self) -> BreakerState:
        """The state (an open breaker whose time is up reports half-open)."""
        with self._lock:
            if self._state is BreakerState.OPEN and time.monotonic() >= self._until:
                return BreakerState.HALF_OPEN
            return self._state

    def remaining_open(self) -> float:
        """Seconds until a probe may go (0 unless open)."""
        with self._lock:
            if self._state is not BreakerState.OPEN:
                return 0.0
            return max(0.0, self._until - time.monotonic())
