//! The middleware's configuration (TOML), with the design's limits as defaults.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
#[cfg(feature = "toml")]
use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

use crate::error::{Error, Result};
use crate::fleet::FleetConfig;
use crate::policy::FailureMode;
use crate::tier::{AlgorithmKind, FailureModeName, Rate, RateOverride, TierConfig};

/// A dimension a request is limited on.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// Per API key (`X-API-Key`), at the key's tier rate.
    ApiKey,
    /// Per client IP: catches key-less abuse.
    Ip,
    /// Per API key and route pattern (per IP and route pattern without a key).
    Endpoint,
    /// One limit for everything: protects shared infrastructure.
    Global,
}

impl Dimension {
    /// The name used in headers, problem bodies, logs and metrics.
    pub const fn name(&self) -> &'static str {
        match self {
            Dimension::ApiKey => "api_key",
            Dimension::Ip => "ip",
            Dimension::Endpoint => "endpoint",
            Dimension::Global => "global",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything the middleware enforces.
///
/// ```toml
/// key_prefix = "rl"                       # Redis keys: rl:{k:<tenant>}:key, rl:{ip:<ip>}, ...
/// failure_mode = "local"                  # open | closed | local
/// instances = 4                           # optional: a static fleet size for the local
///                                         # fallback (default: the live fleet size)
/// hot = ["global"]                        # dimensions served from leases ([] = none)
/// trusted_proxies = ["10.0.0.0/8"]        # X-Forwarded-For is read only from these peers
/// dimensions = ["api_key", "ip", "endpoint", "global"]
/// default_tier = "free"
/// api_key_header = "Authorization"        # default X-API-Key; a leading "Bearer " is stripped
/// ipv6_prefix = 64                        # IPv6 clients share one budget per /64
///
/// [tiers.free]
/// limit = 100                             # per window_ms (default 60000)
///
/// [tiers.pro]
/// limit = 1000
/// [tiers.pro.endpoint]                    # pro keys: 1000/min per route (others: [endpoint])
/// limit = 1000
///
/// [ip]
/// limit = 100                             # still a sliding window: only `algorithm` changes it
///
/// [endpoint]
/// limit = 100
///
/// [global]
/// limit = 100000
/// shadow = true                           # record, never deny
///
/// [access]
/// allow_ips = ["10.1.0.0/16"]             # never limited, not counted
/// deny_ips = ["203.0.113.0/24"]           # 403 (deny wins over allow)
///
/// [fleet]
/// membership = true                       # register in Redis, keep the live fleet size
/// heartbeat_ms = 1000
/// ttl_ms = 3000
///
/// [leases]
/// lifetime_ms = 250                       # a lease's unspent units go back after this
/// demand_ms = 200                         # a lease covers this much of recent demand
/// max_percent = 10                        # the fleet's leases hold at most this % of the limit
/// ```
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Prefix of every Redis key (default `rl`).
    #[serde(default = "default_prefix")]
    pub key_prefix: String,
    /// What to do when Redis is unavailable (default local).
    #[serde(default = "default_failure_mode")]
    pub failure_mode: FailureModeName,
    /// A static fleet size: the local fallback enforces `limit / instances`. Default
    /// (`None`): the live fleet size from [`FleetSettings`] membership, 1 until it is known
    /// (or without membership).
    #[serde(default)]
    pub instances: Option<NonZeroU32>,
    /// Peers whose `X-Forwarded-For` is believed (default none: the peer address is the
    /// client).
    #[serde(default)]
    pub trusted_proxies: Vec<IpNet>,
    /// The dimensions enforced, in checking order (default all four).
    #[serde(default = "default_dimensions")]
    pub dimensions: Vec<Dimension>,
    /// The tier of keys without one.
    #[serde(default = "default_tier")]
    pub default_tier: String,
    /// Per tier: the API-key dimension's rate, and overrides of the other dimensions for
    /// keys of that tier.
    #[serde(default = "default_tiers")]
    pub tiers: BTreeMap<String, TierLimits>,
    /// Per client IP (default 100/min, sliding window).
    #[serde(default = "default_ip", deserialize_with = "ip_rate")]
    pub ip: Rate,
    /// Per API key and endpoint (default 100/min, sliding window).
    #[serde(default = "default_endpoint", deserialize_with = "endpoint_rate")]
    pub endpoint: Rate,
    /// Global (default 100000/min, sliding window).
    #[serde(default = "default_global", deserialize_with = "global_rate")]
    pub global: Rate,
    /// The header carrying the API key (default `X-API-Key`; any header name, e.g.
    /// `Authorization`). A leading `Bearer ` (any case) is stripped from its value.
    #[serde(default = "default_api_key_header")]
    pub api_key_header: String,
    /// IPv6 clients are limited per network of this prefix length (default 64: one budget
    /// per /64, the block a single host or site gets; 128: per address). IPv4 clients are
    /// limited per address.
    #[serde(default = "default_ipv6_prefix")]
    pub ipv6_prefix: u8,
    /// Allow and deny lists (default empty).
    #[serde(default)]
    pub access: AccessConfig,
    /// Dimensions whose limits are served from leases: batches taken with `UPTO` and
    /// spent in process (default `["global"]`; `[]` turns leases off).
    #[serde(default = "default_hot")]
    pub hot: Vec<Dimension>,
    /// Fleet membership.
    #[serde(default)]
    pub fleet: FleetSettings,
    /// Lease timing.
    #[serde(default)]
    pub leases: LeaseSettings,
}

/// Fleet membership as configured (`[fleet]`): see [`crate::fleet`].
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FleetSettings {
    /// Register in Redis and keep the live fleet size (default true). Off: the local
    /// fallback divides by `instances` (1 if not set).
    #[serde(default = "yes")]
    pub membership: bool,
    /// Time between renewals in milliseconds (default 1000).
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// How long a silent member is still counted, in milliseconds (default 3000).
    #[serde(default = "default_ttl_ms")]
    pub ttl_ms: u64,
}

impl Default for FleetSettings {
    fn default() -> Self {
        Self {
            membership: true,
            heartbeat_ms: default_heartbeat_ms(),
            ttl_ms: default_ttl_ms(),
        }
    }
}

/// Lease timing as configured (`[leases]`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LeaseSettings {
    /// A lease's unspent units are given back this long after it was taken, in
    /// milliseconds (default 250; the longest a unit is spent after it was counted).
    #[serde(default = "default_lifetime_ms")]
    pub lifetime_ms: u64,
    /// A lease is sized to this much of the instance's recent demand, in milliseconds
    /// (default 200).
    #[serde(default = "default_demand_ms")]
    pub demand_ms: u64,
    /// What the whole fleet's leases of one key hold at most together, in percent of the
    /// limit (default 10; each lease at most its share by the live fleet size, at least one
    /// unit): the bound on under-admission.
    #[serde(default = "default_max_percent")]
    pub max_percent: u64,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            lifetime_ms: default_lifetime_ms(),
            demand_ms: default_demand_ms(),
            max_percent: default_max_percent(),
        }
    }
}

