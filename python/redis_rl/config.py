"""The middleware's configuration: the same TOML as ``rl-gateway --config`` (the Rust
client's ``RateLimitConfig``), with the design's limits as defaults.

```toml
key_prefix = "rl"                       # Redis keys: rl:{k:<tenant>}:key, rl:{ip:<ip>}, ...
failure_mode = "local"                  # open | closed | local
instances = 4                           # processes sharing the limits (local mode divides)
trusted_proxies = ["10.0.0.0/8"]        # X-Forwarded-For is read only from these peers
dimensions = ["api_key", "ip", "endpoint", "global"]
default_tier = "free"

[tiers.free]
limit = 100                             # per window_ms (default 60000)

[ip]
limit = 100
algorithm = "sliding"                   # token_bucket (default) | sliding | fixed | gcra | log
```
"""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from redis_rl._core import Params
from redis_rl.policy import FailureMode, Policy

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["ConfigError", "Rate", "RateLimitConfig", "DIMENSIONS"]

DIMENSIONS = ("api_key", "ip", "endpoint", "global")
ALGORITHMS = ("token_bucket", "sliding", "fixed", "gcra", "log")
IpNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


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
        fields = {"limit": int, "window_ms": int, "algorithm": str, "burst": int, "shadow": bool, "failure_mode": str}
        values = _take(table, where, fields)
        if "limit" not in values:
            raise ConfigError(f"{where}: missing field `limit`")
        if values.get("algorithm", "token_bucket") not in ALGORITHMS:
            raise ConfigError(f"{where}.algorithm: expected one of {', '.join(ALGORITHMS)}, got {values['algorithm']!r}")
        if values.get("failure_mode", "local") not in ("open", "closed", "local"):
            raise ConfigError(f"{where}.failure_mode: expected open, closed or local, got {values['failure_mode']!r}")
        return Rate(**values)

    def policy(self, default_mode: FailureMode) -> Policy:
        """The validated policy; ``default_mode`` applies unless the rate names its own.
        Errors name the configuration's fields (``limit``, ``window_ms``)."""
        try:
            Params.sliding(self.limit, self.window_ms)
        except (ValueError, TypeError) as e:
            raise ConfigError(str(e)) from None
        limit, window_ms = self.limit, self.window_ms
        try:
            if self.algorithm == "token_bucket":
                p = Policy.token_bucket(self.burst if self.burst is not None else limit, limit, window_ms)
            elif self.algorithm == "sliding":
                p = Policy.sliding(limit, window_ms)
            elif self.algorithm == "fixed":
                p = Policy.fixed(limit, window_ms)
            elif self.algorithm == "gcra":
                p = Policy.gcra(limit, window_ms, self.burst)
            else:
                p = Policy.log(limit, window_ms)
        except (ValueError, TypeError) as e:
            raise ConfigError(str(e)) from None
        mode = default_mode
        if self.failure_mode is not None:
            mode = FailureMode.parse(self.failure_mode, default_mode.instances)
        return p.on_failure(mode).with_shadow(self.shadow)


def _per_minute(limit: int, algorithm: str = "token_bucket") -> Rate:
    return Rate(limit=limit, algorithm=algorithm)


def _default_tiers() -> Dict[str, Rate]:
    return {"enterprise": _per_minute(10_000), "free": _per_minute(100), "pro": _per_minute(1_000)}


