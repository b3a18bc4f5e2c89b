//! The limiter's stack of policy layers: shadow policies, leases of hot keys and failure
//! modes, each wrapping the next over the [`Decider`]s (the diagram is in
//! [`crate::decider`]). They decide by [`Policy`] (its flags say which layer acts) and never
//! fail: at the bottom, [`Failover`] turns "Redis could not answer" into each policy's
//! failure mode.

use std::sync::Arc;

use crate::backend::BoxFuture;
use crate::decider::Decider;
use crate::decision::{Decision, MultiDecision};
use crate::deny_cache::DenyCached;
use crate::failover::Failover;
use crate::lease::Leased;
use crate::policy::Policy;
use crate::shadow::Shadow;

/// Keys with their policies, checked together.
pub(crate) type Keys<'a> = &'a [(&'a str, &'a Policy)];

/// A layer of the limiter: decides by policy, never fails.
pub(crate) trait Layer: Send + Sync + 'static {
    /// Takes `cost` units of `key` (with `peek`: says what taking them would answer).
    fn decide<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u64,
        peek: bool,
    ) -> BoxFuture<'a, Decision>;

    /// Takes `cost` units on every key that enforces its policy if each of them allows it,
    /// else nothing.
    fn decide_all<'a>(&'a self, items: Keys<'a>, cost: u64) -> BoxFuture<'a, MultiDecision>;

    /// The decider under the layers: partial grants and refunds go straight to it (their
    /// callers pick their own fallback).
    fn decider(&self) -> &dyn Decider;
}

/// The deny cache over the server's decider: what failure modes and leases both ask.
pub(crate) type Cached = Arc<DenyCached<Box<dyn Decider>>>;

/// The whole stack, top first.
pub(crate) type Stack = Shadow<Leased<Failover<Cached>>>;
