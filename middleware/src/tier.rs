//! Tiers as configuration, and resolvers from API key to tier name.
//!
//! ```toml
//! default_tier = "free"          # for keys with no tier, or a tier not listed here
//!
//! [tiers.free]
//! limit = 100                    # 100 per minute
//! window_ms = 60000
//!
//! [tiers.pro]
//! limit = 1000
//!
//! [tiers.enterprise]
//! limit = 10000
//! algorithm = "sliding"          # token_bucket (default), sliding, fixed, gcra, log (Kind::CONFIG_NAMES)
//! ```

mod redis_hash;

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::path::Path;

use redis_rl_core::{AnyParams, ConfigRate, Kind};
use serde::Deserialize;

pub use self::redis_hash::{RedisHashTiers, TierStats, DEFAULT_SNAPSHOT_MAX_KEYS};
use redis_rl_client::backend::BoxFuture;
use redis_rl_client::error::{Error, Result};
use redis_rl_client::policy::{FailureMode, Policy};

/// The failure mode named in configuration (the policy engine's: one type for every front end).
pub use redis_rl_policy::FailureModeName;

/// One limit as written in configuration: `limit` units per `window_ms`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Units per window.
    pub limit: u64,
    /// The window in milliseconds (default 60000: per minute).
    #[serde(default = "one_minute")]
    pub window_ms: u64,
    /// The algorithm, by its config name (default `token_bucket`).
    #[serde(default = "default_algorithm")]
    pub algorithm: Kind,
    /// Burst: token bucket capacity or GCRA burst (default: `limit`).
    #[serde(default)]
    pub burst: Option<u64>,
    /// Decide and record, but never deny.
    #[serde(default)]
    pub shadow: bool,
    /// Overrides the global failure mode for this limit.
    #[serde(default)]
    pub failure_mode: Option<FailureModeName>,
}

fn one_minute() -> u64 {
    60_000
}

/// The algorithm of a rate that names none.
pub(crate) fn default_algorithm() -> Kind {
    Kind::TokenBucket
}

impl Rate {
    /// `limit` per minute with the defaults (token bucket, enforced, global failure mode).
    pub const fn per_minute(limit: u64) -> Rate {
        Rate {
            limit,
            window_ms: 60_000,
            algorithm: Kind::TokenBucket,
            burst: None,
            shadow: false,
            failure_mode: None,
        }
    }

    /// The same rate with another algorithm.
    pub fn with_algorithm(mut self, algorithm: Kind) -> Rate {
        self.algorithm = algorithm;
        self
    }

    /// The validated policy; `default_mode` applies unless the rate names its own.
    pub fn policy(&self, default_mode: FailureMode) -> Result<Policy> {
        let instances = match default_mode {
            FailureMode::Local { instances } => instances,
            _ => NonZeroU32::MIN,
        };
        // Which parameters `limit`, `window_ms` and `burst` feed is the registry's; errors
        // name the configuration's fields.
        let rate = ConfigRate {
            limit: self.limit,
            window_ms: self.window_ms,
            burst: self.burst,
        };
        let params = AnyParams::from_rate(self.algorithm, &rate).ok_or_else(|| {
            Error::Config(format!(
                "algorithm {} is not a rate limiter",
                self.algorithm.config_name()
            ))
        })??;
        let mode = self
            .failure_mode
            .map_or(default_mode, |m| FailureMode::named(m, instances));
        Ok(Policy::new(params).on_failure(mode).shadow(self.shadow))
    }
}

/// A partial [`Rate`]: the fields given replace those of a base rate, the others are kept.
///
/// The tables of the middleware's dimensions (`[ip]`, `[endpoint]`, `[global]`) are read as
/// overrides of the design's defaults, and a tier's `[tiers.<name>.<dimension>]` as an
/// override of the dimension's table: `[ip] limit = 1000` keeps the sliding window, and only
/// `algorithm = ".."` changes the algorithm.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RateOverride {
    /// Units per window.
    pub limit: Option<u64>,
    /// The window in milliseconds.
    pub window_ms: Option<u64>,
    /// The algorithm.
    pub algorithm: Option<Kind>,
    /// Burst: token bucket capacity or GCRA burst.
    pub burst: Option<u64>,
    /// Decide and record, but never deny.
    pub shadow: Option<bool>,
    /// Overrides the global failure mode for this limit.
    pub failure_mode: Option<FailureModeName>,
}

