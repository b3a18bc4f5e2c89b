"""The ASGI middleware's costs: each plan item its own units (a rule's ``cost`` header), and
the settlement after the response (a rule's ``settle`` header or trailer), as rl-gateway's
middleware does (``client/src/booking.rs``, ``client/src/middleware/settlement.rs``)."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

from redis_rl.decision import Decision, MultiDecision, Source
from redis_rl.limiter import Limiter
from redis_rl.policy import Policy

log = logging.getLogger("redis_rl.asgi")

Headers = List[Tuple[bytes, bytes]]


async def check_units(limiter: Limiter, pairs: Sequence[Tuple[str, Policy]], units: Sequence[int]) -> MultiDecision:
    """Takes ``units[i]`` on ``pairs[i]``, all or nothing: one ``check_all`` per distinct
    number of units, in order; when one denies, what the earlier ones took is given back."""
    distinct = list(dict.fromkeys(units))
    if len(distinct) <= 1:
        return await limiter.check_all(pairs, distinct[0] if distinct else 1)
    decisions: List[Optional[Decision]] = [None] * len(pairs)
    taken: List[Tuple[int, List[int]]] = []
    denied: Optional[int] = None
    for n in distinct:
        members = [i for i, u in enumerate(units) if u == n]
        md = await limiter.check_all([pairs[i] for i in members], n)
        for i, d in zip(members, md.decisions):
            decisions[i] = d
        if md.denied_index is not None:
            denied = members[md.denied_index]
            for amount, indexes in taken:
                for i in indexes:
                    key, policy = pairs[i]
                    if policy.shadow:
                        continue
                    try:
                        await limiter.refund(key, policy, amount)
                    except Exception as e:  # noqa: BLE001 - best effort, as across slots
                        log.warning("refund after a denial failed: %r", e)
            break
        taken.append((n, members))
    filled = [
        d if d is not None else Decision(True, p.limit, p.limit, 0, 0, Source.UNCHECKED)
        for d, (_, p) in zip(decisions, pairs)
    ]
    return MultiDecision(denied, filled)


class Settlement:
    """A request's reservation, settled once the response (and its trailers) went out."""

    def __init__(self, booking: Any, pairs: Sequence[Tuple[str, Policy]], decisions: Sequence[Decision]) -> None:
        self.booking = booking
        self.names = [n.encode() for n in booking.settle_headers]
        self.pairs = list(pairs)
        # Only what Redis took is settled there (not a failure mode's or the local fallback's).
        self.in_redis = [d.source == Source.REDIS for d in decisions]
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
