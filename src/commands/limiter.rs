//! The flow shared by every single-key limiting command, and the one generic command of a
//! rate limiter in the core registry (`RL.<NAME> key <params> [options] [COST n] [UPTO]
//! [FORCE] [PEEK]`, `UPTO` where the core's `RateLimiter::UPTO` says so).

use std::ffi::CStr;

use redis_module::{Context, RedisString};
use redis_rl_core::algorithm::{upto, RateLimiter};
use redis_rl_core::decision::expire_at;
use redis_rl_core::{Decision, Micros};

use super::{Command, Handled, WRITE};
use crate::args::{integer, Accepted, Options};
use crate::docs::{Syntax, LIMITER_KEY, WRITE_ACL};
use crate::encoding::Stored;
use crate::error::Error;
use crate::store::LimiterKey;
use crate::{clock, config, reply};

/// The command of rate limiter `A`: its arity, arguments and handler come from `A`'s
/// parameters in the core registry; `name`, `summary` and `complexity` are its own.
pub const fn command<A: RateLimiter>(
    name: &'static CStr,
    summary: &'static CStr,
    complexity: &'static CStr,
) -> Command
where
    A::State: Stored,
{
    // At most a handful of parameters: the cast cannot truncate.
    let arity = -2 - A::PARAMS.len() as i32;
    Command {
        name,
        flags: WRITE,
        acl: WRITE_ACL,
        keys: LIMITER_KEY,
        arity,
        summary,
        complexity,
        syntax: Syntax::Limiter {
            params: A::PARAMS,
            options: A::OPTIONS,
            upto: A::UPTO,
        },
        handler: run::<A>,
    }
}

/// `RL.<NAME> key <params> [options] [COST n] [UPTO] [FORCE] [PEEK]`: the parameters in
/// order (each checked against its range), then the options in any order, then the decision
/// (a partial grant with `UPTO`, replied with a sixth integer; the cost taken whatever the
/// limit says with `FORCE`).
///
/// This, [`decide`] and [`settle`] are inlined into the command's entry point (with the
/// dispatcher): one function per command, so the parameters, the state, the decision and
/// the reply fields stay in registers instead of being moved between frames.
#[inline(always)]
fn run<A: RateLimiter>(ctx: &Context, args: &[RedisString]) -> Result<Handled, Error>
where
    A::State: Stored,
{
    let [_, key, rest @ ..] = args else {
        return Err(Error::WrongArity);
    };
    let (positional, options) = rest
        .split_at_checked(A::PARAMS.len())
        .ok_or(Error::WrongArity)?;
    let mut values = [0u64; redis_rl_core::algorithm::MAX_PARAMS];
    for ((slot, arg), range) in values.iter_mut().zip(positional).zip(A::PARAMS) {
        *slot = integer(arg, config::param_range::<A>(*range))?;
    }
    let (options, extra) =
        Options::parse_accepting(options, Accepted::limiter(A::OPTIONS, A::UPTO))?;
    let values = values.get(..A::PARAMS.len()).unwrap_or(&[]);
    let extra = extra.get(..A::OPTIONS.len()).unwrap_or(&[]);
    let params = A::params(values, extra)?;
    if options.upto {
        return settle::<A::State>(
            ctx,
            key,
            options,
            |state, now, cost| {
                let (decision, granted, next) = upto::<A>(state, now, &params, cost);
                (decision, Some(granted), next)
            },
            reply::decision,
        );
    }
    if options.force {
        return decide::<A::State>(ctx, key, options, |state, now, cost| {
            A::force(state, now, &params, cost)
        });
    }
    decide::<A::State>(ctx, key, options, |state, now, cost| {
        A::check(state, now, &params, cost)
    })
}

/// Reads `key`, lets `check` decide at the server's current time, stores the new state
/// (unless PEEK, a denial or a no-op) and replies.
#[inline(always)]
pub fn decide<S: Stored>(
    ctx: &Context,
    key: &RedisString,
    options: Options,
    check: impl FnOnce(Option<S>, Micros, u64) -> (Decision, Option<S>),
) -> Result<Handled, Error> {
    decide_replying(ctx, key, options, check, reply::decision)
}

/// [`decide`] with another reply format (RL.THROTTLE answers like redis-cell).
#[inline(always)]
pub fn decide_replying<S: Stored>(
    ctx: &Context,
    key: &RedisString,
    options: Options,
    check: impl FnOnce(Option<S>, Micros, u64) -> (Decision, Option<S>),
    reply: fn(&Decision) -> reply::Fields,
) -> Result<Handled, Error> {
    let check = |state, now, cost| {
        let (decision, next) = check(state, now, cost);
        (decision, None, next)
    };
    settle(ctx, key, options, check, reply)
}

/// The flow itself: `check` also tells the units granted by `UPTO` (`None` without it),
/// which the reply then carries as a sixth integer.
#[inline(always)]
fn settle<S: Stored>(
    ctx: &Context,
    key: &RedisString,
    options: Options,
    check: impl FnOnce(Option<S>, Micros, u64) -> (Decision, Option<u64>, Option<S>),
    reply: fn(&Decision) -> reply::Fields,
) -> Result<Handled, Error> {
    // The clock first: the state read can then go straight to `check`. (The key's own
    // expiry is the server's business, judged by its clock, so the order changes nothing.)
    let now = clock::now();
    let key = LimiterKey::open(ctx, key);
    let (decision, granted, new_state) = check(key.read::<S>()?, now, options.cost);
    if let (false, Some(state)) = (options.peek, new_state) {
        let expiry = expire_at(now, decision.reset_after, config::ttl_slack());
        state.with_bytes(|value| key.write(value, expiry))?;
    }
    let fields = reply(&decision);
    let reply = match granted {
        Some(granted) => reply::send(ctx, &reply::with_granted(fields, granted)),
        None => reply::send(ctx, &fields),
    };
    Ok(Handled {
        reply,
        decided: (!options.peek).then_some(decision.is_allowed()),
    })
}
