//! Leases for hot keys: for a policy marked hot ([`Policy::hot`]), the limiter takes a
//! batch of units in one call (`COST n UPTO`, [`Decider::take_upto`]), spends it in
//! process one request at a time, and gives back what it did not spend (`RL.REFUND`) when
//! the lease ends: after its lifetime, or at [`crate::Limiter::shutdown`].
//!
//! The bounds (README, "Running a fleet"):
//! - nothing is admitted that the limiter did not grant: a unit is spent only out of a
//!   batch Redis granted;
//! - a unit is counted by Redis when the batch is taken and spent at most one `lifetime`
//!   later; that shift is the only over-admission (over any span of time, at most what
//!   the limiter granted over that span plus one lifetime before it);
//! - under-admission is at most the units held in other gateways' leases: together at most
//!   `max_percent` of the limit (each lease at most `limit × max_percent / 100 / fleet
//!   size`, and sized to `demand` of its own traffic);
//! - a refund that fails (Redis down) is dropped, never retried: the units stay counted
//!   (under-admission), never both given back and spent.
//!
//! A lease is sized from the instance's own recent demand: the units asked since the last
//! take over the time since, smoothed, times `demand` (200 ms by default); at least the
//! request's cost, at most this instance's share of `max_percent` of the limit (divided by
//! the live fleet size, see [`crate::fleet`]; 1 until known). A smaller grant makes a smaller
//! lease; a grant of nothing is a denial, remembered by the deny cache. After either (the key
//! is at its limit), the key is not asked again before a batch could have freed up: its
//! requests beyond the lease in hand are refused locally until then. One take per key is in
//! flight at a time: concurrent requests wait for it rather than each taking a batch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::decider::{Check, Decider};
use crate::decision::{Decision, Source, Verdict};
use crate::fleet::FleetView;
use crate::policy::Policy;

/// Lease settings ([`crate::LimiterBuilder::leases`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long a lease lives (default 250 ms): its unspent units are given back then. The
    /// longest a unit is spent after Redis counted it; keep it well under the window.
    pub lifetime: Duration,
    /// How much of the instance's recent demand a lease covers (default 200 ms).
    pub demand: Duration,
    /// What the whole fleet's leases of one key may hold together, in percent of the limit
    /// (default 10): each lease is at most `limit × max_percent / 100 / fleet size` units
    /// (at least one). The bound on under-admission.
    pub max_percent: u64,
    /// Hot keys holding a lease at once (default 10000); beyond, a hot key is decided by
    /// Redis on every request, as if not hot.
    pub max_keys: usize,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            lifetime: Duration::from_millis(250),
            demand: Duration::from_millis(200),
            max_percent: 10,
            max_keys: 10_000,
        }
    }
}

/// Lease counts since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Batches asked of Redis (`COST n UPTO` calls; not those the deny cache answered).
    pub takes: u64,
    /// Units granted by those calls.
    pub granted: u64,
    /// Requests served from a lease without a call.
    pub hits: u64,
    /// Refunds sent (`RL.REFUND` of a lease's unspent units).
    pub refunds: u64,
    /// Units given back by those refunds.
    pub refunded: u64,
    /// Unspent units not given back (refund failed, or the server gave back less).
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Counts {
    takes: AtomicU64,
    granted: AtomicU64,
    hits: AtomicU64,
    refunds: AtomicU64,
    refunded: AtomicU64,
    dropped: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64, name: &'static str) {
    counter.fetch_add(n, Ordering::Relaxed);
    metrics::counter!(name).increment(n);
}

/// The floor of the time a demand is measured over: a burst of a few requests within a
/// millisecond must not look like a huge rate.
const MIN_MEASURE: Duration = Duration::from_millis(10);

#[derive(Debug)]
struct State {
    /// Units left to spend in the current lease.
    units: u64,
    /// A lease is held (its timer has not ended it).
    live: bool,
    /// Bumped by every take: a timer or a give-back of an older lease does nothing.
    generation: u64,
    /// The decision of the take, for the decisions of the requests served from it.
    taken: Option<(Instant, Decision)>,
    /// Units asked for since `since` (the last take; `None` before the first), and the
    /// smoothed rate (units per second) so far.
    asked: u64,
    since: Option<Instant>,
    rate: Option<u64>,
    /// The last take that failed (Redis unavailable): requests that waited for it do not
    /// try again at once.
    failed_at: Option<Instant>,
    /// After a grant of nothing: no take before this instant (the denial to answer until
    /// then).
    closed: Option<(Instant, Decision)>,
}

