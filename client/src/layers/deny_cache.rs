//! Hot-key deny cache: after Redis denies a key with a wait, deny it locally until the wait
//! is over, so a flood on a blocked key costs Redis nothing.
//!
//! A cached refusal never outlives what Redis said: it ends at the reply's retry time, and
//! never after its reset time (a fixed window's or quota's end). Units given back to a key
//! (a refund, a settlement) or its reset drop its refusal at once: here through the
//! refund, across a fleet through [`crate::Limiter::share_denials`].
//!
//! [`DenyCache`] is the bounded store; [`DenyCached`] is the layer that puts it in front
//! of a [`Decider`].

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Duration;

use lru::LruCache;

use crate::clock::Instant;
use crate::limiter::decision::{Decision, Source, Verdict};
// The `DenyCached` layer's (feature `transport`).
#[cfg(feature = "transport")]
use {
    crate::error::Result,
    crate::layers::decider::{
        cost_at, denied_at, Check, Decided, Decider, EveryKey, Items, Refund,
    },
    crate::limiter::decision::{Grant, MultiDecision},
    std::sync::atomic::{AtomicU64, Ordering},
};

#[derive(Clone, Copy, Debug)]
struct Entry {
    until: Instant,
    /// The cost that was denied.
    cost: u64,
    limit: u64,
    reset_at: Instant,
}

/// A bounded LRU of denied keys. At most one Redis call per key per retry interval (per
/// gateway instance) gets through while the key is blocked.
#[derive(Debug)]
pub struct DenyCache {
    entries: Mutex<LruCache<String, Entry>>,
}

