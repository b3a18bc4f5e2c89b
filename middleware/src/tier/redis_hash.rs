//! Tiers from a Redis hash, with a positive cache, a negative cache, and a snapshot of the
//! hash's keys so unknown keys cost no round trip.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use lru::LruCache;
use redis::Value;
use tokio::time::Instant;

use super::TierResolver;
use redis_rl_client::backend::BoxFuture;
use redis_rl_client::error::{Error, Result};
use redis_rl_client::limiter::Limiter;

/// Keys the snapshot holds at most by default (about 16 MiB of fingerprints).
pub const DEFAULT_SNAPSHOT_MAX_KEYS: usize = 1_000_000;

/// Fields asked per `HSCAN` call while taking a snapshot.
const SCAN_COUNT: usize = 1_000;

#[derive(Clone, Debug)]
struct Cached {
    tier: String,
    fetched: Instant,
}

/// The keys of the hash at one moment, as 64-bit fingerprints (keyed with a per-process
/// random seed, so a client cannot craft a key that collides with a paying one).
struct Snapshot {
    keys: HashSet<u64>,
    taken: Instant,
}

/// What the snapshot loader shares with the resolver.
struct Known {
    seed: RandomState,
    snapshot: RwLock<Option<Snapshot>>,
    loading: AtomicBool,
    max_keys: usize,
}

impl Known {
    fn fingerprint(&self, key: &str) -> u64 {
        self.seed.hash_one(key)
    }

    /// `Some(false)`: the key is certainly not in the hash (as of a snapshot younger than
    /// `max_age`); `Some(true)`: it was; `None`: no usable snapshot.
    fn contains(&self, key: &str, max_age: Duration) -> Option<bool> {
        let guard = self.snapshot.read().unwrap_or_else(|e| e.into_inner());
        let s = guard.as_ref().filter(|s| s.taken.elapsed() < max_age)?;
        Some(s.keys.contains(&self.fingerprint(key)))
    }

    fn age(&self) -> Option<Duration> {
        let guard = self.snapshot.read().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map(|s| s.taken.elapsed())
    }

    fn len(&self) -> usize {
        let guard = self.snapshot.read().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map_or(0, |s| s.keys.len())
    }

    /// Reads every field of `hash` with `HSCAN` (at most `max_keys`; a larger hash gets no
    /// snapshot, and lookups fall back to one round trip per key and TTL).
    async fn load(&self, limiter: &Limiter, hash: &str) -> Result<usize> {
        let slot = Some(redis::cluster_routing::get_slot(hash.as_bytes()));
        let mut keys = HashSet::new();
        let mut cursor = "0".to_string();
        // HSCAN returns every field in a bounded number of calls; the bound guards a
        // server that never ends the scan.
        let max_calls = self.max_keys / SCAN_COUNT * 4 + 1_000;
        for _ in 0..max_calls {
            let mut cmd = redis::cmd("HSCAN");
            cmd.arg(hash).arg(&cursor).arg("COUNT").arg(SCAN_COUNT);
            let reply = limiter.query(&cmd, slot).await?;
            let (next, items): (String, Vec<Vec<u8>>) = redis::from_redis_value(&reply)
                .map_err(|e| Error::Config(format!("HSCAN {hash}: {e}")))?;
            for field in items.iter().step_by(2) {
                keys.insert(self.fingerprint(&String::from_utf8_lossy(field)));
            }
            if keys.len() > self.max_keys {
                *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = None;
                return Err(Error::Config(format!(
                    "tier hash {hash} has more than {} keys: no snapshot, one lookup per key",
                    self.max_keys
                )));
            }
            if next == "0" {
                let n = keys.len();
                *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Some(Snapshot {
                    keys,
                    taken: Instant::now(),
                });
                return Ok(n);
            }
            cursor = next;
        }
        Err(Error::Config(format!("HSCAN {hash} did not finish")))
    }
}

/// Lookups since start, by how they were answered ([`RedisHashTiers::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierStats {
    /// `HGET` round trips.
    pub redis_lookups: u64,
    /// Answered by the positive cache (a known key within its TTL).
    pub cached: u64,
    /// Unknown keys answered without a round trip (snapshot or negative cache).
    pub unknown_local: u64,
    /// Keys in the current snapshot of the hash.
    pub snapshot_keys: usize,
}

