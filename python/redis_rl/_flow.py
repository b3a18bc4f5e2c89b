"""The ASGI middleware's side of the request flow (``redis_rl._core.Flow``, the Rust flow
rl-gateway runs): it only runs what each step asks, with redis-py on the application's event
loop. Every decision (plan, bans, costs, render, delay, settle, what to record) is the flow's."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from redis_rl._core import ban_index_command, top_add_command
from redis_rl.decision import Decision
from redis_rl.limiter import Limiter
from redis_rl.policy import Policy

log = logging.getLogger("redis_rl.asgi")

Headers = List[Tuple[bytes, bytes]]
Take = Tuple[int, str, int]
Outcome = Tuple[str, Optional[int], int, int, bool, str]

# Refusal tasks in flight at most: past it a refusal is dropped (counted), as rl-gateway's
# bounded queue does.
MAX_IN_FLIGHT = 1000


def now_ms() -> int:
    """The flow's clock: monotonic milliseconds."""
    return int(time.monotonic() * 1000)


def outcome(d: Decision) -> Outcome:
    """A limiter decision as the flow takes it."""
    verdict = "allowed" if d.allowed else ("denied" if d.retry_after_ms is not None else "never")
    return (verdict, d.retry_after_ms, d.remaining, d.reset_after_ms, d.shadow, d.source.value)


def pairs(takes: Sequence[Take], policies: Sequence[Policy]) -> Tuple[List[Tuple[str, Policy]], List[int]]:
    return [(key, policies[item]) for item, key, _ in takes], [units for _, _, units in takes]


async def book(limiter: Limiter, takes: Sequence[Take], ban_keys: Sequence[str],
               policies: Sequence[Policy]) -> Tuple[List[Outcome], Optional[int], List[Optional[int]]]:
    """The limiter call and the ban reads, concurrently: one round trip of latency."""
    items, units = pairs(takes, policies)

    async def pttl(key: str) -> Optional[int]:
        try:
            return int(await limiter.query("PTTL", key))
        except Exception as e:  # noqa: BLE001 - a failed read is no ban: the limits still apply
            log.debug("ban not read: key=%s error=%r", key, e)
            return None

    md, bans = await asyncio.gather(limiter.check_all(items, units), asyncio.gather(*(pttl(k) for k in ban_keys)))
    return [outcome(d) for d in md.decisions], md.denied_index, list(bans)


async def peek(limiter: Limiter, takes: Sequence[Take], policies: Sequence[Policy]) -> Optional[List[Outcome]]:
    items, units = pairs(takes, policies)
    try:
        return [outcome(d) for d in await limiter.peek_all_units(items, units)]
    except Exception as e:  # noqa: BLE001 - Redis did not answer: refused as before
        log.debug("looking at a delayed request's keys failed: %r", e)
        return None


async def force(limiter: Limiter, takes: Sequence[Take], policies: Sequence[Policy]) -> bool:
    items, units = pairs(takes, policies)
    try:
        await limiter.force_all_units(items, units)
        return True
    except Exception as e:  # noqa: BLE001 - Redis did not answer: refused as before
        log.warning("booking a delayed request failed: %r", e)
        return False


async def settle(limiter: Limiter, settlement: Any, headers: Headers, policies: Sequence[Policy]) -> None:
    """Refunds or charges each item the difference ``headers`` report (the response's, or its
    trailers); without the header, or with garbage, the reservation stands."""
    items, outcomes = settlement.adjust(headers)
    for header, what in outcomes:
        log.debug("settled: header=%s outcome=%s", header, what)
    charged = False
    for item, key, kind, n in items:
        try:
            if kind == "refund":
                await limiter.refund(key, policies[item], n)
            else:
                await limiter.settle(key, policies[item], 0, n)
                charged = True
        except Exception as e:  # noqa: BLE001 - the reservation stands; logged
            log.warning("settling the cost after the response failed: key=%s error=%r", key, e)
    if charged:
        # A charge on a window that forgets debts at its boundary: hold while it is owed.
        await asyncio.gather(*(hold_debt(limiter, w) for w in settlement.debt_watches(headers)))


def window_count(state: Any) -> Optional[Tuple[int, int]]:
    """The count and milliseconds left of a fixed window or calendar quota from its
    ``RL.STATE`` reply (the module's or the twin's, RESP2 or RESP3); ``None`` otherwise."""
    if not state:
        return None
    pairs = state.items() if isinstance(state, dict) else zip(state[::2], state[1::2])
    fields = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in pairs}
    algorithm = fields.get("algorithm")
    if isinstance(algorithm, bytes):
        algorithm = algorithm.decode()
    if algorithm not in ("fixed window", "calendar quota"):
        return None
    return int(fields["count"]), max(int(fields["ttl_ms"]), 0)


