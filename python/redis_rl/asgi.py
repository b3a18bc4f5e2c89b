"""ASGI rate-limit middleware for Starlette and FastAPI, interchangeable with ``rl-gateway``.

::

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, redis_url="redis://127.0.0.1:6379/0", config="rl.toml")

What a request is limited on, under which Redis keys, and how the decision is written
(``RateLimit-Policy`` / ``RateLimit`` / ``X-RateLimit-*`` headers, 429/503/403/400
problem+json bodies) is decided by the request flow compiled into ``redis_rl._core``: the
flow rl-gateway runs, so the same TOML gives the same keys, statuses and headers in both,
and a fleet can mix them. Per request the flow checks the API key (one per request) and the
access lists, asks the middleware for the key's tier, plans every dimension and matching
``[[rules]]`` entry (each window its own key), has the limiter decide them in one ``RL.ALL``
per hash slot (all or nothing) with the ban reads beside it, and renders the decision; the
middleware only runs what it asks, with redis-py. A rule's ``ban`` refuses a key refused
too often for a while (the strikes and bans are rl-gateway's keys and scripts), and its
refusals count in the fleet's top offenders. A rule's
``cost = "header:<name>"`` reserves that many units on its windows, and its ``settle =
"response-header:<name>"`` refunds or charges the difference once the application's response
(its header, else its ``http.response.trailers``) reports the actual cost. A refused request
whose wait is within ``delay_max_ms`` is booked for its slot and held, then served.

The path the application sees is the path's normal form (no duplicate slashes, dot segments
or trailing slash; case kept), the form rules match and rl-gateway forwards. A bad
configuration fails the application's start (the lifespan's ``startup.failed``, with the
file, line and field), not its requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple, Union

from redis_rl import _flow
from redis_rl._core import Flow, PolicyEngine, normalize_path, request_id as _request_id, tenant_id
from redis_rl.breaker import BreakerConfig
from redis_rl._engine import FleetConfig, LeaseConfig
from redis_rl.limiter import DEFAULT_TIMEOUT, Limiter
from redis_rl.policy import FailureMode, Policy
from redis_rl.trace import TRACEPARENT, trace_context

__all__ = [
    "ConfigError", "PolicyEngine", "RateLimitMiddleware", "RedisHashTiers", "load_engine", "normalize_path",
    "request_id", "route_template", "tenant_id",
]

log = logging.getLogger("redis_rl.asgi")

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
TierResolver = Callable[[str], Awaitable[Optional[str]]]
Config = Union[None, str, Path, Mapping[str, Any], PolicyEngine]

REQUEST_ID = b"x-request-id"
UNMATCHED = "<unmatched>"


class ConfigError(ValueError):
    """A configuration the policy engine refused; the text names the file (``<mapping>``
    for a mapping), the line and the field."""


def load_engine(config: Config = None, routes: Iterable[str] = ()) -> PolicyEngine:
    """The policy engine of ``config``: ``None`` for the design's defaults, the path of a
    TOML file (``rl-gateway --config``'s format), a mapping of the same schema, or an engine.
    ``routes``: route templates of the endpoint dimension besides the rules' paths."""
    routes = list(routes)
    try:
        if isinstance(config, PolicyEngine):
            return config
        if config is None:
            return PolicyEngine.from_json("{}", "<defaults>", routes)
        if isinstance(config, Mapping):
            return PolicyEngine.from_json(json.dumps(config), "<mapping>", routes)
        path = Path(config)
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(f"{path}: {e.strerror or e}") from None
        return PolicyEngine.from_toml(text, str(path), routes)
    except ValueError as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from None


def request_id(headers: Iterable[Tuple[bytes, bytes]]) -> str:
    """The caller's ``X-Request-Id`` if sane (1 to 128 of ``A-Z a-z 0-9 - _ . :``), else a
    new UUID: an id is echoed into logs and headers, so arbitrary bytes are not."""
    for name, value in headers:
        if name.lower() == REQUEST_ID:
            return _request_id(value) or str(uuid.uuid4())
    return str(uuid.uuid4())


class RedisHashTiers:
    """Tiers in a Redis hash (``HSET rl:tiers <api key> pro``), as rl-gateway reads them.

    - A known key costs one ``HGET`` per ``ttl`` seconds (positive cache, a bounded LRU of
      ``capacity``).
    - An unknown key costs nothing: a snapshot of the hash's keys (``HSCAN``, refreshed in
      the background every ``ttl``, at most ``snapshot_max_keys``) answers that a key is
      absent, so a flood of random keys does not reach Redis. Without a usable snapshot (not
      taken yet, hash too large, Redis down) an unknown key costs one ``HGET``, then sits in
      a negative cache (its own bounded LRU of ``capacity``, so random keys never evict
      known ones) for ``ttl``.
    - A key added to the hash is seen within ``ttl`` (the next snapshot or cache expiry).

    On a Redis failure the last known tier is used even when stale, else the default tier.
    """

    def __init__(
        self,
        limiter: Limiter,
        hash_key: str = "rl:tiers",
        ttl: float = 10.0,
        capacity: int = 100_000,
        snapshot_max_keys: int = 1_000_000,
    ) -> None:
        self.limiter = limiter
        self.hash_key = hash_key
        self.ttl = ttl
        self.capacity = capacity
        self.snapshot_max_keys = snapshot_max_keys
        self._cache: "OrderedDict[str, Tuple[str, float]]" = OrderedDict()
        self._unknown: "OrderedDict[str, float]" = OrderedDict()
        # Fingerprints keyed with a per-process secret: a client cannot craft a key that
        # collides with a paying one.
        self._seed = os.urandom(16)
        self._snapshot: Optional[Tuple[Set[bytes], float]] = None
        self._loading: Optional["asyncio.Task[Any]"] = None
        self.redis_lookups = 0
        self.cached = 0
        self.unknown_local = 0

    def _fingerprint(self, key: Union[str, bytes]) -> bytes:
        data = key.encode() if isinstance(key, str) else key
        return hashlib.blake2b(data, digest_size=8, key=self._seed).digest()

    def stats(self) -> Dict[str, int]:
        """Lookups since start: ``redis_lookups`` (``HGET`` round trips), ``cached`` (known
        keys from the cache), ``unknown_local`` (unknown keys answered without a round
        trip), ``snapshot_keys``."""
        return {
            "redis_lookups": self.redis_lookups,
            "cached": self.cached,
            "unknown_local": self.unknown_local,
            "snapshot_keys": len(self._snapshot[0]) if self._snapshot else 0,
        }

    async def refresh(self) -> int:
        """Takes the snapshot of the hash's keys now (otherwise taken in the background on
        the first lookup and every ``ttl``); returns the number of keys."""
        keys: Set[bytes] = set()
        cursor: Any = 0
        # HSCAN ends in a bounded number of calls; the bound guards a server that never does.
        for _ in range(self.snapshot_max_keys // 1000 * 4 + 1000):
            cursor, items = await self.limiter.query("HSCAN", self.hash_key, cursor, "COUNT", 1000)
            fields = list(items)[::2] if isinstance(items, list) else list(items)
            keys.update(self._fingerprint(f) for f in fields)
            if len(keys) > self.snapshot_max_keys:
                self._snapshot = None
                raise RuntimeError(
                    f"tier hash {self.hash_key} has more than {self.snapshot_max_keys} keys: "
                    "no snapshot, one lookup per key"
                )
            if int(cursor) == 0:
                self._snapshot = (keys, time.monotonic())
                return len(keys)
        raise RuntimeError(f"HSCAN {self.hash_key} did not finish")

    def _refresh_in_background(self, now: float) -> None:
        if self.snapshot_max_keys == 0 or self.ttl <= 0:
            return
        if self._snapshot is not None and now - self._snapshot[1] < self.ttl:
            return
        if self._loading is not None and not self._loading.done():
            return

        async def load() -> None:
            try:
                n = await self.refresh()
                log.debug("tier hash snapshot taken: hash=%s keys=%d", self.hash_key, n)
            except Exception as e:  # noqa: BLE001 - lookups fall back to HGET
                log.warning("tier hash snapshot failed: hash=%s error=%r", self.hash_key, e)

        self._loading = asyncio.ensure_future(load())

    def _local_unknown(self) -> Optional[str]:
        self.unknown_local += 1
        return None

    async def __call__(self, api_key: str) -> Optional[str]:
        now = time.monotonic()
        try:
            return await self._lookup(api_key, now)
        finally:
            # After the lookup, so a cold start's first request does not wait behind a scan.
            self._refresh_in_background(time.monotonic())

    async def _lookup(self, api_key: str, now: float) -> Optional[str]:
        stale = self._cache.get(api_key)
        if stale is not None and now - stale[1] < self.ttl:
            self.cached += 1
            self._cache.move_to_end(api_key)
            return stale[0]
        # A snapshot may serve while the next one is taken (up to twice the TTL old).
        snap = self._snapshot
        if stale is None and snap is not None and now - snap[1] < 2 * self.ttl:
            if self._fingerprint(api_key) not in snap[0]:
                return self._local_unknown()
        at = self._unknown.get(api_key)
        if at is not None:
            if now - at < self.ttl:
                return self._local_unknown()
            del self._unknown[api_key]
        self.redis_lookups += 1
        try:
            value = await self.limiter.query("HGET", self.hash_key, api_key)
        except Exception:  # noqa: BLE001 - the breaker and logs of the limiter report it
            return stale[0] if stale is not None else None
        tier = value.decode(errors="replace") if isinstance(value, bytes) else value
        if isinstance(tier, str):
            self._cache[api_key] = (tier, now)
            self._cache.move_to_end(api_key)
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
            return tier
        self._cache.pop(api_key, None)
        self._unknown[api_key] = now
        self._unknown.move_to_end(api_key)
        while len(self._unknown) > self.capacity:
            self._unknown.popitem(last=False)
        return None


def _routes_of(app: Any) -> Optional[List[Any]]:
    """The routes of a Starlette/FastAPI app, router, or a middleware stack around one."""
    for _ in range(32):
        if app is None:
            return None
        routes = getattr(app, "routes", None)
        if isinstance(routes, list):
            return routes
        app = getattr(app, "app", None)
    return None


def route_template(routes: Optional[List[Any]], scope: Scope) -> str:
    """The template of the route that will serve ``scope`` (``/items/{item_id}``), through
    mounts; ``<unmatched>`` when none does (as rl-gateway names it)."""
    if not routes:
        return UNMATCHED
    from starlette.routing import Match

    def find(routes: List[Any], scope: Scope, prefix: str) -> Optional[str]:
        partial = None
        for route in routes:
            try:
                match, child = route.matches(scope)
            except Exception:  # noqa: BLE001 - a custom route that cannot match this scope
                continue
            path = getattr(route, "path", "")
            if match is Match.FULL:
                sub = getattr(route, "routes", None)
                if sub:
                    found = find(sub, {**scope, **child}, prefix + path)
                    if found is not None:
                        return found
                    continue
                if hasattr(route, "routes"):
                    return prefix + path + "/{path}"  # a mounted app: one template for it all
                return prefix + path
            if match is Match.PARTIAL and partial is None:
                partial = prefix + path  # the path matches, the method does not (405)
        return partial

    return find(routes, scope, "") or UNMATCHED


def _cancelling(task: "Optional[asyncio.Task[Any]]") -> bool:
    """Whether ``task`` was asked to stop (``Task.cancelling``, Python 3.11+; before that,
    never known here)."""
    cancelling = getattr(task, "cancelling", None)
    return bool(cancelling()) if cancelling is not None else False


class RateLimitMiddleware:
    """Rate-limits every HTTP request to ``app`` (websocket passes through).

    - ``redis_url`` (or ``limiter``: a ``redis_rl.Limiter`` of your own);
    - ``config``: the path of a TOML file (the format of ``rl-gateway --config``), a mapping
      of the same schema, or a ``PolicyEngine``; ``None`` for the design's defaults;
    - ``routes``: route templates of the endpoint dimension besides the rules' paths (as
      ``rl-gateway --route``); other paths use the application's own route templates;
    - ``tiers``: a mapping from API key to tier name, or an async callable; default: the
      Redis hash ``tier_hash`` (``rl:tiers``) through ``RedisHashTiers``, cached
      ``tier_cache_s`` (10 s) with a negative cache and a snapshot of the hash's keys;
    - ``timeout``, ``breaker``, ``cluster``: for the limiter built from ``redis_url``;
    - ``exclude_paths``: paths never limited (health checks).

    ``[fleet]`` membership (on by default) is the limiter's: a task on the application's
    event loop renews it every ``heartbeat_ms`` (off the requests' path), and the local
    fallback divides each limit by the live fleet size once known (unless ``instances`` is
    configured), as rl-gateway's; a ``limiter`` of your own brings its own ``fleet``.
    The ``hot`` dimensions are served from leases (``[leases]``), as rl-gateway's: a batch of
    units taken with ``UPTO`` and spent in process, its unspent units given back by the same
    task after the lease's lifetime; a ``limiter`` of your own brings its own ``leases``.
    """

    def __init__(
        self,
        app: ASGIApp,
        redis_url: Optional[str] = None,
        config: Config = None,
        *,
        limiter: Optional[Limiter] = None,
        routes: Iterable[str] = (),
        tiers: Union[None, Mapping[str, str], TierResolver] = None,
        tier_hash: str = "rl:tiers",
        tier_cache_s: float = 10.0,
        timeout: float = DEFAULT_TIMEOUT,
        breaker: BreakerConfig = BreakerConfig(),
        cluster: bool = False,
        exclude_paths: Iterable[str] = (),
    ) -> None:
        self.app = app
        # A bad configuration fails the application's start (the lifespan), with the
        # engine's text: Starlette builds middleware inside the first ASGI call, where an
        # exception would read as "no lifespan support" and every request would get 500.
        self.error: Optional[ConfigError] = None
        try:
            self.engine = load_engine(config, routes)
            if not self.engine.key_digest_is_keyed:
                log.warning(
                    "API-key digests in key names are unkeyed SHA-256: a guessable API key can be "
                    "recognised by whoever reads them; set api_key_digest_secret_file to key them "
                    "(key names change once)"
                )
        except ConfigError as e:
            self.error = e
            self.engine = PolicyEngine.default()
        if limiter is None:
            if redis_url is None:
                raise ValueError("RateLimitMiddleware needs redis_url or limiter")
            limiter = Limiter.from_url(redis_url, cluster=cluster, timeout=timeout, breaker=breaker,
                                       fleet=self._fleet_config(), leases=self._lease_config())
        else:
            if self.engine.fleet is not None and limiter.fleet is None:
                log.warning("[fleet] membership is on but the limiter passed in has none (Limiter(fleet=...)): "
                            "the local fallback divides by instances")
            if self.engine.leases is not None and limiter.leases is None:
                log.warning("hot dimensions are configured but the limiter passed in has no leases "
                            "(Limiter(leases=...)): every key is decided in Redis")
        self.limiter = limiter
        self._heartbeats: Optional["asyncio.Task[None]"] = None
        # `close()` ran (the application's shutdown): no heartbeat starts again.
        self._closed = False
        if tiers is None:
            self.tiers: TierResolver = RedisHashTiers(limiter, tier_hash, tier_cache_s)
        elif isinstance(tiers, Mapping):
            table = dict(tiers)

            async def lookup(api_key: str) -> Optional[str]:
                return table.get(api_key)

            self.tiers = lookup
        else:
            self.tiers = tiers
        self.exclude_paths = frozenset(exclude_paths)
        self._mode = FailureMode.parse(self.engine.failure_mode, self.engine.instances)
        self._policies: Dict[Tuple[Any, ...], Policy] = {}
        self._routes: Optional[List[Any]] = None
        # The request flow rl-gateway runs; held requests are booked one at a time (look,
        # then FORCE), so two never get the same slot.
        self.flow = Flow(self.engine)
        self._booking = asyncio.Lock()
        self.recorder = _flow.Recorder(limiter, self.engine.key_prefix)

    def _fleet_config(self) -> Optional[FleetConfig]:
        """The limiter's membership as ``[fleet]`` configures it: the fleet key is
        ``<key_prefix>:{fleet}``, as rl-gateway's, so a fleet can mix them."""
        if self.engine.fleet is None:
            return None
        heartbeat_ms, ttl_ms = self.engine.fleet
        return FleetConfig(f"{self.engine.key_prefix}:{{fleet}}", heartbeat_ms, ttl_ms,
                           divides=not self.engine.instances_configured)

    def _lease_config(self) -> Optional[LeaseConfig]:
        """The limiter's leases as ``hot`` and ``[leases]`` configure them."""
        if self.engine.leases is None:
            return None
        return LeaseConfig(*self.engine.leases)

    def _beat(self) -> None:
        """Keeps the heartbeat task running on this event loop (started by the first request;
        again after the loop that ran it ended): fleet heartbeats, and the refunds of leases
        that ended."""
        fleet, leases = self.limiter.fleet, self.limiter.leases
        if self._closed or (fleet is None and leases is None) or (self._heartbeats is not None and not self._heartbeats.done()):
            return
        # A few ticks per heartbeat; at least two per lease lifetime, so a lease's unspent
        # units go back soon after it ends.
        ticks = [t for t in (fleet and fleet.heartbeat_ms / 4000, leases and leases.lifetime_ms / 2000) if t]
        tick = min(ticks)

        async def heartbeats() -> None:
            task = asyncio.current_task()
            # Before Python 3.12, asyncio.wait_for (every Redis call's timeout) can swallow a
            # cancellation that lands as its call completes: the loop would then run on, and
            # the event loop's shutdown (which waits for every cancelled task) hang. `close()`
            # (the lifespan's shutdown) says so first on every version; from 3.11 the task
            # also counts the cancellations asked of it, swallowed or not.
            while not self._closed and not _cancelling(task):
                await self.limiter.heartbeat()
                await asyncio.sleep(tick)

        self._heartbeats = asyncio.ensure_future(heartbeats())

    async def close(self) -> None:
        """Stops the heartbeat task, leaves the fleet (the others stop counting this member at
        their next heartbeat) and gives back the leases' unspent units: the application's
        shutdown (the lifespan's ``lifespan.shutdown`` runs it; call it yourself under a server
        that sends no lifespan events). The client stays open when it was passed in."""
        self._closed = True
        task, self._heartbeats = self._heartbeats, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.limiter.fleet is not None:
            await self.limiter.leave_fleet()
        if self.limiter.leases is not None:
            await self.limiter.release_leases()

    def _on_shutdown(self, receive: Receive) -> Receive:
        """``receive`` of the lifespan scope, running ``close()`` when the shutdown comes (before
        the application's own shutdown handlers see it)."""

        async def received() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                try:
                    await self.close()
                except Exception as e:  # noqa: BLE001 - the shutdown goes on; leases end on their own
                    log.warning("closing the rate limiter at shutdown failed: %r", e)
            return message

        return received

    def _policies_of(self, plan: Any) -> List[Policy]:
        """The limiter's policy of each plan item."""
        return [self._policy(item, numbers, hot) for item, numbers, hot in zip(plan.items, plan.numbers, plan.hots)]

    def _policy(self, item: Tuple[Any, ...], numbers: Tuple[List[int], List[Optional[int]]], hot: bool) -> Policy:
        """The limiter's policy of one plan item, from the core's numbers of its limit (cached:
        a configuration has few)."""
        algorithm, shadow, mode = item[1], item[5], item[6]
        values, options = numbers
        cache_key = (algorithm, tuple(values), tuple(options), shadow, mode, hot)
        policy = self._policies.get(cache_key)
        if policy is None:
            policy = Policy.of(algorithm, *values, *options)
            failure = FailureMode.parse(mode, self._mode.instances) if mode is not None else self._mode
            policy = policy.on_failure(failure).with_shadow(shadow).with_hot(hot)
            self._policies[cache_key] = policy
        return policy

    def _templates(self, scope: Scope) -> Optional[List[Any]]:
        if self._routes is None:
            self._routes = _routes_of(scope.get("app")) or _routes_of(self.app) or []
        return self._routes

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message.get("type") == "lifespan.startup":
            await send({"type": "lifespan.startup.failed", "message": str(self.error)})
        # As Starlette's router does: the server reports the failure and does not serve.
        raise self.error  # type: ignore[misc]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.error is not None:
            if scope["type"] == "lifespan":
                await self._lifespan(scope, receive, send)
                return
            raise self.error
        if scope["type"] == "lifespan":
            await self.app(scope, self._on_shutdown(receive), send)
            return
        if scope["type"] != "http" or scope.get("path") in self.exclude_paths:
            await self.app(scope, receive, send)
            return
        self._beat()
        headers: List[Tuple[bytes, bytes]] = list(scope.get("headers") or [])
        rid = request_id(headers)
        trace = trace_context(headers)
        peer = scope.get("client")
        method = scope.get("method", "GET")
        # The application's route template, matched on the path's normal form (the form the
        # application will see).
        template = route_template(self._templates(scope), {**scope, "path": normalize_path(scope.get("path", "/"))})
        route = None if template == UNMATCHED else template
        request, step = self.flow.start(
            method, scope.get("path", "/"), headers, peer[0] if peer else None, rid, trace.trace_id, route,
            now_ms=_flow.now_ms())
        policies: List[Policy] = []
        booking_lock = False
        try:
            while True:
                kind = step[0]
                if kind == "tier":
                    step = request.tier(await self.tiers(step[1]))
                elif kind == "book":
                    policies = self._policies_of(request.plan)
                    decided, denied, bans = await _flow.book(self.limiter, step[1], step[2], policies)
                    step = request.booked(decided, denied, bans, _flow.now_ms())
                elif kind == "peek":
                    await self._booking.acquire()
                    booking_lock = True
                    step = request.peeked(await _flow.peek(self.limiter, step[1], policies))
                elif kind == "force":
                    ok = await _flow.force(self.limiter, step[1], policies)
                    self._booking.release()
                    booking_lock = False
                    step = request.forced(ok)
                else:
                    break
        finally:
            if booking_lock:
                self._booking.release()
        kind, result = step
        self.recorder.record(result.record, policies)
        if kind == "respond":
            if result.settle is not None:
                # A report of a response's cost: settled from the report's own headers.
                await _flow.settle(self.limiter, result.settle, headers, self._policies_of(request.plan))
            log.debug("request refused: request_id=%s trace_id=%s tier=%s status=%s",
                      rid, trace.trace_id, result.record.tier, result.status)
            await _respond(send, result.status, result.headers, result.body)
            return
        # The application sees the path's normal form, as rl-gateway forwards it.
        scope = {**scope, "path": result.path, "raw_path": normalize_path(
            (scope.get("raw_path") or result.path.encode()).decode("latin-1")).encode("latin-1")}
        added: List[Tuple[bytes, bytes]] = list(result.headers)
        settlement = _flow.Settlement(result.settle, policies) if result.settle is not None else None
        if result.hold_ms is not None:
            # delay_max_ms: booked for its slot with FORCE, held, then served.
            try:
                await asyncio.sleep(result.hold_ms / 1000)
            finally:
                request.release()

        # The inner app sees the request id the response will carry, and the trace with this
        # hop as the parent.
        inner_headers = [(n, v) for n, v in headers if n.lower() not in (REQUEST_ID, TRACEPARENT)]
        inner_headers.append((REQUEST_ID, rid.encode()))
        inner_headers.append((TRACEPARENT, trace.traceparent.encode()))
        added.append((REQUEST_ID, rid.encode()))
        replaced = {name for name, _ in added}

        async def send_with_headers(message: Message) -> None:
            if settlement is not None:
                settlement.seen(message)
            if message["type"] == "http.response.start":
                kept = [(n, v) for n, v in message.get("headers", []) if n.lower() not in replaced]
                message = {**message, "headers": kept + added}
                if message.get("status", 200) >= 500:
                    log.warning("upstream error %s: request_id=%s trace_id=%s", message.get("status"), rid,
                                trace.trace_id)
            await send(message)

        await self.app({**scope, "headers": inner_headers}, receive, send_with_headers)
        if settlement is not None:
            # The response (and its trailers) went out: its actual cost settles the reservation.
            await settlement.settle(self.limiter)


async def _respond(send: Send, status: int, headers: List[Tuple[bytes, bytes]], body: bytes) -> None:
    headers = list(headers) + [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
