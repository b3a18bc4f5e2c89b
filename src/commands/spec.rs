//! A limiter specification as RL.ALL and RL.REFUND take it: `TOKENBUCKET capacity
//! refill_tokens refill_ms`, `SLIDING limit window_ms`, ...; and running one against a key.
//!
//! This is the one place that maps an algorithm name to its parameters, stored state and
//! core functions, so multi-key commands treat every algorithm alike.

use std::fmt;
use std::slice::Iter;

use redis_module::{Context, RedisError, RedisString};
use redis_rl_core::decision::expire_at;
use redis_rl_core::fixed_window::{self, FixedWindowParams};
use redis_rl_core::gcra::{self, GcraParams};
use redis_rl_core::sliding_log::{self, SlidingLogParams};
use redis_rl_core::sliding_window::{self, SlidingWindowParams};
use redis_rl_core::token_bucket::{self, TokenBucketParams};
use redis_rl_core::{limits, Decision, Micros, Millis};

use crate::args::{integer, shown, ArgError};
use crate::encoding::{Encoded, Stored};
use crate::{config, store};

/// The algorithm names a spec may start with, as listed in error texts.
pub const ALGORITHMS: &str = "TOKENBUCKET, SLIDING, FIXED, GCRA or LOG";

/// One limiter's algorithm and parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spec {
    /// `TOKENBUCKET capacity refill_tokens refill_ms`
    TokenBucket(TokenBucketParams),
    /// `SLIDING limit window_ms`
    SlidingWindow(SlidingWindowParams),
    /// `FIXED limit window_ms`
    FixedWindow(FixedWindowParams),
    /// `GCRA limit period_ms [BURST b]`
    Gcra(GcraParams),
    /// `LOG limit window_ms`
    Log(SlidingLogParams),
}

/// Why a spec could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// No spec where one was expected.
    Missing,
    /// A name that is not an algorithm.
    UnknownAlgorithm(String),
    /// A bad parameter of a known algorithm.
    Arg(ArgError),
}

impl fmt::Display for SpecError {
    /// The text after `ERR ` and any position prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Missing => write!(f, "missing, expected {ALGORITHMS} and its parameters"),
            SpecError::UnknownAlgorithm(name) => {
                write!(f, "unknown algorithm '{name}', expected {ALGORITHMS}")
            }
            SpecError::Arg(e) => {
                let text = e.to_string();
                write!(f, "{}", text.strip_prefix("ERR ").unwrap_or(&text))
            }
        }
    }
}

impl From<limits::ParamError> for SpecError {
    fn from(e: limits::ParamError) -> Self {
        SpecError::Arg(ArgError::Param(e))
    }
}

/// The outcome of running a spec against a key, before anything is written.
pub struct Evaluated {
    /// The decision for this key.
    pub decision: Decision,
    /// The value to store and its absolute expiry, if the call changes the key.
    pub write: Option<(Encoded, Millis)>,
}

impl Spec {
    /// Parses one spec from the front of `args`, consuming exactly its arguments.
    pub fn parse(args: &mut Iter<'_, RedisString>) -> Result<Spec, SpecError> {
        let name = args.next().ok_or(SpecError::Missing)?;
        let mut param = |range: limits::Range| -> Result<u64, SpecError> {
            let arg = args.next().ok_or(range.error())?;
            Ok(integer(arg, range)?)
        };
        let name_bytes = name.as_slice();
        if name_bytes.eq_ignore_ascii_case(b"TOKENBUCKET") {
            let capacity = param(limits::count("capacity"))?;
            let refill_tokens = param(limits::count("refill_tokens"))?;
            let refill_ms = param(limits::duration_ms("refill_ms"))?;
            Ok(Spec::TokenBucket(TokenBucketParams::new(
                capacity,
                refill_tokens,
                refill_ms,
            )?))
        } else if name_bytes.eq_ignore_ascii_case(b"SLIDING") {
            let limit = param(limits::count("limit"))?;
            let window_ms = param(limits::duration_ms("window_ms"))?;
            Ok(Spec::SlidingWindow(SlidingWindowParams::new(
                limit, window_ms,
            )?))
        } else if name_bytes.eq_ignore_ascii_case(b"FIXED") {
            let limit = param(limits::count("limit"))?;
            let window_ms = param(limits::duration_ms("window_ms"))?;
            Ok(Spec::FixedWindow(FixedWindowParams::new(limit, window_ms)?))
        } else if name_bytes.eq_ignore_ascii_case(b"GCRA") {
            let limit = param(limits::count("limit"))?;
            let period_ms = param(limits::duration_ms("period_ms"))?;
            let has_burst = args
                .as_slice()
                .first()
                .is_some_and(|a| a.as_slice().eq_ignore_ascii_case(b"BURST"));
            let burst = if has_burst {
                args.next();
                let range = limits::count("burst");
                let value = args
                    .next()
                    .ok_or(SpecError::Arg(ArgError::MissingValue("BURST", range)))?;
                Some(integer(value, range)?)
            } else {
                None
            };
            Ok(Spec::Gcra(GcraParams::new(limit, period_ms, burst)?))
        } else if name_bytes.eq_ignore_ascii_case(b"LOG") {
            let limit = param(config::log_limit_range())?;
            let window_ms = param(limits::duration_ms("window_ms"))?;
            Ok(Spec::Log(SlidingLogParams::new(limit, window_ms)?))
        } else {
            Err(SpecError::UnknownAlgorithm(shown(name_bytes)))
        }
    }