/// One hot key's lease.
#[derive(Debug)]
struct Lease {
    key: String,
    policy: Policy,
    state: Mutex<State>,
    /// One take at a time.
    taking: tokio::sync::Mutex<()>,
}

impl Lease {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
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
    config: LeaseConfig,
    decider: Arc<dyn Decider>,
    fleet: Arc<FleetView>,
    table: Mutex<HashMap<String, Arc<Lease>>>,
    counts: Arc<Counts>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// True for a policy that can be served from leases: hot, and an algorithm that takes
/// `UPTO` (the registry says which).
pub(crate) fn leasable(policy: &Policy, cost: u64) -> bool {
    policy.is_hot() && cost > 0 && policy.kind().upto()
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
        let c = &self.counts;
        LeaseStats {
            takes: c.takes.load(Ordering::Relaxed),
            granted: c.granted.load(Ordering::Relaxed),
            hits: c.hits.load(Ordering::Relaxed),
            refunds: c.refunds.load(Ordering::Relaxed),
            refunded: c.refunded.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
        }
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
    /// batch taken now. `policy` must be [`leasable`].
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
            let hold = one
                .saturating_mul(u32::try_from(batch).unwrap_or(u32::MAX))
                .min(self.config.lifetime)
                .max(one);
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
            let hold = unit_time(&lease.policy)
                .saturating_mul(u32::try_from(batch).unwrap_or(u32::MAX))
                .min(self.config.lifetime);
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
                let over = now.duration_since(since).max(MIN_MEASURE);
                let observed = u128::from(s.asked) * 1_000_000 / over.as_micros().max(1);
                let observed = u64::try_from(observed).unwrap_or(u64::MAX);
                let rate = s.rate.map_or(observed, |r| r / 2 + observed / 2);
                s.rate = Some(rate);
                rate
            }
        };
        s.asked = 0;
        s.since = Some(now);
        let want = u128::from(rate) * self.config.demand.as_micros() / 1_000_000;
        let want = u64::try_from(want).unwrap_or(u64::MAX);
        let members = u128::from(self.fleet.size().map_or(1, |n| n.get()));
        let max = (u128::from(limit) * u128::from(self.config.max_percent) / 100 / members)
            .try_into()
            .unwrap_or(u64::MAX)
            .max(1);
        want.min(max).max(cost)
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

    /// Ends the lease of generation `generation` after the lifetime, giving its unspent
    /// units back.
    fn end_later(&self, lease: Arc<Lease>, generation: u64) {
        let (lifetime, decider, counts) = (
            self.config.lifetime,
            self.decider.clone(),
            self.counts.clone(),
        );
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            tokio::time::sleep(lifetime).await;
            let left = {
                let mut s = lease.lock();
                if !(s.live && s.generation == generation) {
                    return;
                }
                end(&mut s)
            };
            refund(&*decider, &counts, &lease, left).await;
        });
    }

    fn refund_later(&self, lease: Arc<Lease>, units: u64) {
        if units == 0 {
            return;
        }
        let (decider, counts) = (self.decider.clone(), self.counts.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move { refund(&*decider, &counts, &lease, units).await });
            }
            Err(_) => add(&counts.dropped, units, "rl_lease_units_dropped_total"),
        }
    }

    /// Ends every lease and gives the unspent units back (at shutdown).
    pub(crate) async fn release_all(&self) {
        let leases: Vec<Arc<Lease>> = {
            let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            table.values().cloned().collect()
        };
        let refunds = leases.iter().map(|lease| {
            let left = end(&mut lease.lock());
            refund(&*self.decider, &self.counts, lease, left)
        });
        futures_util::future::join_all(refunds).await;
    }
}

