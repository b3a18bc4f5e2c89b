//! The limiter: typed calls to the module, bounded by a timeout, guarded by the circuit
//! breaker and the deny cache, with the policy's failure mode when Redis cannot answer.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Cmd, Value};

use crate::backend::{Backend, Cluster, Standalone};
use crate::breaker::{Breaker, BreakerConfig, BreakerState, BreakerStats, Permit};
use crate::command;
use crate::decision::{self, Decision, MultiDecision, Source, Verdict};
use crate::deny_cache::DenyCache;
use crate::error::{Error, Result};
use crate::fallback::LocalLimiter;
use crate::policy::{FailureMode, Policy};

/// Default timeout of one call to Redis.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

// Capability bits, detected once with COMMAND INFO.
const CAPS_KNOWN: u8 = 1;
const CAPS_ALL: u8 = 2;
const CAPS_REFUND: u8 = 4;

/// Builds a [`Limiter`].
///
/// ```
/// use std::time::Duration;
/// use redis_rl_client::{BreakerConfig, Limiter};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let limiter = Limiter::builder()
///     .timeout(Duration::from_millis(20))
///     .breaker(BreakerConfig { failure_threshold: 3, open_for: Duration::from_secs(1) })
///     .standalone("redis://127.0.0.1:6379/")
///     .unwrap(); // nothing is connected until the first call
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct LimiterBuilder {
    timeout: Duration,
    breaker: BreakerConfig,
    deny_cache: usize,
    local_capacity: usize,
    rl_all: Option<bool>,
}

impl Default for LimiterBuilder {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            breaker: BreakerConfig::default(),
            deny_cache: 10_000,
            local_capacity: 100_000,
            rl_all: None,
        }
    }
}

impl LimiterBuilder {
    /// Timeout of each call to Redis (default 50 ms). A slow Redis then costs each request
    /// at most this, and the breaker soon stops even that.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Circuit breaker settings.
    pub fn breaker(mut self, config: BreakerConfig) -> Self {
        self.breaker = config;
        self
    }

    /// Keys remembered by the hot-key deny cache (default 10000; 0 turns it off).
    pub fn deny_cache(mut self, capacity: usize) -> Self {
        self.deny_cache = capacity;
        self
    }

    /// Keys held by the local fallback limiter (default 100000).
    pub fn local_capacity(mut self, capacity: usize) -> Self {
        self.local_capacity = capacity;
        self
    }

    /// Forces the use of `RL.ALL` (`Some(true)`) or of single calls (`Some(false)`) for
    /// multi-key checks, instead of detecting it once with `COMMAND INFO`.
    pub fn rl_all(mut self, use_it: Option<bool>) -> Self {
        self.rl_all = use_it;
        self
    }

    /// A limiter on a standalone server.
    pub fn standalone(self, url: &str) -> Result<Limiter> {
        let backend = Standalone::new(url, self.timeout)?;
        Ok(self.backend(Arc::new(backend)))
    }

    /// A limiter on a Redis Cluster reached through the seed `nodes`.
    pub fn cluster(self, nodes: &[String]) -> Result<Limiter> {
        let backend = Cluster::new(nodes, self.timeout)?;
        Ok(self.backend(Arc::new(backend)))
    }

    /// A limiter on any [`Backend`] (tests use this to inject faults).
    pub fn backend(self, backend: Arc<dyn Backend>) -> Limiter {
        let caps = match self.rl_all {
            None => 0,
            Some(true) => CAPS_KNOWN | CAPS_ALL | CAPS_REFUND,
            Some(false) => CAPS_KNOWN,
        };
        Limiter {
            inner: Arc::new(Inner {
                backend,
                timeout: self.timeout,
                breaker: Breaker::new(self.breaker),
                deny_cache: NonZeroUsize::new(self.deny_cache).map(DenyCache::new),
                local: LocalLimiter::new(self.local_capacity),
                caps: AtomicU8::new(caps),
                stats: Counters::default(),
                last_error_log_ms: AtomicU64::new(0),
            }),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    redis_calls: AtomicU64,
    errors: AtomicU64,
    deny_cache: AtomicU64,
    local: AtomicU64,
    fail_open: AtomicU64,
    fail_closed: AtomicU64,
}

/// Counts since start, for health endpoints and game days.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimiterStats {
    /// Calls sent to Redis (commands, including probes, refunds and tier lookups).
    pub redis_calls: u64,
    /// Calls that failed (error or timeout).
    pub errors: u64,
    /// Decisions answered by the deny cache.
    pub deny_cache: u64,
    /// Decisions made by the local fallback limiter.
    pub local: u64,
    /// Decisions allowed because Redis was unavailable (fail open).
    pub fail_open: u64,
    /// Decisions denied because Redis was unavailable (fail closed).
    pub fail_closed: u64,
    /// Breaker transitions.
    pub breaker: BreakerStats,
}

struct Inner {
    backend: Arc<dyn Backend>,
    timeout: Duration,
    breaker: Breaker,
    deny_cache: Option<DenyCache>,
    local: LocalLimiter,
    caps: AtomicU8,
    stats: Counters,
    last_error_log_ms: AtomicU64,
}

/// The client's entry point: cheap to clone, share one per process.
///
/// Every call has a timeout; failures count towards the circuit breaker; when Redis cannot
/// answer, each policy's [`FailureMode`] decides. `check*` therefore never fail: the
/// [`Decision`]'s `source` says who decided.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("timeout", &self.inner.timeout)
            .field("breaker", &self.inner.breaker.state())
            .finish_non_exhaustive()
    }
}

