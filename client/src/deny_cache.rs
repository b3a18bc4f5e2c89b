//! Hot-key deny cache: after Redis denies a key with a wait, deny it locally until the wait
//! is over, so a flood on a blocked key costs Redis nothing.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Duration;

use lru::LruCache;
use tokio::time::Instant;

use crate::decision::{Decision, Source, Verdict};

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
        let entry = Entry {
            until: now + retry_after,
            cost,
            limit: decision.limit,
            reset_at: now + decision.reset_after,
        };
        self.lock().put(key.to_string(), entry);
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
