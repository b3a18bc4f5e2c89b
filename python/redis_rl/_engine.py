"""The limiter's calls for the async and the sync limiter, on the Rust client's sans-I/O ops.

An op of ``redis_rl._core`` (``Layers``, ``Op``: the client's ``sansio`` module, the one the
Node.js package drives too) says which command to send (the module's, or the Lua twin's
``EVALSHA``/``EVAL``), takes the reply or the error redis-py got, and ends with the decision:
reply parsing, the deny cache, the circuit breaker, the failure modes and the local fallback
are Rust's, and so is ``check_all`` across the hash slots of a cluster (``AcrossSlots``: one
``RL.ALL`` per slot, the give-back when a slot denies, shadow keys on their own). Here: the
calls written once as generators that yield ops; the drivers (``limiter.Limiter``,
``sync.SyncLimiter``) run each op with redis-py under the timeout and send the generator
nothing back (an op's error is thrown in).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Generator, List, Optional, Sequence, Tuple, TypeVar, Union

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from redis_rl._core import AcrossSlots, Layers, Op, check_cost
from redis_rl.breaker import BreakerConfig, BreakerState
from redis_rl.decision import Decision, Grant, MultiDecision, ReplyError, Source
from redis_rl.policy import Policy
from redis_rl.settle import Settled

log = logging.getLogger("redis_rl")

Calls = Generator[Op, None, Any]
"""An operation: yields the ops it runs, returns its result."""


class BreakerOpen(Exception):
    """The breaker is open: Redis was not called."""


# Error replies that mean "this server cannot answer now", not "bad request".
_UNAVAILABLE_REPLIES = ("LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY")
# redis-py drops the prefix of the error replies it has a class for; the op reads it.
_PREFIXES = {"NoScriptError": "NOSCRIPT", "BusyLoadingError": "LOADING", "ReadOnlyError": "READONLY",
             "ClusterDownError": "CLUSTERDOWN", "TryAgainError": "TRYAGAIN", "MasterDownError": "MASTERDOWN"}


def is_outage(error: BaseException) -> bool:
    """True for errors meaning Redis is unavailable (they count towards the breaker)."""
    if isinstance(error, (RedisConnectionError, RedisTimeoutError, TimeoutError, OSError)):
        return True
    if isinstance(error, ResponseError):
        return error_text(error).startswith(_UNAVAILABLE_REPLIES)
    return type(error).__name__ in _PREFIXES


def error_text(error: BaseException) -> str:
    """The error reply as the server sent it (redis-py strips the prefix of some)."""
    prefix = "NOSCRIPT" if isinstance(error, NoScriptError) else _PREFIXES.get(type(error).__name__)
    text = str(error)
    return f"{prefix} {text}" if prefix and not text.startswith(prefix) else text


@dataclass(frozen=True)
class LimiterStats:
    """Counts since start, for health endpoints."""

    redis_calls: int
    errors: int
    deny_cache: int
    local: int
    fail_open: int
    fail_closed: int
    breaker_opened: int
    breaker_closed: int


@dataclass(frozen=True)
class FleetConfig:
    """Fleet membership: each limiter holds an ``RL.CONCURRENCY`` lease named by its own id
    on ``key`` (every member names the same key), renewed every ``heartbeat_ms`` by
    ``heartbeat()`` (run it from a timer), and reads the live fleet size from the reply.
    A member that stops renewing is no longer counted after ``ttl_ms``. With ``divides``,
    the local fallback divides each limit by the live fleet size once known (as
    rl-gateway's ``[fleet]``), instead of the policy's ``instances``."""

    key: str
    heartbeat_ms: int = 1000
    ttl_ms: int = 3000
    divides: bool = True


# The ops one heartbeat() runs at most (the heartbeat, lease refunds): the rest wait for the
# next tick, so a backlog cannot hold the timer.
MAX_PENDING = 1000


@dataclass(frozen=True)
class LeaseConfig:
    """Leases for hot keys (a ``Policy`` made ``with_hot()``, in ``check_all``): a batch of
    units taken with ``UPTO`` and spent in process, as rl-gateway's ``[leases]``; a lease's
    unspent units are given back ``lifetime_ms`` after it was taken, by ``heartbeat()``
    (run it from a timer, at least once per ``lifetime_ms``). A lease is sized to
    ``demand_ms`` of the recent demand, at most ``max_percent`` of the limit per fleet."""

    lifetime_ms: int = 250
    demand_ms: int = 200
    max_percent: int = 10


def _check_key(key: Any) -> None:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, not {type(key).__name__}")
    if not key:
        raise ValueError("key must not be empty")


def _check_policy(policy: Any) -> None:
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be a Policy, not {type(policy).__name__}")


def _check_items(items: Sequence[Tuple[str, Policy]]) -> None:
    seen = set()
    for i, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"item {i} must be a (key, Policy) tuple")
        key, policy = item
        _check_key(key)
        if not isinstance(policy, Policy):
            raise TypeError(f"item {i}: policy must be a Policy, not {type(policy).__name__}")
        if key in seen:
            raise ValueError(f"item {i}: key {key!r} repeats an earlier key: each key may appear once")
        seen.add(key)
    if len(items) > 16:
        raise ValueError("check_all takes at most 16 keys (rl.max-all-keys)")


def _costs(cost: Union[int, Sequence[int]], n: int) -> List[int]:
    """One checked cost per item: ``cost`` for each, or ``cost[i]`` (one per item)."""
    if isinstance(cost, int):
        return [check_cost(cost)] * n
    costs = [check_cost(c) for c in cost]
    if len(costs) != n:
        raise ValueError(f"{len(costs)} costs for {n} items: give one cost per item")
    return costs


def _decision(fields: Tuple[Any, ...]) -> Decision:
    allowed, limit, remaining, retry, reset, source, shadow = fields
    return Decision(allowed, limit, remaining, retry, reset, Source(source), shadow)


class Engine:
    """The layers (``redis_rl._core.Layers``) and counters of one limiter."""

    def __init__(self, *, cluster: bool, breaker: BreakerConfig, deny_cache: int, local_capacity: int,
                 lua: bool = True, fleet: Optional[FleetConfig] = None,
                 leases: Optional[LeaseConfig] = None) -> None:
        membership = None if fleet is None else (fleet.key, fleet.heartbeat_ms, fleet.ttl_ms, fleet.divides)
        leasing = None if leases is None else (leases.lifetime_ms, leases.demand_ms, leases.max_percent)
        self.layers = Layers("auto" if lua else "module", cluster, deny_cache, breaker.failure_threshold,
                             round(breaker.open_for * 1000), local_capacity, membership, leasing)
        self.leases = leases
        self.fleet = fleet
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = dict.fromkeys(
            ("redis_calls", "errors", "deny_cache", "local", "fail_open", "fail_closed"), 0
        )
        self._last_error_log = 0.0

    # -- what the drivers call around an op ----------------------------------------------

    def start(self, op: Op) -> Optional[List[str]]:
        """The op's first command (counted), or None when it decided without Redis."""
        try:
            command = op.start()
        except RuntimeError as e:
            raise BreakerOpen(str(e)) from None
        if command is not None:
            self._count("redis_calls")
        return command

    def failed(self, op: Op, error: BaseException) -> Optional[List[str]]:
        """The command to send after ``error`` (the twin's), or None when the failure mode
        decided; raises ``error`` when it is the call's."""
        outage = is_outage(error)
        try:
            command = op.fail(error_text(error), outage)
        except RuntimeError:
            self._count("errors")
            raise error from None
        if command is None:
            self._count("errors")
            self._log_error(error, outage)
        return command

    def fed(self, op: Op, reply: Any) -> Optional[List[str]]:
        try:
            return op.feed(reply)
        except RuntimeError as e:
            raise ReplyError(str(e)) from None

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _counted(self, d: Decision) -> Decision:
        # Units served from a lease are counted by lease_stats().
        if d.source not in (Source.REDIS, Source.UNCHECKED, Source.LEASE):
            self._count(d.source.value)
        return d

    def stats(self) -> LimiterStats:
        with self._lock:
            counts = dict(self._counts)
        opened, closed = self.layers.breaker_transitions()
        return LimiterStats(**counts, breaker_opened=opened, breaker_closed=closed)

    @property
    def breaker_state(self) -> BreakerState:
        return BreakerState(self.layers.breaker_state)

    def _log_error(self, error: BaseException, outage: bool) -> None:
        """At most one line a second: an outage shows in the breaker's transitions."""
        now = time.monotonic()
        if now - self._last_error_log < 1.0:
            log.debug("a call failed: %r", error)
            return
        self._last_error_log = now
        log.log(logging.INFO if outage else logging.WARNING, "a call failed (%r): deciding by the failure mode", error)

    # -- operations --------------------------------------------------------------------

    def check(self, key: str, policy: Policy, cost: int, peek: bool) -> Calls:
        _check_key(key)
        _check_policy(policy)
        op = self.layers.check(key, policy.op_policy, check_cost(cost), peek)
        yield op
        return self._counted(_decision(op.result()))

    def take_upto(self, key: str, policy: Policy, n: int, peek: bool) -> Calls:
        """``COST n UPTO [PEEK]``: a ``Grant``. Raises the call's error (no failure mode
        decides). A grant of nothing is remembered by the deny cache for one unit."""
        _check_key(key)
        _check_policy(policy)
        if not policy.upto:
            raise ValueError(f"{policy.command} takes no UPTO (partial grants): use another algorithm")
        op = self.layers.take_upto(key, policy.op_policy, check_cost(n), peek)
        yield op
        granted, fields = op.result()
        return Grant(granted, self._counted(_decision(fields)))

    def refund(self, key: str, policy: Policy, amount: int) -> Calls:
        """``RL.REFUND key spec COST amount``: the units given back (0 sends nothing)."""
        _check_key(key)
        _check_policy(policy)
        if check_cost(amount) == 0:
            return 0
        op = self.layers.refund(key, policy.op_policy, amount)
        yield op
        return op.result()

    def reset(self, key: str) -> Calls:
        """``RL.RESET key``: True when the key held a limiter; its cached refusal goes too."""
        _check_key(key)
        op = self.layers.reset(key)
        yield op
        return op.result() == 1

    def settle_reservation(self, key: str, policy: Policy, reserved: int, actual: int) -> Calls:
        """Refunds ``reserved - actual`` or takes ``actual - reserved`` with ``FORCE``."""
        _check_key(key)
        _check_policy(policy)
        op = self.layers.settle(key, policy.op_policy, check_cost(reserved), check_cost(actual))
        yield op
        kind, units, charged = op.result()
        return Settled(kind, units, None if charged is None else _decision(charged))

    def check_all(self, items: Sequence[Tuple[str, Policy]], cost: Union[int, Sequence[int]]) -> Calls:
        """Enforced keys all or nothing (one ``RL.ALL`` per hash slot, the slots already
        taken refunded when a later one denies); shadow keys on their own."""
        items = list(items)
        _check_items(items)
        across = self.layers.check_all()
        for (key, policy), c in zip(items, _costs(cost, len(items))):
            across.add(key, policy.op_policy, c)
        denied, fields = yield from self._across(across)
        return MultiDecision(denied_index=denied, decisions=[self._counted(_decision(f)) for f in fields])

    def every_key(self, items: Sequence[Tuple[str, Policy]], units: Sequence[int], option: str) -> Calls:
        """Every item's own decision for ``units[i]``, from Redis itself: one ``RL.ALL ...
        PEEK`` (taking nothing) or ``FORCE`` (taking even over the limits) per hash slot."""
        if option not in ("PEEK", "FORCE"):
            raise ValueError(f"option must be PEEK or FORCE, not {option!r}")
        pairs = list(items)
        _check_items(pairs)
        across = self.layers.each(option == "FORCE")
        for (key, policy), c in zip(pairs, _costs(list(units), len(pairs))):
            across.add(key, policy.op_policy, c)
        _, fields = yield from self._across(across)
        return [_decision(f) for f in fields]

    def _across(self, across: AcrossSlots) -> Calls:
        """Runs the rounds of ``across`` (the slots, the refunds, the shadow keys) one op at a
        time; raises the first error that is the call's once the refunds are sent."""
        error: Optional[Exception] = None
        ops = across.next_round()
        while ops:
            for i, op in enumerate(ops):
                try:
                    yield op
                except Exception as e:  # noqa: BLE001 - the plan says whose it is; a lost refund is logged
                    if not across.failed(i, str(e)):
                        log.warning("RL.REFUND of a check_all key failed: %r", e)
                    elif error is None:
                        error = e
                else:
                    across.done(i, op)
            ops = across.next_round()
        if error is not None:
            raise error
        return across.result()


DEFAULT_TIMEOUT = 0.05
"""Seconds one call to Redis may take (50 ms, as the Rust client)."""


F = TypeVar("F", bound="Front")


class Front:
    """What the async and the blocking limiter share: the client, the timeout per call and
    the engine; each adds the calls that run the engine's ops."""

    _cluster_type: ClassVar[Any]
    """The client class of a Redis Cluster for this front (asyncio's or redis-py's)."""

    def __init__(
        self,
        client: Any,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        breaker: BreakerConfig = BreakerConfig(),
        deny_cache: int = 10_000,
        local_capacity: int = 100_000,
        rl_all: Optional[bool] = None,
        lua: bool = True,
        fleet: Optional[FleetConfig] = None,
        leases: Optional[LeaseConfig] = None,
    ) -> None:
        """``client``: a ``Redis`` or ``RedisCluster`` (of ``redis.asyncio`` for the async
        limiter). ``timeout``: seconds per call. ``deny_cache``: keys remembered by the
        hot-key deny cache (0: off). ``local_capacity``: keys held by the local fallback.
        ``rl_all``: ``None`` or ``True`` (``check_all`` always sends ``RL.ALL``, which the
        module and its Lua twin both have; ``False`` is refused). ``lua``: on a server
        without the module, run its Lua twin (``lua/rl.lua``, ``EVALSHA``, ``EVAL`` after
        ``NOSCRIPT``) from the first ``unknown command`` on. ``fleet``: fleet membership
        (``FleetConfig``; run ``heartbeat()`` from a timer). ``leases``: serve hot keys from
        leases (``LeaseConfig``; ``heartbeat()`` gives their unspent units back)."""
        if not timeout > 0:
            raise ValueError("timeout must be positive")
        if rl_all is False:
            raise ValueError("rl_all=False: every server with the module or its Lua twin has RL.ALL")
        self.client = client
        self.timeout = timeout
        self._engine = Engine(
            cluster=isinstance(client, self._cluster_type),
            breaker=breaker,
            deny_cache=deny_cache,
            local_capacity=local_capacity,
            lua=lua,
            fleet=fleet,
            leases=leases,
        )

    @classmethod
    def from_url(cls: type[F], url: str, *, cluster: bool = False, **kwargs: Any) -> F:
        """A limiter with its own client for ``url`` (nothing connects until the first call),
        socket timeouts set to ``timeout`` and redis-py's retries off (the breaker does the
        waiting: redis-py's own retries would stall every call of an outage for their
        backoff, as the Rust client's game day found)."""
        timeout = kwargs.get("timeout", DEFAULT_TIMEOUT)
        opts: Dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if cluster:
            return cls(cls._cluster_type.from_url(url, **opts), **kwargs)
        return cls(cls._standalone(url, opts), **kwargs)

    @staticmethod
    def _standalone(url: str, opts: Dict[str, Any]) -> Any:
        """A client of one server for ``url`` with ``opts`` and no retries."""
        raise NotImplementedError

    @property
    def breaker_state(self) -> BreakerState:
        return self._engine.breaker_state

    def stats(self) -> LimiterStats:
        """Redis calls, errors and decisions by source since start."""
        return self._engine.stats()

    @property
    def fleet(self) -> Optional[FleetConfig]:
        """The fleet membership, if any."""
        return self._engine.fleet

    @property
    def fleet_size(self) -> Optional[int]:
        """The live fleet size once a heartbeat read it (``None`` before, or without
        membership)."""
        return self._engine.layers.fleet_size

    @property
    def leases(self) -> Optional[LeaseConfig]:
        """The lease settings, if any."""
        return self._engine.leases

    def lease_stats(self) -> Dict[str, int]:
        """Lease counts since start: batches taken, units granted, requests served from a
        lease, refunds sent, units refunded and units dropped (a refund failed)."""
        names = ("takes", "granted", "hits", "refunds", "refunded", "dropped")
        return dict(zip(names, self._engine.layers.lease_stats()))

    def _pending(self) -> Optional[Op]:
        """The next op due now: the heartbeat, then the refunds of leases that ended."""
        return self._engine.layers.pending(time.time_ns() // 1_000_000)
