"""ASGI rate-limit middleware for Starlette and FastAPI, interchangeable with ``rl-gateway``:
the same TOML configuration, Redis keys, headers, 429/503/403 problem+json bodies and
request ids, so a fleet can mix both.

::

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, redis_url="redis://127.0.0.1:6379/0")

Per request, in one ``RL.ALL`` (all or nothing; the keys of a tenant share a hash tag):

=========== ============================================ =================================
dimension   Redis key                                    default
=========== ============================================ =================================
api_key     ``rl:{k:<tenant>}:key``                      the key's tier (``HGET rl:tiers``)
ip          ``rl:{ip:<client>}``                         100/min
endpoint    ``rl:{k:<tenant>}:ep:<route template>``      100/min (per client without a key)
global      ``rl:{global}``                              100000/min
=========== ============================================ =================================

``<tenant>`` is the first 16 hex digits of SHA-256 of the API key (``api_key_header``,
default ``X-API-Key``; the raw key is never logged nor used in a key). ``<client>`` is the
client's IPv4 address, or its IPv6 network of ``ipv6_prefix`` bits (``2001:db8:1:2::/64``).
A tier that overrides ``ip`` or ``global`` (``[tiers.pro.ip]``) has its own budget in
``rl:{ip:<client>}:tier:<tier>`` / ``rl:{global}:tier:<tier>``. Endpoints are the router's
templates (``/items/{item_id}``), not raw paths, so ids do not multiply keys.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple, Union

from redis_rl.breaker import BreakerConfig
from redis_rl.config import AccessConfig, RateLimitConfig, load_config
from redis_rl.decision import Decision, MultiDecision, Source
from redis_rl.limiter import DEFAULT_TIMEOUT, Limiter
from redis_rl.policy import Policy
from redis_rl.trace import TRACEPARENT, trace_context

__all__ = [
    "RateLimitMiddleware", "RedisHashTiers", "api_key_in", "client_ip", "client_network", "request_id",
    "tenant_id",
]

log = logging.getLogger("redis_rl.asgi")

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
TierResolver = Callable[[str], Awaitable[Optional[str]]]
IpAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

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


def api_key_in(headers: Iterable[Tuple[bytes, bytes]], name: Union[str, bytes] = API_KEY) -> Optional[str]:
    """The API key from the header ``name`` (e.g. ``Authorization``), if present, non-empty
    and printable; a leading ``Bearer `` (the scheme in any case) is stripped, so
    ``Authorization: Bearer k1`` and ``Authorization: bearer k1`` both give ``k1``."""
    wanted = (name.encode() if isinstance(name, str) else name).lower()
    for header, raw in headers:
        if header.lower() == wanted:
            # Visible ASCII only, as an HTTP header value read as text.
            if not all(0x20 <= b < 0x7F or b == 0x09 for b in raw):
                return None
            value = raw.decode().strip()
            if value.lower() == "bearer":
                return None
            if value[:7].lower() == "bearer ":
                value = value[7:].strip()
            return value or None
    return None


def _canonical(ip: IpAddress) -> IpAddress:
    """An IPv4-mapped IPv6 address (``::ffff:a.b.c.d``, an IPv4 client on a dual-stack
    socket) as its IPv4 address."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _parse_ip(text: str) -> Optional[IpAddress]:
    try:
        return _canonical(ipaddress.ip_address(text))
    except ValueError:
        return None


def client_ip(
    peer: Optional[str], headers: Iterable[Tuple[bytes, bytes]], trusted: Tuple[Any, ...]
) -> Optional[str]:
    """The peer address, unless the peer is a trusted proxy: then the nearest address in
    ``X-Forwarded-For`` that is not itself trusted (a malformed entry: the peer).
    IPv4-mapped IPv6 addresses are matched and returned as IPv4."""
    if peer is None:
        return None
    peer_ip = _parse_ip(peer)
    if peer_ip is None:
        return peer

    def is_trusted(ip: IpAddress) -> bool:
        return any(ip in net for net in trusted if ip.version == net.version)

    if not is_trusted(peer_ip):
        return str(peer_ip)
    hops: List[str] = []
    for name, value in headers:
        if name.lower() == b"x-forwarded-for":
            hops += [h.strip() for h in value.decode("latin-1").split(",")]
    client = peer_ip
    for hop in reversed(hops):
        ip = _parse_ip(hop)
        if ip is None:
            return str(peer_ip)
        client = ip
        if not is_trusted(ip):
            break
    return str(client)