impl RateOverride {
    /// `base` with the fields given here replaced.
    ///
    /// ```
    /// use redis_rl_middleware::tier::{Rate, RateOverride};
    /// use redis_rl_client::Kind;
    /// let ip = Rate::per_minute(100).with_algorithm(Kind::SlidingWindow);
    /// let more = RateOverride { limit: Some(1000), ..RateOverride::default() };
    /// assert_eq!(more.apply(&ip), Rate::per_minute(1000).with_algorithm(Kind::SlidingWindow));
    /// ```
    pub fn apply(&self, base: &Rate) -> Rate {
        Rate {
            limit: self.limit.unwrap_or(base.limit),
            window_ms: self.window_ms.unwrap_or(base.window_ms),
            algorithm: self.algorithm.unwrap_or(base.algorithm),
            burst: self.burst.or(base.burst),
            shadow: self.shadow.unwrap_or(base.shadow),
            failure_mode: self.failure_mode.or(base.failure_mode),
        }
    }
}

/// Tier definitions: a rate per tier name and the tier for unknown keys.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct TierConfig {
    /// The tier of keys without one (default `free`).
    #[serde(default = "default_tier_name")]
    pub default_tier: String,
    /// Rate per tier (default: free 100/min, pro 1000/min, enterprise 10000/min).
    #[serde(default = "default_tiers")]
    pub tiers: BTreeMap<String, Rate>,
}

fn default_tier_name() -> String {
    "free".to_string()
}

fn default_tiers() -> BTreeMap<String, Rate> {
    BTreeMap::from([
        ("free".to_string(), Rate::per_minute(100)),
        ("pro".to_string(), Rate::per_minute(1_000)),
        ("enterprise".to_string(), Rate::per_minute(10_000)),
    ])
}

impl Default for TierConfig {
    /// The design's tiers: free 100/min (the default), pro 1000/min, enterprise 10000/min.
    fn default() -> Self {
        Self {
            default_tier: default_tier_name(),
            tiers: default_tiers(),
        }
    }
}

impl TierConfig {
    /// Parses and validates TOML.
    ///
    /// ```
    /// use redis_rl_middleware::TierConfig;
    /// let tiers = TierConfig::from_toml("[tiers.gold]\nlimit = 5000\n[tiers.free]\nlimit = 10\n").unwrap();
    /// assert_eq!(tiers.rate(Some("gold")).1.limit, 5000);
    /// assert_eq!(tiers.rate(Some("nope")).0, "free");
    /// ```
    pub fn from_toml(text: &str) -> Result<Self> {
        crate::toml_file::parse(text, Self::validate)
    }

    /// Reads a TOML file of tiers.
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_toml(&crate::toml_file::read(path)?)
    }

    /// Checks that the default tier exists and every rate is within the server's ranges.
    pub fn validate(&self) -> Result<()> {
        if !self.tiers.contains_key(&self.default_tier) {
            return Err(Error::Config(format!(
                "default_tier {:?} is not among the tiers",
                self.default_tier
            )));
        }
        for (name, rate) in &self.tiers {
            rate.policy(FailureMode::default())
                .map_err(|e| Error::Config(format!("tiers.{name}: {e}")))?;
        }
        Ok(())
    }

    /// The tier name and rate for `tier`, or the default tier's when it is `None` or unknown.
    pub fn rate(&self, tier: Option<&str>) -> (&str, &Rate) {
        let known = tier.and_then(|t| self.tiers.get_key_value(t));
        let found = known.or_else(|| self.tiers.get_key_value(&self.default_tier));
        match found {
            Some((name, rate)) => (name.as_str(), rate),
            // validate() guarantees the default exists; a config built by hand without it
            // falls back to the design's free tier.
            None => ("free", &FREE),
        }
    }
}

static FREE: Rate = Rate::per_minute(100);

/// A key's tier in the tier store names no configured tier (a typo, or a tier removed from
/// the configuration): the key is limited as the default tier. Counted, and logged at warn
/// at most once per ten seconds (a request rate of log lines would drown the log).
pub(crate) fn unknown_tier(name: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_WARN_MS: AtomicU64 = AtomicU64::new(0);
    metrics::counter!("rl_unknown_tier_total").increment(1);
    let now_ms = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(u64::MAX);
    let last = LAST_WARN_MS.load(Ordering::Relaxed);
    if now_ms.saturating_sub(last) >= 10_000
        && LAST_WARN_MS
            .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(
            tier = %name.escape_debug(),
            "an API key's tier is not among the configured tiers: limited as the default tier"
        );
    }
}

/// Finds the tier name of an API key (`None`: the default tier).
pub trait TierResolver: Send + Sync + 'static {
    /// The tier of `api_key`.
    fn tier<'a>(&'a self, api_key: &'a str) -> BoxFuture<'a, Option<String>>;
}

