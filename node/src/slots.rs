//! `AcrossSlots`: the client's `checkAll` across cluster hash slots
//! (`redis_rl_client::sansio::AcrossSlots`, the one the Python package drives too) for
//! JavaScript: one `RL.ALL` per slot (a multi-key command must stay in one slot, even on a
//! node holding every slot), the give-back when a slot denies, shadow keys on their own.
//! JavaScript asks every slot at once (one round trip of latency), as the Rust client does.

use napi::bindgen_prelude::*;
use napi_derive::napi;

use redis_rl_client::sansio::{self, Schedule};

use crate::decision::JsMultiDecision;
use crate::op::{js_error, Op};
use crate::policy::{whole, Policy};

/// The rounds of ops of one `checkAll`: `nextRound()` gives the ops to run now (together);
/// report each with `done(i, op)` or `failed(i, message)` (true: the failure is the call's),
/// then ask again until empty; then `multi()`.
#[napi]
pub struct AcrossSlots {
    inner: sansio::AcrossSlots,
}

impl AcrossSlots {
    pub(crate) fn new(inner: sansio::AcrossSlots) -> Self {
        Self { inner }
    }

    pub(crate) const SCHEDULE: Schedule = Schedule::Together;
}

#[napi]
impl AcrossSlots {
    /// Adds a key with its own cost.
    #[napi]
    pub fn add(&mut self, key: String, policy: &Policy, cost: f64) -> Result<()> {
        let cost = whole("cost", cost)?;
        self.inner.add(key, policy.inner, cost).map_err(js_error)
    }

    /// The ops to run now (empty: the call is over).
    #[napi]
    pub fn next_round(&mut self) -> Vec<Op> {
        self.inner.next_round().into_iter().map(Op::new).collect()
    }

    /// The op at `index` of the last round ended.
    #[napi]
    pub fn done(&mut self, index: u32, op: &Op) {
        self.inner.done(index as usize, op.inner());
    }

    /// The op at `index` of the last round threw `message`: whether the error is the call's
    /// (a refund's is not).
    #[napi]
    pub fn failed(&mut self, index: u32, message: String) -> bool {
        self.inner.failed(index as usize, &message)
    }

    /// The decision once the rounds are over; throws the first error that was the call's.
    #[napi]
    pub fn multi(&self) -> Result<JsMultiDecision> {
        let m = self.inner.outcome().map_err(js_error)?;
        Ok(JsMultiDecision::from(&m))
    }
}
