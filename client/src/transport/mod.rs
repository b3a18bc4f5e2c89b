//! The bottom layer: one command to Redis at a time, each bounded by a timeout and guarded
//! by the circuit breaker, plus what the server can do (its capabilities, detected once).
//!
//! Everything above it (the [deciders](crate::layers::decider), the deny cache, the failure modes)
//! sends commands only through [`Transport::call`], so every round trip is timed out,
//! counted, measured (the `rl_redis_call_duration_seconds{outcome}` histogram) and seen by
//! the breaker in one place.

#[cfg(feature = "transport")]
pub mod backend;
pub mod breaker;
pub(crate) mod command;
#[cfg(feature = "transport")]
pub(crate) mod pipelined;
#[cfg(feature = "transport")]
pub(crate) mod resp;

// Without feature `transport` only the breaker (its state, the sans-I/O op's too) and the
// parameters' words are here.
#[cfg(feature = "transport")]
use {
    crate::error::{Error, Refusal, Result},
    crate::transport::backend::Backend,
    crate::transport::breaker::{Breaker, BreakerConfig, Permit},
    redis::{Cmd, Value},
    std::collections::HashMap,
    std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering},
    std::sync::{Arc, Mutex},
    std::time::Duration,
};

// Capability bits, detected once with COMMAND INFO.
#[cfg(feature = "transport")]
const CAPS_KNOWN: u8 = 1;
#[cfg(feature = "transport")]
const CAPS_ALL: u8 = 2;
#[cfg(feature = "transport")]
const CAPS_REFUND: u8 = 4;

/// What the server offers beyond the single-key commands.
#[cfg(feature = "transport")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `RL.ALL` (several keys all or nothing in one call).
    pub rl_all: bool,
    /// `RL.REFUND` (give units back).
    pub rl_refund: bool,
}

#[cfg(feature = "transport")]
impl Capabilities {
    fn from_bits(bits: u8) -> Self {
        Self {
            rl_all: bits & CAPS_ALL != 0,
            rl_refund: bits & CAPS_REFUND != 0,
        }
    }

    fn bits(self) -> u8 {
        CAPS_KNOWN
            | if self.rl_all { CAPS_ALL } else { 0 }
            | if self.rl_refund { CAPS_REFUND } else { 0 }
    }
}

/// The connection to Redis as the layers above see it: [`Backend`] + timeout + breaker +
/// capabilities + call counters.
#[cfg(feature = "transport")]
pub struct Transport {
    backend: Arc<dyn Backend>,
    timeout: Duration,
    breaker: Breaker,
    caps: AtomicU8,
    redis_calls: AtomicU64,
    errors: AtomicU64,
    last_error_log_ms: AtomicU64,
    /// Commands Redis refused to the limiter's user (by command name), until one of them
    /// succeeds: what the health check reports as "authentication failed" or "permission
    /// denied".
    refusals: Mutex<HashMap<String, Refusal>>,
    /// `refusals` is not empty: calls without a refusal need not look at it.
    any_refusal: AtomicBool,
}

#[cfg(feature = "transport")]
impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("timeout", &self.timeout)
            .field("breaker", &self.breaker.state())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "transport")]
impl Transport {
    /// A transport over `backend`. `rl_all` forces the capabilities (`Some(true)`: the
    /// server has `RL.ALL` and `RL.REFUND`; `Some(false)`: neither) instead of detecting
    /// them on first use.
    pub fn new(
        backend: Arc<dyn Backend>,
        timeout: Duration,
        breaker: BreakerConfig,
        rl_all: Option<bool>,
    ) -> Self {
        let caps = rl_all.map_or(0, |on| {
            Capabilities {
                rl_all: on,
                rl_refund: on,
            }
            .bits()
        });
        Self {
            backend,
            timeout,
            breaker: Breaker::new(breaker),
            caps: AtomicU8::new(caps),
            redis_calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_error_log_ms: AtomicU64::new(0),
            refusals: Mutex::new(HashMap::new()),
            any_refusal: AtomicBool::new(false),
        }
    }

