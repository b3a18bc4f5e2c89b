//! The layer that asks Redis for decisions: the seam between "how a decision is made on the
//! server" and everything around it (deny cache, failure modes, leases, shadow policies).
//!
//! The layers, each wrapping the next and depending only on the ones below it:
//!
//! ```text
//! Limiter (facade: builds the stack, delegates to it, gathers the counters)
//!   └ Shadow          shadow policies decided apart, never denying (crate::layers::shadow)
//!      └ Leased        hot keys served from leases taken with UPTO (crate::layers::lease)
//!         └ Failover      failure modes: open, closed, local fallback (crate::layers::failover)
//!            └ DenyCached    hot-key deny cache (crate::layers::deny_cache)
//!               └ dyn Decider   decisions from Redis: a ServerDecider, the module's commands
//!                               sent as commands or to the Lua twin (lua/rl.lua) as a
//!                               function or a script (the wire, crate::layers::decider::wire)
//!                  └ Transport     timeout, circuit breaker, capabilities (crate::transport)
//!                     └ dyn Backend   standalone or cluster connection (crate::transport::backend)
//! ```
//!
//! The three top layers decide by [`Policy`](crate::Policy) and never fail; a [`Decider`]
//! knows only the algorithm and its parameters, and returns Redis's answer or an [`Error`]:
//! it never decides by itself when Redis cannot answer (that is
//! [`Failover`](crate::layers::failover::Failover)'s job) and never caches (that is
//! [`DenyCached`](crate::layers::deny_cache::DenyCached)'s).
//!
//! # Adding a decider
//!
//! [`ServerDecider`] speaks the module's commands (`RL.<ALG>`, `RL.ALL`, `RL.REFUND`), over
//! whichever wire reaches the server; a booking of one key is its algorithm's own command,
//! as in the sans-I/O op (`one_key.rs`). Another way of deciding is a second implementation of
//! [`Decider`] over the same [`Transport`](crate::transport::Transport): it sends its
//! commands with [`Transport::call`](crate::transport::Transport::call) (so they are timed
//! out, counted and seen by the breaker), returns decisions with `source: Redis`, and keeps
//! the all-or-nothing contract of [`Decider::check_all`]. [`Decider::take_upto`] and
//! [`Decider::refund`] are the partial grant (`COST n UPTO`) and the give-back that leases
//! are built from; [`Decider::every_key`] is the look (`PEEK`) and the booking (`FORCE`) of
//! a held request and of a charge after the response. The limiter holds it as a
//! `Box<dyn Decider>`, so nothing above this layer changes.
//!
//! [`Error`]: crate::Error

pub mod lua;
mod one_key;
#[cfg(feature = "transport")]
mod server;
mod wire;

use std::time::Duration;

pub(crate) use one_key::{booking_of_one, parse_booking_of_one};
#[cfg(feature = "transport")]
pub use server::ServerDecider;
pub use wire::ServerImpl;

use crate::limiter::decision::{Decision, MultiDecision, Source, Verdict};
use redis_rl_core::AnyParams;
// The `Decider` trait's (feature `transport`).
#[cfg(feature = "transport")]
use {
    crate::error::{Error, Result},
    crate::limiter::decision::Grant,
    crate::transport::backend::BoxFuture,
    std::sync::Arc,
};

/// One single-key call: take `cost` units of `key` (only say what taking them would
/// answer when `peek`).
#[derive(Clone, Copy, Debug)]
pub struct Check<'a> {
    /// The key.
    pub key: &'a str,
    /// Its algorithm and parameters.
    pub algorithm: &'a AnyParams,
    /// Units to take (0: look without taking).
    pub cost: u64,
    /// Take nothing, only say what taking would answer (`PEEK`).
    pub peek: bool,
}

/// Units of `key` taken earlier, to give back (`RL.REFUND`).
#[derive(Clone, Copy, Debug)]
pub struct Refund<'a> {
    /// The key.
    pub key: &'a str,
    /// Its algorithm and parameters.
    pub algorithm: &'a AnyParams,
    /// Units to give back.
    pub amount: u64,
}

/// What [`Decider::every_key`] does on every key: look, or take even over the limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllMode {
    /// Take nothing, only say what taking the units would answer (`PEEK`).
    Peek,
    /// Take the units whatever the limits say (`FORCE`): what goes past a limit is a debt
    /// the next callers wait for.
    Force,
}

/// Every key's own decision at once (`RL.ALL ... PEEK|FORCE`): `costs[i]` units on
/// `items[i]` (a missing cost is 1), looked at or forced as `mode` says.
#[derive(Clone, Copy, Debug)]
pub struct EveryKey<'a> {
    /// The keys, each with its algorithm.
    pub items: Items<'a>,
    /// Units per key.
    pub costs: &'a [u64],
    /// Look or force.
    pub mode: AllMode,
}

/// What a [`Decider`] answers, later: a decision or why Redis could not give one.
#[cfg(feature = "transport")]
pub type Decided<'a, T> = BoxFuture<'a, Result<T>>;

/// Several keys checked together, each with its algorithm.
pub type Items<'a> = &'a [(&'a str, &'a AnyParams)];