impl Limiter {
    /// A builder with the defaults (50 ms timeout, breaker 5 failures / 1 s, deny cache
    /// of 10000 keys, local store of 100000 keys).
    pub fn builder() -> LimiterBuilder {
        LimiterBuilder::default()
    }

    /// A limiter with the defaults on a standalone server.
    pub fn standalone(url: &str) -> Result<Limiter> {
        Self::builder().standalone(url)
    }

    /// Takes one unit for `key`.
    pub async fn check(&self, key: &str, policy: &Policy) -> Decision {
        self.check_n(key, policy, 1).await
    }

    /// Takes `cost` units for `key` (0: look without taking).
    pub async fn check_n(&self, key: &str, policy: &Policy, cost: u64) -> Decision {
        let mut d = self.decide_one(key, policy, cost, false).await;
        d.shadow = policy.is_shadow();
        d
    }

    /// Says what taking `cost` units would answer, taking nothing (`PEEK`).
    pub async fn peek(&self, key: &str, policy: &Policy, cost: u64) -> Decision {
        let mut d = self.decide_one(key, policy, cost, true).await;
        d.shadow = policy.is_shadow();
        d
    }

    async fn decide_one(&self, key: &str, policy: &Policy, cost: u64, peek: bool) -> Decision {
        if !peek {
            if let Some(d) = self.cached_denial(key, cost) {
                return d;
            }
        }
        let cmd = command::single(key, policy.algorithm(), cost, peek);
        let slot = self.slot_of(key);
        match self.call(&cmd, slot).await {
            Ok(v) => match decision::parse_single(policy.algorithm().command(), &v) {
                Ok(d) => {
                    if !peek {
                        self.remember_denial(key, cost, &d);
                    }
                    d
                }
                Err(e) => self.fallback(key, policy, cost, peek, &e),
            },
            Err(e) => self.fallback(key, policy, cost, peek, &e),
        }
    }

    /// Takes one unit on every key, all or nothing; see [`Limiter::check_all_n`].
    pub async fn check_all<K: AsRef<str>>(&self, items: &[(K, Policy)]) -> MultiDecision {
        self.check_all_n(items, 1).await
    }

    /// Takes `cost` units on every key if every enforced key allows it, else nothing.
    ///
    /// With `RL.ALL` on the server: one call per hash slot (one in all on a standalone
    /// server, atomic). Across slots, slot by slot, refunding (`RL.REFUND`) the slots
    /// already taken when a later one denies; between the take and the refund another
    /// client can see the lower count (best effort). Without `RL.ALL`: every key is peeked
    /// first (nothing taken if one denies), then taken; if a key denies in between
    /// (a race), the others are refunded when the server has `RL.REFUND`.
    ///
    /// Shadow policies are checked independently and never deny the request.
    pub async fn check_all_n<K: AsRef<str>>(
        &self,
        items: &[(K, Policy)],
        cost: u64,
    ) -> MultiDecision {
        let enforced: Vec<usize> = (0..items.len())
            .filter(|&i| items.get(i).is_some_and(|(_, p)| !p.is_shadow()))
            .collect();
        let shadow: Vec<usize> = (0..items.len())
            .filter(|&i| items.get(i).is_some_and(|(_, p)| p.is_shadow()))
            .collect();
        let pairs: Vec<(&str, &Policy)> = items.iter().map(|(k, p)| (k.as_ref(), p)).collect();
        let enforced_pairs: Vec<(&str, &Policy)> = enforced
            .iter()
            .filter_map(|&i| pairs.get(i).copied())
            .collect();
        let shadow_checks = shadow
            .iter()
            .filter_map(|&i| pairs.get(i).copied())
            .map(|(k, p)| self.check_n(k, p, cost));
        let (enforced_result, shadow_results) = tokio::join!(
            self.decide_all(&enforced_pairs, cost),
            join_all(shadow_checks)
        );

        let placeholder = Decision {
            verdict: Verdict::Allowed,
            limit: 0,
            remaining: 0,
            reset_after: Duration::ZERO,
            source: Source::Redis,
            shadow: false,
        };
        let mut decisions = vec![placeholder; items.len()];
        let (denied_sub, enforced_decisions) = enforced_result;
        for (&i, d) in enforced.iter().zip(enforced_decisions) {
            if let Some(slot) = decisions.get_mut(i) {
                *slot = d;
            }
        }
        for (&i, d) in shadow.iter().zip(shadow_results) {
            if let Some(slot) = decisions.get_mut(i) {
                *slot = d;
            }
        }
        MultiDecision {
            denied: denied_sub.and_then(|j| enforced.get(j).copied()),
            decisions,
        }
    }

