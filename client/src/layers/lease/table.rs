//! The lease table: one lease per hot key, units reserved from it for each request, batches
//! taken when it runs out, sized from the instance's own recent demand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::refund::{add, Counts};
use super::sizing::{batch_size, demand_rate, hold_after_nothing, hold_after_partial, served};
use super::{LeaseConfig, LeaseStats};
use crate::fleet::FleetView;
use crate::layers::decider::{Check, Decider};
use crate::limiter::decision::{Decision, Source, Verdict};
use crate::limiter::policy::Policy;

#[derive(Debug)]
pub(super) struct State {
    /// Units left to spend in the current lease.
    pub(super) units: u64,
    /// A lease is held (its timer has not ended it).
    pub(super) live: bool,
    /// Bumped by every take: a timer or a give-back of an older lease does nothing.
    pub(super) generation: u64,
    /// The decision of the take, for the decisions of the requests served from it.
    pub(super) taken: Option<(Instant, Decision)>,
    /// Units asked for since `since` (the last take; `None` before the first), and the
    /// smoothed rate (units per second) so far.
    pub(super) asked: u64,
    pub(super) since: Option<Instant>,
    pub(super) rate: Option<u64>,
    /// The last take that failed (Redis unavailable): requests that waited for it do not
    /// try again at once.
    pub(super) failed_at: Option<Instant>,
    /// After a grant of nothing: no take before this instant (the denial to answer until
    /// then).
    pub(super) closed: Option<(Instant, Decision)>,
}

/// One hot key's lease.
#[derive(Debug)]
pub(super) struct Lease {
    pub(super) key: String,
    pub(super) policy: Policy,
    state: Mutex<State>,
    /// One take at a time.
    taking: tokio::sync::Mutex<()>,
}

impl Lease {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Units reserved from a lease for one request: spent when the request is allowed, given
/// back with [`Leases::give_back`] when another dimension denies it.
#[derive(Debug)]
pub(crate) struct Reservation {
    lease: Arc<Lease>,
    generation: u64,
    cost: u64,
}

/// What a hot key answers for one request.
#[derive(Debug)]
pub(crate) enum Reserve {
    /// Units reserved (from a lease in hand, or from a batch just taken).
    Reserved(Reservation, Decision),
    /// The limiter has nothing for this request (its denial, or the deny cache's).
    Denied(Decision),
    /// No lease could be had (Redis unavailable, or not a lease policy now): decide the
    /// key the ordinary way.
    Ordinary,
}

/// The lease table of one limiter.
pub(crate) struct Leases {
    pub(super) config: LeaseConfig,
    pub(super) decider: Arc<dyn Decider>,
    fleet: Arc<FleetView>,
    pub(super) table: Mutex<HashMap<String, Arc<Lease>>>,
    pub(super) counts: Arc<Counts>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Leases {
    pub(crate) fn new(
        config: LeaseConfig,
        decider: Arc<dyn Decider>,
        fleet: Arc<FleetView>,
    ) -> Self {
        Self {
            config,
            decider,
            fleet,
            table: Mutex::new(HashMap::new()),
            counts: Arc::new(Counts::default()),
        }
    }

    pub(crate) fn stats(&self) -> LeaseStats {
        self.counts.stats()
    }

    fn lease(&self, key: &str, policy: &Policy) -> Option<Arc<Lease>> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = table.get(key) {
            if l.policy == *policy {
                return Some(l.clone());
            }
        }
        if table.len() >= self.config.max_keys {
            // Make room: leases that hold nothing (their units refunded) go first.
            table.retain(|_, l| l.lock().live);
            if table.len() >= self.config.max_keys {
                return None;
            }
        }
        let lease = Arc::new(Lease {
            key: key.to_owned(),
            policy: *policy,
            state: Mutex::new(State {
                units: 0,
                live: false,
                generation: 0,
                taken: None,
                asked: 0,
                since: None,
                rate: None,
                failed_at: None,
                closed: None,
            }),
            taking: tokio::sync::Mutex::new(()),
        });
        // A key whose policy changed (a configuration reload) starts a new lease; the old
        // one's timer still gives its units back.
        table.insert(key.to_owned(), lease.clone());
        Some(lease)
    }

    /// Reserves `cost` units of `key` for one request: from the lease in hand, else from a
    /// batch taken now. `policy` must be [`leasable`](super::leasable).
    pub(crate) async fn reserve(&self, key: &str, policy: &Policy, cost: u64) -> Reserve {
        let Some(lease) = self.lease(key, policy) else {
            return Reserve::Ordinary;
        };
        let asked_at = Instant::now();
        if let Some(r) = self.serve_from(&lease, cost, asked_at, true) {
            return r;
        }
        let _taking = lease.taking.lock().await;
        // Another request may have taken a batch (or failed to) while this one waited.
        if let Some(r) = self.serve_from(&lease, cost, asked_at, false) {
            return r;
        }
        self.take(&lease, cost).await
    }