@dataclass(frozen=True)
class RateLimitConfig:
    """Everything the middleware enforces. Defaults are the design's: tiers free 100/min
    (the default tier), pro 1000/min, enterprise 10000/min per API key (token buckets);
    100/min per IP and per key and endpoint, 100000/min globally (sliding windows); local
    fallback for one instance."""

    key_prefix: str = "rl"
    failure_mode: str = "local"
    instances: int = 1
    trusted_proxies: Tuple[IpNetwork, ...] = ()
    dimensions: Tuple[str, ...] = DIMENSIONS
    default_tier: str = "free"
    tiers: Dict[str, Rate] = field(default_factory=_default_tiers)
    ip: Rate = _per_minute(100, "sliding")
    endpoint: Rate = _per_minute(100, "sliding")
    global_: Rate = _per_minute(100_000, "sliding")
    hot: Tuple[str, ...] = ("global",)
    """rl-gateway's leased dimensions, read and checked so one TOML serves both; this
    middleware has no leases (every dimension is decided by Redis)."""
    fleet: Dict[str, Any] = field(default_factory=dict)
    """rl-gateway's ``[fleet]`` membership settings (read and checked, not used here:
    ``instances`` stays the local fallback's static divisor)."""
    leases: Dict[str, Any] = field(default_factory=dict)
    """rl-gateway's ``[leases]`` settings (read and checked, not used here)."""

    def __post_init__(self) -> None:
        self.validate()

    @staticmethod
    def from_mapping(data: Mapping[str, Any]) -> "RateLimitConfig":
        """From parsed TOML (or any mapping of the same shape). Unknown fields are errors."""
        fields = {
            "key_prefix": str, "failure_mode": str, "instances": int, "trusted_proxies": list,
            "dimensions": list, "default_tier": str, "tiers": dict, "ip": dict,
            "endpoint": dict, "global": dict, "hot": list, "fleet": dict, "leases": dict,
        }
        values = _take(data, "", fields)
        kwargs: Dict[str, Any] = {}
        for name in ("key_prefix", "failure_mode", "instances", "default_tier"):
            if name in values:
                kwargs[name] = values[name]
        if "trusted_proxies" in values:
            nets = []
            for net in values["trusted_proxies"]:
                try:
                    nets.append(ipaddress.ip_network(net, strict=False))
                except (ValueError, TypeError):
                    raise ConfigError(f"trusted_proxies: invalid network {net!r}") from None
            kwargs["trusted_proxies"] = tuple(nets)
        if "dimensions" in values:
            for d in values["dimensions"]:
                if d not in DIMENSIONS:
                    raise ConfigError(f"dimensions: unknown dimension {d!r}, expected one of {', '.join(DIMENSIONS)}")
            kwargs["dimensions"] = tuple(values["dimensions"])
        if "hot" in values:
            for d in values["hot"]:
                if d not in DIMENSIONS:
                    raise ConfigError(f"hot: unknown dimension {d!r}, expected one of {', '.join(DIMENSIONS)}")
            kwargs["hot"] = tuple(values["hot"])
        if "fleet" in values:
            kwargs["fleet"] = _take(values["fleet"], "fleet", {"membership": bool, "heartbeat_ms": int, "ttl_ms": int})
        if "leases" in values:
            kwargs["leases"] = _take(values["leases"], "leases", {"lifetime_ms": int, "demand_ms": int, "max_percent": int})
        if "tiers" in values:
            kwargs["tiers"] = {name: Rate.from_table(t, f"tiers.{name}") for name, t in values["tiers"].items()}
        for name in ("ip", "endpoint", "global"):
            if name in values:
                kwargs["global_" if name == "global" else name] = Rate.from_table(values[name], name)
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

    def validate(self) -> None:
        """Checks every rate, the default tier, the failure mode and the key prefix."""
        if self.failure_mode not in ("open", "closed", "local"):
            raise ConfigError(f"failure_mode: expected open, closed or local, got {self.failure_mode!r}")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or not 1 <= self.instances <= 2**32 - 1:
            raise ConfigError("instances: expected an integer between 1 and 4294967295")
        if self.default_tier not in self.tiers:
            raise ConfigError(f"default_tier {self.default_tier!r} is not among the tiers")
        for name, rate in self.tiers.items():
            try:
                rate.policy(FailureMode.LOCAL)
            except ConfigError as e:
                raise ConfigError(f"tiers.{name}: {e}") from None
        for name, rate in (("ip", self.ip), ("endpoint", self.endpoint), ("global", self.global_)):
            try:
                rate.policy(self.mode)
            except ConfigError as e:
                raise ConfigError(f"{name}: {e}") from None
        if "{" in self.key_prefix or "}" in self.key_prefix:
            raise ConfigError("key_prefix must not contain braces (they would change the hash slot)")


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