    /// Reads `key` and decides whether `cost` units may be taken at `now`. Writes nothing.
    pub fn evaluate(
        &self,
        ctx: &Context,
        key: &RedisString,
        now: Micros,
        cost: u64,
    ) -> Result<Evaluated, RedisError> {
        match self {
            Spec::TokenBucket(p) => decide(ctx, key, now, p, cost, token_bucket::check),
            Spec::SlidingWindow(p) => decide(ctx, key, now, p, cost, sliding_window::check),
            Spec::FixedWindow(p) => decide(ctx, key, now, p, cost, fixed_window::check),
            Spec::Gcra(p) => decide(ctx, key, now, p, cost, gcra::check),
            Spec::Log(p) => decide(ctx, key, now, p, cost, sliding_log::check),
        }
    }

    /// Reads `key` and gives back up to `amount` units. Returns the units given back and the
    /// key's state afterwards (as a zero-cost decision). Writes nothing.
    pub fn refund(
        &self,
        ctx: &Context,
        key: &RedisString,
        now: Micros,
        amount: u64,
    ) -> Result<(u64, Evaluated), RedisError> {
        match self {
            Spec::TokenBucket(p) => give_back(
                ctx,
                key,
                now,
                p,
                amount,
                token_bucket::refund,
                token_bucket::check,
            ),
            Spec::SlidingWindow(p) => give_back(
                ctx,
                key,
                now,
                p,
                amount,
                sliding_window::refund,
                sliding_window::check,
            ),
            Spec::FixedWindow(p) => give_back(
                ctx,
                key,
                now,
                p,
                amount,
                fixed_window::refund,
                fixed_window::check,
            ),
            Spec::Gcra(p) => give_back(ctx, key, now, p, amount, gcra::refund, gcra::check),
            Spec::Log(p) => give_back(
                ctx,
                key,
                now,
                p,
                amount,
                sliding_log::refund,
                sliding_log::check,
            ),
        }
    }
}

/// A core `check` function: `(state, now, params, cost) -> (decision, state to write)`.
type Check<S, P> = fn(Option<S>, Micros, &P, u64) -> (Decision, Option<S>);
/// A core `refund` function: `(state, now, params, amount) -> (given back, state to write)`.
type Refund<S, P> = fn(Option<S>, Micros, &P, u64) -> (u64, Option<S>);

fn decide<S: Stored, P>(
    ctx: &Context,
    key: &RedisString,
    now: Micros,
    params: &P,
    cost: u64,
    check: Check<S, P>,
) -> Result<Evaluated, RedisError> {
    let stored = store::read::<S>(ctx, key)?;
    let (decision, state) = check(stored, now, params, cost);
    Ok(with_write(decision, state, now))
}

fn give_back<S: Stored + Clone, P>(
    ctx: &Context,
    key: &RedisString,
    now: Micros,
    params: &P,
    amount: u64,
    refund: Refund<S, P>,
    check: Check<S, P>,
) -> Result<(u64, Evaluated), RedisError> {
    let stored = store::read::<S>(ctx, key)?;
    let (refunded, state) = refund(stored.clone(), now, params, amount);
    let (view, _) = check(state.clone().or(stored), now, params, 0);
    Ok((refunded, with_write(view, state, now)))
}

fn with_write<S: Stored>(decision: Decision, state: Option<S>, now: Micros) -> Evaluated {
    Evaluated {
        decision,
        write: state.map(|s| {
            (
                s.encode(),
                expire_at(now, decision.reset_after, crate::config::ttl_slack()),
            )
        }),
    }
}