/// Tiers held in memory (tests, small deployments, or a map loaded at start).
#[derive(Clone, Debug, Default)]
pub struct StaticTiers {
    map: HashMap<String, String>,
}

impl StaticTiers {
    /// An empty map: every key gets the default tier.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the tier of `api_key`.
    pub fn with(mut self, api_key: impl Into<String>, tier: impl Into<String>) -> Self {
        self.map.insert(api_key.into(), tier.into());
        self
    }
}

impl TierResolver for StaticTiers {
    fn tier<'a>(&'a self, api_key: &'a str) -> BoxFuture<'a, Option<String>> {
        let tier = self.map.get(api_key).cloned();
        Box::pin(async move { tier })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_designs_tiers() {
        let t = TierConfig::default();
        t.validate().unwrap();
        assert_eq!(t.rate(None), ("free", &Rate::per_minute(100)));
        assert_eq!(t.rate(Some("pro")).1.limit, 1_000);
        assert_eq!(t.rate(Some("enterprise")).1.limit, 10_000);
        assert_eq!(t.rate(Some("platinum")).0, "free");
        let p = t.rate(Some("pro")).1.policy(FailureMode::Open).unwrap();
        assert_eq!(
            p,
            Policy::token_bucket(1_000, 1_000, 60_000)
                .unwrap()
                .on_failure(FailureMode::Open)
        );
        assert_eq!(p.failure_mode(), FailureMode::Open);
    }

    #[test]
    fn toml_overrides_and_validates() {
        let t = TierConfig::from_toml(
            r#"
            default_tier = "basic"
            [tiers.basic]
            limit = 5
            window_ms = 1000
            algorithm = "gcra"
            burst = 2
            failure_mode = "closed"
            shadow = true
            "#,
        )
        .unwrap();
        let (name, rate) = t.rate(None);
        assert_eq!(name, "basic");
        let p = rate.policy(FailureMode::LOCAL).unwrap();
        assert_eq!(
            p.params(),
            Policy::gcra(5, 1_000, Some(2)).unwrap().params()
        );
        assert_eq!(p.failure_mode(), FailureMode::Closed);
        assert!(p.is_shadow());

        let errors = [
            (
                "default_tier = \"x\"",
                "default_tier \"x\" is not among the tiers",
            ),
            (
                "[tiers.free]\nlimit = 0",
                "tiers.free: invalid policy: limit",
            ),
            (
                "[tiers.free]\nlimit = 1\nwindw_ms = 5",
                "unknown field `windw_ms`",
            ),
            (
                "[tiers.free]\nlimit = 1\nalgorithm = \"nosuch\"",
                "unknown variant `nosuch`",
            ),
        ];
        for (text, expected) in errors {
            let err = TierConfig::from_toml(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn every_registered_rate_limiter_can_be_configured() {
        // Every one a `limit` per `window_ms` can make (a calendar quota has a period).
        let windowed = Kind::LIMITERS.iter().filter(|k| {
            k.rate_fields()
                .contains(&redis_rl_core::RateField::WindowMs)
        });
        for name in windowed.map(|k| k.config_name()) {
            let text = format!("limit = 10\nalgorithm = \"{name}\"\n");
            let rate: Rate = toml::from_str(&text).unwrap();
            let policy = rate.policy(FailureMode::LOCAL).unwrap();
            assert_eq!(policy.kind().config_name(), name);
        }
    }

    #[test]
    fn limit_and_window_are_checked_with_the_algorithms_ranges() {
        let log = |limit| {
            Rate {
                limit,
                ..Rate::per_minute(1).with_algorithm(Kind::SlidingLog)
            }
            .policy(FailureMode::LOCAL)
            .unwrap_err()
            .to_string()
        };
        let expected = "invalid policy: limit must be an integer between 1 and 10000";
        assert_eq!(log(0), expected);
        assert_eq!(log(10_001), expected);
        let tb = Rate {
            window_ms: 0,
            ..Rate::per_minute(1)
        };
        assert_eq!(
            tb.policy(FailureMode::LOCAL).unwrap_err().to_string(),
            "invalid policy: window_ms must be an integer between 1 and 1000000000000"
        );
    }

    #[tokio::test]
    async fn static_resolver() {
        let r = StaticTiers::new().with("k1", "pro");
        assert_eq!(r.tier("k1").await.as_deref(), Some("pro"));
        assert_eq!(r.tier("k2").await, None);
    }
}
