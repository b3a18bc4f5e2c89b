//! The in-process fallback limiter: the same core algorithms as the server, on a bounded
//! in-memory store.
//!
//! Used when Redis is unavailable and a policy's failure mode is
//! [`FailureMode::Local`](crate::FailureMode::Local). It is approximate by design: each
//! gateway instance sees only its own traffic, so the limit is divided by the expected
//! number of instances, and an uneven spread admits more (or less) than the global limit.
//! The share, and what runs it, are the core registry's: each rate limiter declares how its
//! limit divides ([`AnyParams::local_share`]), and on that share runs its own core
//! algorithm exactly, except one whose state grows with its limit (a log) over a bound
//! (its `LOCAL_EXACT_MAX`), which runs as a sliding window.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashMap};
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::Instant;
use redis_rl_core::{AnyState, Micros, Outcome};

use crate::limiter::decision::{Decision, Source};
use redis_rl_core::AnyParams;

const SHARDS: usize = 64;

#[derive(Clone, Debug)]
struct Slot {
    state: AnyState,
    /// When the limiter is idle again: an entry past this can be dropped, since a missing
    /// entry means exactly the idle state.
    idle_at: Micros,
}

impl Slot {
    fn new(state: AnyState, now: Micros, d: &redis_rl_core::Decision) -> Self {
        Slot {
            state,
            idle_at: Micros(now.0.saturating_add(d.reset_after.as_micros().0)),
        }
    }
}

/// The local limiter: 64 mutex-guarded shards, at most `capacity` keys in all.
#[derive(Debug)]
pub struct LocalLimiter {
    shards: Vec<Mutex<HashMap<String, Slot>>>,
    hasher: DefaultHashBuilder,
    per_shard: usize,
    epoch: Instant,
}

