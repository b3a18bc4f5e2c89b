//! The failure-mode layer: turns "Redis could not answer" into a decision, by each
//! policy's [`FailureMode`] (open, closed, or the local fallback limiter, whose share of
//! each limit is the limit divided by the live fleet size when it is known, see
//! [`crate::fleet`], else by the policy's `instances`).

use std::num::NonZeroU32;
use std::time::Duration;

use crate::layers::fallback::LocalLimiter;
use crate::limiter::decision::{Decision, MultiDecision, Source, Verdict};
use crate::limiter::policy::{FailureMode, Policy};
use crate::transport::breaker::Breaker;
// The `Failover` layer's (feature `transport`).
#[cfg(feature = "transport")]
use {
    crate::error::Error,
    crate::fleet::FleetView,
    crate::layers::decider::{cost_at, Check, Decider},
    crate::layers::stack::{Ask, Keys, Layer},
    crate::transport::backend::BoxFuture,
    crate::transport::Transport,
    redis_rl_core::AnyParams,
    std::sync::atomic::{AtomicU64, Ordering},
    std::sync::Arc,
};

/// Decisions by failure mode since start.
#[cfg(feature = "transport")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailoverCounts {
    /// Made by the local fallback limiter.
    pub local: u64,
    /// Allowed because Redis was unavailable.
    pub fail_open: u64,
    /// Denied because Redis was unavailable.
    pub fail_closed: u64,
}

/// A [`Decider`] whose errors are decided by the policies' failure modes: the top of the
/// limiter's stack, so its answers never fail.
#[cfg(feature = "transport")]
#[derive(Debug)]
pub struct Failover<D> {
    inner: D,
    transport: Arc<Transport>,
    local: LocalLimiter,
    fleet: Arc<FleetView>,
    local_count: AtomicU64,
    fail_open: AtomicU64,
    fail_closed: AtomicU64,
}

#[cfg(feature = "transport")]
impl<D: Decider> Failover<D> {
    /// `inner`, falling back on `local` (the breaker and the error log are `transport`'s),
    /// which divides limits as `fleet` says.
    pub(crate) fn new(
        inner: D,
        transport: Arc<Transport>,
        local: LocalLimiter,
        fleet: Arc<FleetView>,
    ) -> Self {
        Self {
            inner,
            transport,
            local,
            fleet,
            local_count: AtomicU64::new(0),
            fail_open: AtomicU64::new(0),
            fail_closed: AtomicU64::new(0),
        }
    }

    /// The layer below.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Decisions made by failure mode since start.
    pub fn counts(&self) -> FailoverCounts {
        FailoverCounts {
            local: self.local_count.load(Ordering::Relaxed),
            fail_open: self.fail_open.load(Ordering::Relaxed),
            fail_closed: self.fail_closed.load(Ordering::Relaxed),
        }
    }

    /// One key: the inner decider's answer, else the failure mode's.
    pub async fn check(&self, key: &str, policy: &Policy, cost: u64, peek: bool) -> Decision {
        let algorithm = policy.params();
        let call = Check {
            key,
            algorithm,
            cost,
            peek,
        };
        match self.inner.check(call).await {
            Ok(d) => d,
            Err(e) => {
                self.transport.log_error(algorithm.kind().command(), &e);
                let d = self.fail(key, policy, cost, peek);
                self.count(d.source);
                d
            }
        }
    }

    /// All or nothing over `items` (none in shadow mode); when Redis cannot answer, by each
    /// key's failure mode: peek all, then take them only if none denies.
    pub async fn check_all(&self, items: &[(&str, &Policy)], cost: u64) -> MultiDecision {
        self.check_all_costs(items, &vec![cost; items.len()]).await
    }

    /// [`Failover::check_all`] with a cost per key (`costs[i]` on `items[i]`, a missing one
    /// 1), one atomic decision; the local fallback takes each key's own cost too.
    pub async fn check_all_costs(&self, items: &[(&str, &Policy)], costs: &[u64]) -> MultiDecision {
        if items.is_empty() {
            return MultiDecision {
                denied: None,
                decisions: Vec::new(),
            };
        }
        let algorithms: Vec<(&str, &AnyParams)> =
            items.iter().map(|(k, p)| (*k, p.params())).collect();
        match self.inner.check_all_costs(&algorithms, costs).await {
            Ok(md) => md,
            Err(e) => self.fallback_all(items, costs, &e),
        }
    }

