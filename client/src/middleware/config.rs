//! The middleware's configuration (TOML), with the design's limits as defaults.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
#[cfg(feature = "toml")]
use std::path::Path;

use ipnet::IpNet;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::tier::{AlgorithmKind, FailureModeName, Rate, TierConfig};

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
/// instances = 4                           # gateways sharing the limits (local mode divides by it)
/// trusted_proxies = ["10.0.0.0/8"]        # X-Forwarded-For is read only from these peers
/// dimensions = ["api_key", "ip", "endpoint", "global"]
/// default_tier = "free"
///
/// [tiers.free]
/// limit = 100                             # per window_ms (default 60000)
///
/// [ip]
/// limit = 100
/// algorithm = "sliding"
///
/// [endpoint]
/// limit = 100
///
/// [global]
/// limit = 100000
/// shadow = true                           # record, never deny
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
    /// Expected gateway instances: the local fallback enforces `limit / instances`.
    #[serde(default = "default_instances")]
    pub instances: NonZeroU32,
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
    /// Rate per tier, for the API-key dimension.
    #[serde(default = "default_tiers")]
    pub tiers: BTreeMap<String, Rate>,
    /// Per client IP (default 100/min, sliding window).
    #[serde(default = "default_ip")]
    pub ip: Rate,
    /// Per API key and endpoint (default 100/min, sliding window).
    #[serde(default = "default_endpoint")]
    pub endpoint: Rate,
    /// Global (default 100000/min, sliding window).
    #[serde(default = "default_global")]
    pub global: Rate,
}

fn default_prefix() -> String {
    "rl".to_string()
}
fn default_failure_mode() -> FailureModeName {
    FailureModeName::Local
}
fn default_instances() -> NonZeroU32 {
    NonZeroU32::MIN
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
fn default_tiers() -> BTreeMap<String, Rate> {
    TierConfig::default().tiers
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

impl Default for RateLimitConfig {
    /// The design's limits: tiers free 100/min (default), pro 1000/min, enterprise
    /// 10000/min per API key; 100/min per IP; 100/min per key and endpoint; 100000/min
    /// globally; local fallback for one instance.
    fn default() -> Self {
        Self {
            key_prefix: default_prefix(),
            failure_mode: default_failure_mode(),
            instances: default_instances(),
            trusted_proxies: Vec::new(),
            dimensions: default_dimensions(),
            default_tier: default_tier(),
            tiers: default_tiers(),
            ip: default_ip(),
            endpoint: default_endpoint(),
            global: default_global(),
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

    /// The tier part of the configuration.
    pub fn tier_config(&self) -> TierConfig {
        TierConfig {
            default_tier: self.default_tier.clone(),
            tiers: self.tiers.clone(),
        }
    }

    /// Checks every rate, the default tier, and the key prefix.
    pub fn validate(&self) -> Result<()> {
        self.tier_config().validate()?;
        let mode = self.failure_mode.with_instances(self.instances);
        for (name, rate) in [
            ("ip", &self.ip),
            ("endpoint", &self.endpoint),
            ("global", &self.global),
        ] {
            rate.policy(mode)
                .map_err(|e| Error::Config(format!("{name}: {e}")))?;
        }
        if self.key_prefix.contains(['{', '}']) {
            return Err(Error::Config(
                "key_prefix must not contain braces (they would change the hash slot)".to_string(),
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
        assert_eq!(c.instances.get(), 3);
        assert_eq!(c.trusted_proxies.len(), 2);
        assert_eq!(c.dimensions, [Dimension::Ip, Dimension::Global]);
        assert_eq!(c.ip.limit, 9);
        assert_eq!(c.ip.algorithm, AlgorithmKind::TokenBucket);
        assert!(c.global.shadow);
        assert_eq!(c.endpoint, default_endpoint());
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
        ] {
            let err = RateLimitConfig::from_toml(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