    /// All-or-nothing over `pairs` (none in shadow mode): the index of the first denial and
    /// one decision per pair.
    async fn decide_all(
        &self,
        pairs: &[(&str, &Policy)],
        cost: u64,
    ) -> (Option<usize>, Vec<Decision>) {
        if pairs.is_empty() {
            return (None, Vec::new());
        }
        // A key the deny cache holds denies the whole request without a round trip.
        for (i, (key, _)) in pairs.iter().enumerate() {
            if let Some(d) = self.cached_denial(key, cost) {
                let mut out: Vec<Decision> = pairs.iter().map(|(_, p)| unknown(p)).collect();
                if let Some(slot) = out.get_mut(i) {
                    *slot = d;
                }
                return (Some(i), out);
            }
        }
        let result = match self.capabilities().await {
            Ok(caps) if caps & CAPS_ALL != 0 => self.redis_all(pairs, cost, caps).await,
            Ok(caps) => self.redis_single_calls(pairs, cost, caps).await,
            Err(e) => Err(e),
        };
        match result {
            Ok((denied, decisions)) => {
                if let Some(i) = denied {
                    if let (Some((key, _)), Some(d)) = (pairs.get(i), decisions.get(i)) {
                        self.remember_denial(key, cost, d);
                    }
                }
                (denied, decisions)
            }
            Err(e) => self.fallback_all(pairs, cost, &e),
        }
    }

    /// One RL.ALL per slot group; refunds earlier groups when a later one denies or fails.
    async fn redis_all(
        &self,
        pairs: &[(&str, &Policy)],
        cost: u64,
        caps: u8,
    ) -> Result<(Option<usize>, Vec<Decision>)> {
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
        let groups = command::slot_groups(&keys, self.inner.backend.is_cluster());
        let mut decisions: Vec<Decision> = pairs.iter().map(|(_, p)| unknown(p)).collect();
        let mut taken: Vec<usize> = Vec::new();
        for (slot, members) in &groups {
            let group: Vec<(&str, &crate::Algorithm)> = members
                .iter()
                .filter_map(|&i| pairs.get(i))
                .map(|(k, p)| (*k, p.algorithm()))
                .collect();
            let cmd = command::all(&group, cost, false);
            let outcome = match self.call(&cmd, *slot).await {
                Ok(v) => decision::parse_all(&v, group.len()),
                Err(e) => Err(e),
            };
            let (denied, group_decisions) = match outcome {
                Ok(r) => r,
                Err(e) => {
                    if is_unknown_command(&e) {
                        // The module was replaced by one without RL.ALL: detect again later.
                        self.inner.caps.store(0, Ordering::Relaxed);
                    }
                    self.refund(pairs, &taken, cost, caps).await;
                    return Err(e);
                }
            };
            for (&i, d) in members.iter().zip(group_decisions) {
                if let Some(slot) = decisions.get_mut(i) {
                    *slot = d;
                }
            }
            if let Some(j) = denied {
                self.refund(pairs, &taken, cost, caps).await;
                return Ok((members.get(j).copied(), decisions));
            }
            taken.extend(members.iter().copied());
        }
        Ok((None, decisions))
    }

