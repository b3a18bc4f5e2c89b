//! The configuration schema (TOML), with the design's limits as defaults.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

use crate::limit::FailureModeName;
use crate::rate::{table_with_rate, Rate, RateOverride};
use crate::rule::Rule;
use redis_rl_core::Kind;

/// A dimension a request is limited on.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// Per API key, at the key's tier rate.
    ApiKey,
    /// Per client IP: catches key-less abuse.
    Ip,
    /// Per API key and route (per IP and route without a key).
    Endpoint,
    /// One limit for everything: protects shared infrastructure.
    Global,
}

impl Dimension {
    /// Every dimension, in the default checking order.
    pub const ALL: [Dimension; 4] = [
        Dimension::ApiKey,
        Dimension::Ip,
        Dimension::Endpoint,
        Dimension::Global,
    ];

    /// The name used in configuration, headers, problem bodies, logs and metrics.
    pub const fn name(&self) -> &'static str {
        match self {
            Dimension::ApiKey => "api_key",
            Dimension::Ip => "ip",
            Dimension::Endpoint => "endpoint",
            Dimension::Global => "global",
        }
    }

    /// The dimension by its name.
    pub fn from_name(name: &str) -> Option<Dimension> {
        Dimension::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything a front end enforces: see the rules chapter of the book for every field.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Prefix of every Redis key (default `rl`).
    #[serde(default = "default_prefix")]
    pub key_prefix: String,
    /// What to do when Redis is unavailable (default local).
    #[serde(default = "default_failure_mode")]
    pub failure_mode: FailureModeName,
    /// A static fleet size: the local fallback enforces `limit / instances`.
    #[serde(default)]
    pub instances: Option<NonZeroU32>,
    /// Peers whose `X-Forwarded-For` is believed (default none).
    #[serde(default)]
    pub trusted_proxies: Vec<IpNet>,
    /// The dimensions enforced, in checking order (default all four).
    #[serde(default = "default_dimensions")]
    pub dimensions: Vec<Dimension>,
    /// The tier of keys without one.
    #[serde(default = "default_tier")]
    pub default_tier: String,
    /// Per tier: the API-key dimension's rate and overrides of the other dimensions.
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
    /// The header carrying the API key (default `X-API-Key`). A leading `Bearer` and
    /// whitespace are stripped from its value.
    #[serde(default = "default_api_key_header")]
    pub api_key_header: String,
    /// A file holding the secret that keys API-key digests (at least 32 bytes): the
    /// `<tenant>` of key names, logs and the admin endpoints. Default none: the unkeyed
    /// digest, with a warning at start.
    #[serde(default)]
    pub api_key_digest_secret_file: Option<String>,
    /// IPv6 clients are limited per network of this prefix length (default 64).
    #[serde(default = "default_ipv6_prefix")]
    pub ipv6_prefix: u8,
    /// Allow and deny lists (default empty).
    #[serde(default)]
    pub access: AccessConfig,
    /// Dimensions served from leases (default `["global"]`; `[]`: none).
    #[serde(default = "default_hot")]
    pub hot: Vec<Dimension>,
    /// Fleet membership.
    #[serde(default)]
    pub fleet: FleetSettings,
    /// Lease timing.
    #[serde(default)]
    pub leases: LeaseSettings,
    /// Rules: limits for the requests they match, on top of the dimensions.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// At most this many requests held at once by `delay_max_ms` (per process; default
    /// 1000): past it, a request that could be held is refused.
    #[serde(default = "default_max_held")]
    pub delay_max_held: usize,
    /// Send `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` beside
    /// the draft's `RateLimit` and `RateLimit-Policy` (default true; false: the draft's
    /// two alone, as express-rate-limit's `legacyHeaders: false`).
    #[serde(default = "yes")]
    pub legacy_headers: bool,
}

/// Fleet membership as configured (`[fleet]`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FleetSettings {
    /// Register in Redis and keep the live fleet size (default true).
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
    /// A lease's unspent units are given back this long after it was taken (default 250).
    #[serde(default = "default_lifetime_ms")]
    pub lifetime_ms: u64,
    /// A lease is sized to this much of the recent demand, in milliseconds (default 200).
    #[serde(default = "default_demand_ms")]
    pub demand_ms: u64,
    /// The fleet's leases of one key hold at most this % of the limit (default 10).
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

/// Allow and deny lists, checked before any limit (deny wins). IPv4-mapped IPv6 networks
/// (`::ffff:192.0.2.0/120`) are read as the IPv4 networks they name, the form client
/// addresses are compared in.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AccessConfig {
    /// Client networks never limited.
    #[serde(default)]
    pub allow_ips: Vec<IpNet>,
    /// Client networks refused with 403.
    #[serde(default)]
    pub deny_ips: Vec<IpNet>,
    /// API keys never limited.
    #[serde(default)]
    pub allow_api_keys: Vec<String>,
    /// API keys refused with 403.
    #[serde(default)]
    pub deny_api_keys: Vec<String>,
}

impl AccessConfig {
    /// True when no list has an entry.
    pub fn is_empty(&self) -> bool {
        self.allow_ips.is_empty()
            && self.deny_ips.is_empty()
            && self.allow_api_keys.is_empty()
            && self.deny_api_keys.is_empty()
    }
}

/// One tier: the API-key dimension's rate (`limit`, or `limits` for several windows), and
/// for keys of this tier optional overrides of the other dimensions (`[tiers.pro.ip]`...),
/// each a budget of the tier's own for `ip` and `global`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierLimits {
    /// The API-key dimension's rate (default algorithm: token bucket).
    pub rate: Rate,
    /// The IP dimension for keys of this tier (default: `[ip]`).
    pub ip: Option<RateOverride>,
    /// The endpoint dimension for keys of this tier (default: `[endpoint]`).
    pub endpoint: Option<RateOverride>,
    /// The global dimension for keys of this tier (default: `[global]`).
    pub global: Option<RateOverride>,
}

