"""The blocking limiter (``redis.Redis`` or ``redis.cluster.RedisCluster``)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, cast

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from redis_rl._core import Op
from redis_rl._engine import MAX_PENDING, BreakerOpen, Calls, Front, error_text, is_outage, log
from redis_rl.decision import Decision, Grant, MultiDecision
from redis_rl.policy import Policy
from redis_rl.settle import Settled

__all__ = ["SyncLimiter", "Limiter"]


class SyncLimiter(Front):
    """The same limiter as ``redis_rl.Limiter``, for blocking code and threads.

    A blocking call cannot be cut short from outside, so the timeout is the client's
    ``socket_timeout``: ``SyncLimiter.from_url`` sets it to ``timeout``; a client you pass in
    should have one (and no retries), or a hung Redis blocks the caller.
    """

    _cluster_type = RedisCluster

    @staticmethod
    def _standalone(url: str, opts: Dict[str, Any]) -> Any:
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), **opts)

    def check(self, key: str, policy: Policy, cost: int = 1) -> Decision:
        """Takes ``cost`` units (0: look without taking) for ``key``."""
        return cast(Decision, self._run(self._engine.check(key, policy, cost, False)))

    def peek(self, key: str, policy: Policy, cost: int = 1) -> Decision:
        """What taking ``cost`` units would answer, taking nothing (``PEEK``)."""
        return cast(Decision, self._run(self._engine.check(key, policy, cost, True)))

    def check_all(self, items: Sequence[Tuple[str, Policy]], cost: Union[int, Sequence[int]] = 1) -> MultiDecision:
        """All or nothing over several keys; see ``redis_rl.Limiter.check_all``."""
        return cast(MultiDecision, self._run(self._engine.check_all(items, cost)))

    def take_upto(self, key: str, policy: Policy, n: int) -> Grant:
        """A batch of up to ``n`` units; see ``redis_rl.Limiter.take_upto``."""
        return cast(Grant, self._run(self._engine.take_upto(key, policy, n, False)))

    def peek_upto(self, key: str, policy: Policy, n: int) -> Grant:
        """What ``take_upto`` would grant now, taking nothing."""
        return cast(Grant, self._run(self._engine.take_upto(key, policy, n, True)))

    def refund(self, key: str, policy: Policy, amount: int) -> int:
        """Gives back up to ``amount`` units; see ``redis_rl.Limiter.refund``."""
        return cast(int, self._run(self._engine.refund(key, policy, amount)))

    def reset(self, key: str) -> bool:
        """Deletes ``key``'s limiter state; see ``redis_rl.Limiter.reset``."""
        return cast(bool, self._run(self._engine.reset(key)))

    def settle(self, key: str, policy: Policy, reserved: int, actual: int) -> Settled:
        """Settles a reservation of ``reserved`` units of ``policy`` on ``key`` (taken
        earlier with ``check(..., cost=reserved)``) against the ``actual`` cost: refunds
        ``reserved - actual`` (``RL.REFUND``) or takes ``actual - reserved`` with ``FORCE``
        (the module or the Lua twin). Raises when Redis cannot answer."""
        return cast(Settled, self._run(self._engine.settle_reservation(key, policy, reserved, actual)))

    def peek_all_units(self, items: Sequence[Tuple[str, Policy]], units: Sequence[int]) -> List[Decision]:
        """Every item's own decision, taking nothing; see ``redis_rl.Limiter.peek_all_units``."""
        return cast(List[Decision], self._run(self._engine.every_key(items, units, "PEEK")))

    def force_all_units(self, items: Sequence[Tuple[str, Policy]], units: Sequence[int]) -> List[Decision]:
        """Takes each item's units even over the limits; see ``redis_rl.Limiter.force_all_units``."""
        return cast(List[Decision], self._run(self._engine.every_key(items, units, "FORCE")))

    def query(self, *command: Any) -> Any:
        """Runs any command through the breaker and timeout (tier lookups use this); raises
        the call's error (``BreakerOpen`` when the breaker is open)."""
        layers = self._engine.layers
        if not layers.permit():
            raise BreakerOpen("the circuit breaker is open: Redis was not called")
        try:
            value = self._query(command)
        except Exception as e:
            layers.call_ended(is_outage(e))
            raise
        layers.call_ended(False)
        return value

    def _query(self, command: Tuple[Any, ...]) -> Any:
        """``command``, one of the module's through the twin where it runs."""
        layers = self._engine.layers
        if not (command and isinstance(command[0], str) and command[0][:3].upper() == "RL."):
            return self.client.execute_command(*command)
        words = [w.decode() if isinstance(w, bytes) else str(w) for w in command]
        sent = layers.encode(words)
        while True:
            try:
                return self.client.execute_command(*sent)
            except ResponseError as e:
                retry = layers.retry(words, error_text(e))
                if retry is None:
                    raise
                sent = retry

    def _run(self, calls: Calls) -> Any:
        try:
            op = next(calls)
            while True:
                try:
                    self._drive(op)
                except Exception as e:  # noqa: BLE001 - the operation decides (refunds, raises)
                    op = calls.throw(e)
                else:
                    op = calls.send(None)
        except StopIteration as done:
            return done.value

    def _drive(self, op: Op) -> None:
        """Sends what ``op`` asks until it is done."""
        engine = self._engine
        command = engine.start(op)
        while command is not None:
            try:
                reply = self.client.execute_command(*command)
            except Exception as e:  # noqa: BLE001
                command = engine.failed(op, e)
            else:
                command = engine.fed(op, reply)

    def heartbeat(self) -> Optional[int]:
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
                self._drive(op)
            except Exception as e:  # noqa: BLE001 - the size stays, the units stay counted; logged
                log.debug("fleet heartbeat or lease refund failed: %r", e)
        return self.fleet_size

    def leave_fleet(self) -> None:
        """Releases this limiter's membership (at shutdown), so the others stop counting it
        at their next heartbeat (best effort: otherwise it expires after ``ttl_ms``)."""
        op = self._engine.layers.leave()
        if op is not None:
            try:
                self._drive(op)
            except Exception as e:  # noqa: BLE001 - the membership expires on its own
                log.debug("leaving the fleet failed: %r", e)

    def release_leases(self) -> None:
        """Gives back every lease's unspent units (at shutdown), so they count as free at once
        rather than staying taken until their window moves (best effort: a failed refund is
        logged and its units stay counted)."""
        for op in self._engine.layers.release_leases():
            try:
                self._drive(op)
            except Exception as e:  # noqa: BLE001 - the units stay counted until their window moves
                log.debug("giving a lease back failed: %r", e)

    def ping(self) -> bool:
        """Pings Redis directly (not through the breaker)."""
        try:
            self.client.ping()
        except Exception:  # noqa: BLE001
            return False
        return True

    def close(self) -> None:
        self.client.close()


Limiter = SyncLimiter
"""``redis_rl.sync.Limiter``: the blocking limiter under the async one's name."""