    /// Without RL.ALL: peek every key (concurrently, pipelined on the one connection),
    /// then take every key; refund on a racing denial.
    async fn redis_single_calls(
        &self,
        pairs: &[(&str, &Policy)],
        cost: u64,
        caps: u8,
    ) -> Result<(Option<usize>, Vec<Decision>)> {
        let peeks = self.singles(pairs, cost, true).await?;
        if let Some(i) = peeks.iter().position(|d| d.is_denied()) {
            return Ok((Some(i), peeks));
        }
        let taken = self.singles(pairs, cost, false).await?;
        if let Some(i) = taken.iter().position(|d| d.is_denied()) {
            let allowed: Vec<usize> = (0..taken.len())
                .filter(|&j| taken.get(j).is_some_and(|d| !d.is_denied()))
                .collect();
            self.refund(pairs, &allowed, cost, caps).await;
            return Ok((Some(i), taken));
        }
        Ok((None, taken))
    }

    async fn singles(
        &self,
        pairs: &[(&str, &Policy)],
        cost: u64,
        peek: bool,
    ) -> Result<Vec<Decision>> {
        let calls = pairs.iter().map(|(key, policy)| async move {
            let cmd = command::single(key, policy.algorithm(), cost, peek);
            let v = self.call(&cmd, self.slot_of(key)).await?;
            decision::parse_single(policy.algorithm().command(), &v)
        });
        join_all(calls).await.into_iter().collect()
    }

    /// Gives back `cost` on the keys at `indexes`, best effort (errors are logged).
    async fn refund(&self, pairs: &[(&str, &Policy)], indexes: &[usize], cost: u64, caps: u8) {
        if indexes.is_empty() || cost == 0 {
            return;
        }
        if caps & CAPS_REFUND == 0 {
            tracing::debug!(
                keys = indexes.len(),
                "server has no RL.REFUND: units taken on other slots stay taken"
            );
            return;
        }
        let calls = indexes
            .iter()
            .filter_map(|&i| pairs.get(i))
            .map(|(key, policy)| async move {
                let cmd = command::refund(key, policy.algorithm(), cost);
                if let Err(e) = self.call(&cmd, self.slot_of(key)).await {
                    self.log_error("RL.REFUND", &e);
                }
            });
        join_all(calls).await;
    }

    /// The server's capabilities, detected once (`COMMAND INFO RL.ALL RL.REFUND`).
    async fn capabilities(&self) -> Result<u8> {
        let caps = self.inner.caps.load(Ordering::Relaxed);
        if caps & CAPS_KNOWN != 0 {
            return Ok(caps);
        }
        let v = self.call(&command::capabilities(), None).await?;
        let found = |i: usize| match &v {
            Value::Array(items) => items.get(i).is_some_and(|item| !matches!(item, Value::Nil)),
            _ => false,
        };
        let mut caps = CAPS_KNOWN;
        if found(0) {
            caps |= CAPS_ALL;
        }
        if found(1) {
            caps |= CAPS_REFUND;
        }
        tracing::debug!(
            rl_all = found(0),
            rl_refund = found(1),
            "detected server capabilities"
        );
        self.inner.caps.store(caps, Ordering::Relaxed);
        Ok(caps)
    }

    /// Runs any command through the breaker and timeout (tier lookups use this).
    pub async fn query(&self, cmd: &Cmd, slot: Option<u16>) -> Result<Value> {
        self.call(cmd, slot).await
    }

    async fn call(&self, cmd: &Cmd, slot: Option<u16>) -> Result<Value> {
        let inner = &self.inner;
        if inner.breaker.permit() == Permit::Reject {
            return Err(Error::BreakerOpen);
        }
        inner.stats.redis_calls.fetch_add(1, Ordering::Relaxed);
        let result = match tokio::time::timeout(inner.timeout, inner.backend.query(cmd, slot)).await
        {
            Err(_) => Err(Error::Timeout(inner.timeout)),
            Ok(Err(e)) => Err(Error::Redis(e)),
            Ok(Ok(v)) => Ok(v),
        };
        match &result {
            Err(e) if e.is_outage() => {
                inner.stats.errors.fetch_add(1, Ordering::Relaxed);
                inner.breaker.on_failure();
            }
            Err(_) => {
                inner.stats.errors.fetch_add(1, Ordering::Relaxed);
                inner.breaker.on_success();
            }
            Ok(_) => inner.breaker.on_success(),
        }
        result
    }

    /// Pings Redis directly (bypassing the breaker, within the timeout): for health checks.
    pub async fn ping(&self) -> bool {
        let inner = &self.inner;
        let cmd = redis::cmd("PING");
        matches!(
            tokio::time::timeout(inner.timeout, inner.backend.query(&cmd, None)).await,
            Ok(Ok(_))
        )
    }

