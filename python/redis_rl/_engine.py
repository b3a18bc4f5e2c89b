"""The limiter's logic, written once without I/O for the async and the sync limiter.

Each operation is a generator: it yields a command (a tuple of arguments) whenever it needs
Redis and is sent back an ``Ok(value)`` or a ``Failed(error)``; its return value is the
decision. The drivers (``limiter.Limiter``, ``sync.SyncLimiter``) only execute commands
under the timeout and the breaker.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Generator, List, Optional, Sequence, Tuple, TypeVar, Union

from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from redis_rl._core import LUA_TWIN, LocalStore, check_cost
from redis_rl.breaker import Breaker, BreakerConfig, BreakerState
from redis_rl.decision import (
    Decision,
    Grant,
    MultiDecision,
    Source,
    parse_all,
    parse_refund,
    parse_single,
    parse_upto,
)
from redis_rl.deny_cache import DenyCache
from redis_rl.policy import Policy
from redis_rl.settle import Settled, forced_command

log = logging.getLogger("redis_rl")

Command = Tuple[Union[str, int], ...]


class BreakerOpen(Exception):
    """The breaker is open: Redis was not called."""


@dataclass(frozen=True)
class Ok:
    value: Any


@dataclass(frozen=True)
class Failed:
    error: BaseException


Result = Union[Ok, Failed]
Op = Generator[Command, Result, Any]

# Error replies that mean "this server cannot answer now", not "bad request".
_UNAVAILABLE_REPLIES = ("LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY")


def is_outage(error: BaseException) -> bool:
    """True for errors meaning Redis is unavailable (they count towards the breaker)."""
    if isinstance(error, (RedisConnectionError, RedisTimeoutError, TimeoutError, OSError)):
        return True
    if isinstance(error, ResponseError):
        return str(error).startswith(_UNAVAILABLE_REPLIES)
    return type(error).__name__ in ("ClusterDownError", "MasterDownError", "TryAgainError")


def _is_unknown_command(error: BaseException) -> bool:
    return isinstance(error, ResponseError) and "unknown command" in str(error).lower()


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


def _check_key(key: Any) -> None:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, not {type(key).__name__}")
    if not key:
        raise ValueError("key must not be empty")


class LuaTwin:
    """The module's commands in Lua (``lua/rl.lua``: same replies, errors and stored bytes),
    for servers that cannot load the module. Used from the first ``unknown command 'RL.…'``
    reply on, when enabled: as the function library ``rl`` (``FUNCTION LOAD REPLACE`` once,
    then ``FCALL``), or where FUNCTION is refused, as a script (``EVALSHA``)."""

    library = LUA_TWIN
    # The same file runs as a script with a plain shebang (see its header).
    script = "#!lua" + LUA_TWIN[LUA_TWIN.find("\n") :]
    sha = hashlib.sha1(script.encode()).hexdigest()

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.active = False
        self.use_function = True

    def switch(self, command: Command, error: BaseException) -> bool:
        """True when ``error`` says the server lacks the module and the twin takes over."""
        if not (self.enabled and _is_unknown_command(error) and str(command[0]).startswith("RL.")):
            return False
        if not self.active:
            log.warning("the server has no redis-rl module: using its Lua twin")
        self.active = True
        return True

    @staticmethod
    def arguments(command: Command) -> Optional[Command]:
        """``RL.X key args`` as ``1 key RL.X args`` (``RL.ALL n keys specs`` as ``n keys RL.ALL
        specs``), the arguments of FCALL / EVALSHA after the function or sha; ``None`` for
        other commands."""
        name = str(command[0]).upper()
        if name == "RL.ALL":
            n = int(command[1])
            return (n, *command[2 : 2 + n], name, *command[2 + n :])
        if name.startswith("RL."):
            return (1, command[1], name, *command[2:])
        return None


    def calls(self, command: Command) -> "TwinCalls":
        """The calls that run ``command``, for a driver to execute one by one."""
        return TwinCalls(self._steps(command))

    def _steps(self, command: Command) -> Generator[Command, Any, Any]:
        # The command as it is while the module answers; from its first "unknown command"
        # on, the twin: FCALL (the library loaded on "function not found"), or where
        # FUNCTION is refused, EVALSHA (the script loaded on NOSCRIPT).
        if not self.active:
            try:
                return (yield command)
            except ResponseError as e:
                if not self.switch(command, e):
                    raise
        args = self.arguments(command)
        if args is None:
            return (yield command)
        if self.use_function:
            try:
                return (yield ("FCALL", "rl", *args))
            except ResponseError as e:
                if not is_function_missing(e):
                    raise
            try:
                yield ("FUNCTION", "LOAD", "REPLACE", self.library)
            except ResponseError:
                self.use_function = False  # FUNCTION refused (ACL, managed service): a script
            else:
                return (yield ("FCALL", "rl", *args))
        try:
            return (yield ("EVALSHA", self.sha, *args))
        except NoScriptError:
            yield ("SCRIPT", "LOAD", self.script)
            return (yield ("EVALSHA", self.sha, *args))


class TwinCalls:
    """The calls one command takes (see ``LuaTwin.calls``): run ``command``, ``feed`` its
    reply or its ``ResponseError`` back, until ``feed`` returns False; ``value`` is then the
    command's reply. An error the chain does not expect is raised by ``feed``."""

    def __init__(self, steps: Generator[Command, Any, Any]) -> None:
        self._steps = steps
        self.command: Command = next(steps)
        self.value: Any = None

    def feed(self, value: Any, error: Optional[ResponseError]) -> bool:
        try:
            if error is not None:
                self.command = self._steps.throw(error)
            else:
                self.command = self._steps.send(value)
        except StopIteration as done:
            self.value = done.value
            return False
        return True