/// Makes decisions on the server. See the [module docs](self) for where it sits.
#[cfg(feature = "transport")]
pub trait Decider: Send + Sync + 'static {
    /// One key.
    fn check<'a>(&'a self, call: Check<'a>) -> Decided<'a, Decision>;

    /// Takes `cost` units on every key if every key allows it, else nothing: the index of
    /// the first denial and one decision per key, in order. `items` is not empty and holds
    /// no shadow policy (the limiter checks those apart).
    fn check_all<'a>(&'a self, items: Items<'a>, cost: u64) -> Decided<'a, MultiDecision>;

    /// [`Decider::check_all`] with a cost per key: takes `costs[i]` units on `items[i]` (a
    /// missing cost is 1) if every key allows its own, else nothing, in one atomic decision
    /// (`RL.ALL ... COSTS`), never a call per cost. The default serves equal costs with
    /// [`Decider::check_all`] and refuses different ones with [`Error::Config`]: a decider
    /// that cannot take them at once must not split them (a split is not all or nothing).
    fn check_all_costs<'a>(
        &'a self,
        items: Items<'a>,
        costs: &'a [u64],
    ) -> Decided<'a, MultiDecision> {
        match uniform_cost(items.len(), costs) {
            Some(cost) => self.check_all(items, cost),
            None => refused("this decider takes one cost for all keys of a call".to_string()),
        }
    }

    /// A partial grant (`COST n UPTO`): takes up to `call.cost` units of `call.key`, as many
    /// as are available (with `call.peek`: says how many, taking nothing). The algorithm
    /// must take `UPTO` (every rate limiter but the log).
    fn take_upto<'a>(&'a self, call: Check<'a>) -> Decided<'a, Grant>;

    /// Gives back up to `units.amount` units taken earlier (`RL.REFUND`); the units given
    /// back.
    fn refund<'a>(&'a self, units: Refund<'a>) -> Decided<'a, u64>;

    /// Every key's own decision for `costs[i]` units on `items[i]` (a missing cost is 1),
    /// looking (`AllMode::Peek`) or taking even over the limits (`AllMode::Force`): one
    /// `RL.ALL ... [COSTS ...] PEEK|FORCE` per hash slot, on the same wire as
    /// [`Decider::check_all`] (the module or the Lua twin). The default refuses with
    /// [`Error::Config`].
    fn every_key<'a>(&'a self, call: EveryKey<'a>) -> Decided<'a, Vec<Decision>> {
        refused(format!(
            "this decider cannot {:?} several keys at once",
            call.mode
        ))
    }
}

/// A pointer to a decider decides as the decider it points to.
#[cfg(feature = "transport")]
macro_rules! forward_decider {
    ($($pointer:ident),*) => {$(
        impl<D: Decider + ?Sized> Decider for $pointer<D> {
            fn check<'a>(&'a self, call: Check<'a>) -> Decided<'a, Decision> {
                (**self).check(call)
            }

            fn check_all<'a>(&'a self, items: Items<'a>, cost: u64) -> Decided<'a, MultiDecision> {
                (**self).check_all(items, cost)
            }

            fn check_all_costs<'a>(
                &'a self,
                items: Items<'a>,
                costs: &'a [u64],
            ) -> Decided<'a, MultiDecision> {
                (**self).check_all_costs(items, costs)
            }

            fn take_upto<'a>(&'a self, call: Check<'a>) -> Decided<'a, Grant> {
                (**self).take_upto(call)
            }

            fn refund<'a>(&'a self, units: Refund<'a>) -> Decided<'a, u64> {
                (**self).refund(units)
            }

            fn every_key<'a>(&'a self, call: EveryKey<'a>) -> Decided<'a, Vec<Decision>> {
                (**self).every_key(call)
            }
        }
    )*};
}

#[cfg(feature = "transport")]
forward_decider!(Box, Arc);

/// The cost of key `i` of a call: `costs[i]`, 1 where `costs` is short (the default cost).
pub(crate) fn cost_at(costs: &[u64], i: usize) -> u64 {
    costs.get(i).copied().unwrap_or(1)
}

/// The one cost of `n` keys when [`cost_at`] is the same for each (1 for none), else `None`.
#[cfg(feature = "transport")]
pub(crate) fn uniform_cost(n: usize, costs: &[u64]) -> Option<u64> {
    let first = cost_at(costs, 0);
    (1..n).all(|i| cost_at(costs, i) == first).then_some(first)
}

/// The answer of a provided [`Decider`] method that the decider cannot serve: an
/// [`Error::Config`] saying `why`, at once, without a call to Redis (so nothing is taken).
#[cfg(feature = "transport")]
fn refused<'a, T: Send + 'a>(why: String) -> Decided<'a, T> {
    Box::pin(std::future::ready(Err(Error::Config(why))))
}

/// A decision for a key that was not checked (another key decided first): its limit, with
/// nothing known about its count (`Source::Unchecked`: not a decision of Redis).
pub(crate) fn unknown(algorithm: &AnyParams) -> Decision {
    let limit = algorithm.quota().0;
    Decision {
        verdict: Verdict::Allowed,
        limit,
        remaining: limit,
        reset_after: Duration::ZERO,
        source: Source::Unchecked,
        shadow: false,
    }
}

/// The decisions of a request denied by `decision` at `index` before the other keys were
/// asked: theirs are [`unknown`].
pub(crate) fn denied_at<T>(
    items: &[T],
    algorithm: impl Fn(&T) -> &AnyParams,
    index: usize,
    decision: Decision,
) -> MultiDecision {
    let mut decisions: Vec<Decision> = items.iter().map(|i| unknown(algorithm(i))).collect();
    if let Some(slot) = decisions.get_mut(index) {
        *slot = decision;
    }
    MultiDecision {
        denied: Some(index),
        decisions,
    }
}