fn yes() -> bool {
    true
}
fn default_heartbeat_ms() -> u64 {
    1_000
}
fn default_ttl_ms() -> u64 {
    3_000
}
fn default_lifetime_ms() -> u64 {
    250
}
fn default_demand_ms() -> u64 {
    200
}
fn default_max_percent() -> u64 {
    10
}
fn default_hot() -> Vec<Dimension> {
    vec![Dimension::Global]
}

/// One tier: the API-key dimension's rate (`[tiers.pro] limit = 1000`), and for keys of
/// this tier optional overrides of the other dimensions (`[tiers.pro.endpoint]`,
/// `[tiers.pro.ip]`, `[tiers.pro.global]`), each taking the fields it does not set from the
/// dimension's own table.
///
/// An overridden `ip` or `global` limit is a budget of the tier's own, in the key
/// `<prefix>:{ip:<ip>}:tier:<tier>` or `<prefix>:{global}:tier:<tier>`: the tier's keys do
/// not share it with key-less traffic or other tiers (and one key never holds two policies).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TierLimits {
    /// Units per window (API-key dimension).
    pub limit: u64,
    /// The window in milliseconds (default 60000).
    #[serde(default = "one_minute")]
    pub window_ms: u64,
    /// The algorithm (default token bucket).
    #[serde(default)]
    pub algorithm: AlgorithmKind,
    /// Burst: token bucket capacity or GCRA burst (default: `limit`).
    #[serde(default)]
    pub burst: Option<u64>,
    /// Decide and record, but never deny.
    #[serde(default)]
    pub shadow: bool,
    /// Overrides the global failure mode for this rate.
    #[serde(default)]
    pub failure_mode: Option<FailureModeName>,
    /// The IP dimension for keys of this tier (default: `[ip]`).
    #[serde(default)]
    pub ip: Option<RateOverride>,
    /// The endpoint dimension for keys of this tier (default: `[endpoint]`).
    #[serde(default)]
    pub endpoint: Option<RateOverride>,
    /// The global dimension for keys of this tier (default: `[global]`).
    #[serde(default)]
    pub global: Option<RateOverride>,
}