def client_network(ip: str, ipv6_prefix: int = 64) -> str:
    """How a client address appears in limiter keys: an IPv4 address as is (an IPv4-mapped
    IPv6 address as the IPv4 one), an IPv6 address as its network of ``ipv6_prefix`` bits
    (``2001:db8:1:2::/64``), so a host cannot multiply its budget by rotating through the
    addresses of its block. Anything else (a test client's name) as is."""
    addr = _parse_ip(ip)
    if addr is None:
        return ip
    if addr.version == 4 or ipv6_prefix >= 128:
        return str(addr)
    return str(ipaddress.ip_network((addr, ipv6_prefix), strict=False))


def _ceil_secs(ms: int) -> int:
    return -(-ms // 1000)


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


class AccessList:
    """The ``[access]`` lists, ready for lookups: deny wins over allow."""

    def __init__(self, c: AccessConfig) -> None:
        self.allow_ips = c.allow_ips
        self.deny_ips = c.deny_ips
        self.allow_keys = frozenset(c.allow_api_keys)
        self.deny_keys = frozenset(c.deny_api_keys)
        self.is_empty = c.is_empty

    def check(self, ip: Optional[str], api_key: Optional[str]) -> Optional[str]:
        """``"deny:ip"`` / ``"deny:api_key"`` (403), ``"allow"`` (never limited) or ``None``
        (limited as usual)."""
        addr = _parse_ip(ip) if ip is not None else None

        def in_nets(nets: Tuple[Any, ...]) -> bool:
            return addr is not None and any(addr in n for n in nets if n.version == addr.version)

        if in_nets(self.deny_ips):
            return "deny:ip"
        if api_key is not None and api_key in self.deny_keys:
            return "deny:api_key"
        if in_nets(self.allow_ips) or (api_key is not None and api_key in self.allow_keys):
            return "allow"
        return None


@dataclass(frozen=True)
class _Planned:
    dimension: str
    key: str
    policy: Policy


@dataclass(frozen=True)
class QuotaPolicy:
    """One enforced policy as ``RateLimit-Policy`` lists it: ``"<dimension>";q=<quota>;w=<s>``."""

    dimension: str
    quota: int
    window_ms: int

    @staticmethod
    def of(dimension: str, policy: Policy) -> "QuotaPolicy":
        return QuotaPolicy(dimension, policy.limit, policy.window_ms)

    @property
    def window_secs(self) -> int:
        """``w`` in whole seconds (rounded up, at least 1)."""
        return max(1, _ceil_secs(self.window_ms))

    def field(self) -> str:
        return f'"{self.dimension}";q={self.quota};w={self.window_secs}'


@dataclass(frozen=True)
class _Reported:
    policy: QuotaPolicy
    decision: Decision

    @property
    def dimension(self) -> str:
        return self.policy.dimension

    def reset_secs(self) -> int:
        """``t``: seconds until the quota allows the request again. Denied: the true wait
        (as ``Retry-After``); allowed: until the quota is fully restored, at most ``w``;
        never (the cost exceeds the quota): ``w``."""
        d = self.decision
        w = self.policy.window_secs
        if d.allowed:
            return min(_ceil_secs(d.reset_after_ms), w)
        if d.retry_after_ms is None:
            return w
        return _ceil_secs(d.retry_after_ms)

    def remaining(self) -> int:
        """``r``: units left (never more than ``q``)."""
        return min(self.decision.remaining, self.policy.quota)


def rate_limit_headers(r: Optional[_Reported], policies: List[QuotaPolicy]) -> List[Tuple[bytes, bytes]]:
    """draft-ietf-httpapi-ratelimit-headers-11 as rl-gateway writes it: ``RateLimit-Policy``
    lists every enforced policy; for the reported one ``RateLimit: "<dim>";r=<r>;t=<t>`` with
    ``X-RateLimit-Limit`` (= ``q``), ``X-RateLimit-Remaining`` (= ``r``) and
    ``X-RateLimit-Reset`` (= ``t``)."""
    out: List[Tuple[bytes, bytes]] = []
    if policies:
        out.append((b"ratelimit-policy", ", ".join(p.field() for p in policies).encode()))
    if r is None:
        return out
    t, remaining = r.reset_secs(), r.remaining()
    out += [
        (b"x-ratelimit-limit", str(r.policy.quota).encode()),
        (b"x-ratelimit-remaining", str(remaining).encode()),
        (b"x-ratelimit-reset", str(t).encode()),
        (b"ratelimit", f'"{r.dimension}";r={remaining};t={t}'.encode()),
    ]
    return out


def _problem(status: int, body: Dict[str, Any], rid: str) -> Tuple[int, List[Tuple[bytes, bytes]], bytes]:
    # Byte for byte as serde_json writes it: compact, keys sorted.
    payload = json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(payload)).encode()),
        (REQUEST_ID, rid.encode()),
    ]
    return status, headers, payload


