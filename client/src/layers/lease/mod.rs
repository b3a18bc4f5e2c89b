//! Leases for hot keys: for a policy marked hot ([`Policy::hot`](crate::Policy::hot)), the limiter takes a
//! batch of units in one call (`COST n UPTO`, [`Decider::take_upto`](crate::layers::decider::Decider::take_upto)), spends it in
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
//!
//! The parts: `table.rs` (the leases of hot keys: reserve, take, give back), `refund.rs`
//! (ending leases and giving their units back), `layer.rs` (the limiter's layer that serves
//! hot keys from them).

use std::time::Duration;

use crate::limiter::policy::Policy;

#[cfg(feature = "transport")]
mod layer;
#[cfg(feature = "transport")]
mod refund;
pub(crate) mod sizing;
#[cfg(feature = "transport")]
mod table;
#[cfg(all(test, feature = "transport"))]
mod tests;

#[cfg(feature = "transport")]
pub(crate) use layer::Leased;
#[cfg(feature = "transport")]
pub(crate) use table::Leases;

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

/// True for a policy that can be served from leases: hot, enforced (a shadow policy's units
/// are not worth holding), and an algorithm that takes `UPTO` (the registry says which).
pub(crate) fn leasable(policy: &Policy, cost: u64) -> bool {
    policy.is_hot() && !policy.is_shadow() && cost > 0 && policy.kind().upto()
}