fn one_minute() -> u64 {
    60_000
}

impl From<Rate> for TierLimits {
    /// A tier with this API-key rate and no overrides.
    fn from(r: Rate) -> Self {
        Self {
            limit: r.limit,
            window_ms: r.window_ms,
            algorithm: r.algorithm,
            burst: r.burst,
            shadow: r.shadow,
            failure_mode: r.failure_mode,
            ip: None,
            endpoint: None,
            global: None,
        }
    }
}

impl TierLimits {
    /// The API-key dimension's rate.
    pub fn rate(&self) -> Rate {
        Rate {
            limit: self.limit,
            window_ms: self.window_ms,
            algorithm: self.algorithm,
            burst: self.burst,
            shadow: self.shadow,
            failure_mode: self.failure_mode,
        }
    }

    /// The override of `dimension` (`None` for the API key: that is the tier's own rate).
    pub fn override_of(&self, dimension: Dimension) -> Option<&RateOverride> {
        match dimension {
            Dimension::ApiKey => None,
            Dimension::Ip => self.ip.as_ref(),
            Dimension::Endpoint => self.endpoint.as_ref(),
            Dimension::Global => self.global.as_ref(),
        }
    }

    /// Sets the override of `dimension` (builder style; ignored for the API key).
    pub fn with_override(mut self, dimension: Dimension, rate: RateOverride) -> Self {
        match dimension {
            Dimension::ApiKey => {}
            Dimension::Ip => self.ip = Some(rate),
            Dimension::Endpoint => self.endpoint = Some(rate),
            Dimension::Global => self.global = Some(rate),
        }
        self
    }
}

/// Allow and deny lists, checked before any limit. Deny wins: a request whose client IP or
/// API key is denied gets 403 even if the other is allowed. An allowed request (IP or key
/// listed, nothing denied) is never limited and costs Redis nothing.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AccessConfig {
    /// Client networks never limited (CIDR or address).
    #[serde(default)]
    pub allow_ips: Vec<IpNet>,
    /// Client networks always refused with 403.
    #[serde(default)]
    pub deny_ips: Vec<IpNet>,
    /// API keys never limited.
    #[serde(default)]
    pub allow_api_keys: Vec<String>,
    /// API keys always refused with 403.
    #[serde(default)]
    pub deny_api_keys: Vec<String>,
}

