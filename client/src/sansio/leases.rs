//! The sans-I/O op's lease table: the async limiter's leases ([`crate::layers::lease`]) for
//! hosts that own the connection. The same numbers ([`crate::layers::lease::sizing`]); what
//! differs is who does the I/O: a batch is taken by the op that needs it (its `UPTO` is the
//! op's first command), and the units of leases that ended are given back by the
//! `RL.REFUND` ops [`crate::sansio::Layers::pending`] hands to the host's timer, never by a
//! thread or task of the limiter's own.
//!
//! One take per key at a time: a request that finds a take in flight is decided by Redis
//! the ordinary way (a sans-I/O op cannot wait for another op).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::layers::lease::sizing::{
    batch_size, demand_rate, hold_after_nothing, hold_after_partial, served,
};
use crate::layers::lease::{LeaseConfig, LeaseStats};
use crate::limiter::decision::{Decision, Grant, Source, Verdict};
use crate::limiter::policy::Policy;

/// One hot key's lease.
#[derive(Debug)]
struct Lease {
    policy: Policy,
    /// Units left to spend in the lease in hand.
    units: u64,
    /// A lease is held (not ended).
    live: bool,
    /// Bumped by every take and end: a give-back of an older lease goes to Redis.
    generation: u64,
    /// When the lease in hand was taken, and the take's decision.
    taken: Option<(Instant, Decision)>,
    /// Units asked since `since` (the last take), and the smoothed rate so far.
    asked: u64,
    since: Option<Instant>,
    rate: Option<u64>,
    /// A take is in flight.
    taking: bool,
    /// The last take that failed (Redis unavailable): no other try within a lifetime.
    failed_at: Option<Instant>,
    /// After a grant of nothing or a partial one: no take before this instant (the denial
    /// to answer until then).
    closed: Option<(Instant, Decision)>,
}

/// Units reserved from a lease for one request: spent if the request is allowed, given
/// back ([`Leases::give_back`]) if another key denies it.
#[derive(Debug)]
pub(crate) struct Reservation {
    key: String,
    generation: u64,
    cost: u64,
}

/// What a hot key answers for one request, before any command.
#[derive(Debug)]
pub(crate) enum Reserve {
    /// Units reserved from the lease in hand.
    Reserved(Reservation, Decision),
    /// Refused without a call (the key is at its limit, lately).
    Denied(Decision),
    /// Take a batch of this many units (`COST n UPTO`).
    Take(u64),
    /// Decide the key the ordinary way (a take in flight or failed lately, the table full).
    Ordinary,
}

/// A refund due: a lease's unspent units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) key: String,
    pub(crate) policy: Policy,
    pub(crate) units: u64,
}

#[derive(Debug, Default)]
struct Table {
    leases: HashMap<String, Lease>,
    /// Units to give back, for [`crate::sansio::Layers::pending`].
    due: Vec<Due>,
    stats: LeaseStats,
}

/// The leases of one [`crate::sansio::Layers`].
#[derive(Debug)]
pub(crate) struct Leases {
    config: LeaseConfig,
    table: Mutex<Table>,
}

/// Ends the lease in hand: its unspent units go to the refunds due.
fn end(key: &str, lease: &mut Lease, due: &mut Vec<Due>) {
    lease.live = false;
    lease.generation = lease.generation.wrapping_add(1);
    let units = std::mem::take(&mut lease.units);
    if units > 0 {
        due.push(Due {
            key: key.to_owned(),
            policy: lease.policy,
            units,
        });
    }
}

