//! `RL.THROTTLE key max_burst count period_s [quantity]`: redis-cell's `CL.THROTTLE`.

use redis_module::{Context, RedisString};
use redis_rl_core::gcra::{check, GcraParams, GcraState};
use redis_rl_core::throttle;

use super::limiter::decide_replying;
use super::{Command, Handled, WRITE};
use crate::args::{integer, ArgError, Options};
use crate::docs::{int, key, Syntax, LIMITER_KEY, WRITE_ACL};
use crate::error::Error;
use crate::reply;

pub const COMMAND: Command = Command {
    name: c"RL.THROTTLE",
    flags: WRITE,
    acl: WRITE_ACL,
    keys: LIMITER_KEY,
    arity: -5,
    summary: c"redis-cell CL.THROTTLE compatible GCRA; replies limited, limit, remaining, retry_after_s, reset_after_s.",
    complexity: c"O(1)",
    syntax: Syntax::Args(&[
        key(),
        int(throttle::MAX_BURST.name),
        int(throttle::COUNT.name),
        int(throttle::PERIOD_S.name),
        int(throttle::QUANTITY.name).optional(),
    ]),
    handler: run,
};

/// Inlined into the command's entry point, as the other limiting commands' (see
/// `limiter::run`).
#[inline(always)]
fn run(ctx: &Context, args: &[RedisString]) -> Result<Handled, Error> {
    let (key, max_burst, count, period_s, quantity) = match args {
        [_, key, b, c, p] => (key, b, c, p, None),
        [_, key, b, c, p, q] => (key, b, c, p, Some(q)),
        _ => return Err(Error::WrongArity),
    };
    let (params, options) = parse(max_burst, count, period_s, quantity)?;
    decide_replying::<GcraState>(
        ctx,
        key,
        options,
        |state, now, cost| check(state, now, &params, cost),
        reply::throttle,
    )
}

#[inline(always)]
fn parse(
    max_burst: &RedisString,
    count: &RedisString,
    period_s: &RedisString,
    quantity: Option<&RedisString>,
) -> Result<(GcraParams, Options), ArgError> {
    let params = throttle::params(
        integer(max_burst, throttle::MAX_BURST)?,
        integer(count, throttle::COUNT)?,
        integer(period_s, throttle::PERIOD_S)?,
    )?;
    // Quantity 0 looks without taking, like PEEK, so nothing else is needed. The quantity
    // is the call's cost: `rl.max-cost` bounds it, the implicit 1 included.
    let range = crate::config::quantity_range();
    let cost = quantity.map_or_else(|| range.check(1), |q| integer(q, range))?;
    Ok((
        params,
        Options {
            cost,
            peek: false,
            upto: false,
            force: false,
        },
    ))
}
