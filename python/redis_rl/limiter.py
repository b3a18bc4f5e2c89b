"""The asyncio limiter (``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``)."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from redis_rl._core import Op
from redis_rl._engine import (
    DEFAULT_TIMEOUT,
    MAX_PENDING,
    BreakerOpen,
    Calls,
    Front,
    error_text,
    is_outage,
    log,
)
from redis_rl.decision import Decision, Grant, MultiDecision
from redis_rl.policy import Policy
from redis_rl.settle import Settled

__all__ = ["Limiter", "DEFAULT_TIMEOUT"]

class Limiter(Front):
    """Rate limiting on the redis-rl module, for asyncio.

    ``check`` and ``check_all`` never raise for Redis trouble: every call has a timeout,
    failures count towards the circuit breaker, and when Redis cannot answer the policy's
    failure mode decides (``Decision.source`` says who decided). Bad arguments raise
    ``TypeError`` / ``ValueError`` before anything is sent.

    ::

        limiter = Limiter(redis.asyncio.Redis(host="127.0.0.1"))
        free = Policy.token_bucket(100, 100, 60_000)
        d = await limiter.check("api:alice", free)
        if not d.allowed: ...  # 429 after d.retry_after_ms
    """

    _cluster_type = RedisCluster

    @staticmethod
    def _standalone(url: str, opts: Dict[str, Any]) -> Any:
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        return aioredis.from_url(url, retry=Retry(NoBackoff(), 0), **opts)

    async def check(self, key: str, policy: Policy, cost: int = 1) -> Decision:
        """Takes ``cost`` units (0: look without taking) for ``key``."""
        return cast(Decision, await self._run(self._engine.check(key, policy, cost, False)))

    async def peek(self, key: str, policy: Policy, cost: int = 1) -> Decision:
        """What taking ``cost`` units would answer, taking nothing (``PEEK``)."""
        return cast(Decision, await self._run(self._engine.check(key, policy, cost, True)))

    async def check_all(
        self, items: Sequence[Tuple[str, Policy]], cost: Union[int, Sequence[int]] = 1
    ) -> MultiDecision:
        """Takes ``cost`` units on every key (or ``cost[i]`` on ``items[i]``: one cost per
        item) if every enforced key allows it, else nothing.

        One RL.ALL per hash slot (one in all on a standalone server, atomic, different costs
        included: ``COSTS``); across slots,
        slot by slot, refunding the slots already taken (RL.REFUND) when a later one denies.
        Shadow policies are checked on their own and never deny."""
        return cast(MultiDecision, await self._run(self._engine.check_all(items, cost)))

    async def take_upto(self, key: str, policy: Policy, n: int) -> Grant:
        """Takes a batch: up to ``n`` units of ``key`` in one call (``COST n UPTO``), as
        many as are available; give back what is not spent with ``refund``. A grant of 0
        means nothing was available (``grant.decision.retry_after_ms``: the wait for one
        unit); the deny cache then answers for the key until then. Raises when Redis cannot
        answer (no failure mode decides). Not for ``Policy.log``."""
        return cast(Grant, await self._run(self._engine.take_upto(key, policy, n, False)))

    async def peek_upto(self, key: str, policy: Policy, n: int) -> Grant:
        """What ``take_upto`` would grant now (``UPTO PEEK``), taking nothing."""
        return cast(Grant, await self._run(self._engine.take_upto(key, policy, n, True)))

    async def refund(self, key: str, policy: Policy, amount: int) -> int:
        """Gives back up to ``amount`` units taken earlier (``RL.REFUND``, best effort);
        returns the units given back. Raises when Redis cannot answer."""
        return cast(int, await self._run(self._engine.refund(key, policy, amount)))

    async def reset(self, key: str) -> bool:
        """Deletes ``key``'s limiter state (``RL.RESET``, the module's or the Lua twin's):
        True when it held some. Its cached refusal in this limiter goes too. Raises when
        Redis cannot answer."""
        return cast(bool, await self._run(self._engine.reset(key)))

    async def settle(self, key: str, policy: Policy, reserved: int, actual: int) -> Settled:
        """Settles a reservation of ``reserved`` units of ``policy`` on ``key`` (taken
        earlier with ``check(..., cost=reserved)``) against the ``actual`` cost: refunds
        ``reserved - actual`` (``RL.REFUND``) or takes ``actual - reserved`` with ``FORCE``
        (the module or the Lua twin). Raises when Redis cannot answer."""
        return cast(Settled, await self._run(self._engine.settle_reservation(key, policy, reserved, actual)))

    async def peek_all_units(self, items: Sequence[Tuple[str, Policy]], units: Sequence[int]) -> List[Decision]:
        """Every item's own decision for taking ``units[i]`` on ``items[i]``, taking
        nothing: one ``RL.ALL ... COSTS ... PEEK`` per hash slot (the module, or the Lua twin),
        asked of Redis itself (not the deny cache). Raises when Redis cannot answer."""
        return cast(List[Decision], await self._run(self._engine.every_key(items, units, "PEEK")))

    async def force_all_units(self, items: Sequence[Tuple[str, Policy]], units: Sequence[int]) -> List[Decision]:
        """Takes ``units[i]`` on each of ``items[i]`` even over the limits: one ``RL.ALL
        ... COSTS ... FORCE`` per hash slot (the module, or the Lua twin); what went past a
        limit is a debt the next callers wait for. Raises when Redis cannot answer."""
        return cast(List[Decision], await self._run(self._engine.every_key(items, units, "FORCE")))

    async def query(self, *command: Any) -> Any:
        """Runs any command through the breaker and timeout (tier lookups use this); raises
        the call's error (``BreakerOpen`` when the breaker is open)."""
        layers = self._engine.layers
        if not layers.permit():
            raise BreakerOpen("the circuit breaker is open: Redis was not called")
        try:
            value = await self._query(command)
        except Exception as e:  # noqa: BLE001 - cancellation (BaseException) passes through
            layers.call_ended(is_outage(e))
            raise
        layers.call_ended(False)
        return value

    async def _query(self, command: Tuple[Any, ...]) -> Any:
        """``command``, one of the module's through the twin where it runs."""
        layers = self._engine.layers
        if not (command and isinstance(command[0], str) and command[0][:3].upper() == "RL."):
            return await asyncio.wait_for(self.client.execute_command(*command), self.timeout)
        words = [w.decode() if isinstance(w, bytes) else str(w) for w in command]
        sent = layers.encode(words)
        while True:
            try:
                return await asyncio.wait_for(self.client.execute_command(*sent), self.timeout)
            except ResponseError as e:
                retry = layers.retry(words, error_text(e))
                if retry is None:
                    raise
                sent = retry

    async def _run(self, calls: Calls) -> Any:
        try:
            op = next(calls)
            while True:
                try:
                    await self._drive(op)
                except Exception as e:  # noqa: BLE001 - the operation decides (refunds, raises)
                    op = calls.throw(e)
                else:
                    op = calls.send(None)
        except StopIteration as done:
            return done.value

    async def _drive(self, op: Op) -> None:
        """Sends what ``op`` asks until it is done."""
        engine = self._engine
        command = engine.start(op)
        while command is not None:
            try:
                reply = await asyncio.wait_for(self.client.execute_command(*command), self.timeout)
            except Exception as e:  # noqa: BLE001 - cancellation (BaseException) passes through
                command = engine.failed(op, e)
            else:
                command = engine.fed(op, reply)

    async def heartbeat(self) -> Optional[int]:
        """Renews this limiter's fleet membership when a heartbeat is due and gives back the
        unspent units of leases that ended (call it from a timer, a few times per
        ``heartbeat_ms`` and at least once per lease lifetime; nothing is sent when nothing
        is due) and returns the live fleet size once known. A failed heartbeat keeps the
        last size; a failed refund is dropped, never retried."""
        for _ in range(MAX_PENDING):
            op = self._pending()
            if op is None:
                break
            try:
                await self._drive(op)
            except Exception as e:  # noqa: BLE001 - the size stays, the units stay counted; logged
                log.debug("fleet heartbeat or lease refund failed: %r", e)
        return self.fleet_size

    async def leave_fleet(self) -> None:
        """Releases this limiter's membership (at shutdown), so the others stop counting it
        at their next heartbeat (best effort: otherwise it expires after ``ttl_ms``)."""
        op = self._engine.layers.leave()
        if op is not None:
            try:
                await self._drive(op)
            except Exception as e:  # noqa: BLE001 - the membership expires on its own
                log.debug("leaving the fleet failed: %r", e)

    async def release_leases(self) -> None:
        """Gives back every lease's unspent units (at shutdown), so they count as free at once
        rather than staying taken until their window moves (best effort: a failed refund is
        logged and its units stay counted)."""
        for op in self._engine.layers.release_leases():
            try:
                await self._drive(op)
            except Exception as e:  # noqa: BLE001 - the units stay counted until their window moves
                log.debug("giving a lease back failed: %r", e)

    async def ping(self) -> bool:
        """Pings Redis directly (not through the breaker), within the timeout."""
        try:
            await asyncio.wait_for(self.client.ping(), self.timeout)
        except Exception:  # noqa: BLE001
            return False
        return True

    async def aclose(self) -> None:
        """Closes the client."""
        close = getattr(self.client, "aclose", None) or self.client.close
        await close()