/// Tiers stored in a Redis hash (`HSET rl:tiers <api key> pro`), cached locally for `ttl`.
///
/// - A known key costs one `HGET` per `ttl` (positive cache, bounded LRU of `capacity`).
/// - An unknown key costs nothing: the resolver keeps a snapshot of the hash's keys
///   (`HSCAN`, refreshed in the background every `ttl`, at most
///   [`DEFAULT_SNAPSHOT_MAX_KEYS`] keys), and a key absent from it gets the default tier
///   without a round trip, so a flood of random keys does not reach Redis. Without a
///   usable snapshot (not taken yet, hash too large, Redis down) an unknown key costs one
///   `HGET`, then sits in a negative cache (its own bounded LRU of `capacity` keys, so
///   random keys never evict known ones) for `ttl`.
/// - A key added to the hash is seen within `ttl` (the next snapshot or cache expiry).
///
/// Lookups go through the limiter's timeout and breaker. When Redis cannot answer, the
/// last known tier is used even if stale, else the default tier.
pub struct RedisHashTiers {
    limiter: Limiter,
    hash: String,
    ttl: Duration,
    cache: Mutex<LruCache<String, Cached>>,
    unknown: Mutex<LruCache<String, Instant>>,
    known: Arc<Known>,
    redis_lookups: AtomicU64,
    cached: AtomicU64,
    unknown_local: AtomicU64,
}

impl RedisHashTiers {
    /// Reads tiers from the hash `hash`, caching up to `capacity` known and `capacity`
    /// unknown keys for `ttl`.
    pub fn new(
        limiter: Limiter,
        hash: impl Into<String>,
        ttl: Duration,
        capacity: NonZeroUsize,
    ) -> Self {
        Self {
            limiter,
            hash: hash.into(),
            ttl,
            cache: Mutex::new(LruCache::new(capacity)),
            unknown: Mutex::new(LruCache::new(capacity)),
            known: Arc::new(Known {
                seed: RandomState::new(),
                snapshot: RwLock::new(None),
                loading: AtomicBool::new(false),
                max_keys: DEFAULT_SNAPSHOT_MAX_KEYS,
            }),
            redis_lookups: AtomicU64::new(0),
            cached: AtomicU64::new(0),
            unknown_local: AtomicU64::new(0),
        }
    }

    /// Holds at most `max_keys` keys in the snapshot of the hash (0: no snapshot; every
    /// unknown key costs one round trip per `ttl`).
    pub fn snapshot_max_keys(mut self, max_keys: usize) -> Self {
        if let Some(known) = Arc::get_mut(&mut self.known) {
            known.max_keys = max_keys;
        }
        self
    }

    /// Takes the snapshot of the hash's keys now (it is otherwise taken in the background
    /// on the first lookup, and refreshed every `ttl`). Returns the number of keys.
    pub async fn refresh(&self) -> Result<usize> {
        self.known.load(&self.limiter, &self.hash).await
    }

    /// Lookup counts since start.
    pub fn stats(&self) -> TierStats {
        TierStats {
            redis_lookups: self.redis_lookups.load(Ordering::Relaxed),
            cached: self.cached.load(Ordering::Relaxed),
            unknown_local: self.unknown_local.load(Ordering::Relaxed),
            snapshot_keys: self.known.len(),
        }
    }

    /// Starts a background snapshot when there is none or it is older than `ttl` (one at
    /// a time).
    fn refresh_in_background(&self) {
        if self.known.max_keys == 0 || self.ttl.is_zero() {
            return;
        }
        if self.known.age().is_some_and(|age| age < self.ttl) {
            return;
        }
        if self.known.loading.swap(true, Ordering::AcqRel) {
            return;
        }
        let (known, limiter, hash) = (self.known.clone(), self.limiter.clone(), self.hash.clone());
        tokio::spawn(async move {
            match known.load(&limiter, &hash).await {
                Ok(n) => tracing::debug!(hash = %hash, keys = n, "tier hash snapshot taken"),
                Err(e) => tracing::warn!(hash = %hash, error = %e, "tier hash snapshot failed"),
            }
            known.loading.store(false, Ordering::Release);
        });
    }

    fn local_unknown(&self) -> Option<String> {
        self.unknown_local.fetch_add(1, Ordering::Relaxed);
        None
    }

    async fn fetch(&self, api_key: &str) -> Option<String> {
        self.refresh_in_background();
        let stale = {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            match cache.get(api_key) {
                Some(c) if c.fetched.elapsed() < self.ttl => {
                    self.cached.fetch_add(1, Ordering::Relaxed);
                    return Some(c.tier.clone());
                }
                other => other.cloned(),
            }
        };
        // A snapshot may serve while the next one is taken (up to twice the TTL old).
        if stale.is_none() && self.known.contains(api_key, self.ttl * 2) == Some(false) {
            return self.local_unknown();
        }
        {
            let mut unknown = self.unknown.lock().unwrap_or_else(|e| e.into_inner());
            match unknown.peek(api_key) {
                Some(at) if at.elapsed() < self.ttl => return self.local_unknown(),
                Some(_) => {
                    unknown.pop(api_key);
                }
                None => {}
            }
        }
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&self.hash).arg(api_key);
        let slot = Some(redis::cluster_routing::get_slot(self.hash.as_bytes()));
        self.redis_lookups.fetch_add(1, Ordering::Relaxed);
        let tier = match self.limiter.query(&cmd, slot).await {
            Ok(Value::Nil) => None,
            Ok(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Ok(Value::SimpleString(s)) => Some(s),
            Ok(other) => {
                tracing::warn!(hash = %self.hash, reply = ?other, "unexpected tier lookup reply");
                None
            }
            Err(_) => return stale.map(|c| c.tier),
        };
        let now = Instant::now();
        match &tier {
            Some(t) => {
                let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                cache.put(
                    api_key.to_string(),
                    Cached {
                        tier: t.clone(),
                        fetched: now,
                    },
                );
            }
            None => {
                self.cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop(api_key);
                let mut unknown = self.unknown.lock().unwrap_or_else(|e| e.into_inner());
                unknown.put(api_key.to_string(), now);
            }
        }
        tier
    }
}