    /// Serves `cost` from the lease in hand if it is live and holds enough; ends a lease
    /// past its lifetime. `None`: a batch must be taken.
    fn serve_from(
        &self,
        lease: &Arc<Lease>,
        cost: u64,
        asked_at: Instant,
        first_look: bool,
    ) -> Option<Reserve> {
        let now = Instant::now();
        let mut s = lease.lock();
        if first_look {
            s.asked = s.asked.saturating_add(cost);
        }
        // A take failed while this request waited, or lately (Redis unavailable): the
        // ordinary path, whose failure mode decides, without another try now.
        let failed_lately = s.failed_at.is_some_and(|t| {
            (!first_look && t >= asked_at) || now.duration_since(t) < self.config.lifetime
        });
        let in_hand = s.live && s.units >= cost;
        if failed_lately && !in_hand {
            return Some(Reserve::Ordinary);
        }
        if let (Some((until, mut denied)), false) = (s.closed, in_hand) {
            if now < until {
                denied.verdict = Verdict::Denied {
                    retry_after: until - now,
                };
                denied.source = Source::DenyCache;
                return Some(Reserve::Denied(denied));
            }
        }
        if s.live {
            if let Some((taken_at, d)) = s.taken {
                if now.duration_since(taken_at) >= self.config.lifetime {
                    let left = end(&mut s);
                    drop(s);
                    self.refund_later(lease.clone(), left);
                    return None;
                }
                if s.units >= cost {
                    s.units -= cost;
                    let decision = served(&d, s.units, now.duration_since(taken_at));
                    let r = Reservation {
                        lease: lease.clone(),
                        generation: s.generation,
                        cost,
                    };
                    drop(s);
                    add(&self.counts.hits, 1, "rl_lease_hits_total");
                    let mut decision = decision;
                    decision.source = Source::Lease;
                    return Some(Reserve::Reserved(r, decision));
                }
            }
        }
        None
    }

    /// Takes a batch sized from recent demand and reserves `cost` of it.
    async fn take(&self, lease: &Arc<Lease>, cost: u64) -> Reserve {
        let (batch, leftover) = {
            let mut s = lease.lock();
            let batch = self.batch_size(&mut s, lease.policy.limit(), cost);
            // What is left of the lease in hand (less than the cost) goes back.
            let leftover = if s.live { end(&mut s) } else { 0 };
            (batch, leftover)
        };
        self.refund_later(lease.clone(), leftover);
        let call = Check {
            key: &lease.key,
            algorithm: lease.policy.params(),
            cost: batch,
            peek: false,
        };
        let taken = self.decider.take_upto(call).await;
        // Count the calls that reached Redis (not the deny cache's or the open breaker's
        // answers).
        let sent = match &taken {
            Ok(g) => g.decision.source == Source::Redis,
            Err(e) => !matches!(e, crate::Error::BreakerOpen),
        };
        if sent {
            add(&self.counts.takes, 1, "rl_lease_takes_total");
        }
        let grant = match taken {
            Ok(g) => g,
            Err(_) => {
                lease.lock().failed_at = Some(Instant::now());
                return Reserve::Ordinary;
            }
        };
        if grant.granted == 0 {
            // Nothing left: ask again once a batch could have freed up (the wait for one
            // unit times the batch, within a lifetime), not at every unit: a saturated key
            // then costs the fleet about one call per batch, not one per unit per gateway.
            let one = grant.decision.retry_after().unwrap_or(Duration::ZERO);
            let hold = hold_after_nothing(&self.config, one, batch);
            if !hold.is_zero() {
                lease.lock().closed = Some((Instant::now() + hold, grant.decision));
            }
            return Reserve::Denied(grant.decision);
        }
        add(
            &self.counts.granted,
            grant.granted,
            "rl_lease_units_granted_total",
        );
        let now = Instant::now();
        let mut s = lease.lock();
        s.generation = s.generation.wrapping_add(1);
        s.live = true;
        s.taken = Some((now, grant.decision));
        s.failed_at = None;
        // A partial grant means the key is at its limit: once this lease is spent, ask again
        // only when a batch could have freed up (one unit's share of the window times the
        // batch, within a lifetime), as after a grant of nothing.
        s.closed = (grant.granted < batch).then(|| {
            let hold = hold_after_partial(&self.config, &lease.policy, batch);
            (now + hold, grant.decision)
        });
        let generation = s.generation;
        let reserved = grant.granted >= cost;
        s.units = if reserved {
            grant.granted - cost
        } else {
            grant.granted
        };
        let units = s.units;
        drop(s);
        self.end_later(lease.clone(), generation);
        if !reserved {
            // Less than this request's cost is available: the units stay in the lease for
            // smaller requests, and the ordinary call gives this one its exact answer.
            return Reserve::Ordinary;
        }
        let r = Reservation {
            lease: lease.clone(),
            generation,
            cost,
        };
        Reserve::Reserved(r, served(&grant.decision, units, Duration::ZERO))
    }

    /// The batch to ask for: recent demand times `demand`, between `cost` and the largest
    /// lease. Resets the demand measure.
    fn batch_size(&self, s: &mut State, limit: u64, cost: u64) -> u64 {
        let now = Instant::now();
        let rate = match s.since {
            // The first take knows nothing yet (just this request); the next one measures.
            None => 0,
            Some(since) => {
                let rate = demand_rate(s.asked, now.duration_since(since), s.rate);
                s.rate = Some(rate);
                rate
            }
        };
        s.asked = 0;
        s.since = Some(now);
        let members = self.fleet.size().map_or(1, |n| n.get());
        batch_size(&self.config, rate, limit, members, cost)
    }

    /// Gives back units reserved for a request that another dimension denied: to the lease
    /// they came from if it is still the one in hand, else to Redis (a later lease must
    /// not spend them past their own lease's lifetime).
    pub(crate) fn give_back(&self, r: Reservation) {
        let mut s = r.lease.lock();
        if s.live && s.generation == r.generation {
            s.units = s.units.saturating_add(r.cost);
        } else {
            drop(s);
            self.refund_later(r.lease, r.cost);
        }
    }
}

/// Ends the lease in hand: its unspent units, to give back.
pub(super) fn end(s: &mut State) -> u64 {
    s.live = false;
    s.generation = s.generation.wrapping_add(1);
    std::mem::take(&mut s.units)
}