impl DenyCache {
    /// A cache remembering at most `capacity` keys (least recently used evicted first).
    pub fn new(capacity: NonZeroUsize) -> Self {
        Self {
            entries: Mutex::new(LruCache::new(capacity)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, Entry>> {
        // A poisoned cache only holds hints; keep using it.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached denial of `key` for `cost` units, if its wait has not passed.
    pub fn get(&self, key: &str, cost: u64) -> Option<Decision> {
        let now = Instant::now();
        let mut entries = self.lock();
        let entry = *entries.peek(key)?;
        if now >= entry.until {
            entries.pop(key);
            return None;
        }
        // A smaller cost may fit earlier; a cost over the limit gets Redis's "never".
        if cost < entry.cost || cost > entry.limit {
            return None;
        }
        Some(Decision {
            verdict: Verdict::Denied {
                retry_after: entry.until - now,
            },
            limit: entry.limit,
            remaining: 0,
            reset_after: entry.reset_at.saturating_duration_since(now),
            source: Source::DenyCache,
            shadow: false,
        })
    }

    /// Remembers a denial from Redis (anything else is ignored).
    pub fn remember(&self, key: &str, cost: u64, decision: &Decision) {
        let Verdict::Denied { retry_after } = decision.verdict else {
            return;
        };
        if retry_after == Duration::ZERO {
            return;
        }
        let now = Instant::now();
        // The refusal holds until the retry time, and never past the reset (a window's
        // end): then Redis's answer has changed whatever the retry time said.
        let wait = match decision.reset_after {
            Duration::ZERO => retry_after,
            reset => retry_after.min(reset),
        };
        let entry = Entry {
            until: now + wait,
            cost,
            limit: decision.limit,
            reset_at: now + decision.reset_after,
        };
        self.lock().put(key.to_string(), entry);
    }

    /// Forgets `key`'s refusal (units were given back, or the key was reset).
    pub fn forget(&self, key: &str) {
        self.lock().pop(key);
    }

    /// Forgets every refusal (refunds elsewhere in the fleet may have been missed).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Keys currently remembered (including expired ones not yet evicted).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A [`Decider`] behind a deny cache (`None`: no cache, every call goes through).
///
/// A key the cache holds is denied without a round trip (a peek always asks: it takes
/// nothing); a denial from the inner decider is remembered. Errors pass through untouched,
/// so only Redis's own denials are ever cached.
#[cfg(feature = "transport")]
#[derive(Debug)]
pub struct DenyCached<D> {
    inner: D,
    cache: Option<DenyCache>,
    hits: AtomicU64,
}

#[cfg(feature = "transport")]
impl<D: Decider> DenyCached<D> {
    /// `inner` behind `cache`.
    pub fn new(inner: D, cache: Option<DenyCache>) -> Self {
        Self {
            inner,
            cache,
            hits: AtomicU64::new(0),
        }
    }

    /// Decisions answered by the cache since start.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Forgets `key`'s cached refusal (no cache: nothing to do).
    pub fn forget(&self, key: &str) {
        if let Some(cache) = &self.cache {
            cache.forget(key);
        }
    }

    /// Forgets every cached refusal.
    pub fn clear(&self) {
        if let Some(cache) = &self.cache {
            cache.clear();
        }
    }

    fn cached(&self, key: &str, cost: u64) -> Option<Decision> {
        let d = self.cache.as_ref()?.get(key, cost)?;
        self.hits.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("rl_client_decisions_total", "source" => "deny_cache").increment(1);
        Some(d)
    }

    fn remember(&self, key: &str, cost: u64, d: &Decision) {
        if let Some(cache) = &self.cache {
            cache.remember(key, cost, d);
        }
    }

    async fn check_cached(&self, call: Check<'_>) -> Result<Decision> {
        if !call.peek {
            if let Some(d) = self.cached(call.key, call.cost) {
                return Ok(d);
            }
        }
        let d = self.inner.check(call).await?;
        if !call.peek {
            self.remember(call.key, call.cost, &d);
        }
        Ok(d)
    }

    /// A partial grant that finds nothing available is a denial of one unit: a key the
    /// cache holds for one unit grants nothing without a round trip, and a grant of nothing
    /// from Redis is remembered for one unit (so plain checks of the key are denied too).
    async fn take_upto_cached(&self, call: Check<'_>) -> Result<Grant> {
        if !call.peek && call.cost > 0 {
            if let Some(decision) = self.cached(call.key, 1) {
                return Ok(Grant {
                    granted: 0,
                    decision,
                });
            }
        }
        let grant = self.inner.take_upto(call).await?;
        if !call.peek && grant.granted == 0 {
            self.remember(call.key, 1, &grant.decision);
        }
        Ok(grant)
    }

    /// `costs[i]` on `items[i]`, all or nothing (see [`Decider::check_all_costs`]).
    async fn check_all_cached(&self, items: Items<'_>, costs: &[u64]) -> Result<MultiDecision> {
        // A key the cache holds denies the whole request without a round trip.
        for (i, (key, _)) in items.iter().enumerate() {
            if let Some(d) = self.cached(key, cost_at(costs, i)) {
                return Ok(denied_at(items, |(_, a)| a, i, d));
            }
        }
        let md = self.inner.check_all_costs(items, costs).await?;
        if let Some(i) = md.denied {
            if let (Some((key, _)), Some(d)) = (items.get(i), md.decisions.get(i)) {
                self.remember(key, cost_at(costs, i), d);
            }
        }
        Ok(md)
    }
}

#[cfg(feature = "transport")]
impl<D: Decider> Decider for DenyCached<D> {
    fn check<'a>(&'a self, call: Check<'a>) -> Decided<'a, Decision> {
        Box::pin(self.check_cached(call))
    }

    fn check_all<'a>(&'a self, items: Items<'a>, cost: u64) -> Decided<'a, MultiDecision> {
        Box::pin(async move { self.check_all_cached(items, &vec![cost; items.len()]).await })
    }

    fn check_all_costs<'a>(
        &'a self,
        items: Items<'a>,
        costs: &'a [u64],
    ) -> Decided<'a, MultiDecision> {
        Box::pin(self.check_all_cached(items, costs))
    }

    fn take_upto<'a>(&'a self, call: Check<'a>) -> Decided<'a, Grant> {
        Box::pin(self.take_upto_cached(call))
    }

    /// Units given back may admit what was refused: the key's cached refusal goes.
    fn refund<'a>(&'a self, units: Refund<'a>) -> Decided<'a, u64> {
        Box::pin(async move {
            let given = self.inner.refund(units).await;
            self.forget(units.key);
            given
        })
    }

    /// Asked of Redis itself: the cache's waits would be stale for a look, and a forced
    /// take must reach the server.
    fn every_key<'a>(&'a self, call: EveryKey<'a>) -> Decided<'a, Vec<Decision>> {
        self.inner.every_key(call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(ms: u64) -> Decision {
        Decision {
            verdict: Verdict::Denied {
                retry_after: Duration::from_millis(ms),
            },
            limit: 10,
            remaining: 0,
            reset_after: Duration::from_millis(ms * 2),
            source: Source::Redis,
            shadow: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn denies_until_the_wait_passes() {
        let cache = DenyCache::new(NonZeroUsize::new(8).unwrap());
        cache.remember("k", 1, &denied(300));
        tokio::time::advance(Duration::from_millis(100)).await;
        let d = cache.get("k", 1).unwrap();
        assert_eq!(d.retry_after(), Some(Duration::from_millis(200)));
        assert_eq!(d.source, Source::DenyCache);
        assert_eq!(d.reset_after, Duration::from_millis(500));
        assert!(cache.get("other", 1).is_none());
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(cache.get("k", 1).is_none(), "the wait is over: ask Redis");
        assert!(cache.is_empty(), "expired entry dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn smaller_costs_and_allowed_decisions_are_not_cached() {
        let cache = DenyCache::new(NonZeroUsize::new(8).unwrap());
        cache.remember("k", 5, &denied(300));
        assert!(cache.get("k", 4).is_none());
        assert!(cache.get("k", 5).is_some());
        let mut allowed = denied(1);
        allowed.verdict = Verdict::Allowed;
        cache.remember("a", 1, &allowed);
        assert!(cache.get("a", 1).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_never_outlives_the_reset_and_goes_when_forgotten() {
        let cache = DenyCache::new(NonZeroUsize::new(8).unwrap());
        // A fixed window ending in 200 ms that says "retry in 5 s" (a cost the window's
        // end frees): the window's end is when Redis's answer changes.
        let mut d = denied(5_000);
        d.reset_after = Duration::from_millis(200);
        cache.remember("k", 1, &d);
        assert!(cache.get("k", 1).is_some());
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(cache.get("k", 1).is_none(), "the window ended: ask Redis");
        cache.remember("k", 1, &denied(5_000));
        cache.remember("j", 1, &denied(5_000));
        cache.forget("k");
        assert!(cache.get("k", 1).is_none(), "units given back: ask Redis");
        assert!(cache.get("j", 1).is_some());
        cache.clear();
        assert!(cache.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn memory_is_bounded() {
        let cache = DenyCache::new(NonZeroUsize::new(2).unwrap());
        for k in ["a", "b", "c"] {
            cache.remember(k, 1, &denied(1_000));
        }
        assert_eq!(cache.len(), 2);
        assert!(cache.get("a", 1).is_none(), "least recently used evicted");
        assert!(cache.get("c", 1).is_some());
    }
}

#[cfg(all(test, feature = "transport"))]
mod layer_tests {
    use std::time::Duration;

    use crate::limiter::decision::Source;
    use crate::limiter::policy::FailureMode;
    use crate::testing::*;

    #[tokio::test(start_paused = true)]
    async fn a_denied_key_is_denied_locally_until_its_wait_passes() {
        let mock = Mock::new(false, |_| deny(300));
        let l = limiter(&mock);
        let p = policy(FailureMode::Open);
        assert_eq!(l.check("hot", &p).await.source, Source::Redis);
        for _ in 0..100 {
            let d = l.check("hot", &p).await;
            assert_eq!(d.source, Source::DenyCache);
            assert!(!d.allows());
        }
        assert_eq!(mock.commands().len(), 1, "the flood cost Redis nothing");
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(l.check("hot", &p).await.source, Source::Redis);
        assert_eq!(mock.commands().len(), 2);
        assert_eq!(l.stats().deny_cache, 100);
    }
}