/// The time one unit takes to free up at the limit's rate: the window (or refill period)
/// over the limit.
fn unit_time(policy: &Policy) -> Duration {
    let nanos = policy.window().as_nanos() / u128::from(policy.limit().max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Ends the lease in hand: its unspent units, to give back.
fn end(s: &mut State) -> u64 {
    s.live = false;
    s.generation = s.generation.wrapping_add(1);
    std::mem::take(&mut s.units)
}

/// The decision of a request served from a lease taken with decision `taken`, `elapsed`
/// ago, `units` left in it: what Redis had left then plus what the lease still holds.
fn served(taken: &Decision, units: u64, elapsed: Duration) -> Decision {
    Decision {
        verdict: Verdict::Allowed,
        limit: taken.limit,
        remaining: taken.remaining.saturating_add(units).min(taken.limit),
        reset_after: taken.reset_after.saturating_sub(elapsed),
        source: taken.source,
        shadow: false,
    }
}

/// `RL.REFUND` of a lease's unspent units; a failure drops them (never retried, so never
/// given back twice).
async fn refund(decider: &dyn Decider, counts: &Counts, lease: &Lease, units: u64) {
    if units == 0 {
        return;
    }
    add(&counts.refunds, 1, "rl_lease_refunds_total");
    match decider
        .refund(&lease.key, lease.policy.params(), units)
        .await
    {
        Ok(back) => {
            add(&counts.refunded, back, "rl_lease_units_refunded_total");
            add(
                &counts.dropped,
                units.saturating_sub(back),
                "rl_lease_units_dropped_total",
            );
        }
        Err(e) => {
            tracing::debug!(key = %lease.key, units, error = %e, "lease refund dropped");
            add(&counts.dropped, units, "rl_lease_units_dropped_total");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use crate::decision::Source;
    use crate::policy::Policy;
    use crate::testing::*;

    /// The cost a command names.
    fn cost(w: &[String]) -> i64 {
        let i = w.iter().position(|a| a == "COST").unwrap();
        w[i + 1].parse().unwrap()
    }

    /// Grants every `UPTO` in full, refunds in full, denies every `RL.ALL`.
    fn server(w: &[String]) -> Value {
        match w[0].as_str() {
            "COMMAND" => caps(true),
            "RL.SLIDING" if w.iter().any(|a| a == "UPTO") => {
                ints(&[1, 100_000, 50_000, 0, 60_000, cost(w)])
            }
            "RL.REFUND" => ints(&[cost(w), 100_000, 50_000, 0, 60_000]),
            "RL.ALL" => Value::Array(vec![
                Value::Int(0),
                Value::Int(1),
                Value::Array(vec![ints(&[1, 0, 900, 60_000])]),
            ]),
            _ => allow(),
        }
    }

    fn hot() -> Policy {
        Policy::sliding(100_000, 60_000).unwrap().hot(true)
    }

    fn takes(mock: &Mock) -> Vec<i64> {
        mock.commands()
            .iter()
            .filter(|w| w.iter().any(|a| a == "UPTO"))
            .map(|w| cost(w))
            .collect()
    }

    /// Two requests 1 ms apart: the first takes one unit (no demand known yet), the second
    /// a batch for 200 ms of the demand measured (1 unit over the 10 ms floor: 100/s, 20).
    async fn warm_up(l: &crate::Limiter) {
        assert_eq!(l.check("g", &hot()).await.source, Source::Redis);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(l.check("g", &hot()).await.source, Source::Redis);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hot_key_takes_batches_sized_from_demand_and_refunds_the_rest() {
        let mock = Mock::new(false, server);
        let l = limiter(&mock);
        warm_up(&l).await;
        assert_eq!(takes(&mock), [1, 20]);
        for _ in 0..19 {
            let d = l.check("g", &hot()).await;
            assert!(d.allows());
            assert_eq!(d.source, Source::Lease);
        }
        assert_eq!(takes(&mock).len(), 2, "19 units spent without a call");
        // The demand grows: one request per millisecond is 1000/s, 200 per lease (well
        // under the largest lease, 10% of the limit).
        for _ in 0..400 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(l.check("g", &hot()).await.allows());
        }
        let sizes = takes(&mock);
        assert!(sizes.len() < 12, "{sizes:?}");
        assert!(sizes.iter().all(|&n| n <= 1_000), "{sizes:?}");
        // Idle past the lifetime: the rest goes back, once.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s = l.stats().leases;
        assert_eq!(s.takes, sizes.len() as u64);
        assert_eq!(s.granted, sizes.iter().sum::<i64>() as u64);
        assert_eq!(s.granted, 421 + s.refunded, "granted = spent + refunded");
        assert_eq!((s.refunds, s.dropped), (1, 0));
        assert_eq!(s.hits, 421 - s.takes);
    }

    #[tokio::test(start_paused = true)]
    async fn a_unit_is_spent_only_if_every_other_dimension_allows() {
        let mock = Mock::new(false, server);
        let l = limiter(&mock);
        warm_up(&l).await; // 19 units in hand
        let ip = Policy::sliding(1, 60_000).unwrap();
        let md = l.check_all(&[("ip", ip), ("g", hot())]).await;
        assert_eq!(md.denied, Some(0));
        assert_eq!(md.decisions[1].source, Source::Lease);
        // The unit went back: 19 still in hand.
        for _ in 0..19 {
            assert_eq!(l.check("g", &hot()).await.source, Source::Lease);
        }
        assert_eq!(l.check("g", &hot()).await.source, Source::Redis);
        assert_eq!(takes(&mock).len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_of_nothing_is_a_denial_and_goes_to_the_deny_cache() {
        let mock = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            _ => ints(&[0, 100_000, 0, 500, 60_000, 0]),
        });
        let l = limiter(&mock);
        let d = l.check("g", &hot()).await;
        assert_eq!(d.retry_after(), Some(Duration::from_millis(500)));
        let ip = Policy::sliding(10, 60_000).unwrap();
        let md = l.check_all(&[("ip", ip), ("g", hot())]).await;
        assert_eq!(md.denied, Some(1));
        assert_eq!(md.decisions[1].source, Source::DenyCache);
        assert_eq!(
            mock.commands().len(),
            1,
            "the other dimension was not asked"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_saturated_key_is_asked_again_once_a_batch_could_have_freed_up() {
        let saturated = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            // One unit frees every 2 ms, and another gateway takes it.
            _ => ints(&[0, 100_000, 0, 2, 60_000, 0]),
        });
        let l2 = limiter(&saturated);
        warm_up_denied(&l2).await;
        let mut denied = 0;
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            denied += u32::from(l2.check("g", &hot()).await.is_denied());
        }
        assert_eq!(denied, 200);
        let calls = saturated
            .names()
            .iter()
            .filter(|n| *n == "RL.SLIDING")
            .count();
        // Without the hold: one call per 2 ms (the deny cache's wait), 100.
        assert!(calls <= 20, "{calls} calls for 200 denied requests");
    }

    /// Demand measured on a key that is saturated from the start.
    async fn warm_up_denied(l: &crate::Limiter) {
        for _ in 0..3 {
            assert!(l.check("g", &hot()).await.is_denied());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_partial_grant_the_key_is_asked_again_once_a_batch_could_have_freed_up() {
        // Always two units left: the key is at its limit.
        let mock = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            "RL.REFUND" => ints(&[cost(w), 100_000, 2, 0, 60_000]),
            _ => ints(&[1, 100_000, 0, 0, 60_000, cost(w).min(2)]),
        });
        let l = limiter(&mock);
        let (mut allowed, mut held) = (0, 0);
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let d = l.check("g", &hot()).await;
            allowed += u32::from(d.allows());
            held += u32::from(d.source == Source::DenyCache);
        }
        let takes = takes(&mock).len();
        // Without the hold: a take for every other request (100). A unit of 100000 per
        // minute frees every 0.6 ms, a batch of 200 in 120 ms.
        assert!(takes <= 10, "{takes} takes");
        assert!(
            held > 0 && allowed as usize <= 2 * takes,
            "{allowed} {held}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn in_an_outage_the_lease_is_spent_first_and_its_refund_is_dropped_not_retried() {
        let mock = Mock::new(false, server);
        let l = limiter(&mock);
        warm_up(&l).await; // 19 units in hand
        mock.set(DOWN);
        for _ in 0..10 {
            assert_eq!(l.check("g", &hot()).await.source, Source::Lease);
        }
        // The lease ends during the outage: its refund fails and is dropped.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(l.check("g", &hot()).await.source, Source::Local);
        let s = l.stats().leases;
        assert_eq!((s.refunds, s.refunded, s.dropped), (1, 0, 9));
        mock.set(UP);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(l.check("g", &hot()).await.allows());
        let refunds = mock.names().iter().filter(|n| *n == "RL.REFUND").count();
        assert_eq!(refunds, 1, "the failed refund is never sent again");
        assert_eq!(l.stats().leases.dropped, 9);
    }
}
