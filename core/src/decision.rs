//! What a limiter answers: allowed, not now (and for how long), or never.

use crate::time::Millis;

/// The answer to one call, with everything the reply reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allowed, denied for now, or impossible.
    pub outcome: Outcome,
    /// The configured limit (capacity or limit) the caller is held to.
    pub limit: u64,
    /// Whole units left after this call (nothing is taken on a denial).
    pub remaining: u64,
    /// Time until the limiter is back to its idle state (full bucket, zero count).
    pub reset_after: Millis,
}

/// Whether the call may proceed.
///
/// "Not now" and "never" are different answers: a caller can wait out `Denied`, but a
/// cost larger than the limit can never succeed, and telling it to retry would be a lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The units were (or, with PEEK, would be) taken.
    Allowed,
    /// Not enough units now; the same call succeeds after `retry_after` if no other
    /// traffic comes.
    Denied {
        /// Earliest wait after which the same call would be allowed (at least 1 ms).
        retry_after: Millis,
    },
    /// The cost exceeds the limit: no amount of waiting helps.
    Never,
}

impl Decision {
    /// True when the call was allowed.
    pub const fn is_allowed(&self) -> bool {
        matches!(self.outcome, Outcome::Allowed)
    }
}

/// When a written limiter key should expire: once its limiter is idle, plus `slack`.
///
/// A key that vanishes then means exactly the idle state, so idle limiters cost no memory.
/// `now` is rounded up so the expiry is never before the idle instant.
pub fn expire_at(now: crate::Micros, reset_after: Millis, slack: Millis) -> Millis {
    now.ceil_millis()
        .saturating_add(reset_after)
        .saturating_add(slack)
}
