"""ASGI rate-limit middleware for Starlette and FastAPI, interchangeable with ``rl-gateway``:
the same TOML configuration, Redis keys, headers, 429 problem+json bodies and request ids,
so a fleet can mix both.

::

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, redis_url="redis://127.0.0.1:6379/0")

Per request, in one ``RL.ALL`` (all or nothing; the keys of a tenant share a hash tag):

=========== ====================================== =================================
dimension   Redis key                              default
=========== ====================================== =================================
api_key     ``rl:{k:<tenant>}:key``                the key's tier (``HGET rl:tiers``)
ip          ``rl:{ip:<client ip>}``                100/min
endpoint    ``rl:{k:<tenant>}:ep:<route template>`` 100/min (per IP without a key)
global      ``rl:{global}``                        100000/min
=========== ====================================== =================================

``<tenant>`` is the first 16 hex digits of SHA-256 of ``X-API-Key`` (the raw key is never
logged nor used in a key). Endpoints are the router's templates (``/items/{item_id}``), not
raw paths, so ids do not multiply keys.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from redis_rl.breaker import BreakerConfig
from redis_rl.config import RateLimitConfig, load_config
from redis_rl.decision import Decision, MultiDecision, Source
from redis_rl.limiter import DEFAULT_TIMEOUT, Limiter
from redis_rl.policy import Policy

__all__ = ["RateLimitMiddleware", "RedisHashTiers", "tenant_id", "request_id", "client_ip"]

log = logging.getLogger("redis_rl.asgi")

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
TierResolver = Callable[[str], Awaitable[Optional[str]]]

REQUEST_ID = b"x-request-id"
API_KEY = b"x-api-key"
_ID_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:")
UNMATCHED = "<unmatched>"


def tenant_id(api_key: str) -> str:
    """A stable id for an API key that does not reveal it: 16 hex digits of its SHA-256."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16]


def request_id(headers: Iterable[Tuple[bytes, bytes]]) -> str:
    """The caller's ``X-Request-Id`` if sane (1 to 128 of ``A-Z a-z 0-9 - _ . :``), else a
    new UUID: an id is echoed into logs and headers, so arbitrary bytes are not."""
    for name, value in headers:
        if name.lower() == REQUEST_ID:
            if 1 <= len(value) <= 128 and all(b in _ID_CHARS for b in value):
                return value.decode()
            break
    return str(uuid.uuid4())


def _api_key(headers: Iterable[Tuple[bytes, bytes]]) -> Optional[str]:
    for name, value in headers:
        if name.lower() == API_KEY:
            # Visible ASCII only, as an HTTP header value read as text.
            if not all(0x20 <= b < 0x7F or b == 0x09 for b in value):
                return None
            key = value.decode().strip()
            return key or None
    return None


def client_ip(
    peer: Optional[str], headers: Iterable[Tuple[bytes, bytes]], trusted: Tuple[Any, ...]
) -> Optional[str]:
    """The peer address, unless the peer is a trusted proxy: then the nearest address in
    ``X-Forwarded-For`` that is not itself trusted (a malformed entry: the peer)."""
    if peer is None:
        return None
    try:
        peer_ip = ipaddress.ip_address(peer)
    except ValueError:
        return peer

    def is_trusted(ip: Any) -> bool:
        return any(ip in net for net in trusted if ip.version == net.version)

    if not is_trusted(peer_ip):
        return str(peer_ip)
    hops: List[str] = []
    for name, value in headers:
        if name.lower() == b"x-forwarded-for":
            hops += [h.strip() for h in value.decode("latin-1").split(",")]
    client = peer_ip
    for hop in reversed(hops):
        try:
            ip = ipaddress.ip_address(hop)
        except ValueError:
            return str(peer_ip)
        client = ip
        if not is_trusted(ip):
            break
    return str(client)