    /// Runs `cmd` through the breaker and the timeout. An error meaning Redis is unavailable
    /// counts towards opening the breaker; an error reply from a healthy server does not.
    pub async fn call(&self, cmd: &Cmd, slot: Option<u16>) -> Result<Value> {
        if self.breaker.permit() == Permit::Reject {
            return Err(Error::BreakerOpen);
        }
        self.redis_calls.fetch_add(1, Ordering::Relaxed);
        // One clock read for the deadline and the histogram.
        let started = tokio::time::Instant::now();
        let deadline = started + self.timeout;
        let result = match tokio::time::timeout_at(deadline, self.backend.query(cmd, slot)).await {
            Err(_) => Err(Error::Timeout(self.timeout)),
            Ok(Err(e)) => Err(Error::Redis(e)),
            Ok(Ok(v)) => Ok(v),
        };
        let refusal = result.as_ref().err().and_then(Error::refusal);
        self.note_refusal(cmd, refusal);
        let outcome = match &result {
            Err(e) if refusal.is_some() => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                // A wrong password fails at connect: every call would reconnect, so the
                // breaker spares Redis that; a command the ACL refuses is a healthy reply.
                if refusal == Some(Refusal::AuthenticationFailed) {
                    self.breaker.on_failure();
                } else {
                    self.breaker.on_success();
                }
                metrics::counter!("rl_redis_refusals_total", "reason" => refusal.map_or("", Refusal::name))
                    .increment(1);
                self.log_refusal(cmd, e);
                "refused"
            }
            Err(e) if e.is_outage() => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.breaker.on_failure();
                if matches!(e, Error::Timeout(_)) {
                    "timeout"
                } else {
                    "unavailable"
                }
            }
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.breaker.on_success();
                "error_reply"
            }
            Ok(_) => {
                self.breaker.on_success();
                "ok"
            }
        };
        metrics::histogram!("rl_redis_call_duration_seconds", "outcome" => outcome)
            .record(started.elapsed().as_secs_f64());
        result
    }

    /// Pings Redis directly (bypassing the breaker, within the timeout): for health checks.
    pub async fn ping(&self) -> bool {
        self.ping_result().await.is_ok()
    }

    /// [`ping`](Self::ping) with the reason of a failure (a [`Refusal`] when Redis refused
    /// the user); a refusal is also remembered as [`refusals`](Self::refusals) report.
    pub async fn ping_result(&self) -> Result<()> {
        let cmd = redis::cmd("PING");
        let result = match tokio::time::timeout(self.timeout, self.backend.query(&cmd, None)).await
        {
            Err(_) => Err(Error::Timeout(self.timeout)),
            Ok(Err(e)) => Err(Error::Redis(e)),
            Ok(Ok(_)) => Ok(()),
        };
        self.note_refusal(&cmd, result.as_ref().err().and_then(Error::refusal));
        result
    }

    /// The refusals standing: each command Redis last refused to the limiter's user, and
    /// why (cleared when the command next succeeds; every one of them when Redis next
    /// accepts the user's password).
    pub fn refusals(&self) -> Vec<(String, Refusal)> {
        let map = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<(String, Refusal)> = map.iter().map(|(c, r)| (c.clone(), *r)).collect();
        out.sort();
        out
    }

    fn note_refusal(&self, cmd: &Cmd, refusal: Option<Refusal>) {
        // The common case, an answer with no refusal standing: no name to make, no lock.
        if refusal.is_none() && !self.any_refusal.load(Ordering::Relaxed) {
            return;
        }
        let name = command_name(cmd);
        let mut map = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        match refusal {
            Some(r) => {
                // Bounded: one entry per command name the limiter sends.
                if map.len() < 64 || map.contains_key(&name) {
                    map.insert(name, r);
                }
            }
            None if map.is_empty() => {}
            None => {
                // Any answer means the password was accepted; the ACL verdict is per command.
                map.retain(|c, r| *r != Refusal::AuthenticationFailed && *c != name);
            }
        }
        // Set under the lock, so it never reads false while an entry stands.
        self.any_refusal.store(!map.is_empty(), Ordering::Relaxed);
    }

    /// Refusals are configuration errors someone must fix: logged at error level, once per
    /// ten seconds.
    fn log_refusal(&self, cmd: &Cmd, error: &Error) {
        let now_ms = wall_ms();
        let last = self.last_error_log_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < 10_000
            || self
                .last_error_log_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        match error.refusal() {
            Some(Refusal::PermissionDenied) => tracing::error!(
                command = %command_name(cmd),
                error = %error,
                "redis refused a command to the limiter's user (NOPERM): grant it in the user's ACL; deciding by failure mode"
            ),
            _ => tracing::error!(
                error = %error,
                "redis refused the limiter's credentials (WRONGPASS/NOAUTH): check the user and password in the URL; deciding by failure mode"
            ),
        }
    }

    /// The hash slot of `key` on a cluster (`None` on a standalone server).
    pub fn slot_of(&self, key: &str) -> Option<u16> {
        self.backend
            .is_cluster()
            .then(|| redis::cluster_routing::get_slot(key.as_bytes()))
    }

    /// True when keys are spread over hash slots.
    pub fn is_cluster(&self) -> bool {
        self.backend.is_cluster()
    }

    /// The timeout of one call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The circuit breaker.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Calls sent and calls failed since start.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.redis_calls.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }

    /// The server's capabilities, detected once (`COMMAND INFO RL.ALL RL.REFUND`).
    pub async fn capabilities(&self) -> Result<Capabilities> {
        let bits = self.caps.load(Ordering::Relaxed);
        if bits & CAPS_KNOWN != 0 {
            return Ok(Capabilities::from_bits(bits));
        }
        let v = self.call(&command::capabilities(), None).await?;
        let found = |i: usize| match &v {
            Value::Array(items) => items.get(i).is_some_and(|item| !matches!(item, Value::Nil)),
            _ => false,
        };
        let caps = Capabilities {
            rl_all: found(0),
            rl_refund: found(1),
        };
        tracing::debug!(
            rl_all = caps.rl_all,
            rl_refund = caps.rl_refund,
            "detected server capabilities"
        );
        self.caps.store(caps.bits(), Ordering::Relaxed);
        Ok(caps)
    }

    /// Forgets the capabilities (the server answered "unknown command" to one it was
    /// believed to have: the module was replaced), so the next use detects them again.
    pub fn forget_capabilities(&self) {
        self.caps.store(0, Ordering::Relaxed);
    }

    /// Logs a failed call at most once per second: an outage is reported by the breaker's
    /// transitions, not by a line per request.
    pub fn log_error(&self, command: &str, error: &Error) {
        if error.refusal().is_some() {
            // Logged at error level where it happened (`call`).
            return;
        }
        let now_ms = wall_ms();
        let last = self.last_error_log_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < 1_000 {
            tracing::debug!(command, error = %error, "redis call failed");
            return;
        }
        if self
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

/// This host's wall clock in ms since the epoch (for rate-limiting logs, and comparing with
/// the server's expiries).
#[cfg(feature = "transport")]
pub fn wall_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(u64::MAX)
}

/// The command's name (its first word, upper case): the key of the refusals.
#[cfg(feature = "transport")]
fn command_name(cmd: &Cmd) -> String {
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(bytes)) => String::from_utf8_lossy(bytes).to_ascii_uppercase(),
        _ => String::new(),
    }
}

/// True when `e` is Redis saying it does not know the command.
#[cfg(feature = "transport")]
pub(crate) fn is_unknown_command(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if r.to_string().to_ascii_lowercase().contains("unknown command"))
}

#[cfg(all(test, feature = "transport"))]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use crate::limiter::decision::Source;
    use crate::limiter::policy::FailureMode;
    use crate::testing::*;
    use crate::transport::breaker::{BreakerState, BreakerStats};

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
