//! Resolvers from API key to tier name ([`TierResolver`]: in memory, or a Redis hash
//! cached locally). What a tier allows is the configuration's: the `[tiers.<name>]` tables
//! of [`RateLimitConfig`](crate::RateLimitConfig) (free 100/min, pro 1000/min, enterprise
//! 10000/min by default), read by the policy engine.

mod redis_hash;

use std::collections::HashMap;

pub use self::redis_hash::{RedisHashTiers, TierStats, DEFAULT_SNAPSHOT_MAX_KEYS};
use redis_rl_client::backend::BoxFuture;

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

    #[tokio::test]
    async fn static_resolver() {
        let r = StaticTiers::new().with("k1", "pro");
        assert_eq!(r.tier("k1").await.as_deref(), Some("pro"));
        assert_eq!(r.tier("k2").await, None);
    }
}