impl TierResolver for RedisHashTiers {
    fn tier<'a>(&'a self, api_key: &'a str) -> BoxFuture<'a, Option<String>> {
        Box::pin(self.fetch(api_key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_rl_client::testing::{limiter, Mock};

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// A hash with `pro-key -> pro`, scanned in two HSCAN calls.
    fn hash_mock() -> Arc<Mock> {
        Mock::new(false, |w| {
            match (w[0].as_str(), w.get(2).map(String::as_str)) {
                ("HGET", _) if w[2] == "pro-key" => bulk("pro"),
                ("HGET", _) => Value::Nil,
                ("HSCAN", Some("0")) => Value::Array(vec![
                    bulk("7"),
                    Value::Array(vec![bulk("pro-key"), bulk("pro")]),
                ]),
                ("HSCAN", _) => Value::Array(vec![
                    bulk("0"),
                    Value::Array(vec![bulk("ent-key"), bulk("enterprise")]),
                ]),
                _ => Value::Nil,
            }
        })
    }

    /// Tiers from `rl:tiers` on `mock`, cached for a minute, at most `capacity` keys.
    fn tiers_on(mock: &Arc<Mock>, capacity: usize) -> RedisHashTiers {
        RedisHashTiers::new(
            limiter(mock),
            "rl:tiers",
            Duration::from_secs(60),
            NonZeroUsize::new(capacity).unwrap(),
        )
    }

    fn count(mock: &Mock, name: &str) -> usize {
        mock.names().iter().filter(|n| *n == name).count()
    }

    #[tokio::test]
    async fn random_keys_cost_no_round_trip_once_the_snapshot_is_taken() {
        let mock = hash_mock();
        let tiers = tiers_on(&mock, 16);
        assert_eq!(tiers.refresh().await.unwrap(), 2);
        assert_eq!(count(&mock, "HSCAN"), 2);
        for i in 0..1_000 {
            assert_eq!(tiers.tier(&format!("random-{i}")).await, None);
        }
        assert_eq!(count(&mock, "HGET"), 0, "unknown keys: no round trip");
        for _ in 0..10 {
            assert_eq!(tiers.tier("pro-key").await.as_deref(), Some("pro"));
        }
        assert_eq!(count(&mock, "HGET"), 1, "a known key: once per TTL");
        let s = tiers.stats();
        assert_eq!((s.redis_lookups, s.cached, s.unknown_local), (1, 9, 1_000));
        assert_eq!(s.snapshot_keys, 2);
    }

    #[tokio::test]
    async fn without_a_snapshot_unknown_keys_are_cached_negatively_and_bounded() {
        let mock = hash_mock();
        let tiers = tiers_on(&mock, 4).snapshot_max_keys(0);
        assert_eq!(tiers.tier("pro-key").await.as_deref(), Some("pro"));
        for _ in 0..10 {
            for k in ["a", "b", "c", "d"] {
                assert_eq!(tiers.tier(k).await, None);
            }
        }
        assert_eq!(count(&mock, "HGET"), 5, "one lookup per unknown key");
        assert_eq!(count(&mock, "HSCAN"), 0);
        // Random keys fill the negative cache (bounded), never evicting the known key.
        for i in 0..100 {
            tiers.tier(&format!("r{i}")).await;
        }
        mock.clear();
        assert_eq!(tiers.tier("pro-key").await.as_deref(), Some("pro"));
        assert_eq!(count(&mock, "HGET"), 0, "the known key is still cached");
        assert_eq!(tiers.unknown.lock().unwrap().len(), 4);
    }

    #[tokio::test]
    async fn a_hash_over_the_limit_gets_no_snapshot() {
        let mock = hash_mock();
        let tiers = tiers_on(&mock, 4).snapshot_max_keys(1);
        assert!(tiers.refresh().await.is_err());
        assert_eq!(tiers.stats().snapshot_keys, 0);
        assert_eq!(tiers.tier("x").await, None);
        assert_eq!(count(&mock, "HGET"), 1, "per-key lookups instead");
    }
}
