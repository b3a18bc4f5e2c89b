//! The numbers of a lease, without a clock or a table: how big a batch to take, what a
//! request served from it reads, how long a key at its limit is not asked again. Shared by
//! the async limiter's lease table and the sans-I/O op's ([`crate::sansio`]), so both size
//! and answer leases alike.

use std::time::Duration;

use super::LeaseConfig;
use crate::limiter::decision::{Decision, Verdict};
use crate::limiter::policy::Policy;

/// The floor of the time a demand is measured over: a burst of a few requests within a
/// millisecond must not look like a huge rate.
const MIN_MEASURE: Duration = Duration::from_millis(10);

/// The smoothed demand (units per second) after `asked` units over `over` since the last
/// take, `previous` the rate measured then.
pub(crate) fn demand_rate(asked: u64, over: Duration, previous: Option<u64>) -> u64 {
    let over = over.max(MIN_MEASURE);
    let observed = u128::from(asked) * 1_000_000 / over.as_micros().max(1);
    let observed = u64::try_from(observed).unwrap_or(u64::MAX);
    previous.map_or(observed, |r| r / 2 + observed / 2)
}

/// The batch to ask for at demand `rate` (units per second; 0 before any measure): `demand`
/// of it, between `cost` and this instance's share (`members` in the fleet) of
/// `max_percent` of `limit`.
pub(crate) fn batch_size(
    config: &LeaseConfig,
    rate: u64,
    limit: u64,
    members: u32,
    cost: u64,
) -> u64 {
    let want = u128::from(rate) * config.demand.as_micros() / 1_000_000;
    let want = u64::try_from(want).unwrap_or(u64::MAX);
    let max =
        (u128::from(limit) * u128::from(config.max_percent) / 100 / u128::from(members.max(1)))
            .try_into()
            .unwrap_or(u64::MAX)
            .max(1);
    want.min(max).max(cost)
}

/// After a grant of nothing whose one unit frees up in `one`: how long the key is not
/// asked again (a batch's worth of that wait, within a lifetime): a saturated key then
/// costs the fleet about one call per batch, not one per unit per instance.
pub(crate) fn hold_after_nothing(config: &LeaseConfig, one: Duration, batch: u64) -> Duration {
    one.saturating_mul(u32::try_from(batch).unwrap_or(u32::MAX))
        .min(config.lifetime)
        .max(one)
}

/// After a partial grant (the key at its limit): how long, once the lease is spent, the key
/// is not asked again (one unit's share of the window times the batch, within a lifetime).
pub(crate) fn hold_after_partial(config: &LeaseConfig, policy: &Policy, batch: u64) -> Duration {
    unit_time(policy)
        .saturating_mul(u32::try_from(batch).unwrap_or(u32::MAX))
        .min(config.lifetime)
}

/// The time one unit takes to free up at the limit's rate: the window (or refill period)
/// over the limit.
fn unit_time(policy: &Policy) -> Duration {
    let nanos = policy.window().as_nanos() / u128::from(policy.limit().max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// The decision of a request served from a lease taken with decision `taken`, `elapsed`
/// ago, `units` left in it: what Redis had left then plus what the lease still holds.
pub(crate) fn served(taken: &Decision, units: u64, elapsed: Duration) -> Decision {
    Decision {
        verdict: Verdict::Allowed,
        limit: taken.limit,
        remaining: taken.remaining.saturating_add(units).min(taken.limit),
        reset_after: taken.reset_after.saturating_sub(elapsed),
        source: taken.source,
        shadow: false,
    }
}