    /// The circuit breaker's state.
    pub fn breaker_state(&self) -> BreakerState {
        self.inner.breaker.state()
    }

    /// Counts since start.
    pub fn stats(&self) -> LimiterStats {
        let c = &self.inner.stats;
        LimiterStats {
            redis_calls: c.redis_calls.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            deny_cache: c.deny_cache.load(Ordering::Relaxed),
            local: c.local.load(Ordering::Relaxed),
            fail_open: c.fail_open.load(Ordering::Relaxed),
            fail_closed: c.fail_closed.load(Ordering::Relaxed),
            breaker: self.inner.breaker.stats(),
        }
    }

    fn slot_of(&self, key: &str) -> Option<u16> {
        self.inner
            .backend
            .is_cluster()
            .then(|| redis::cluster_routing::get_slot(key.as_bytes()))
    }

    fn cached_denial(&self, key: &str, cost: u64) -> Option<Decision> {
        let d = self.inner.deny_cache.as_ref()?.get(key, cost)?;
        self.inner.stats.deny_cache.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("rl_client_decisions_total", "source" => "deny_cache").increment(1);
        Some(d)
    }

    fn remember_denial(&self, key: &str, cost: u64, d: &Decision) {
        if let Some(cache) = &self.inner.deny_cache {
            cache.remember(key, cost, d);
        }
    }

    /// Decides one key by its failure mode because Redis could not.
    fn fallback(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
        peek: bool,
        error: &Error,
    ) -> Decision {
        self.log_error(policy.algorithm().command(), error);
        let d = self.fail(key, policy, cost, peek);
        self.count_fallback(d.source);
        d
    }

    fn fail(&self, key: &str, policy: &Policy, cost: u64, peek: bool) -> Decision {
        let limit = policy.algorithm().limit();
        match policy.failure_mode() {
            FailureMode::Open => Decision {
                verdict: Verdict::Allowed,
                limit,
                remaining: limit,
                reset_after: Duration::ZERO,
                source: Source::FailOpen,
                shadow: false,
            },
            FailureMode::Closed => Decision {
                verdict: Verdict::Denied {
                    retry_after: self
                        .inner
                        .breaker
                        .remaining_open()
                        .max(Duration::from_secs(1)),
                },
                limit,
                remaining: 0,
                reset_after: Duration::ZERO,
                source: Source::FailClosed,
                shadow: false,
            },
            FailureMode::Local { instances } => {
                self.inner
                    .local
                    .check(key, policy.algorithm(), instances, cost, peek)
            }
        }
    }

    /// All-or-nothing by each key's failure mode: peek all, then take the local ones.
    fn fallback_all(
        &self,
        pairs: &[(&str, &Policy)],
        cost: u64,
        error: &Error,
    ) -> (Option<usize>, Vec<Decision>) {
        self.log_error("RL.ALL", error);
        let peeks: Vec<Decision> = pairs
            .iter()
            .map(|(k, p)| self.fail(k, p, cost, true))
            .collect();
        let denied = peeks.iter().position(|d| d.is_denied());
        let decisions = if denied.is_some() {
            peeks
        } else {
            pairs
                .iter()
                .map(|(k, p)| self.fail(k, p, cost, false))
                .collect()
        };
        for d in &decisions {
            self.count_fallback(d.source);
        }
        (denied, decisions)
    }

    fn count_fallback(&self, source: Source) {
        let c = &self.inner.stats;
        let counter = match source {
            Source::Local => &c.local,
            Source::FailOpen => &c.fail_open,
            Source::FailClosed => &c.fail_closed,
            Source::Redis | Source::DenyCache => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("rl_client_decisions_total", "source" => source.name()).increment(1);
    }

    /// Logs a failed call at most once per second: an outage is reported by the breaker's
    /// transitions, not by a line per request.
    fn log_error(&self, command: &str, error: &Error) {
        let now_ms = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis(),
        )
        .unwrap_or(u64::MAX);
        let last = self.inner.last_error_log_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < 1_000 {
            tracing::debug!(command, error = %error, "redis call failed");
            return;
        }
        if self
            .inner
            .last_error_log_ms
            .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            if error.is_outage() {
                tracing::info!(command, error = %error, "redis unavailable, deciding by failure mode");
            } else {
                tracing::warn!(command, error = %error, "redis call failed, deciding by failure mode");
            }
        }
    }
}

