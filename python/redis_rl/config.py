"""The middleware's configuration: the same TOML as ``rl-gateway --config`` (the Rust
client's ``RateLimitConfig``), with the design's limits as defaults.

```toml
key_prefix = "rl"                       # Redis keys: rl:{k:<tenant>}:key, rl:{ip:<ip>}, ...
failure_mode = "local"                  # open | closed | local
instances = 4                           # processes sharing the limits (local mode divides)
trusted_proxies = ["10.0.0.0/8"]        # X-Forwarded-For is read only from these peers
dimensions = ["api_key", "ip", "endpoint", "global"]
default_tier = "free"
api_key_header = "Authorization"        # default X-API-Key; a leading "Bearer " is stripped
ipv6_prefix = 64                        # IPv6 clients share one budget per /64

[tiers.free]
limit = 100                             # per window_ms (default 60000)

[tiers.pro]
limit = 1000
[tiers.pro.endpoint]                    # pro keys: 1000/min per route (others: [endpoint])
limit = 1000

[ip]
limit = 50                              # still a sliding window: only `algorithm` changes it

[access]
allow_ips = ["10.1.0.0/16"]             # never limited, not counted
deny_ips = ["203.0.113.0/24"]           # 403 (deny wins over allow)
```

``hot``, ``[fleet]`` and ``[leases]`` (rl-gateway's leases and fleet membership) are parsed
and validated, so one file serves both, but Python does not act on them: it checks every
dimension in Redis on every request (as ``hot = []``), and its local fallback divides by
``instances`` (default 1), not by a live fleet size.
"""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import dataclass, field, fields as dataclass_fields
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from redis_rl._registry import LIMITERS
from redis_rl.policy import FailureMode, Policy

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "AccessConfig", "ConfigError", "DIMENSIONS", "FleetSettings", "LeaseSettings", "Rate",
    "RateLimitConfig", "RateOverride", "TierLimits",
]

DIMENSIONS = ("api_key", "ip", "endpoint", "global")
IpNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
_RATE_FIELDS: Dict[str, type] = {
    "limit": int, "window_ms": int, "algorithm": str, "burst": int, "shadow": bool, "failure_mode": str,
}
# RFC 9110 token characters: what a header name may be made of.
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class ConfigError(ValueError):
    """An invalid configuration (unknown field, wrong type, value out of range)."""


def _take(table: Mapping[str, Any], where: str, fields: Mapping[str, type]) -> Dict[str, Any]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table")
    out = {}
    for name, value in table.items():
        if name not in fields:
            expected = ", ".join(f"`{f}`" for f in fields)
            raise ConfigError(f"{where}: unknown field `{name}`, expected one of {expected}")
        want = fields[name]
        ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
        if not ok:
            raise ConfigError(f"{where}{'.' if where else ''}{name}: expected {want.__name__}, got {value!r}")
        out[name] = value
    return out


def _check_rate_values(values: Mapping[str, Any], where: str) -> None:
    if values.get("algorithm", "token_bucket") not in LIMITERS:
        raise ConfigError(f"{where}.algorithm: expected one of {', '.join(LIMITERS)}, got {values['algorithm']!r}")
    if values.get("failure_mode", "local") not in ("open", "closed", "local"):
        raise ConfigError(f"{where}.failure_mode: expected open, closed or local, got {values['failure_mode']!r}")


def _networks(values: Any, where: str) -> Tuple[IpNetwork, ...]:
    if not isinstance(values, list):
        raise ConfigError(f"{where}: expected a list of networks")
    nets = []
    for net in values:
        try:
            nets.append(ipaddress.ip_network(net, strict=False))
        except (ValueError, TypeError):
            raise ConfigError(f"{where}: invalid IP network {net!r}") from None
    return tuple(nets)


def _dimensions(values: Any, where: str) -> Tuple[str, ...]:
    if not isinstance(values, list):
        raise ConfigError(f"{where}: expected a list of dimensions")
    for d in values:
        if d not in DIMENSIONS:
            raise ConfigError(f"{where}: unknown dimension {d!r}, expected one of {', '.join(DIMENSIONS)}")
    return tuple(values)


