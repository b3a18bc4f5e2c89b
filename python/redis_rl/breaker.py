"""Circuit breaker settings and states. The breaker itself is the Rust client's (in the
extension's ``Layers``): after N consecutive failures it stops calling Redis for a while,
then lets one probe through; only the probe closes it (a late reply of a call made before
it opened proves little)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["BreakerConfig", "BreakerState"]


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