fn default_prefix() -> String {
    "rl".to_string()
}
fn default_failure_mode() -> FailureModeName {
    FailureModeName::Local
}
fn default_dimensions() -> Vec<Dimension> {
    vec![
        Dimension::ApiKey,
        Dimension::Ip,
        Dimension::Endpoint,
        Dimension::Global,
    ]
}
fn default_tier() -> String {
    TierConfig::default().default_tier
}
fn default_tiers() -> BTreeMap<String, TierLimits> {
    TierConfig::default()
        .tiers
        .into_iter()
        .map(|(name, rate)| (name, rate.into()))
        .collect()
}
fn default_ip() -> Rate {
    Rate::per_minute(100).with_algorithm(AlgorithmKind::Sliding)
}
fn default_endpoint() -> Rate {
    Rate::per_minute(100).with_algorithm(AlgorithmKind::Sliding)
}
fn default_global() -> Rate {
    Rate::per_minute(100_000).with_algorithm(AlgorithmKind::Sliding)
}
fn default_api_key_header() -> String {
    "X-API-Key".to_string()
}
fn default_ipv6_prefix() -> u8 {
    64
}

// A dimension's table overrides the dimension's defaults, so its algorithm stays the
// documented one unless `algorithm` is given.
fn ip_rate<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Rate, D::Error> {
    Ok(RateOverride::deserialize(d)?.apply(&default_ip()))
}
fn endpoint_rate<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Rate, D::Error> {
    Ok(RateOverride::deserialize(d)?.apply(&default_endpoint()))
}
fn global_rate<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Rate, D::Error> {
    Ok(RateOverride::deserialize(d)?.apply(&default_global()))
}

impl Default for RateLimitConfig {
    /// The design's limits: tiers free 100/min (default), pro 1000/min, enterprise
    /// 10000/min per API key; 100/min per IP; 100/min per key and endpoint; 100000/min
    /// globally; leases for the global limit; fleet membership, the local fallback
    /// dividing by the live fleet size.
    fn default() -> Self {
        Self {
            key_prefix: default_prefix(),
            failure_mode: default_failure_mode(),
            instances: None,
            trusted_proxies: Vec::new(),
            dimensions: default_dimensions(),
            default_tier: default_tier(),
            tiers: default_tiers(),
            ip: default_ip(),
            endpoint: default_endpoint(),
            global: default_global(),
            api_key_header: default_api_key_header(),
            ipv6_prefix: default_ipv6_prefix(),
            access: AccessConfig::default(),
            hot: default_hot(),
            fleet: FleetSettings::default(),
            leases: LeaseSettings::default(),
        }
    }
}