def is_function_missing(error: BaseException) -> bool:
    return isinstance(error, ResponseError) and "function not found" in str(error).lower()


class Engine:
    """Breaker, deny cache, local store, capabilities and counters of one limiter."""

    def __init__(
        self,
        *,
        cluster: bool,
        breaker: BreakerConfig,
        deny_cache: int,
        local_capacity: int,
        rl_all: Optional[bool],
        lua: bool = True,
    ) -> None:
        self.cluster = cluster
        self.twin = LuaTwin(lua)
        self.breaker = Breaker(breaker)
        self.deny_cache = DenyCache(deny_cache) if deny_cache > 0 else None
        self.local = LocalStore(local_capacity)
        self.has_all: Optional[bool] = rl_all
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = dict.fromkeys(
            ("redis_calls", "errors", "deny_cache", "local", "fail_open", "fail_closed"), 0
        )
        self._last_error_log = 0.0

    # -- calls -----------------------------------------------------------------------

    def permit(self) -> Optional[Failed]:
        """Before a call: ``Failed(BreakerOpen)`` when Redis must not be called."""
        if not self.breaker.permit():
            return Failed(BreakerOpen())
        self._count("redis_calls")
        return None

    def settle(self, error: Optional[BaseException]) -> None:
        """After a call: tell the breaker and the counters how it went."""
        if error is None:
            self.breaker.on_success()
            return
        self._count("errors")
        if is_outage(error):
            self.breaker.on_failure()
        else:
            self.breaker.on_success()

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def stats(self) -> LimiterStats:
        with self._lock:
            counts = dict(self._counts)
        return LimiterStats(
            **counts, breaker_opened=self.breaker.opened, breaker_closed=self.breaker.closed
        )

    @property
    def breaker_state(self) -> BreakerState:
        return self.breaker.state

    def query(self, command: Command) -> Op:
        """Any command through the breaker and timeout; raises what the call raised."""
        result = yield tuple(command)
        if isinstance(result, Failed):
            raise result.error
        return result.value

    # -- one key -----------------------------------------------------------------------

    def check(self, key: str, policy: Policy, cost: int, peek: bool) -> Op:
        _check_key(key)
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a Policy, not {type(policy).__name__}")
        cost = check_cost(cost)
        if not peek:
            cached = self._cached_denial(key, cost)
            if cached is not None:
                return cached.with_shadow(policy.shadow)
        result = yield single(key, policy, cost, peek)
        try:
            if isinstance(result, Failed):
                raise result.error
            d = parse_single(policy.command, result.value)
        except Exception as e:  # noqa: BLE001 - every failure decides by the failure mode
            d = self._fallback(key, policy, cost, peek, e)
        else:
            if not peek:
                self._remember_denial(key, cost, d)
        return d.with_shadow(policy.shadow)

    # -- batches (leases) ----------------------------------------------------------------

    def take_upto(self, key: str, policy: Policy, n: int, peek: bool) -> Op:
        """``COST n UPTO [PEEK]``: a ``Grant``. Raises the call's error (no failure mode
        decides). A grant of nothing is remembered by the deny cache for one unit."""
        _check_key(key)
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a Policy, not {type(policy).__name__}")
        if not policy.upto:
            raise ValueError(f"{policy.command} takes no UPTO (partial grants): use another algorithm")
        n = check_cost(n)
        if not peek and n > 0:
            cached = self._cached_denial(key, 1)
            if cached is not None:
                return Grant(granted=0, decision=cached)
        result = yield upto_command(key, policy, n, peek)
        if isinstance(result, Failed):
            raise result.error
        grant = parse_upto(policy.command, result.value)
        if not peek and grant.granted == 0:
            self._remember_denial(key, 1, grant.decision)
        return grant

    def refund(self, key: str, policy: Policy, amount: int) -> Op:
        """``RL.REFUND key spec COST amount``: the units given back (0 sends nothing).
        Raises the call's error."""
        _check_key(key)
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a Policy, not {type(policy).__name__}")
        amount = check_cost(amount)
        if amount == 0:
            return 0
        result = yield refund_command(key, policy, amount)
        # The units given back may admit what the deny cache refuses.
        self._forget_denial(key)
        if isinstance(result, Failed):
            raise result.error
        return parse_refund(result.value)

    def reset(self, key: str) -> Op:
        """``RL.RESET key`` (the module's or the Lua twin's): True when the key held a
        limiter; the key's cached refusal goes too. Raises the call's error."""
        _check_key(key)
        result = yield ("RL.RESET", key)
        self._forget_denial(key)
        if isinstance(result, Failed):
            raise result.error
        return int(result.value) == 1

    def _forget_denial(self, key: str) -> None:
        if self.deny_cache is not None:
            self.deny_cache.forget(key)

    def settle_reservation(self, key: str, policy: Policy, reserved: int, actual: int) -> Op:
        """Settles a reservation of ``reserved`` units against the ``actual`` cost: refunds
        the difference or takes it with ``FORCE``. Raises the call's error (nothing is
        retried: a refund is lost, a charge not taken)."""
        _check_key(key)
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a Policy, not {type(policy).__name__}")
        reserved = check_cost(reserved)
        actual = check_cost(actual)
        if actual < reserved:
            given = yield from self.refund(key, policy, reserved - actual)
            return Settled("refunded", given)
        if actual == reserved:
            return Settled("exact", 0)
        result = yield forced_command(key, policy, actual - reserved)
        if isinstance(result, Failed):
            raise result.error
        return Settled("charged", actual - reserved, parse_single(policy.command, result.value))

    # -- several keys --------------------------------------------------------------------

    def check_all(self, items: Sequence[Tuple[str, Policy]], cost: Union[int, Sequence[int]]) -> Op:
        items = list(items)
        _check_items(items)
        costs = _costs(cost, len(items))
        enforced = [i for i, (_, p) in enumerate(items) if not p.shadow]
        shadow = [i for i, (_, p) in enumerate(items) if p.shadow]
        decisions: List[Optional[Decision]] = [None] * len(items)
        denied_sub, enforced_decisions = yield from self._decide_all(
            [items[i] for i in enforced], [costs[i] for i in enforced]
        )
        for i, d in zip(enforced, enforced_decisions):
            decisions[i] = d
        for i in shadow:
            key, policy = items[i]
            decisions[i] = yield from self.check(key, policy, costs[i], False)
        return MultiDecision(
            denied_index=None if denied_sub is None else enforced[denied_sub],
            decisions=[d for d in decisions if d is not None],
        )

    def _decide_all(
        self, pairs: List[Tuple[str, Policy]], costs: List[int]
    ) -> Generator[Command, Result, Tuple[Optional[int], List[Decision]]]:
        if not pairs:
            return None, []
        # A key the deny cache holds denies the whole request without a round trip.
        for i, (key, _) in enumerate(pairs):
            cached = self._cached_denial(key, costs[i])
            if cached is not None:
                out = [_unknown(p) for _, p in pairs]
                out[i] = cached
                return i, out
        try:
            if self.has_all is not False:
                try:
                    denied, decisions = yield from self._redis_all(pairs, costs)
                except ResponseError as e:
                    if not _is_unknown_command(e) or self.has_all:
                        raise
                    # No RL.ALL on this server: single calls from now on.
                    self.has_all = False
                    denied, decisions = yield from self._redis_singles(pairs, costs)
                else:
                    self.has_all = True
            else:
                denied, decisions = yield from self._redis_singles(pairs, costs)
        except Exception as e:  # noqa: BLE001
            return self._fallback_all(pairs, costs, e)
        if denied is not None:
            self._remember_denial(pairs[denied][0], costs[denied], decisions[denied])
        return denied, decisions

    def every_key(self, items: Sequence[Tuple[str, Policy]], units: Sequence[int], option: str) -> Op:
        """Every item's own decision for ``units[i]``, from Redis itself (not the deny cache,
        whose waits would be stale): one ``RL.ALL ... [COSTS ...] <option>`` per hash slot,
        ``PEEK`` (taking nothing) or ``FORCE`` (taking the units even over the limits), over
        the same wire as ``check_all`` (the module, or the Lua twin). Raises the call's error."""
        if option not in ("PEEK", "FORCE"):
            raise ValueError(f"option must be PEEK or FORCE, not {option!r}")
        pairs = list(items)
        _check_items(pairs)
        costs = _costs(list(units), len(pairs))
        decisions = [_unknown(p) for _, p in pairs]
        for members in self._groups([k for k, _ in pairs]):
            group = [pairs[i] for i in members]
            result = yield all_command(group, [costs[i] for i in members]) + (option,)
            if isinstance(result, Failed):
                raise result.error
            _, got = parse_all(result.value, len(group))
            for i, d in zip(members, got):
                decisions[i] = d
        return decisions

    def _groups(self, keys: List[str]) -> List[List[int]]:
        """Key indexes by hash slot, slots in order of first appearance."""
        if not self.cluster:
            return [list(range(len(keys)))]
        groups: Dict[int, List[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key_slot(key.encode()), []).append(i)
        return list(groups.values())

    def _redis_all(
        self, pairs: List[Tuple[str, Policy]], costs: List[int]
    ) -> Generator[Command, Result, Tuple[Optional[int], List[Decision]]]:
        """One RL.ALL per slot, each key its own cost (``COSTS`` where they differ); the slots
        already taken are refunded when a later one denies or fails."""
        decisions = [_unknown(p) for _, p in pairs]
        taken: List[int] = []
        for members in self._groups([k for k, _ in pairs]):
            group = [pairs[i] for i in members]
            result = yield all_command(group, [costs[i] for i in members])
            try:
                if isinstance(result, Failed):
                    raise result.error
                denied, group_decisions = parse_all(result.value, len(group))
            except Exception:
                yield from self._refund(pairs, taken, costs)
                raise
            for i, d in zip(members, group_decisions):
                decisions[i] = d
            if denied is not None:
                yield from self._refund(pairs, taken, costs)
                return members[denied], decisions
            taken.extend(members)
        return None, decisions

    def _redis_singles(
        self, pairs: List[Tuple[str, Policy]], costs: List[int]
    ) -> Generator[Command, Result, Tuple[Optional[int], List[Decision]]]:
        """Without RL.ALL: peek every key, then take every key; refund on a racing denial."""
        peeks = yield from self._singles(pairs, costs, True)
        for i, d in enumerate(peeks):
            if d.denied:
                return i, peeks
        taken = yield from self._singles(pairs, costs, False)
        for i, d in enumerate(taken):
            if d.denied:
                yield from self._refund(pairs, [j for j, t in enumerate(taken) if t.allowed], costs)
                return i, taken
        return None, taken

    def _singles(
        self, pairs: List[Tuple[str, Policy]], costs: List[int], peek: bool
    ) -> Generator[Command, Result, List[Decision]]:
        out = []
        for (key, policy), cost in zip(pairs, costs):
            result = yield single(key, policy, cost, peek)
            if isinstance(result, Failed):
                raise result.error
            out.append(parse_single(policy.command, result.value))
        return out

    def _refund(
        self, pairs: List[Tuple[str, Policy]], indexes: List[int], costs: List[int]
    ) -> Generator[Command, Result, None]:
        """Gives back their costs on the keys at ``indexes``, best effort."""
        for i in indexes:
            key, policy = pairs[i]
            if costs[i] == 0:
                continue
            result = yield refund_command(key, policy, costs[i])
            if isinstance(result, Failed):
                self._log_error("RL.REFUND", result.error)

    # -- failures ----------------------------------------------------------------------

    def _fallback(self, key: str, policy: Policy, cost: int, peek: bool, error: BaseException) -> Decision:
        self._log_error(policy.command, error)
        d = self._fail(key, policy, cost, peek)
        self._count(d.source.value)
        return d

    def _fail(self, key: str, policy: Policy, cost: int, peek: bool) -> Decision:
        mode = policy.failure_mode.name
        limit = policy.limit
        if mode == "open":
            return Decision(True, limit, limit, 0, 0, Source.FAIL_OPEN)
        if mode == "closed":
            wait = max(1000, math.ceil(self.breaker.remaining_open() * 1000))
            return Decision(False, limit, 0, wait, 0, Source.FAIL_CLOSED)
        now_us = time.time_ns() // 1000
        fields = self.local.check(key, policy.local_params(), cost, now_us, peek)
        return Decision.from_reply(fields, Source.LOCAL)

    def _fallback_all(
        self, pairs: List[Tuple[str, Policy]], costs: List[int], error: BaseException
    ) -> Tuple[Optional[int], List[Decision]]:
        """All or nothing by each key's failure mode: peek every key, then take them, each
        its own cost."""
        self._log_error("RL.ALL", error)
        peeks = [self._fail(k, p, c, True) for (k, p), c in zip(pairs, costs)]
        denied = next((i for i, d in enumerate(peeks) if d.denied), None)
        decisions = peeks if denied is not None else [self._fail(k, p, c, False) for (k, p), c in zip(pairs, costs)]
        for d in decisions:
            self._count(d.source.value)
        return denied, decisions

    def _log_error(self, command: str, error: BaseException) -> None:
        """At most one line a second: an outage shows in the breaker's transitions."""
        now = time.monotonic()
        if now - self._last_error_log < 1.0:
            log.debug("%s failed: %r", command, error)
            return
        self._last_error_log = now
        level = logging.INFO if is_outage(error) or isinstance(error, BreakerOpen) else logging.WARNING
        log.log(level, "%s failed (%r): deciding by the failure mode", command, error)

    def _cached_denial(self, key: str, cost: int) -> Optional[Decision]:
        if self.deny_cache is None:
            return None
        d = self.deny_cache.get(key, cost)
        if d is not None:
            self._count("deny_cache")
        return d

    def _remember_denial(self, key: str, cost: int, d: Decision) -> None:
        if self.deny_cache is not None:
            self.deny_cache.remember(key, cost, d)


def _unknown(policy: Policy) -> Decision:
    """A key that was not checked (another decided first): its limit, its count unknown, and
    a source that says so (not ``redis``: Redis never saw it)."""
    return Decision(True, policy.limit, policy.limit, 0, 0, Source.UNCHECKED, policy.shadow)


def _cost_peek(cost: int, peek: bool) -> Command:
    words: Tuple[Union[str, int], ...] = ("COST", cost) if cost != 1 else ()
    return words + ("PEEK",) if peek else words


def single(key: str, policy: Policy, cost: int, peek: bool) -> Command:
    """``RL.<ALG> key params... [COST n] [PEEK]``."""
    return (policy.command, key, *policy.spec(), *_cost_peek(cost, peek))


def upto_command(key: str, policy: Policy, n: int, peek: bool) -> Command:
    """``RL.<ALG> key params... COST n UPTO [PEEK]``."""
    return (policy.command, key, *policy.spec(), "COST", n, "UPTO", *(("PEEK",) if peek else ()))


def _costs(cost: Union[int, Sequence[int]], n: int) -> List[int]:
    """One checked cost per item: ``cost`` for each, or ``cost[i]`` (one per item)."""
    if isinstance(cost, int):
        return [check_cost(cost)] * n
    costs = [check_cost(c) for c in cost]
    if len(costs) != n:
        raise ValueError(f"{len(costs)} costs for {n} items: give one cost per item")
    return costs


def all_command(pairs: Sequence[Tuple[str, Policy]], costs: Union[int, Sequence[int]]) -> Command:
    """``RL.ALL numkeys key... spec... [COST n | COSTS n1 ... nk]``: one cost for every key, or
    each key its own (``COSTS`` where they differ), one atomic call either way."""
    specs: List[Union[str, int]] = []
    for _, policy in pairs:
        specs += [policy.spec_name, *policy.spec()]
    each = [costs] * len(pairs) if isinstance(costs, int) else list(costs)
    if len(set(each)) > 1:
        options: Command = ("COSTS", *each)
    else:
        options = _cost_peek(each[0] if each else 1, False)
    return ("RL.ALL", len(pairs), *(k for k, _ in pairs), *specs, *options)


def refund_command(key: str, policy: Policy, cost: int) -> Command:
    """``RL.REFUND key spec COST n``."""
    return ("RL.REFUND", key, policy.spec_name, *policy.spec(), "COST", cost)


DEFAULT_TIMEOUT = 0.05
"""Seconds one call to Redis may take (50 ms, as the Rust client)."""


F = TypeVar("F", bound="Front")


class Front:
    """What the async and the blocking limiter share: the client, the timeout per call and
    the engine; each adds the calls that execute the engine's commands."""

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
    ) -> None:
        """``client``: a ``Redis`` or ``RedisCluster`` (of ``redis.asyncio`` for the async
        limiter). ``timeout``: seconds per call. ``deny_cache``: keys remembered by the
        hot-key deny cache (0: off). ``local_capacity``: keys held by the local fallback.
        ``rl_all``: force (True) or avoid (False) RL.ALL for ``check_all`` instead of
        finding out on first use. ``lua``: on a server without the module, run its Lua twin
        (``lua/rl.lua``: ``FCALL rl`` after ``FUNCTION LOAD``, else ``EVALSHA``) from the
        first ``unknown command`` on."""
        if not timeout > 0:
            raise ValueError("timeout must be positive")
        self.client = client
        self.timeout = timeout
        self._engine = Engine(
            cluster=isinstance(client, self._cluster_type),
            breaker=breaker,
            deny_cache=deny_cache,
            local_capacity=local_capacity,
            rl_all=rl_all,
            lua=lua,
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
