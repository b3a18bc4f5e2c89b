"""The ASGI middleware's costs: each plan item its own units (a rule's ``cost`` header), and
the settlement after the response (a rule's ``settle`` header or trailer), as rl-gateway's
middleware does (``client/src/booking.rs``, ``client/src/middleware/settlement.rs``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

from redis_rl.decision import Decision, MultiDecision, Source
from redis_rl.limiter import Limiter
from redis_rl.policy import Policy

log = logging.getLogger("redis_rl.asgi")

Headers = List[Tuple[bytes, bytes]]


async def check_units(limiter: Limiter, pairs: Sequence[Tuple[str, Policy]], units: Sequence[int]) -> MultiDecision:
    """Takes ``units[i]`` on ``pairs[i]``, all or nothing, equal units or not: one
    ``check_all`` (one ``RL.ALL ... COSTS`` per hash slot), never a call per number of units."""
    return await limiter.check_all(pairs, list(units))


class Settlement:
    """A request's reservation, settled once the response (and its trailers) went out."""

    def __init__(self, booking: Any, pairs: Sequence[Tuple[str, Policy]], decisions: Sequence[Decision]) -> None:
        self.booking = booking
        self.names = [n.encode() for n in booking.settle_headers]
        self.pairs = list(pairs)
        # Only what Redis took is settled there (not a failure mode's, the local fallback's or a
        # shadow policy's denial).
        self.in_redis = [d.source == Source.REDIS and d.allowed for d in decisions]
        self.head: Headers = []
        self.trailers: Optional[Headers] = None

    def seen(self, message: Dict[str, Any]) -> None:
        """Notes the response's head and trailers as they are sent."""
        if message["type"] == "http.response.start":
            self.head = list(message.get("headers") or [])
        elif message["type"] == "http.response.trailers":
            self.trailers = list(message.get("headers") or [])

    def _source(self) -> Headers:
        present = {n.lower() for n, _ in self.head}
        if all(name in present for name in self.names) or self.trailers is None:
            return self.head
        return self.trailers

    async def settle(self, limiter: Limiter) -> None:
        """Refunds or charges each item the difference the response reports; without the
        header (nor trailer), or with garbage, the reservation stands."""
        adjust, outcomes = self.booking.settlement(self._source())
        for header, outcome in outcomes:
            log.debug("settled: header=%s outcome=%s", header, outcome)
        for (key, policy), (kind, n), in_redis in zip(self.pairs, adjust, self.in_redis):
            if kind == "keep" or not in_redis:
                continue
            try:
                if kind == "refund":
                    await limiter.refund(key, policy, n)
                else:
                    await limiter.settle(key, policy, 0, n)
            except Exception as e:  # noqa: BLE001 - the reservation stands; logged
                log.warning("settling the cost after the response failed: key=%s error=%r", key, e)


class Holds:
    """Delay instead of 429 for the ASGI middleware, as rl-gateway's (``delay_max_ms``): a
    refused request whose wait is within every refusing item's delay is booked with
    ``FORCE`` for its slot and held, at most ``delay_max_held`` at once; requests are booked
    one at a time, so two never get the same slot."""

    def __init__(self, max_held: int) -> None:
        self.max_held = max_held
        self.held = 0
        self._lock = asyncio.Lock()

    async def hold(
        self,
        engine: Any,
        plan: Any,
        limiter: Limiter,
        pairs: Sequence[Tuple[str, Policy]],
        units: Sequence[int],
        outcomes: List[Tuple[Any, ...]],
    ) -> Optional[float]:
        """Books the request and returns the seconds to hold it, or ``None``: refuse it
        (no delay allowed, a longer wait, the cap reached, or Redis not answering). The
        caller calls ``release`` once the hold is over."""
        if all(d is None for d in plan.delays) or self.held >= self.max_held:
            return None
        self.held += 1
        try:
            enforced = [i for i, (_, p) in enumerate(pairs) if not p.shadow]
            sub = [pairs[i] for i in enforced]
            sub_units = [units[i] for i in enforced]
            async with self._lock:
                looks = await limiter.peek_all_units(sub, sub_units)
                looked = list(outcomes)
                for i, d in zip(enforced, looks):
                    verdict = "allowed" if d.allowed else ("denied" if d.retry_after_ms is not None else "never")
                    looked[i] = (verdict, d.retry_after_ms, d.remaining, d.reset_after_ms, False, "redis")
                if all(o[0] == "allowed" for o in looked):
                    wait_ms: Optional[int] = 0
                else:
                    wait_ms = engine.hold_ms(plan, looked)
                if wait_ms is None:
                    self.held -= 1
                    return None
                await limiter.force_all_units(sub, sub_units)
            return wait_ms / 1000
        except Exception as e:  # noqa: BLE001 - Redis did not answer: refused as before
            log.warning("booking a delayed request failed: %r", e)
            self.held -= 1
            return None

    def release(self) -> None:
        self.held -= 1