table_with_rate! {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawTier {} {
        ip: Option<RateOverride>,
        endpoint: Option<RateOverride>,
        global: Option<RateOverride>,
    }
}

impl<'de> Deserialize<'de> for TierLimits {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut raw = RawTier::deserialize(d)?;
        let rate = raw
            .rate()
            .standalone(Kind::TokenBucket)
            .and_then(|r| r.specs().map(|_| r))
            .map_err(serde::de::Error::custom)?;
        Ok(TierLimits {
            rate,
            ip: raw.ip,
            endpoint: raw.endpoint,
            global: raw.global,
        })
    }
}

impl From<Rate> for TierLimits {
    /// A tier with this API-key rate and no overrides.
    fn from(rate: Rate) -> Self {
        Self {
            rate,
            ip: None,
            endpoint: None,
            global: None,
        }
    }
}

impl TierLimits {
    /// The override of `dimension` (`None` for the API key: that is the tier's rate).
    pub fn override_of(&self, dimension: Dimension) -> Option<&RateOverride> {
        match dimension {
            Dimension::ApiKey => None,
            Dimension::Ip => self.ip.as_ref(),
            Dimension::Endpoint => self.endpoint.as_ref(),
            Dimension::Global => self.global.as_ref(),
        }
    }

    /// The same tier with `dimension` overridden.
    pub fn with_override(mut self, dimension: Dimension, o: RateOverride) -> Self {
        match dimension {
            Dimension::ApiKey => {}
            Dimension::Ip => self.ip = Some(o),
            Dimension::Endpoint => self.endpoint = Some(o),
            Dimension::Global => self.global = Some(o),
        }
        self
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
fn default_prefix() -> String {
    "rl".to_string()
}
fn default_failure_mode() -> FailureModeName {
    FailureModeName::Local
}
fn default_dimensions() -> Vec<Dimension> {
    Dimension::ALL.to_vec()
}
fn default_tier() -> String {
    "free".to_string()
}
/// The design's tiers: free 100/min, pro 1000/min, enterprise 10000/min (token buckets).
pub fn default_tiers() -> BTreeMap<String, TierLimits> {
    BTreeMap::from([
        ("free".to_string(), Rate::per_minute(100).into()),
        ("pro".to_string(), Rate::per_minute(1_000).into()),
        ("enterprise".to_string(), Rate::per_minute(10_000).into()),
    ])
}
/// The design's IP limit: 100/min, sliding window.
pub fn default_ip() -> Rate {
    Rate::per_minute(100).with_algorithm(Kind::SlidingWindow)
}
/// The design's endpoint limit: 100/min, sliding window.
pub fn default_endpoint() -> Rate {
    Rate::per_minute(100).with_algorithm(Kind::SlidingWindow)
}
/// The design's global limit: 100000/min, sliding window.
pub fn default_global() -> Rate {
    Rate::per_minute(100_000).with_algorithm(Kind::SlidingWindow)
}
fn default_api_key_header() -> String {
    "X-API-Key".to_string()
}
fn default_max_held() -> usize {
    crate::delay::DEFAULT_MAX_HELD
}
fn default_ipv6_prefix() -> u8 {
    64
}

// A dimension's table overrides the dimension's defaults, so its algorithm stays the
// documented one unless `algorithm` is given.
fn rate_over<'de, D: Deserializer<'de>>(d: D, base: Rate) -> Result<Rate, D::Error> {
    RateOverride::deserialize(d)?
        .apply(&base)
        .and_then(|r| r.specs().map(|_| r))
        .map_err(serde::de::Error::custom)
}
fn ip_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
    rate_over(d, default_ip())
}
fn endpoint_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
    rate_over(d, default_endpoint())
}
fn global_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
    rate_over(d, default_global())
}

impl Default for Config {
    /// The design's limits: tiers free 100/min (default), pro 1000/min, enterprise
    /// 10000/min per API key; 100/min per IP; 100/min per key and endpoint; 100000/min
    /// globally; leases for the global limit; fleet membership; no rules.
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
            api_key_digest_secret_file: None,
            ipv6_prefix: default_ipv6_prefix(),
            access: AccessConfig::default(),
            hot: default_hot(),
            fleet: FleetSettings::default(),
            leases: LeaseSettings::default(),
            rules: Vec::new(),
            delay_max_held: default_max_held(),
            legacy_headers: true,
        }
    }
}

impl Config {
    /// The rate of `dimension` at the top level (the API key's: the default tier's).
    pub fn dimension_rate(&self, dimension: Dimension) -> Rate {
        match dimension {
            Dimension::ApiKey => self
                .tiers
                .get(&self.default_tier)
                .map_or_else(|| Rate::per_minute(100), |t| t.rate.clone()),
            Dimension::Ip => self.ip.clone(),
            Dimension::Endpoint => self.endpoint.clone(),
            Dimension::Global => self.global.clone(),
        }
    }

    /// The rate of `dimension` for keys of `tier` when the tier sets one: its own rate for
    /// the API key, its override over the dimension's table for the others.
    pub fn tier_rate(&self, tier: &str, dimension: Dimension) -> Option<Result<Rate, String>> {
        let limits = self.tiers.get(tier)?;
        match dimension {
            Dimension::ApiKey => Some(Ok(limits.rate.clone())),
            d => limits
                .override_of(d)
                .map(|o| o.apply(&self.dimension_rate(d))),
        }
    }
}
