//! `AcrossSlots` for Python: the client's `check_all` (or `each`) across cluster hash slots
//! (`redis_rl_client::sansio::AcrossSlots`, the one the Node.js package drives too): one
//! `RL.ALL` per slot, the give-back when a slot denies, shadow keys on their own. Python's
//! limiters ask one slot at a time (the sync limiter sends one command at a time, and the
//! async one answers the same): no call goes to the later slots once one denies.

use pyo3::prelude::*;

use redis_rl_client::sansio::{self, Schedule};

use crate::op::{decision, py_error, Op, OpPolicy, PyDecision};

/// The rounds of ops of one `check_all`: `next_round()` gives the ops to run now; report each
/// with `done(i, op)` or `failed(i, message)` (True: the failure is the call's), then ask
/// again until empty; then `result()`.
#[pyclass(module = "redis_rl._core")]
pub(crate) struct AcrossSlots {
    inner: sansio::AcrossSlots,
}

impl AcrossSlots {
    pub(crate) fn new(inner: sansio::AcrossSlots) -> Self {
        Self { inner }
    }

    pub(crate) const SCHEDULE: Schedule = Schedule::InTurn;
}

#[pymethods]
impl AcrossSlots {
    fn add(&mut self, key: String, policy: &OpPolicy, cost: u64) -> PyResult<()> {
        self.inner.add(key, policy.policy, cost).map_err(py_error)
    }

    fn next_round(&mut self) -> Vec<Op> {
        self.inner.next_round().into_iter().map(Op::new).collect()
    }

    fn done(&mut self, index: usize, op: PyRef<'_, Op>) {
        self.inner.done(index, &op.inner);
    }

    fn failed(&mut self, index: usize, message: &str) -> bool {
        self.inner.failed(index, message)
    }

    /// `(denied_index, [decision...])`, or the first failure that was the call's.
    fn result(&self) -> PyResult<(Option<usize>, Vec<PyDecision>)> {
        let m = self.inner.outcome().map_err(py_error)?;
        Ok((
            m.denied,
            m.decisions.iter().map(|d| decision(d, false)).collect(),
        ))
    }
}
