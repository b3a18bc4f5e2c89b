//! The layer that asks Redis for decisions: the seam between "how a decision is made on the
//! server" and everything around it (deny cache, failure modes, shadow policies).
//!
//! The layers, each wrapping the next and depending only on the ones below it:
//!
//! ```text
//! Limiter (facade: shadow policies, stats)
//!   └ Failover        failure modes: open, closed, local fallback (crate::failover)
//!      └ DenyCached   hot-key deny cache (crate::deny_cache)
//!         └ dyn Decider   decisions from Redis: AutoDecider picks ModuleDecider (module
//!                         commands) or LuaDecider (the same commands run by lua/rl.lua)
//!            └ Transport  timeout, circuit breaker, capabilities (crate::transport)
//!               └ dyn Backend  standalone or cluster connection (crate::backend)
//! ```
//!
//! A [`Decider`] returns Redis's answer or an [`Error`]; it never decides by itself when
//! Redis cannot answer (that is [`Failover`](crate::failover::Failover)'s job) and never
//! caches (that is [`DenyCached`](crate::deny_cache::DenyCached)'s).
//!
//! # Adding a decider
//!
//! [`ModuleDecider`] speaks the module's commands (`RL.<ALG>`, `RL.ALL`, `RL.REFUND`).
//! Another way of deciding on the server, such as Lua scripts for a server without the
//! module, is a second implementation of [`Decider`] over the same [`Transport`]: it
//! sends its commands with [`Transport::call`] (so they are timed out, counted and seen by
//! the breaker), returns decisions with `source: Redis`, and keeps the all-or-nothing
//! contract of [`Decider::check_all`]. [`Decider::take_upto`] and [`Decider::refund`] are
//! the partial grant (`COST n UPTO`) and the give-back that leases are built from. The limiter holds it as a `Box<dyn Decider>`, so
//! nothing above this layer changes.

mod auto;
pub mod lua;
mod module;
mod twin;

use std::time::Duration;

pub use auto::{AutoDecider, Engine};
pub use lua::LuaDecider;
pub use module::ModuleDecider;

use crate::backend::BoxFuture;
use crate::decision::{Decision, Grant, MultiDecision, Source, Verdict};
use crate::error::Result;
use redis_rl_core::AnyParams;

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

/// What a [`Decider`] answers, later: a decision or why Redis could not give one.
pub type Decided<'a, T> = BoxFuture<'a, Result<T>>;

/// Several keys checked together, each with its algorithm.
pub type Items<'a> = &'a [(&'a str, &'a AnyParams)];

/// Makes decisions on the server. See the [module docs](self) for where it sits.
pub trait Decider: Send + Sync + 'static {
    /// One key.
    fn check<'a>(&'a self, call: Check<'a>) -> Decided<'a, Decision>;

    /// Takes `cost` units on every key if every key allows it, else nothing: the index of
    /// the first denial and one decision per key, in order. `items` is not empty and holds
    /// no shadow policy (the limiter checks those apart).
    fn check_all<'a>(&'a self, items: Items<'a>, cost: u64) -> Decided<'a, MultiDecision>;

    /// A partial grant (`COST n UPTO`): takes up to `call.cost` units of `call.key`, as many
    /// as are available (with `call.peek`: says how many, taking nothing). The algorithm
    /// must take `UPTO` (every rate limiter but the log).
    fn take_upto<'a>(&'a self, call: Check<'a>) -> Decided<'a, Grant>;

    /// Gives back up to `amount` units of `key` taken earlier (`RL.REFUND`); the units
    /// given back.
    fn refund<'a>(
        &'a self,
        key: &'a str,
        algorithm: &'a AnyParams,
        amount: u64,
    ) -> Decided<'a, u64>;
}

impl<D: Decider + ?Sized> Decider for Box<D> {
    fn check<'a>(&'a self, call: Check<'a>) -> Decided<'a, Decision> {
        (**self).check(call)
    }

    fn check_all<'a>(&'a self, items: Items<'a>, cost: u64) -> Decided<'a, MultiDecision> {
        (**self).check_all(items, cost)
    }

    fn take_upto<'a>(&'a self, call: Check<'a>) -> Decided<'a, Grant> {
        (**self).take_upto(call)
    }

    fn refund<'a>(
        &'a self,
        key: &'a str,
        algorithm: &'a AnyParams,
        amount: u64,
    ) -> Decided<'a, u64> {
        (**self).refund(key, algorithm, amount)
    }
}

impl<D: Decider + ?Sized> Decider for std::sync::Arc<D> {
    fn check<'a>(&'a self, call: Check<'a>) -> Decided<'a, Decision> {
        (**self).check(call)
    }

    fn check_all<'a>(&'a self, items: Items<'a>, cost: u64) -> Decided<'a, MultiDecision> {
        (**self).check_all(items, cost)
    }

    fn take_upto<'a>(&'a self, call: Check<'a>) -> Decided<'a, Grant> {
        (**self).take_upto(call)
    }

    fn refund<'a>(
        &'a self,
        key: &'a str,
        algorithm: &'a AnyParams,
        amount: u64,
    ) -> Decided<'a, u64> {
        (**self).refund(key, algorithm, amount)
    }
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