@dataclass(frozen=True)
class Rate:
    """One limit as written in configuration: ``limit`` units per ``window_ms``."""

    limit: int
    window_ms: int = 60_000
    algorithm: str = "token_bucket"
    burst: Optional[int] = None
    """Token bucket capacity or GCRA burst (default: ``limit``)."""
    shadow: bool = False
    failure_mode: Optional[str] = None
    """Overrides the global failure mode for this limit."""

    @staticmethod
    def from_table(table: Mapping[str, Any], where: str) -> "Rate":
        values = _take(table, where, _RATE_FIELDS)
        if "limit" not in values:
            raise ConfigError(f"{where}: missing field `limit`")
        _check_rate_values(values, where)
        return Rate(**values)

    def policy(self, default_mode: FailureMode) -> Policy:
        """The validated policy; ``default_mode`` applies unless the rate names its own.
        Errors name the configuration's fields (``limit``, ``window_ms``)."""
        try:
            p = Policy.from_rate(self.algorithm, self.limit, self.window_ms, self.burst)
        except (ValueError, TypeError) as e:
            raise ConfigError(str(e)) from None
        mode = default_mode
        if self.failure_mode is not None:
            mode = FailureMode.parse(self.failure_mode, default_mode.instances)
        return p.on_failure(mode).with_shadow(self.shadow)


@dataclass(frozen=True)
class RateOverride:
    """A table that changes some fields of a rate (``[ip] limit = 50``,
    ``[tiers.pro.endpoint] limit = 1000``): the fields it does not set are the base's, so
    the algorithm stays the documented one unless ``algorithm`` is given."""

    limit: Optional[int] = None
    window_ms: Optional[int] = None
    algorithm: Optional[str] = None
    burst: Optional[int] = None
    shadow: Optional[bool] = None
    failure_mode: Optional[str] = None

    @staticmethod
    def from_table(table: Mapping[str, Any], where: str) -> "RateOverride":
        values = _take(table, where, _RATE_FIELDS)
        _check_rate_values(values, where)
        return RateOverride(**values)

    def apply(self, base: Rate) -> Rate:
        """``base`` with the fields given here replaced."""
        return Rate(
            limit=self.limit if self.limit is not None else base.limit,
            window_ms=self.window_ms if self.window_ms is not None else base.window_ms,
            algorithm=self.algorithm if self.algorithm is not None else base.algorithm,
            burst=self.burst if self.burst is not None else base.burst,
            shadow=self.shadow if self.shadow is not None else base.shadow,
            failure_mode=self.failure_mode if self.failure_mode is not None else base.failure_mode,
        )


@dataclass(frozen=True)
class TierLimits(Rate):
    """One tier: the API-key dimension's rate (``[tiers.pro] limit = 1000``) and, for keys
    of this tier, optional overrides of the other dimensions (``[tiers.pro.endpoint]``,
    ``[tiers.pro.ip]``, ``[tiers.pro.global]``), each taking the fields it does not set from
    the dimension's own table.

    An overridden ``ip`` or ``global`` limit is a budget of the tier's own, in the key
    ``<prefix>:{ip:<ip>}:tier:<tier>`` or ``<prefix>:{global}:tier:<tier>`` (as rl-gateway):
    the tier's keys do not share it with key-less traffic or other tiers."""

    ip: Optional[RateOverride] = None
    endpoint: Optional[RateOverride] = None
    global_: Optional[RateOverride] = None

    @staticmethod
    def from_table(table: Mapping[str, Any], where: str) -> "TierLimits":
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}: expected a table")
        subtables = {"ip": dict, "endpoint": dict, "global": dict}
        values = _take(table, where, {**_RATE_FIELDS, **subtables})
        if "limit" not in values:
            raise ConfigError(f"{where}: missing field `limit`")
        _check_rate_values(values, where)
        overrides: Dict[str, Any] = {
            ("global_" if name == "global" else name): RateOverride.from_table(values.pop(name), f"{where}.{name}")
            for name in subtables
            if name in values
        }
        return TierLimits(**values, **overrides)

    @staticmethod
    def of(rate: Rate) -> "TierLimits":
        """A tier with this API-key rate and no overrides (or ``rate`` if it is a tier)."""
        if isinstance(rate, TierLimits):
            return rate
        return TierLimits(**{f.name: getattr(rate, f.name) for f in dataclass_fields(Rate)})

    def rate(self) -> Rate:
        """The API-key dimension's rate."""
        return Rate(**{f.name: getattr(self, f.name) for f in dataclass_fields(Rate)})

    def override_of(self, dimension: str) -> Optional[RateOverride]:
        """The override of ``dimension`` (``None`` for ``api_key``: that is the tier's rate)."""
        return {"ip": self.ip, "endpoint": self.endpoint, "global": self.global_}.get(dimension)


