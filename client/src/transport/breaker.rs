//! Circuit breaker: after N consecutive failures stop calling Redis for a while, then let
//! one probe through.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::Instant;

/// Breaker settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures (errors meaning Redis is unavailable, or timeouts) that open
    /// the breaker. Default 5.
    pub failure_threshold: u32,
    /// How long the breaker stays open before one probe is let through. Default 1 s, so
    /// the limiter is back on Redis about a second after Redis recovers.
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            open_for: Duration::from_secs(1),
        }
    }
}

/// The breaker's state as reported to operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go to Redis.
    Closed,
    /// Calls do not go to Redis; every decision uses the failure mode.
    Open,
    /// One probe call is in flight; the others use the failure mode.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half_open`.
    pub const fn name(&self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a call may go to Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permit {
    /// Closed: call.
    Call,
    /// Half-open: this call is the probe; its outcome closes or re-opens the breaker.
    Probe,
    /// Open: do not call.
    Reject,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { since: Instant },
}

/// Counts of state changes since start, for health endpoints and game days.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BreakerStats {
    /// Transitions to open (from closed, or from a failed probe).
    pub opened: u64,
    /// Transitions to closed (a probe succeeded).
    pub closed: u64,
}

/// The breaker. State changes are logged once each (`tracing` target
/// `redis_rl_client::breaker`) and counted (`rl_breaker_transitions_total`); nothing is
/// logged per request.
#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    state: Mutex<State>,
    opened: AtomicU64,
    closed: AtomicU64,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::Closed { failures: 0 }),
            opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a plain value: a panic elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks whether a call may go to Redis now.
    pub fn permit(&self) -> Permit {
        let mut state = self.lock();
        if let State::Closed { .. } = *state {
            // The usual answer needs no clock.
            return Permit::Call;
        }
        let now = Instant::now();
        match *state {
            State::Closed { .. } => Permit::Call,
            State::Open { until } if now >= until => {
                *state = State::HalfOpen { since: now };
                tracing::info!(target: "redis_rl_client::breaker", "circuit breaker half-open: probing redis");
                metrics::counter!("rl_breaker_transitions_total", "to" => "half_open").increment(1);
                Permit::Probe
            }
            State::Open { .. } => Permit::Reject,
            // A probe whose caller gave up without reporting (cancelled) must not wedge
            // the breaker: after `open_for`, another probe may go.
            State::HalfOpen { since } if now >= since + self.config.open_for => {
                *state = State::HalfOpen { since: now };
                Permit::Probe
            }
            State::HalfOpen { .. } => Permit::Reject,
        }
    }

    /// Reports a call that reached a healthy Redis (any reply, including an error reply).
    pub fn on_success(&self) {
        let mut state = self.lock();
        match *state {
            State::Closed { failures: 0 } => {}
            State::Closed { .. } => *state = State::Closed { failures: 0 },
            // A late success of a call made before the breaker opened proves little about
            // Redis now (a flapping link answers some calls): only the probe may close it.
            State::Open { .. } => {}
            State::HalfOpen { .. } => {
                *state = State::Closed { failures: 0 };
                drop(state);
                self.closed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: "redis_rl_client::breaker", "circuit breaker closed: redis is back");
                metrics::counter!("rl_breaker_transitions_total", "to" => "closed").increment(1);
            }
        }
    }

    /// Reports a call that failed because Redis is unavailable.
    pub fn on_failure(&self) {
        let now = Instant::now();
        let mut state = self.lock();
        let reopen = match *state {
            State::Closed { failures } => {
                let failures = failures.saturating_add(1);
                if failures >= self.config.failure_threshold {
                    tracing::warn!(
                        target: "redis_rl_client::breaker",
                        failures,
                        open_for_ms = u64::try_from(self.config.open_for.as_millis()).unwrap_or(u64::MAX),
                        "circuit breaker opened: redis unavailable, using the failure mode"
                    );
                    true
                } else {
                    *state = State::Closed { failures };
                    false
                }
            }
            State::HalfOpen { .. } => {
                tracing::info!(target: "redis_rl_client::breaker", "circuit breaker probe failed: open again");
                true
            }
            // Calls that started before the breaker opened and fail now change nothing.
            State::Open { .. } => false,
        };
        if reopen {
            *state = State::Open {
                until: now + self.config.open_for,
            };
            drop(state);
            self.opened.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("rl_breaker_transitions_total", "to" => "open").increment(1);
        }
    }

    /// The current state (an open breaker whose time is up reports half-open).
    pub fn state(&self) -> BreakerState {
        match *self.lock() {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { until } if Instant::now() >= until => BreakerState::HalfOpen,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Time until the breaker lets a probe through (zero unless open).
    pub fn remaining_open(&self) -> Duration {
        match *self.lock() {
            State::Open { until } => until.saturating_duration_since(Instant::now()),
            _ => Duration::ZERO,
        }
    }

    /// Transition counts since start.
    pub fn stats(&self) -> BreakerStats {
        BreakerStats {
            opened: self.opened.load(Ordering::Relaxed),
            closed: self.closed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(BreakerConfig {
            failure_threshold: 3,
            open_for: Duration::from_millis(500),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_n_consecutive_failures_only() {
        let b = breaker();
        b.on_failure();
        b.on_failure();
        b.on_success(); // resets the count
        b.on_failure();
        b.on_failure();
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.permit(), Permit::Call);
        b.on_failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.permit(), Permit::Reject);
        assert_eq!(b.stats().opened, 1);
        assert_eq!(b.remaining_open(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_after_open_for_then_closes_on_success() {
        let b = breaker();
        for _ in 0..3 {
            b.on_failure();
        }
        tokio::time::advance(Duration::from_millis(499)).await;
        assert_eq!(b.permit(), Permit::Reject);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(b.permit(), Permit::Probe);
        assert_eq!(b.permit(), Permit::Reject, "only one probe at a time");
        assert_eq!(b.state(), BreakerState::HalfOpen);
        b.on_success();
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.permit(), Permit::Call);
        assert_eq!(
            b.stats(),
            BreakerStats {
                opened: 1,
                closed: 1
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probe_reopens_for_another_period() {
        let b = breaker();
        for _ in 0..3 {
            b.on_failure();
        }
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(b.permit(), Permit::Probe);
        b.on_failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.remaining_open(), Duration::from_millis(500));
        assert_eq!(b.stats().opened, 2);
        // Late failures of calls made before opening change nothing.
        b.on_failure();
        assert_eq!(b.stats().opened, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_success_while_open_does_not_close_it() {
        let b = breaker();
        for _ in 0..3 {
            b.on_failure();
        }
        // A call made before the breaker opened answers now.
        b.on_success();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.permit(), Permit::Reject);
        assert_eq!(b.stats().closed, 0);
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(b.permit(), Permit::Probe);
        b.on_success();
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_probe_does_not_wedge_the_breaker() {
        let b = breaker();
        for _ in 0..3 {
            b.on_failure();
        }
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(b.permit(), Permit::Probe);
        // The probe's caller is cancelled and never reports.
        tokio::time::advance(Duration::from_millis(499)).await;
        assert_eq!(b.permit(), Permit::Reject);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(b.permit(), Permit::Probe);
    }
}