    fn fallback_all(
        &self,
        items: &[(&str, &Policy)],
        costs: &[u64],
        error: &Error,
    ) -> MultiDecision {
        self.transport.log_error("RL.ALL", error);
        let multi = all_or_nothing(items.len(), |i, peek| {
            items
                .get(i)
                .map(|(k, p)| self.fail(k, p, cost_at(costs, i), peek))
        });
        for d in &multi.decisions {
            self.count(d.source);
        }
        multi
    }

    fn fail(&self, key: &str, policy: &Policy, cost: u64, peek: bool) -> Decision {
        let breaker = self.transport.breaker();
        failure_decision(
            key,
            policy,
            cost,
            peek,
            breaker,
            &self.local,
            self.fleet.share(),
        )
    }

    fn count(&self, source: Source) {
        let counter = match source {
            Source::Local => &self.local_count,
            Source::FailOpen => &self.fail_open,
            Source::FailClosed => &self.fail_closed,
            Source::Redis | Source::DenyCache | Source::Lease | Source::Unchecked => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("rl_client_decisions_total", "source" => source.name()).increment(1);
    }
}

/// The failure modes' answer for several keys, all or nothing: every key's answer is looked
/// at first (`decide(i, true)`), and taken (`decide(i, false)`) only when none denies, so a
/// key the fallback refuses costs the others nothing. `decide` answers key `i` of `n` (`None`
/// past the end). The async failover and the sans-I/O op both answer so.
pub(crate) fn all_or_nothing(
    n: usize,
    mut decide: impl FnMut(usize, bool) -> Option<Decision>,
) -> MultiDecision {
    let peeks: Vec<Decision> = (0..n).filter_map(|i| decide(i, true)).collect();
    let denied = peeks.iter().position(|d| !d.allows());
    let decisions = if denied.is_some() {
        peeks
    } else {
        (0..n).filter_map(|i| decide(i, false)).collect()
    };
    MultiDecision { denied, decisions }
}

/// What `policy`'s failure mode answers for `cost` units of `key` while Redis cannot:
/// allowed (open), denied until the `breaker` closes again, at least 1 s (closed), or the
/// `local` fallback limiter's decision on the limit divided by `fleet_size` when it is
/// known, else by the policy's `instances` (local). Every front end's failover is this one.
pub fn failure_decision(
    key: &str,
    policy: &Policy,
    cost: u64,
    peek: bool,
    breaker: &Breaker,
    local: &LocalLimiter,
    fleet_size: Option<NonZeroU32>,
) -> Decision {
    let limit = policy.limit();
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
                retry_after: breaker.remaining_open().max(Duration::from_secs(1)),
            },
            limit,
            remaining: 0,
            reset_after: Duration::ZERO,
            source: Source::FailClosed,
            shadow: false,
        },
        FailureMode::Local { instances } => {
            let share = fleet_size.unwrap_or(instances);
            local.check(key, policy.params(), share, cost, peek)
        }
    }
}

#[cfg(feature = "transport")]
impl<D: Decider> Layer for Failover<D> {
    fn decide<'a>(&'a self, ask: Ask<'a>) -> BoxFuture<'a, Decision> {
        Box::pin(self.check(ask.key, ask.policy, ask.cost, ask.peek))
    }

    fn decide_all<'a>(&'a self, items: Keys<'a>, costs: &'a [u64]) -> BoxFuture<'a, MultiDecision> {
        Box::pin(self.check_all_costs(items, costs))
    }

    fn decider(&self) -> &dyn Decider {
        &self.inner
    }
}

#[cfg(all(test, feature = "transport"))]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use crate::limiter::decision::Source;
    use crate::limiter::policy::{FailureMode, Policy};
    use crate::testing::*;

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
    async fn the_local_fallback_takes_each_keys_own_cost_all_or_nothing() {
        let mock = Mock::new(false, |_| allow());
        mock.set(DOWN);
        let l = limiter(&mock);
        let five = Policy::sliding(5, 60_000)
            .unwrap()
            .on_failure(FailureMode::LOCAL);
        let md = l
            .check_all_units(&[("x", five), ("y", five)], &[3, 1])
            .await;
        assert!(md.allows());
        assert_eq!(
            (md.decisions[0].remaining, md.decisions[1].remaining),
            (2, 4)
        );
        // x has 2 left: its cost of 3 refuses the request, and y's 1 is not taken.
        let md = l
            .check_all_units(&[("y", five), ("x", five)], &[1, 3])
            .await;
        assert_eq!(md.denied, Some(1));
        assert!(md.decisions.iter().all(|d| d.source == Source::Local));
        assert_eq!(l.check_n("y", &five, 4).await.remaining, 0);
        assert_eq!(l.check_n("x", &five, 2).await.remaining, 0);
    }
}