def _refusal(
    r: _Reported, policies: List[QuotaPolicy], rid: str, trace_id: str
) -> Tuple[int, List[Tuple[bytes, bytes]], bytes]:
    """429 with ``Retry-After`` (= ``t`` of ``RateLimit``, the true wait in whole seconds
    rounded up; absent when no wait helps), the quota fields and a problem+json body; or,
    when the limiter failed closed, 503 with ``Retry-After`` and no quota fields (no quota
    was checked). As rl-gateway's, byte for byte."""
    d = r.decision
    dimension = r.dimension
    if d.source is Source.FAIL_CLOSED:
        retry_after = _ceil_secs(d.retry_after_ms) if d.retry_after_ms is not None else None
        body = {
            "type": "about:blank",
            "title": "Rate limiter unavailable",
            "status": 503,
            "detail": f"the rate limiter for dimension '{dimension}' is unavailable and fails closed",
            "dimension": dimension,
            "request_id": rid,
            "retry_after": retry_after,
            "trace_id": trace_id,
        }
        status, headers, payload = _problem(503, body, rid)
        if retry_after is not None:
            headers.append((b"retry-after", str(retry_after).encode()))
        return status, headers, payload
    retry_after = r.reset_secs() if d.retry_after_ms is not None else None
    if retry_after is not None:
        detail = (
            f"rate limit exceeded on dimension '{dimension}' ({r.policy.quota} per {r.policy.window_secs} s); "
            f"retry after {retry_after} s"
        )
    else:
        detail = f"request exceeds the limit of dimension '{dimension}' and can never be allowed"
    body = {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": detail,
        "dimension": dimension,
        "request_id": rid,
        "limit": r.policy.quota,
        "retry_after": retry_after,
        "trace_id": trace_id,
    }
    status, headers, payload = _problem(429, body, rid)
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    headers += rate_limit_headers(r, policies)
    return status, headers, payload


def _forbidden(on: str, rid: str, trace_id: str) -> Tuple[int, List[Tuple[bytes, bytes]], bytes]:
    """403: the client IP (``on = "ip"``) or API key (``"api_key"``) is on a deny list."""
    body = {
        "type": "about:blank",
        "title": "Forbidden",
        "status": 403,
        "detail": f"the request's {on} is on the gateway's deny list",
        "denied_by": on,
        "request_id": rid,
        "trace_id": trace_id,
    }
    return _problem(403, body, rid)