@dataclass(frozen=True)
class AccessConfig:
    """Allow and deny lists (``[access]``), checked before any limit. Deny wins: a request
    whose client IP or API key is denied gets 403 even if the other is allowed. An allowed
    request (IP or key listed, nothing denied) is never limited and costs Redis nothing."""

    allow_ips: Tuple[IpNetwork, ...] = ()
    deny_ips: Tuple[IpNetwork, ...] = ()
    allow_api_keys: Tuple[str, ...] = ()
    deny_api_keys: Tuple[str, ...] = ()

    @staticmethod
    def from_table(table: Mapping[str, Any]) -> "AccessConfig":
        fields = {"allow_ips": list, "deny_ips": list, "allow_api_keys": list, "deny_api_keys": list}
        values = _take(table, "access", fields)
        out: Dict[str, Any] = {}
        for name in ("allow_ips", "deny_ips"):
            if name in values:
                out[name] = _networks(values[name], f"access.{name}")
        for name in ("allow_api_keys", "deny_api_keys"):
            if name in values:
                if not all(isinstance(k, str) for k in values[name]):
                    raise ConfigError(f"access.{name}: expected a list of strings")
                out[name] = tuple(values[name])
        return AccessConfig(**out)

    @property
    def is_empty(self) -> bool:
        return not (self.allow_ips or self.deny_ips or self.allow_api_keys or self.deny_api_keys)


@dataclass(frozen=True)
class FleetSettings:
    """rl-gateway's fleet membership (``[fleet]``): parsed and validated, not used by Python."""

    membership: bool = True
    heartbeat_ms: int = 1_000
    ttl_ms: int = 3_000


@dataclass(frozen=True)
class LeaseSettings:
    """rl-gateway's lease timing (``[leases]``): parsed and validated, not used by Python."""

    lifetime_ms: int = 250
    demand_ms: int = 200
    max_percent: int = 10


def _per_minute(limit: int, algorithm: str = "token_bucket") -> Rate:
    return Rate(limit=limit, algorithm=algorithm)


def _default_tiers() -> Dict[str, Rate]:
    return {name: TierLimits(limit=n) for name, n in (("enterprise", 10_000), ("free", 100), ("pro", 1_000))}


_DEFAULT_RATES = {
    "ip": _per_minute(100, "sliding"),
    "endpoint": _per_minute(100, "sliding"),
    "global": _per_minute(100_000, "sliding"),
}