def _ceil_secs(ms: int) -> int:
    return -(-ms // 1000)


class RedisHashTiers:
    """Tiers in a Redis hash (``HSET rl:tiers <api key> pro``), cached for ``ttl`` seconds
    in a bounded LRU; on a Redis failure the last known tier is used even when stale."""

    def __init__(self, limiter: Limiter, hash_key: str = "rl:tiers", ttl: float = 10.0, capacity: int = 100_000) -> None:
        self.limiter = limiter
        self.hash_key = hash_key
        self.ttl = ttl
        self.capacity = capacity
        self._cache: "OrderedDict[str, Tuple[Optional[str], float]]" = OrderedDict()

    async def __call__(self, api_key: str) -> Optional[str]:
        now = time.monotonic()
        cached = self._cache.get(api_key)
        if cached is not None and now - cached[1] < self.ttl:
            return cached[0]
        try:
            value = await self.limiter.query("HGET", self.hash_key, api_key)
        except Exception:  # noqa: BLE001 - the breaker and logs of the limiter report it
            return cached[0] if cached is not None else None
        tier = value.decode(errors="replace") if isinstance(value, bytes) else value
        self._cache[api_key] = (tier if isinstance(tier, str) else None, now)
        self._cache.move_to_end(api_key)
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return tier if isinstance(tier, str) else None


@dataclass(frozen=True)
class _Planned:
    dimension: str
    key: str
    policy: Policy


@dataclass(frozen=True)
class _Reported:
    dimension: str
    window_ms: int
    decision: Decision


def rate_limit_headers(r: _Reported) -> List[Tuple[bytes, bytes]]:
    """``X-RateLimit-Limit/Remaining/Reset`` and draft-ietf-httpapi-ratelimit-headers-11's
    ``RateLimit-Policy`` / ``RateLimit``, as rl-gateway writes them."""
    d = r.decision
    reset = _ceil_secs(d.reset_after_ms)
    window = max(1, _ceil_secs(r.window_ms))
    return [
        (b"x-ratelimit-limit", str(d.limit).encode()),
        (b"x-ratelimit-remaining", str(d.remaining).encode()),
        (b"x-ratelimit-reset", str(reset).encode()),
        (b"ratelimit-policy", f'"{r.dimension}";q={d.limit};w={window}'.encode()),
        (b"ratelimit", f'"{r.dimension}";r={d.remaining};t={reset}'.encode()),
    ]


def _refusal(r: _Reported, rid: str) -> Tuple[int, List[Tuple[bytes, bytes]], bytes]:
    """429 (503 when the limiter failed closed), ``Retry-After`` (the true wait, whole
    seconds rounded up; absent when no wait helps) and an ``application/problem+json`` body
    byte for byte as rl-gateway's."""
    d = r.decision
    retry_after = _ceil_secs(d.retry_after_ms) if d.denied and d.retry_after_ms is not None else None
    if d.source is Source.FAIL_CLOSED:
        status, title = 503, "Rate limiter unavailable"
        detail = f"the rate limiter for dimension '{r.dimension}' is unavailable and fails closed"
    else:
        status, title = 429, "Too Many Requests"
        if retry_after is not None:
            window = max(1, _ceil_secs(r.window_ms))
            detail = (
                f"rate limit exceeded on dimension '{r.dimension}' ({d.limit} per {window} s); "
                f"retry after {retry_after} s"
            )
        else:
            detail = f"request exceeds the limit of dimension '{r.dimension}' and can never be allowed"
    body = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "dimension": r.dimension,
        "request_id": rid,
        "limit": d.limit,
        "retry_after": retry_after,
    }
    payload = json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    headers = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(payload)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    headers += rate_limit_headers(r)
    headers.append((REQUEST_ID, rid.encode()))
    return status, headers, payload


def _most_restrictive(plan: List[_Planned], md: MultiDecision) -> Optional[_Reported]:
    """The denying dimension, else the enforced one with the fewest units left (ties: the
    one that takes longest to reset)."""

    def reported(i: int) -> _Reported:
        return _Reported(plan[i].dimension, plan[i].policy.window_ms, md.decisions[i])

    if not plan:
        return None
    if md.denied_index is not None:
        return reported(md.denied_index)
    candidates = [i for i, d in enumerate(md.decisions) if not d.shadow]
    if not candidates:
        return reported(0)
    best = min(candidates, key=lambda i: (md.decisions[i].remaining, -md.decisions[i].reset_after_ms))
    return reported(best)


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