impl LocalLimiter {
    /// A limiter holding at most `capacity` keys (rounded up to a multiple of 64). When a
    /// shard is full, idle keys are dropped first, then arbitrary ones (a dropped key
    /// starts again from idle: the bound on memory costs some over-admission).
    pub fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: DefaultHashBuilder::default(),
            per_shard,
            epoch: Instant::now(),
        }
    }

    /// Microseconds since this limiter was made (the local clock; never goes back).
    fn now(&self) -> Micros {
        Micros(u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX))
    }

    /// Decides `cost` units for `key` now, with the limit of `alg` divided by `instances`.
    pub fn check(
        &self,
        key: &str,
        alg: &AnyParams,
        instances: NonZeroU32,
        cost: u64,
        peek: bool,
    ) -> Decision {
        self.check_at(key, alg, instances, cost, peek, self.now())
    }

    /// [`LocalLimiter::check`] at an explicit instant (microseconds on the local clock).
    pub fn check_at(
        &self,
        key: &str,
        algorithm: &AnyParams,
        instances: NonZeroU32,
        cost: u64,
        peek: bool,
        now: Micros,
    ) -> Decision {
        let Ok(params) = algorithm.local_share(u64::from(instances.get())) else {
            // Parameters the core rejects cannot come from a validated policy; deny rather
            // than guess.
            return decision(Outcome::Never, 0, 0, Duration::ZERO);
        };
        let index = usize::try_from(self.hasher.hash_one(key) % SHARDS as u64).unwrap_or(0);
        let Some(shard) = self.shards.get(index) else {
            return decision(Outcome::Never, 0, 0, Duration::ZERO);
        };
        let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
        // One lookup on the common path (the key exists); an insert only for a new key.
        let d = match map.get_mut(key) {
            Some(slot) => {
                let (d, new_state) = params.check(Some(slot.state.clone()), now, cost);
                if let (Some(state), false) = (new_state, peek) {
                    *slot = Slot::new(state, now, &d);
                }
                d
            }
            None => {
                let (d, new_state) = params.check(None, now, cost);
                if let (Some(state), false) = (new_state, peek) {
                    if map.len() >= self.per_shard {
                        evict(&mut map, now, self.per_shard);
                    }
                    map.insert(key.to_owned(), Slot::new(state, now, &d));
                }
                d
            }
        };
        decision(
            d.outcome,
            d.limit,
            d.remaining,
            Duration::from_millis(d.reset_after.0),
        )
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Makes room in a full shard: idle entries first; if still full, drop an eighth of it so
/// the next inserts do not pay for another scan.
fn evict(map: &mut HashMap<String, Slot>, now: Micros, per_shard: usize) {
    map.retain(|_, slot| slot.idle_at > now);
    if map.len() >= per_shard {
        let target = per_shard - per_shard.div_ceil(8);
        let excess: Vec<String> = map.keys().take(map.len() - target).cloned().collect();
        for key in excess {
            map.remove(&key);
        }
    }
}

fn decision(outcome: Outcome, limit: u64, remaining: u64, reset_after: Duration) -> Decision {
    Decision {
        verdict: outcome.map(|wait| Duration::from_millis(wait.0)),
        limit,
        remaining,
        reset_after,
        source: Source::Local,
        shadow: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: NonZeroU32 = NonZeroU32::MIN;

    fn sliding(limit: u64) -> AnyParams {
        *crate::Policy::sliding(limit, 1_000).unwrap().params()
    }

    /// One unit for `key` at instant 0, one instance.
    fn at_zero(local: &LocalLimiter, key: &str, alg: &AnyParams, peek: bool) -> Decision {
        local.check_at(key, alg, ONE, 1, peek, Micros(0))
    }

    #[test]
    fn admits_exactly_the_limit_then_denies() {
        let local = LocalLimiter::new(1_000);
        let alg = sliding(3);
        for i in 0..3 {
            let d = local.check_at("k", &alg, ONE, 1, false, Micros(0));
            assert!(d.allows(), "call {i}");
            assert_eq!(d.source, Source::Local);
        }
        let d = local.check_at("k", &alg, ONE, 1, false, Micros(0));
        assert!(d.is_denied());
        assert!(d.retry_after().is_some());
        assert!(at_zero(&local, "other", &alg, false).allows());
    }

    #[test]
    fn peek_consumes_nothing() {
        let local = LocalLimiter::new(1_000);
        let alg = sliding(1);
        assert!(at_zero(&local, "k", &alg, true).allows());
        assert!(at_zero(&local, "k", &alg, false).allows());
        assert!(at_zero(&local, "k", &alg, true).is_denied());
    }

    #[test]
    fn the_limit_is_shared_by_the_expected_instances() {
        let local = LocalLimiter::new(1_000);
        let four = NonZeroU32::new(4).unwrap();
        let tb = *crate::Policy::token_bucket(100, 100, 60_000)
            .unwrap()
            .params();
        let admitted = (0..100)
            .filter(|_| {
                local
                    .check_at("tb", &tb, four, 1, false, Micros(0))
                    .allows()
            })
            .count();
        assert_eq!(admitted, 25);
        // The refill rate is a quarter too: one token per 2.4 s instead of 0.6 s.
        assert!(local
            .check_at("tb", &tb, four, 1, false, Micros(2_399_000))
            .is_denied());
        assert!(local
            .check_at("tb", &tb, four, 1, false, Micros(2_400_000))
            .allows());
        // A share never drops to zero.
        let big = NonZeroU32::new(1_000).unwrap();
        assert!(local
            .check_at("s", &sliding(3), big, 1, false, Micros(0))
            .allows());
        assert!(local
            .check_at("s", &sliding(3), big, 1, false, Micros(0))
            .is_denied());
    }

    #[test]
    fn gcra_runs_exactly_with_its_burst() {
        let local = LocalLimiter::new(1_000);
        let g = *crate::Policy::gcra(10, 1_000, Some(2)).unwrap().params();
        assert!(local.check_at("g", &g, ONE, 2, false, Micros(0)).allows());
        assert!(local
            .check_at("g", &g, ONE, 1, false, Micros(0))
            .is_denied());
        assert!(local
            .check_at("g", &g, ONE, 1, false, Micros(100_000))
            .allows());
    }

    #[test]
    fn a_large_log_runs_as_a_sliding_window_of_its_share() {
        let local = LocalLimiter::new(1_000);
        // 100 per second over 2 instances: a share of 50, an exact log (a log admits 50 at
        // once, as a sliding window would; both deny the 51st).
        let log = *crate::Policy::log(100, 1_000).unwrap().params();
        let two = NonZeroU32::new(2).unwrap();
        let admitted = |key: &str, instances| {
            (0..200)
                .filter(|_| {
                    local
                        .check_at(key, &log, instances, 1, false, Micros(0))
                        .allows()
                })
                .count()
        };
        assert_eq!(admitted("shared", two), 50);
        assert_eq!(admitted("alone", ONE), 100);
    }

    #[test]
    fn memory_is_bounded_and_idle_keys_go_first() {
        let local = LocalLimiter::new(64); // one key per shard
        let alg = sliding(10);
        for i in 0..10_000 {
            local.check_at(&format!("k{i}"), &alg, ONE, 1, false, Micros(0));
        }
        assert!(local.len() <= 64, "{}", local.len());
        // Long after every key went idle, new keys replace them.
        for i in 0..1_000 {
            local.check_at(&format!("n{i}"), &alg, ONE, 1, false, Micros(10_000_000));
        }
        assert!(local.len() <= 64);
    }
}