@dataclass(frozen=True)
class RateLimitConfig:
    """Everything the middleware enforces. Defaults are the design's: tiers free 100/min
    (the default tier), pro 1000/min, enterprise 10000/min per API key (token buckets);
    100/min per IP and per key and endpoint, 100000/min globally (sliding windows); local
    fallback for one instance; the API key in ``X-API-Key``; IPv6 clients per /64."""

    key_prefix: str = "rl"
    failure_mode: str = "local"
    instances: int = 1
    trusted_proxies: Tuple[IpNetwork, ...] = ()
    dimensions: Tuple[str, ...] = DIMENSIONS
    default_tier: str = "free"
    tiers: Dict[str, Rate] = field(default_factory=_default_tiers)
    """Per tier: a ``TierLimits`` (a plain ``Rate`` is a tier without overrides)."""
    ip: Rate = _DEFAULT_RATES["ip"]
    endpoint: Rate = _DEFAULT_RATES["endpoint"]
    global_: Rate = _DEFAULT_RATES["global"]
    api_key_header: str = "X-API-Key"
    """The header carrying the API key (any header name, e.g. ``Authorization``); a leading
    ``Bearer `` (any case) is stripped from its value."""
    ipv6_prefix: int = 64
    """IPv6 clients are limited per network of this prefix length (128: per address)."""
    access: AccessConfig = AccessConfig()
    hot: Tuple[str, ...] = ("global",)
    """rl-gateway's leased dimensions: parsed, not used by Python (every check goes to Redis)."""
    fleet: FleetSettings = FleetSettings()
    leases: LeaseSettings = LeaseSettings()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tiers", {name: TierLimits.of(t) for name, t in self.tiers.items()})
        self.validate()

    @staticmethod
    def from_mapping(data: Mapping[str, Any]) -> "RateLimitConfig":
        """From parsed TOML (or any mapping of the same shape). Unknown fields are errors."""
        fields = {
            "key_prefix": str, "failure_mode": str, "instances": int, "trusted_proxies": list,
            "dimensions": list, "default_tier": str, "tiers": dict, "ip": dict,
            "endpoint": dict, "global": dict, "api_key_header": str, "ipv6_prefix": int,
            "access": dict, "hot": list, "fleet": dict, "leases": dict,
        }
        values = _take(data, "", fields)
        kwargs: Dict[str, Any] = {}
        for name in ("key_prefix", "failure_mode", "instances", "default_tier", "api_key_header", "ipv6_prefix"):
            if name in values:
                kwargs[name] = values[name]
        if "trusted_proxies" in values:
            kwargs["trusted_proxies"] = _networks(values["trusted_proxies"], "trusted_proxies")
        if "dimensions" in values:
            kwargs["dimensions"] = _dimensions(values["dimensions"], "dimensions")
        if "hot" in values:
            kwargs["hot"] = _dimensions(values["hot"], "hot")
        if "tiers" in values:
            kwargs["tiers"] = {name: TierLimits.from_table(t, f"tiers.{name}") for name, t in values["tiers"].items()}
        for name in ("ip", "endpoint", "global"):
            if name in values:
                # A dimension's table overrides the dimension's defaults.
                rate = RateOverride.from_table(values[name], name).apply(_DEFAULT_RATES[name])
                kwargs["global_" if name == "global" else name] = rate
        if "access" in values:
            kwargs["access"] = AccessConfig.from_table(values["access"])
        if "fleet" in values:
            kwargs["fleet"] = FleetSettings(
                **_take(values["fleet"], "fleet", {"membership": bool, "heartbeat_ms": int, "ttl_ms": int})
            )
        if "leases" in values:
            kwargs["leases"] = LeaseSettings(
                **_take(values["leases"], "leases", {"lifetime_ms": int, "demand_ms": int, "max_percent": int})
            )
        return RateLimitConfig(**kwargs)

    @staticmethod
    def from_toml(text: str) -> "RateLimitConfig":
        """Parses and validates TOML (missing fields take the defaults)."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"invalid TOML: {e}") from None
        return RateLimitConfig.from_mapping(data)

    @staticmethod
    def load(path: Union[str, Path]) -> "RateLimitConfig":
        """Reads a TOML file."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"{path}: {e}") from None
        return RateLimitConfig.from_toml(text)

    @property
    def mode(self) -> FailureMode:
        return FailureMode.parse(self.failure_mode, self.instances)

    def dimension_rate(self, dimension: str) -> Rate:
        """The rate of ``dimension`` at the top level (the API key's is the default tier's)."""
        if dimension == "api_key":
            return TierLimits.of(self.tiers[self.default_tier]).rate()
        return {"ip": self.ip, "endpoint": self.endpoint, "global": self.global_}[dimension]

    def tier_rate(self, tier: str, dimension: str) -> Optional[Rate]:
        """The rate of ``dimension`` for keys of ``tier``: the tier's override over the
        dimension's table; ``None`` when the tier is unknown or does not override it."""
        limits = self.tiers.get(tier)
        if limits is None:
            return None
        limits = TierLimits.of(limits)
        if dimension == "api_key":
            return limits.rate()
        over = limits.override_of(dimension)
        return over.apply(self.dimension_rate(dimension)) if over is not None else None

    def validate(self) -> None:
        """Checks every rate (tier overrides included), the default tier, the failure mode,
        the key prefix, the API key header, the IPv6 prefix, the access lists, and the fleet
        and lease settings."""
        if self.failure_mode not in ("open", "closed", "local"):
            raise ConfigError(f"failure_mode: expected open, closed or local, got {self.failure_mode!r}")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or not 1 <= self.instances <= 2**32 - 1:
            raise ConfigError("instances: expected an integer between 1 and 4294967295")
        if self.default_tier not in self.tiers:
            raise ConfigError(f"default_tier {self.default_tier!r} is not among the tiers")
        for d in (*self.dimensions, *self.hot):
            if d not in DIMENSIONS:
                raise ConfigError(f"unknown dimension {d!r}, expected one of {', '.join(DIMENSIONS)}")
        for name, rate in self.tiers.items():
            try:
                rate.policy(FailureMode.LOCAL)
            except ConfigError as e:
                raise ConfigError(f"tiers.{name}: {e}") from None
        for name in ("ip", "endpoint", "global"):
            try:
                self.dimension_rate(name).policy(self.mode)
            except ConfigError as e:
                raise ConfigError(f"{name}: {e}") from None
        for tier in self.tiers:
            for d in ("ip", "endpoint", "global"):
                over = self.tier_rate(tier, d)
                if over is not None:
                    try:
                        over.policy(self.mode)
                    except ConfigError as e:
                        raise ConfigError(f"tiers.{tier}.{d}: {e}") from None
        if "{" in self.key_prefix or "}" in self.key_prefix:
            raise ConfigError("key_prefix must not contain braces (they would change the hash slot)")
        if not self.api_key_header or not set(self.api_key_header) <= _TCHAR:
            raise ConfigError(f'api_key_header "{self.api_key_header}" is not a valid header name')
        if isinstance(self.ipv6_prefix, bool) or not isinstance(self.ipv6_prefix, int) or not 1 <= self.ipv6_prefix <= 128:
            raise ConfigError("ipv6_prefix must be between 1 and 128")
        if any(not k.strip() or k.strip() != k for k in (*self.access.allow_api_keys, *self.access.deny_api_keys)):
            raise ConfigError("access: API keys must be non-empty, without surrounding spaces")
        if self.fleet.membership and not 0 < self.fleet.heartbeat_ms < self.fleet.ttl_ms:
            raise ConfigError(
                f"fleet: heartbeat ({self.fleet.heartbeat_ms} ms) must be positive and shorter than "
                f"ttl ({self.fleet.ttl_ms} ms)"
            )
        if self.leases.lifetime_ms < 1 or self.leases.demand_ms < 1:
            raise ConfigError("leases: lifetime_ms and demand_ms must be at least 1")
        if not 1 <= self.leases.max_percent <= 100:
            raise ConfigError("leases: max_percent must be between 1 and 100")


def load_config(config: Union[None, str, Path, Mapping[str, Any], RateLimitConfig]) -> RateLimitConfig:
    """``None`` (the defaults), a ``RateLimitConfig``, a mapping, or a path to a TOML file."""
    if config is None:
        return RateLimitConfig()
    if isinstance(config, RateLimitConfig):
        return config
    if isinstance(config, Mapping):
        return RateLimitConfig.from_mapping(config)
    if isinstance(config, (str, Path)):
        return RateLimitConfig.load(config)
    raise TypeError(f"config must be a RateLimitConfig, a mapping or a path, not {type(config).__name__}")