class RateLimitMiddleware:
    """Rate-limits every HTTP request to ``app`` (lifespan and websocket pass through).

    - ``redis_url`` (or ``limiter``: a ``redis_rl.Limiter`` of your own);
    - ``config``: a ``RateLimitConfig``, a mapping, or the path of a TOML file (the format of
      ``rl-gateway --config``); ``None`` for the design's defaults;
    - ``tiers``: a mapping from API key to tier name, or an async callable; default: the
      Redis hash ``tier_hash`` (``rl:tiers``), cached ``tier_cache_s`` (10 s);
    - ``timeout``, ``breaker``, ``cluster``: for the limiter built from ``redis_url``;
    - ``exclude_paths``: paths never limited (health checks).
    """

    def __init__(
        self,
        app: ASGIApp,
        redis_url: Optional[str] = None,
        config: Union[None, str, Path, Mapping[str, Any], RateLimitConfig] = None,
        *,
        limiter: Optional[Limiter] = None,
        tiers: Union[None, Mapping[str, str], TierResolver] = None,
        tier_hash: str = "rl:tiers",
        tier_cache_s: float = 10.0,
        timeout: float = DEFAULT_TIMEOUT,
        breaker: BreakerConfig = BreakerConfig(),
        cluster: bool = False,
        exclude_paths: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.config = load_config(config)
        if limiter is None:
            if redis_url is None:
                raise ValueError("RateLimitMiddleware needs redis_url or limiter")
            limiter = Limiter.from_url(redis_url, cluster=cluster, timeout=timeout, breaker=breaker)
        self.limiter = limiter
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
        mode = self.config.mode
        self._tier_policies = {name: rate.policy(mode) for name, rate in self.config.tiers.items()}
        self._default_policy = self._tier_policies[self.config.default_tier]
        self._ip = self.config.ip.policy(mode)
        self._endpoint = self.config.endpoint.policy(mode)
        self._global = self.config.global_.policy(mode)
        self._routes: Optional[List[Any]] = None

    def plan(self, tenant: Optional[str], tier: Optional[str], ip: Optional[str], endpoint: str) -> List[_Planned]:
        """The keys and policies of one request, in the configured order."""
        prefix = self.config.key_prefix
        ip = ip or "unknown"
        out = []
        for dimension in self.config.dimensions:
            if dimension == "api_key":
                if tenant is None:
                    continue
                policy = self._tier_policies.get(tier or "", self._default_policy)
                out.append(_Planned(dimension, f"{prefix}:{{k:{tenant}}}:key", policy))
            elif dimension == "ip":
                out.append(_Planned(dimension, f"{prefix}:{{ip:{ip}}}", self._ip))
            elif dimension == "endpoint":
                owner = f"k:{tenant}" if tenant is not None else f"ip:{ip}"
                out.append(_Planned(dimension, f"{prefix}:{{{owner}}}:ep:{endpoint}", self._endpoint))
            else:
                out.append(_Planned(dimension, f"{prefix}:{{global}}", self._global))
        return out

    def _templates(self, scope: Scope) -> Optional[List[Any]]:
        if self._routes is None:
            self._routes = _routes_of(scope.get("app")) or _routes_of(self.app) or []
        return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.exclude_paths:
            await self.app(scope, receive, send)
            return
        headers: List[Tuple[bytes, bytes]] = list(scope.get("headers") or [])
        rid = request_id(headers)
        api_key = _api_key(headers)
        tenant = tenant_id(api_key) if api_key is not None else None
        client = scope.get("client")
        ip = client_ip(client[0] if client else None, headers, self.config.trusted_proxies)
        endpoint = route_template(self._templates(scope), scope)
        tier = await self.tiers(api_key) if api_key is not None else None
        plan = self.plan(tenant, tier, ip, endpoint)
        md = await self.limiter.check_all([(p.key, p.policy) for p in plan])
        reported = _most_restrictive(plan, md)

        if md.denied_index is not None and reported is not None:
            status, out_headers, body = _refusal(reported, rid)
            log.debug(
                "request refused: request_id=%s tenant=%s tier=%s dimension=%s source=%s",
                rid, tenant or "-", tier or "-", reported.dimension, reported.decision.source.value,
            )
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            await send({"type": "http.response.body", "body": body})
            return

        # The inner app sees the request id the response will carry.
        inner_headers = [(n, v) for n, v in headers if n.lower() != REQUEST_ID]
        inner_headers.append((REQUEST_ID, rid.encode()))
        added = rate_limit_headers(reported) if reported is not None else []
        added.append((REQUEST_ID, rid.encode()))
        replaced = {name for name, _ in added}

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(n, v) for n, v in message.get("headers", []) if n.lower() not in replaced]
                message = {**message, "headers": kept + added}
                if message.get("status", 200) >= 500:
                    log.warning("upstream error %s: request_id=%s", message.get("status"), rid)
            await send(message)

        await self.app({**scope, "headers": inner_headers}, receive, send_with_headers)