impl RateLimitConfig {
    /// Reads the middleware's configuration from a TOML file.
    #[cfg(feature = "toml")]
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_toml(&crate::toml_file::read(path)?)
    }

    /// Parses and validates TOML (missing fields take the defaults).
    #[cfg(feature = "toml")]
    pub fn from_toml(text: &str) -> Result<Self> {
        crate::toml_file::parse(text, Self::validate)
    }

    /// The tier part of the configuration (the API-key dimension's rates).
    pub fn tier_config(&self) -> TierConfig {
        TierConfig {
            default_tier: self.default_tier.clone(),
            tiers: self
                .tiers
                .iter()
                .map(|(name, t)| (name.clone(), t.rate()))
                .collect(),
        }
    }

    /// The rate of `dimension` at the top level (the API key's is the default tier's).
    pub fn dimension_rate(&self, dimension: Dimension) -> Rate {
        match dimension {
            Dimension::ApiKey => self.tier_config().rate(None).1.clone(),
            Dimension::Ip => self.ip.clone(),
            Dimension::Endpoint => self.endpoint.clone(),
            Dimension::Global => self.global.clone(),
        }
    }

    /// The rate of `dimension` for keys of `tier`: the tier's override over the
    /// dimension's table, if the tier has one.
    pub fn tier_rate(&self, tier: &str, dimension: Dimension) -> Option<Rate> {
        let limits = self.tiers.get(tier)?;
        match dimension {
            Dimension::ApiKey => Some(limits.rate()),
            d => limits
                .override_of(d)
                .map(|o| o.apply(&self.dimension_rate(d))),
        }
    }

    /// The failure mode of every limit without its own, with the static `instances` (1
    /// when not set: the limiter then divides by the live fleet size once known).
    pub fn failure_mode(&self) -> FailureMode {
        self.failure_mode
            .with_instances(self.instances.unwrap_or(NonZeroU32::MIN))
    }

    /// The fleet membership settings (`None` when membership is off). The fleet key is
    /// `<key_prefix>:{fleet}`: gateways with the same prefix form one fleet.
    pub fn fleet_config(&self) -> Option<FleetConfig> {
        self.fleet.membership.then(|| FleetConfig {
            heartbeat: Duration::from_millis(self.fleet.heartbeat_ms),
            ttl: Duration::from_millis(self.fleet.ttl_ms),
            ..FleetConfig::new(format!("{}:{{fleet}}", self.key_prefix))
        })
    }

    /// Whether the local fallback should divide by the live fleet size: membership on and
    /// no static `instances`.
    pub fn fleet_fallback(&self) -> bool {
        self.fleet.membership && self.instances.is_none()
    }

    /// Checks every rate (tier overrides included), the default tier, the key prefix, the
    /// API key header, the IPv6 prefix, and the fleet and lease settings.
    pub fn validate(&self) -> Result<()> {
        self.tier_config().validate()?;
        if let Some(fleet) = self.fleet_config() {
            fleet.validate()?;
        }
        if self.leases.lifetime_ms == 0 || self.leases.demand_ms == 0 {
            return Err(Error::Config(
                "leases: lifetime_ms and demand_ms must be at least 1".to_string(),
            ));
        }
        if !(1..=100).contains(&self.leases.max_percent) {
            return Err(Error::Config(
                "leases: max_percent must be between 1 and 100".to_string(),
            ));
        }
        let mode = self.failure_mode();
        for (name, rate) in [
            ("ip", &self.ip),
            ("endpoint", &self.endpoint),
            ("global", &self.global),
        ] {
            rate.policy(mode)
                .map_err(|e| Error::Config(format!("{name}: {e}")))?;
        }
        for tier in self.tiers.keys() {
            for d in [Dimension::Ip, Dimension::Endpoint, Dimension::Global] {
                if let Some(rate) = self.tier_rate(tier, d) {
                    rate.policy(mode)
                        .map_err(|e| Error::Config(format!("tiers.{tier}.{d}: {e}")))?;
                }
            }
        }
        if self.key_prefix.contains(['{', '}']) {
            return Err(Error::Config(
                "key_prefix must not contain braces (they would change the hash slot)".to_string(),
            ));
        }
        if http::HeaderName::from_bytes(self.api_key_header.as_bytes()).is_err() {
            return Err(Error::Config(format!(
                "api_key_header {:?} is not a valid header name",
                self.api_key_header
            )));
        }
        if !(1..=128).contains(&self.ipv6_prefix) {
            return Err(Error::Config(
                "ipv6_prefix must be between 1 and 128".to_string(),
            ));
        }
        if self
            .access
            .allow_api_keys
            .iter()
            .chain(&self.access.deny_api_keys)
            .any(|k| k.trim().is_empty() || k.trim() != k)
        {
            return Err(Error::Config(
                "access: API keys must be non-empty, without surrounding spaces".to_string(),
            ));
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "toml"))]
mod tests {
    use super::*;

    #[test]
    fn empty_toml_is_the_default() {
        assert_eq!(
            RateLimitConfig::from_toml("").unwrap(),
            RateLimitConfig::default()
        );
    }

