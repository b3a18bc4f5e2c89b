//! The contract of the limiter's policy layers: shadow policies, leases of hot keys and
//! failure modes, each wrapping the next over the [`Decider`]s (the diagram is in
//! [`crate::layers::decider`]; the limiter assembles the stack). The layers depend on this module,
//! never the reverse. They decide by [`Policy`] (its flags say which layer acts) and never
//! fail: at the bottom, [`Failover`](crate::layers::failover::Failover) turns "Redis could not
//! answer" into each policy's failure mode.

use crate::layers::decider::Decider;
use crate::limiter::decision::{Decision, MultiDecision};
use crate::limiter::policy::Policy;
use crate::transport::backend::BoxFuture;

/// Keys with their policies, checked together.
pub(crate) type Keys<'a> = &'a [(&'a str, &'a Policy)];

/// One key's call: take `cost` units of `key` under `policy` (with `peek`: only say what
/// taking them would answer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask<'a> {
    pub(crate) key: &'a str,
    pub(crate) policy: &'a Policy,
    pub(crate) cost: u64,
    pub(crate) peek: bool,
}

/// A layer of the limiter: decides by policy, never fails. The futures are boxed, as the
/// [`Decider`]'s are: a generic `impl Future` here leaves the middleware's future unable to
/// prove it is `Send` for every lifetime (a limitation of the compiler's auto-trait check).
pub(crate) trait Layer: Send + Sync + 'static {
    /// One key.
    fn decide<'a>(&'a self, ask: Ask<'a>) -> BoxFuture<'a, Decision>;

    /// Takes `costs[i]` units on `items[i]` (a missing cost is 1) for every key that enforces
    /// its policy if each of them allows its own, else nothing: one atomic decision, whatever
    /// the costs.
    fn decide_all<'a>(&'a self, items: Keys<'a>, costs: &'a [u64]) -> BoxFuture<'a, MultiDecision>;

    /// The decider under the layers: partial grants and refunds go straight to it (their
    /// callers pick their own fallback).
    fn decider(&self) -> &dyn Decider;
}

/// Implements [`Layer`] for a layer over another (`inner: L`) from its inherent
/// `async fn decide_one(&self, Ask)` and `async fn decide_many(&self, Keys, &[u64])`; partial
/// grants and refunds go to the decider under it.
macro_rules! layer_over {
    ($layer:ident) => {
        impl<L: $crate::layers::stack::Layer> $crate::layers::stack::Layer for $layer<L> {
            fn decide<'a>(
                &'a self,
                ask: $crate::layers::stack::Ask<'a>,
            ) -> $crate::transport::backend::BoxFuture<'a, $crate::limiter::decision::Decision>
            {
                Box::pin(self.decide_one(ask))
            }

            fn decide_all<'a>(
                &'a self,
                items: $crate::layers::stack::Keys<'a>,
                costs: &'a [u64],
            ) -> $crate::transport::backend::BoxFuture<'a, $crate::limiter::decision::MultiDecision>
            {
                Box::pin(self.decide_many(items, costs))
            }

            fn decider(&self) -> &dyn $crate::layers::decider::Decider {
                self.inner.decider()
            }
        }
    };
}

pub(crate) use layer_over;