def _most_restrictive(plan: List[_Planned], md: MultiDecision) -> Optional[_Reported]:
    """The denying policy, else among the enforced ones that Redis (or the local fallback)
    decided, the one with the fewest units left (ties: the longest ``t``, then the
    configured order). ``None`` when nothing was decided (every dimension failed open)."""

    def reported(i: int) -> _Reported:
        return _Reported(QuotaPolicy.of(plan[i].dimension, plan[i].policy), md.decisions[i])

    if md.denied_index is not None:
        return reported(md.denied_index)
    candidates = [
        reported(i)
        for i, d in enumerate(md.decisions[: len(plan)])
        if not d.shadow and d.source is not Source.FAIL_OPEN
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (r.remaining(), -r.reset_secs()))


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
      Redis hash ``tier_hash`` (``rl:tiers``) through ``RedisHashTiers``, cached
      ``tier_cache_s`` (10 s) with a negative cache and a snapshot of the hash's keys;
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
        self.access = AccessList(self.config.access)
        self._api_key_header = self.config.api_key_header.lower().encode()
        c, mode = self.config, self.config.mode
        # Per tier: the API-key policy, and the policies of the dimensions it overrides.
        self._tiers: Dict[str, Dict[str, Policy]] = {}
        for name, limits in c.tiers.items():
            policies = {"api_key": limits.policy(mode)}
            for d in ("ip", "endpoint", "global"):
                rate = c.tier_rate(name, d)
                if rate is not None:
                    policies[d] = rate.policy(mode)
            self._tiers[name] = policies
        self._dimension = {d: c.dimension_rate(d).policy(mode) for d in ("ip", "endpoint", "global")}
        self._routes: Optional[List[Any]] = None

    def plan(self, tenant: Optional[str], tier: Optional[str], client: Optional[str], endpoint: str) -> List[_Planned]:
        """The keys and policies of one request, in the configured order, as rl-gateway's.
        ``tier`` is the resolved tier of ``tenant`` (``None`` or unknown: the default tier);
        ``client`` is the client's address or network as it appears in keys."""
        prefix = self.config.key_prefix
        client = client or "unknown"
        # Key-less requests have no tier: the dimensions' own tables apply.
        tier_name: Optional[str] = None
        if tenant is not None:
            tier_name = tier if tier in self._tiers else self.config.default_tier
        own = self._tiers.get(tier_name, {}) if tier_name is not None else {}
        out = []
        for dimension in self.config.dimensions:
            if dimension == "api_key":
                if tenant is None:
                    continue
                out.append(_Planned(dimension, f"{prefix}:{{k:{tenant}}}:key", own["api_key"]))
            elif dimension == "endpoint":
                owner = f"k:{tenant}" if tenant is not None else f"ip:{client}"
                policy = own.get("endpoint", self._dimension["endpoint"])
                out.append(_Planned(dimension, f"{prefix}:{{{owner}}}:ep:{endpoint}", policy))
            else:
                base = f"{prefix}:{{ip:{client}}}" if dimension == "ip" else f"{prefix}:{{global}}"
                if dimension in own:
                    # A tier's own budget for a shared dimension lives in a key of its own.
                    out.append(_Planned(dimension, f"{base}:tier:{tier_name}", own[dimension]))
                else:
                    out.append(_Planned(dimension, base, self._dimension[dimension]))
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
        trace = trace_context(headers)
        api_key = api_key_in(headers, self._api_key_header)
        tenant = tenant_id(api_key) if api_key is not None else None
        peer = scope.get("client")
        ip = client_ip(peer[0] if peer else None, headers, self.config.trusted_proxies)

        limited = True
        if not self.access.is_empty:
            verdict = self.access.check(ip, api_key)
            if verdict is not None and verdict.startswith("deny:"):
                on = verdict[len("deny:"):]
                log.debug("request refused by the deny list: request_id=%s trace_id=%s denied_by=%s",
                          rid, trace.trace_id, on)
                await _respond(send, _forbidden(on, rid, trace.trace_id))
                return
            limited = verdict != "allow"

        reported: Optional[_Reported] = None
        policies: List[QuotaPolicy] = []
        tier: Optional[str] = None
        if limited:
            endpoint = route_template(self._templates(scope), scope)
            tier = await self.tiers(api_key) if api_key is not None else None
            client = client_network(ip, self.config.ipv6_prefix) if ip is not None else None
            plan = self.plan(tenant, tier, client, endpoint)
            md = await self.limiter.check_all([(p.key, p.policy) for p in plan])
            policies = [QuotaPolicy.of(p.dimension, p.policy) for p in plan if not p.policy.shadow]
            reported = _most_restrictive(plan, md)
            if md.denied_index is not None and reported is not None:
                log.debug(
                    "request refused: request_id=%s trace_id=%s tenant=%s tier=%s dimension=%s source=%s",
                    rid, trace.trace_id, tenant or "-", tier or "-", reported.dimension, reported.decision.source.value,
                )
                await _respond(send, _refusal(reported, policies, rid, trace.trace_id))
                return

        # The inner app sees the request id the response will carry, and the trace with this
        # hop as the parent.
        inner_headers = [(n, v) for n, v in headers if n.lower() not in (REQUEST_ID, TRACEPARENT)]
        inner_headers.append((REQUEST_ID, rid.encode()))
        inner_headers.append((TRACEPARENT, trace.traceparent.encode()))
        added = rate_limit_headers(reported, policies)
        added.append((REQUEST_ID, rid.encode()))
        replaced = {name for name, _ in added}

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(n, v) for n, v in message.get("headers", []) if n.lower() not in replaced]
                message = {**message, "headers": kept + added}
                if message.get("status", 200) >= 500:
                    log.warning("upstream error %s: request_id=%s trace_id=%s", message.get("status"), rid,
                                trace.trace_id)
            await send(message)

        await self.app({**scope, "headers": inner_headers}, receive, send_with_headers)


async def _respond(send: Send, response: Tuple[int, List[Tuple[bytes, bytes]], bytes]) -> None:
    status, headers, body = response
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