    #[test]
    fn toml_sets_every_field() {
        let c = RateLimitConfig::from_toml(
            r#"
            key_prefix = "x"
            failure_mode = "open"
            instances = 3
            trusted_proxies = ["10.0.0.0/8", "::1/128"]
            dimensions = ["ip", "global"]
            default_tier = "b"
            [tiers.b]
            limit = 7
            [ip]
            limit = 9
            window_ms = 1000
            [global]
            limit = 50
            shadow = true
            "#,
        )
        .unwrap();
        assert_eq!(c.key_prefix, "x");
        assert_eq!(c.failure_mode, FailureModeName::Open);
        assert_eq!(c.instances, NonZeroU32::new(3));
        assert_eq!(c.trusted_proxies.len(), 2);
        assert_eq!(c.dimensions, [Dimension::Ip, Dimension::Global]);
        assert_eq!(c.ip.limit, 9);
        assert_eq!(
            c.ip.algorithm,
            AlgorithmKind::Sliding,
            "overriding a rate keeps the dimension's algorithm"
        );
        assert!(c.global.shadow);
        assert_eq!(c.endpoint, default_endpoint());
    }

    #[test]
    fn a_fleet_is_on_by_default_and_instances_overrides_its_size() {
        let c = RateLimitConfig::default();
        assert_eq!(c.hot, [Dimension::Global]);
        let fleet = c.fleet_config().unwrap();
        assert_eq!(fleet.key, "rl:{fleet}");
        assert_eq!(fleet.heartbeat, Duration::from_secs(1));
        assert!(c.fleet_fallback());
        let c = RateLimitConfig::from_toml(
            "key_prefix = \"x\"\ninstances = 4\nhot = []\n[fleet]\nheartbeat_ms = 200\nttl_ms = 900\n",
        )
        .unwrap();
        assert!(c.hot.is_empty());
        assert!(!c.fleet_fallback(), "a static instances count overrides");
        assert_eq!(c.fleet_config().unwrap().key, "x:{fleet}");
        assert_eq!(
            c.failure_mode(),
            FailureMode::Local {
                instances: NonZeroU32::new(4).unwrap()
            }
        );
        let off = RateLimitConfig::from_toml("[fleet]\nmembership = false\n").unwrap();
        assert!(off.fleet_config().is_none() && !off.fleet_fallback());
    }