/// A decision for a key that was not checked (another key decided first): its limit, with
/// nothing known about its count.
fn unknown(policy: &Policy) -> Decision {
    let limit = policy.algorithm().limit();
    Decision {
        verdict: Verdict::Allowed,
        limit,
        remaining: limit,
        reset_after: Duration::ZERO,
        source: Source::Redis,
        shadow: policy.is_shadow(),
    }
}

fn is_unknown_command(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if r.to_string().to_ascii_lowercase().contains("unknown command"))
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::sync::atomic::AtomicU8;
    use std::sync::Mutex;

    use super::*;
    use crate::command::words;

    const UP: u8 = 0;
    const DOWN: u8 = 1;
    const HANG: u8 = 2;

    type Answer = Box<dyn Fn(&[String]) -> Value + Send + Sync>;

    /// A scripted Redis: records every command and its slot; answers with `answer` while
    /// up, refuses connections while down, never answers while hanging.
    struct Mock {
        mode: AtomicU8,
        cluster: bool,
        log: Mutex<Vec<(Vec<String>, Option<u16>)>>,
        answer: Answer,
    }

    impl Mock {
        fn new(
            cluster: bool,
            answer: impl Fn(&[String]) -> Value + Send + Sync + 'static,
        ) -> Arc<Self> {
            Arc::new(Self {
                mode: AtomicU8::new(UP),
                cluster,
                log: Mutex::new(Vec::new()),
                answer: Box::new(answer),
            })
        }

        fn set(&self, mode: u8) {
            self.mode.store(mode, Ordering::SeqCst);
        }

        fn commands(&self) -> Vec<Vec<String>> {
            self.log
                .lock()
                .unwrap()
                .iter()
                .map(|(w, _)| w.clone())
                .collect()
        }

        fn names(&self) -> Vec<String> {
            self.commands().iter().map(|w| w[0].clone()).collect()
        }

        fn clear(&self) {
            self.log.lock().unwrap().clear();
        }
    }

    impl Backend for Mock {
        fn query<'a>(
            &'a self,
            cmd: &'a Cmd,
            slot: Option<u16>,
        ) -> crate::backend::BoxFuture<'a, redis::RedisResult<Value>> {
            let w = words(cmd);
            self.log.lock().unwrap().push((w.clone(), slot));
            let mode = self.mode.load(Ordering::SeqCst);
            let reply = (self.answer)(&w);
            Box::pin(async move {
                match mode {
                    UP => match reply {
                        Value::SimpleString(e) if e.starts_with('-') => {
                            Err((redis::ErrorKind::ResponseError, "error reply", e).into())
                        }
                        v => Ok(v),
                    },
                    DOWN => Err(
                        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "down").into(),
                    ),
                    _ => std::future::pending().await,
                }
            })
        }

        fn is_cluster(&self) -> bool {
            self.cluster
        }
    }

    fn ints(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|i| Value::Int(*i)).collect())
    }

    fn allow() -> Value {
        ints(&[1, 10, 9, 0, 1_000])
    }

    fn deny(retry_ms: i64) -> Value {
        ints(&[0, 10, 0, retry_ms, 1_000])
    }

    fn caps(all: bool) -> Value {
        let entry = |on: bool| if on { Value::Array(vec![]) } else { Value::Nil };
        Value::Array(vec![entry(all), entry(all)])
    }

    fn limiter(mock: &Arc<Mock>) -> Limiter {
        Limiter::builder()
            .timeout(Duration::from_millis(20))
            .breaker(BreakerConfig {
                failure_threshold: 3,
                open_for: Duration::from_millis(500),
            })
            .backend(mock.clone())
    }

    fn policy(mode: FailureMode) -> Policy {
        Policy::sliding(2, 60_000).unwrap().on_failure(mode)
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_redis_costs_one_timeout_per_call_until_the_breaker_opens() {
        let mock = Mock::new(false, |_| allow());
        let l = limiter(&mock);
        mock.set(HANG);
        let p = policy(FailureMode::Open);
        for _ in 0..3 {
            let start = tokio::time::Instant::now();
            let d = l.check("k", &p).await;
            assert_eq!(d.source, Source::FailOpen);
            assert!(d.allows());
            assert_eq!(
                start.elapsed(),
                Duration::from_millis(20),
                "bounded by the timeout"
            );
        }
        assert_eq!(l.breaker_state(), BreakerState::Open);
        let start = tokio::time::Instant::now();
        let d = l.check("k", &p).await;
        assert_eq!(d.source, Source::FailOpen);
        assert_eq!(start.elapsed(), Duration::ZERO, "no call while open");
        assert_eq!(mock.commands().len(), 3);
        assert_eq!(l.stats().fail_open, 4);
        assert_eq!(l.stats().errors, 3);

        // Recovery: after open_for, one probe; it succeeds and closes the breaker.
        mock.set(UP);
        tokio::time::advance(Duration::from_millis(500)).await;
        let d = l.check("k", &p).await;
        assert_eq!(d.source, Source::Redis);
        assert_eq!(l.breaker_state(), BreakerState::Closed);
        assert_eq!(
            l.stats().breaker,
            BreakerStats {
                opened: 1,
                closed: 1
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failure_modes_decide_when_redis_is_down() {
        let mock = Mock::new(false, |_| allow());
        mock.set(DOWN);
        let l = limiter(&mock);
        let open = l.check("k", &policy(FailureMode::Open)).await;
        assert!(open.allows());
        assert_eq!(open.source, Source::FailOpen);
        let closed = l.check("k", &policy(FailureMode::Closed)).await;
        assert!(!closed.allows());
        assert_eq!(closed.source, Source::FailClosed);
        assert!(closed.retry_after().unwrap() >= Duration::from_secs(1));
        // Local: exactly the limit (2) per instance, then denied.
        let local = policy(FailureMode::LOCAL);
        let admitted = [
            l.check("k", &local).await,
            l.check("k", &local).await,
            l.check("k", &local).await,
        ];
        assert!(admitted.iter().all(|d| d.source == Source::Local));
        assert_eq!(admitted.iter().filter(|d| d.allows()).count(), 2);
        // Divided by the expected instances: 2 / 2 = 1.
        let shared = policy(FailureMode::Local {
            instances: NonZeroU32::new(2).unwrap(),
        });
        assert!(l.check("j", &shared).await.allows());
        assert!(!l.check("j", &shared).await.allows());
    }

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

    #[tokio::test(start_paused = true)]
    async fn check_all_sends_one_rl_all_on_a_standalone_server() {
        let mock = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            "RL.ALL" => Value::Array(vec![
                Value::Int(1),
                Value::Int(0),
                Value::Array(vec![ints(&[2, 1, 0, 500]), ints(&[5, 3, 0, 100])]),
            ]),
            _ => Value::Nil,
        });
        let l = limiter(&mock);
        let items = [
            ("rl:{a}", Policy::sliding(2, 1_000).unwrap()),
            ("rl:{b}", Policy::token_bucket(5, 1, 100).unwrap()),
        ];
        let md = l.check_all(&items).await;
        assert!(md.allows());
        assert_eq!(md.decisions[1].remaining, 3);
        l.check_all(&items).await;
        let cmds = mock.commands();
        assert_eq!(cmds[0], ["COMMAND", "INFO", "RL.ALL", "RL.REFUND"]);
        assert_eq!(
            cmds[1],
            [
                "RL.ALL",
                "2",
                "rl:{a}",
                "rl:{b}",
                "SLIDING",
                "2",
                "1000",
                "TOKENBUCKET",
                "5",
                "1",
                "100"
            ]
        );
        assert_eq!(
            mock.names(),
            ["COMMAND", "RL.ALL", "RL.ALL"],
            "capabilities detected once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn across_slots_a_later_denial_refunds_the_slots_already_taken() {
        let mock = Mock::new(true, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            // The group holding the ip key denies.
            "RL.ALL" if w.iter().any(|a| a.starts_with("rl:{ip")) => Value::Array(vec![
                Value::Int(0),
                Value::Int(1),
                Value::Array(vec![ints(&[100, 0, 2_500, 60_000])]),
            ]),
            "RL.ALL" => Value::Array(vec![
                Value::Int(1),
                Value::Int(0),
                Value::Array(vec![ints(&[10, 9, 0, 1]), ints(&[10, 9, 0, 1])]),
            ]),
            "RL.REFUND" => ints(&[1, 10, 10, 0, 0]),
            _ => Value::Nil,
        });
        let l = limiter(&mock);
        let p = Policy::sliding(10, 60_000).unwrap();
        let items = [
            ("rl:{k:1}:key", p),
            ("rl:{ip:1.2.3.4}", Policy::sliding(100, 60_000).unwrap()),
            ("rl:{k:1}:ep:/a", p),
            ("rl:{global}", p),
        ];
        let md = l.check_all_n(&items, 2).await;
        assert_eq!(md.denied, Some(1));
        assert_eq!(md.retry_after(), Some(Duration::from_millis(2_500)));
        let log = mock.log.lock().unwrap().clone();
        let sent: Vec<&Vec<String>> = log.iter().map(|(w, _)| w).collect();
        assert_eq!(
            *sent[1],
            [
                "RL.ALL",
                "2",
                "rl:{k:1}:key",
                "rl:{k:1}:ep:/a",
                "SLIDING",
                "10",
                "60000",
                "SLIDING",
                "10",
                "60000",
                "COST",
                "2"
            ]
        );
        assert_eq!(log[1].1, Some(redis::cluster_routing::get_slot(b"k:1")));
        assert_eq!(sent[2][2], "rl:{ip:1.2.3.4}");
        let refunds: Vec<&Vec<String>> = sent
            .iter()
            .filter(|w| w[0] == "RL.REFUND")
            .copied()
            .collect();
        assert_eq!(refunds.len(), 2);
        assert!(refunds.contains(&&vec![
            "RL.REFUND".to_string(),
            "rl:{k:1}:key".into(),
            "SLIDING".into(),
            "10".into(),
            "60000".into(),
            "COST".into(),
            "2".into()
        ]));
        assert!(
            !sent.iter().any(|w| w.contains(&"rl:{global}".to_string())),
            "later slots not touched"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_rl_all_every_key_is_peeked_before_any_is_taken() {
        let mock = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => caps(false),
            _ if w[1] == "b" => deny(700),
            _ => allow(),
        });
        let l = limiter(&mock);
        let p = Policy::sliding(10, 1_000).unwrap();
        let md = l.check_all(&[("a", p), ("b", p)]).await;
        assert_eq!(md.denied, Some(1));
        let cmds = mock.commands();
        assert_eq!(cmds.len(), 3);
        assert!(
            cmds[1..].iter().all(|w| w.last().unwrap() == "PEEK"),
            "{cmds:?}"
        );

        mock.clear();
        let md = l.check_all(&[("a", p), ("c", p)]).await;
        assert!(md.allows());
        let cmds = mock.commands();
        assert_eq!(cmds.len(), 4, "two peeks, two takes: {cmds:?}");
        assert_eq!(cmds[2], ["RL.SLIDING", "a", "10", "1000"]);
    }

    #[tokio::test(start_paused = true)]
    async fn check_all_falls_back_all_or_nothing() {
        let mock = Mock::new(false, |_| allow());
        mock.set(DOWN);
        let l = limiter(&mock);
        let one = Policy::sliding(1, 60_000).unwrap();
        let five = Policy::sliding(5, 60_000).unwrap();
        assert!(l.check_all(&[("x", five), ("y", one)]).await.allows());
        let md = l.check_all(&[("x", five), ("y", one)]).await;
        assert_eq!(md.denied, Some(1));
        assert!(md.decisions.iter().all(|d| d.source == Source::Local));
        // The denied request took nothing from x: 5 - 1 = 4 left.
        for _ in 0..4 {
            assert!(l.check("x", &five).await.allows());
        }
        assert!(!l.check("x", &five).await.allows());
    }

    #[tokio::test(start_paused = true)]
    async fn a_shadow_policy_records_but_never_denies() {
        let mock = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            "RL.ALL" => Value::Array(vec![
                Value::Int(1),
                Value::Int(0),
                Value::Array(vec![ints(&[10, 5, 0, 10])]),
            ]),
            _ => deny(900),
        });
        let l = limiter(&mock);
        let enforced = Policy::sliding(10, 1_000).unwrap();
        let shadow = Policy::sliding(1, 1_000).unwrap().shadow(true);
        let md = l.check_all(&[("a", enforced), ("s", shadow)]).await;
        assert!(md.allows());
        assert!(md.decisions[1].shadow);
        assert!(md.decisions[1].is_denied());
        assert!(md.decisions[1].allows());
        assert_eq!(md.retry_after(), None);
        let single = l.check("s", &shadow).await;
        assert!(single.allows() && single.is_denied());
    }

    #[tokio::test(start_paused = true)]
    async fn error_replies_do_not_open_the_breaker() {
        let mock = Mock::new(false, |_| {
            Value::SimpleString("-WRONGTYPE wrong kind of value".into())
        });
        let l = limiter(&mock);
        for _ in 0..10 {
            let d = l.check("k", &policy(FailureMode::Open)).await;
            assert_eq!(d.source, Source::FailOpen);
        }
        assert_eq!(l.breaker_state(), BreakerState::Closed);
        assert_eq!(mock.commands().len(), 10);
    }
}
