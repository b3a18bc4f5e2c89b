"""Hot-key deny cache: after Redis denies a key with a wait, deny it locally until the wait
is over, so a flood on a blocked key reaches Redis at most once per retry interval.

A cached refusal never outlives what Redis said: it ends at the retry time and never after
the reset time (a fixed window's or quota's end), and the limiter forgets a key's refusal
when it gives units back to it (a refund, a settlement) or resets it."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Optional, Tuple

from redis_rl.decision import Decision, Source

__all__ = ["DenyCache"]


class DenyCache:
    """A bounded LRU of denied keys (thread-safe)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        # key -> (until, cost, limit, reset_at), times on the monotonic clock
        self._entries: "OrderedDict[str, Tuple[float, int, int, float]]" = OrderedDict()

    def get(self, key: str, cost: int) -> Optional[Decision]:
        """The cached denial of ``key`` for ``cost`` units, if its wait has not passed."""
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            until, denied_cost, limit, reset_at = entry
            if now >= until:
                del self._entries[key]
                return None
        # A smaller cost may fit earlier; a cost over the limit gets Redis's "never".
        if cost < denied_cost or cost > limit:
            return None
        return Decision(
            allowed=False,
            limit=limit,
            remaining=0,
            retry_after_ms=max(1, math.ceil((until - now) * 1000)),
            reset_after_ms=max(0, math.ceil((reset_at - now) * 1000)),
            source=Source.DENY_CACHE,
        )

    def remember(self, key: str, cost: int, d: Decision) -> None:
        """Remembers a denial with a wait (anything else is ignored)."""
        if d.allowed or not d.retry_after_ms:
            return
        now = time.monotonic()
        # Until the retry time, and never past the reset (a window's end).
        wait_ms = min(d.retry_after_ms, d.reset_after_ms) if d.reset_after_ms else d.retry_after_ms
        entry = (now + wait_ms / 1000, cost, d.limit, now + d.reset_after_ms / 1000)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def forget(self, key: str) -> None:
        """Forgets ``key``'s refusal (units were given back, or the key was reset)."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        """Forgets every refusal."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