impl Leases {
    pub(crate) fn new(config: LeaseConfig) -> Self {
        Self {
            config,
            table: Mutex::new(Table::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn stats(&self) -> LeaseStats {
        self.lock().stats
    }

    /// Reserves `cost` units of `key` for one request at `now`, from the lease in hand; else
    /// says what to do. `members`: the live fleet size (1 until known).
    pub(crate) fn reserve(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
        members: u32,
        now: Instant,
    ) -> Reserve {
        let lifetime = self.config.lifetime;
        let mut guard = self.lock();
        let t = &mut *guard;
        if !t.leases.get(key).is_some_and(|l| l.policy == *policy) {
            if let Some(mut old) = t.leases.remove(key) {
                // A key whose policy changed (a configuration reload) starts a new lease;
                // the old one's units go back.
                end(key, &mut old, &mut t.due);
            }
            if t.leases.len() >= self.config.max_keys {
                // Make room: leases that hold nothing go first.
                t.leases.retain(|_, l| l.live || l.taking);
                if t.leases.len() >= self.config.max_keys {
                    return Reserve::Ordinary;
                }
            }
            t.leases.insert(key.to_owned(), Lease::new(*policy));
        }
        let Some(l) = t.leases.get_mut(key) else {
            return Reserve::Ordinary;
        };
        l.asked = l.asked.saturating_add(cost);
        if l.live {
            if let Some((taken_at, d)) = l.taken {
                if now.saturating_duration_since(taken_at) >= lifetime {
                    end(key, l, &mut t.due);
                } else if l.units >= cost {
                    l.units -= cost;
                    let mut decision = served(&d, l.units, now.saturating_duration_since(taken_at));
                    decision.source = Source::Lease;
                    t.stats.hits = t.stats.hits.saturating_add(1);
                    let r = Reservation {
                        key: key.to_owned(),
                        generation: l.generation,
                        cost,
                    };
                    return Reserve::Reserved(r, decision);
                }
            }
        }
        if l.taking
            || l.failed_at
                .is_some_and(|at| now.saturating_duration_since(at) < lifetime)
        {
            return Reserve::Ordinary;
        }
        if let Some((until, mut denied)) = l.closed {
            if now < until {
                denied.verdict = Verdict::Denied {
                    retry_after: until - now,
                };
                denied.source = Source::DenyCache;
                return Reserve::Denied(denied);
            }
        }
        let rate = match l.since {
            // The first take knows nothing yet (just this request); the next one measures.
            None => 0,
            Some(since) => {
                let rate = demand_rate(l.asked, now.saturating_duration_since(since), l.rate);
                l.rate = Some(rate);
                rate
            }
        };
        l.asked = 0;
        l.since = Some(now);
        l.taking = true;
        // What is left of the lease in hand (less than the cost) goes back.
        if l.live {
            end(key, l, &mut t.due);
        }
        Reserve::Take(batch_size(
            &self.config,
            rate,
            policy.limit(),
            members,
            cost,
        ))
    }

    /// Stores the grant of a take of `batch` units for a request of `cost` at `now`: the
    /// request's units reserved from it, its denial, or the ordinary way (less than its cost
    /// was granted: the units stay for smaller requests).
    pub(crate) fn granted(
        &self,
        key: &str,
        policy: &Policy,
        batch: u64,
        cost: u64,
        grant: &Grant,
        now: Instant,
    ) -> Reserve {
        let mut guard = self.lock();
        let t = &mut *guard;
        t.stats.takes = t
            .stats
            .takes
            .saturating_add(u64::from(grant.decision.source == Source::Redis));
        let Some(l) = t.leases.get_mut(key).filter(|l| l.policy == *policy) else {
            // Not this key's lease any more (a reload): what was granted goes back.
            if grant.granted > 0 {
                t.due.push(Due {
                    key: key.to_owned(),
                    policy: *policy,
                    units: grant.granted,
                });
            }
            return Reserve::Ordinary;
        };
        l.taking = false;
        if grant.granted == 0 {
            let one = grant.decision.retry_after().unwrap_or(Duration::ZERO);
            let hold = hold_after_nothing(&self.config, one, batch);
            if !hold.is_zero() {
                l.closed = Some((now + hold, grant.decision));
            }
            return Reserve::Denied(grant.decision);
        }
        t.stats.granted = t.stats.granted.saturating_add(grant.granted);
        l.generation = l.generation.wrapping_add(1);
        l.live = true;
        l.taken = Some((now, grant.decision));
        l.failed_at = None;
        l.closed = (grant.granted < batch).then(|| {
            (
                now + hold_after_partial(&self.config, &l.policy, batch),
                grant.decision,
            )
        });
        let reserved = grant.granted >= cost;
        l.units = if reserved {
            grant.granted - cost
        } else {
            grant.granted
        };
        if !reserved {
            return Reserve::Ordinary;
        }
        let r = Reservation {
            key: key.to_owned(),
            generation: l.generation,
            cost,
        };
        Reserve::Reserved(r, served(&grant.decision, l.units, Duration::ZERO))
    }

    /// A take of `key` failed (Redis unavailable, or an error): the key is decided the
    /// ordinary way, and not taken again within a lifetime.
    pub(crate) fn take_failed(&self, key: &str, now: Instant) {
        if let Some(l) = self.lock().leases.get_mut(key) {
            l.taking = false;
            l.failed_at = Some(now);
        }
    }

    /// A take of `key` not sent after all (another key denied the request first).
    pub(crate) fn cancel_take(&self, key: &str) {
        if let Some(l) = self.lock().leases.get_mut(key) {
            l.taking = false;
        }
    }

    /// Gives back units reserved for a request that another key denied: to the lease they
    /// came from if it is still the one in hand, else to Redis (a later lease must not
    /// spend them past their own lease's lifetime).
    pub(crate) fn give_back(&self, r: Reservation) {
        let mut guard = self.lock();
        let t = &mut *guard;
        match t.leases.get_mut(&r.key) {
            Some(l) if l.live && l.generation == r.generation => {
                l.units = l.units.saturating_add(r.cost);
            }
            Some(l) => t.due.push(Due {
                key: r.key,
                policy: l.policy,
                units: r.cost,
            }),
            None => {}
        }
    }

    /// The next refund due at `now`, after ending the leases past their lifetime (every
    /// lease with `all`, at shutdown).
    pub(crate) fn next_due(&self, now: Instant, all: bool) -> Option<Due> {
        let lifetime = self.config.lifetime;
        let mut guard = self.lock();
        let t = &mut *guard;
        for (key, l) in &mut t.leases {
            let expired = l
                .taken
                .is_some_and(|(at, _)| now.saturating_duration_since(at) >= lifetime);
            if l.live && (all || expired) {
                end(key, l, &mut t.due);
            }
        }
        let due = t.due.pop()?;
        t.stats.refunds = t.stats.refunds.saturating_add(1);
        Some(due)
    }

    /// Counts what a refund gave back (`back` of `units`; `None`: it failed, dropped).
    pub(crate) fn refunded(&self, units: u64, back: Option<u64>) {
        let mut t = self.lock();
        let back = back.unwrap_or(0).min(units);
        t.stats.refunded = t.stats.refunded.saturating_add(back);
        t.stats.dropped = t.stats.dropped.saturating_add(units - back);
    }
}

impl Lease {
    fn new(policy: Policy) -> Self {
        Self {
            policy,
            units: 0,
            live: false,
            generation: 0,
            taken: None,
            asked: 0,
            since: None,
            rate: None,
            taking: false,
            failed_at: None,
            closed: None,
        }
    }
}