    #[test]
    fn bad_configs_are_rejected_with_the_field() {
        for (text, expected) in [
            ("keyprefix = \"x\"", "unknown field `keyprefix`"),
            ("[ip]\nlimit = 0", "ip: invalid policy: limit"),
            ("key_prefix = \"{a}\"", "braces"),
            ("default_tier = \"gold\"", "default_tier"),
            ("trusted_proxies = [\"nope\"]", "invalid IP"),
            ("instances = 0", "instances"),
            ("hot = [\"nope\"]", "unknown variant"),
            ("[fleet]\nheartbeat_ms = 3000", "shorter than ttl"),
            ("[fleet]\nbeat = 1", "unknown field `beat`"),
            ("[leases]\nlifetime_ms = 0", "leases"),
            ("ipv6_prefix = 0", "ipv6_prefix must be between 1 and 128"),
            ("ipv6_prefix = 129", "ipv6_prefix must be between 1 and 128"),
            (
                "api_key_header = \"x key\"",
                "api_key_header \"x key\" is not a valid",
            ),
            ("[access]\nallow_ips = [\"10.0.0.0/33\"]", "invalid IP"),
            (
                "[access]\ndeny_api_keys = [\"\"]",
                "access: API keys must be non-empty",
            ),
            ("[access]\nallow = []", "unknown field `allow`"),
            (
                "[tiers.free]\nlimit = 1\n[tiers.free.ip]\nlimit = 0",
                "tiers.free.ip: invalid policy: limit",
            ),
            (
                "[tiers.free]\nlimit = 1\n[tiers.free.api]\nlimit = 1",
                "unknown field `api`",
            ),
            (
                "[tiers.free]\nlimit = 1\n[tiers.free.endpoint]\nlimt = 1",
                "unknown field `limt`",
            ),
        ] {
            let err = RateLimitConfig::from_toml(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn tiers_override_any_dimension_and_keep_the_algorithm() {
        let c = RateLimitConfig::from_toml(
            r#"
            api_key_header = "Authorization"
            ipv6_prefix = 56
            [tiers.free]
            limit = 100
            [tiers.pro]
            limit = 1000
            [tiers.pro.endpoint]
            limit = 1000
            [tiers.pro.ip]
            limit = 500
            window_ms = 1000
            [tiers.pro.global]
            algorithm = "gcra"
            [ip]
            limit = 50
            [access]
            allow_ips = ["10.0.0.0/8"]
            deny_ips = ["10.6.6.0/24"]
            allow_api_keys = ["a"]
            deny_api_keys = ["d"]
            "#,
        )
        .unwrap();
        let sliding = |limit, window_ms| Rate {
            window_ms,
            ..Rate::per_minute(limit).with_algorithm(AlgorithmKind::Sliding)
        };
        assert_eq!(c.ip, sliding(50, 60_000));
        assert_eq!(c.endpoint, default_endpoint());
        assert_eq!(
            c.tier_rate("pro", Dimension::ApiKey),
            Some(Rate::per_minute(1000))
        );
        assert_eq!(
            c.tier_rate("pro", Dimension::Endpoint),
            Some(sliding(1000, 60_000))
        );
        assert_eq!(c.tier_rate("pro", Dimension::Ip), Some(sliding(500, 1_000)));
        assert_eq!(
            c.tier_rate("pro", Dimension::Global),
            Some(Rate::per_minute(100_000).with_algorithm(AlgorithmKind::Gcra))
        );
        assert_eq!(c.tier_rate("free", Dimension::Ip), None, "no override");
        assert_eq!(c.tier_rate("gold", Dimension::ApiKey), None);
        assert_eq!(c.api_key_header, "Authorization");
        assert_eq!(c.ipv6_prefix, 56);
        assert_eq!(c.access.deny_ips.len(), 1);
        assert_eq!(c.access.allow_api_keys, ["a"]);
        // Defaults stay the design's: no tier overrides another dimension.
        let d = RateLimitConfig::default();
        for tier in ["free", "pro", "enterprise"] {
            for dim in [Dimension::Ip, Dimension::Endpoint, Dimension::Global] {
                assert_eq!(d.tier_rate(tier, dim), None);
            }
        }
        assert_eq!(d.api_key_header, "X-API-Key");
        assert_eq!(d.ipv6_prefix, 64);
    }

    /// The book's annotated TOML (docs/src/rules.md) is the default configuration, key for key.
    #[test]
    fn the_documented_toml_is_the_default() {
        let chapter = include_str!("../../../docs/src/rules.md");
        let section = chapter
            .split("## Configuring rl-gateway")
            .nth(1)
            .expect("docs/src/rules.md has the section");
        let toml = section
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("the section has a TOML block");
        assert_eq!(
            RateLimitConfig::from_toml(toml).unwrap(),
            RateLimitConfig::default()
        );
        for key in [
            "key_prefix",
            "failure_mode",
            "instances",
            "trusted_proxies",
            "dimensions",
            "default_tier",
            "api_key_header",
            "ipv6_prefix",
            "window_ms",
            "algorithm",
            "burst",
            "shadow",
            "[tiers.pro.endpoint]",
            "[tiers.pro.ip]",
            "[tiers.pro.global]",
            "allow_ips",
            "deny_ips",
            "allow_api_keys",
            "deny_api_keys",
            "hot",
            "[fleet]",
            "membership",
            "heartbeat_ms",
            "ttl_ms",
            "[leases]",
            "lifetime_ms",
            "demand_ms",
        ] {
            assert!(toml.contains(key), "the documented TOML lacks {key}");
        }
    }
}