async def hold_debt(limiter: Limiter, watch: Any) -> None:
    """After a charge on ``watch.key``: when its window is now over its limit, holds the
    subject until the debt is paid (the flow's command, in the subject's ban key)."""
    try:
        counted = window_count(await limiter.query("RL.STATE", watch.key))
        if counted is None:
            return
        command = watch.hold(*counted)
        if command is None:
            return
        await limiter.query(*command)
        log.debug("a settled debt holds its subject: key=%s", watch.key)
    except Exception as e:  # noqa: BLE001 - the charge stands; logged
        log.warning("a settled debt's hold was not written: key=%s error=%r", watch.key, e)


class Settlement:
    """A reservation settled once the response (and its trailers) went out."""

    def __init__(self, settlement: Any, policies: Sequence[Policy]) -> None:
        self.settlement = settlement
        self.policies = list(policies)
        self.head: Headers = []
        self.trailers: Optional[Headers] = None

    def seen(self, message: Dict[str, Any]) -> None:
        """Notes the response's head and trailers as they are sent."""
        if message["type"] == "http.response.start":
            self.head = list(message.get("headers") or [])
        elif message["type"] == "http.response.trailers":
            self.trailers = list(message.get("headers") or [])

    async def settle(self, limiter: Limiter) -> None:
        source = self.head if self.settlement.found_in(self.head) or self.trailers is None else self.trailers
        await settle(limiter, self.settlement, source, self.policies)


class Recorder:
    """What requests leave behind, off their path: refusals towards bans (the ban script,
    then the index for a new ban) and the fleet's top offenders (summed in process, written
    once a second per policy), units a banned request gives back."""

    def __init__(self, limiter: Limiter, prefix: str) -> None:
        self.limiter = limiter
        self.prefix = prefix
        self.tasks: Set["asyncio.Task[Any]"] = set()
        self.counts: Dict[Tuple[str, str], int] = {}
        self.flushing: Optional["asyncio.Task[Any]"] = None
        self.dropped = 0

    def _spawn(self, coro: Any) -> None:
        if len(self.tasks) >= MAX_IN_FLIGHT:
            self.dropped += 1
            coro.close()
            return
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def record(self, record: Any, policies: Sequence[Policy]) -> None:
        for policy, subject, strike in record.refusals:
            if strike is not None:
                self._spawn(self._strike(policy, subject, strike))
            self.counts[(policy, subject)] = self.counts.get((policy, subject), 0) + 1
        if self.counts and (self.flushing is None or self.flushing.done()):
            self.flushing = asyncio.ensure_future(self._flush_soon())
        if record.give_back:
            self._spawn(self._give_back(record.give_back, policies))

    async def _strike(self, policy: str, subject: str, strike: List[str]) -> None:
        try:
            reply = await self.limiter.query(*strike)
            command = ban_index_command(self.prefix, policy, subject, [int(x) for x in reply])
            if command is not None:
                log.info("banned after repeated refusals: policy=%s subject=%s", policy, subject)
                await self.limiter.query(*command)
        except Exception as e:  # noqa: BLE001 - the refusal is not counted towards a ban
            log.debug("a refusal was not counted towards a ban: policy=%s error=%r", policy, e)

    async def _give_back(self, takes: Sequence[Take], policies: Sequence[Policy]) -> None:
        for item, key, units in takes:
            try:
                await self.limiter.refund(key, policies[item], units)
            except Exception as e:  # noqa: BLE001 - the units stay taken
                log.debug("a banned request's units stay taken: %r", e)

    async def _flush_soon(self) -> None:
        await asyncio.sleep(1.0)
        await self.flush()

    async def flush(self) -> None:
        """Writes the summed refusals into the current minute's top-offender sets."""
        counts, self.counts = self.counts, {}
        by_policy: Dict[str, List[Tuple[str, int]]] = {}
        for (policy, subject), n in counts.items():
            by_policy.setdefault(policy, []).append((subject, n))
        minute = int(time.time()) // 60
        for policy, entries in by_policy.items():
            for i in range(0, len(entries), 256):
                try:
                    await self.limiter.query(*top_add_command(self.prefix, policy, minute, entries[i : i + 256]))
                except Exception as e:  # noqa: BLE001 - best effort, as rl-gateway's
                    log.debug("top-offender counts not written: %r", e)
