//! The end of a lease: its unspent units given back (`RL.REFUND`) after its lifetime, at
//! shutdown, or when a newer lease replaced it; a refund that fails is dropped, never retried.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::table::{end, Lease, Leases};
use super::LeaseStats;
use crate::layers::decider::{Decider, Refund};

#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) takes: AtomicU64,
    pub(super) granted: AtomicU64,
    pub(super) hits: AtomicU64,
    pub(super) refunds: AtomicU64,
    pub(super) refunded: AtomicU64,
    pub(super) dropped: AtomicU64,
}

impl Counts {
    pub(super) fn stats(&self) -> LeaseStats {
        LeaseStats {
            takes: self.takes.load(Ordering::Relaxed),
            granted: self.granted.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            refunds: self.refunds.load(Ordering::Relaxed),
            refunded: self.refunded.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

pub(super) fn add(counter: &AtomicU64, n: u64, name: &'static str) {
    counter.fetch_add(n, Ordering::Relaxed);
    metrics::counter!(name).increment(n);
}

impl Leases {
    /// Ends the lease of generation `generation` after the lifetime, giving its unspent
    /// units back.
    pub(super) fn end_later(&self, lease: Arc<Lease>, generation: u64) {
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

    pub(super) fn refund_later(&self, lease: Arc<Lease>, units: u64) {
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

/// `RL.REFUND` of a lease's unspent units; a failure drops them (never retried, so never
/// given back twice).
async fn refund(decider: &dyn Decider, counts: &Counts, lease: &Lease, units: u64) {
    if units == 0 {
        return;
    }
    add(&counts.refunds, 1, "rl_lease_refunds_total");
    let units_back = Refund {
        key: &lease.key,
        algorithm: lease.policy.params(),
        amount: units,
    };
    match decider.refund(units_back).await {
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
