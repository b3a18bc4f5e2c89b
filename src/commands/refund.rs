//! `RL.REFUND key spec COST n`: gives back units taken earlier by the same spec.
//!
//! It exists so a client can make a request all-or-nothing across hash slots, where one
//! RL.ALL cannot reach every key: take slot by slot, and refund the slots already taken when
//! a later one denies. Refunds are best effort; see each algorithm's `refund` in the core.

use redis_module::{Context, RedisString};

use super::{spec, Command, Handled, WRITE};
use crate::args::{integer, shown, ArgError};
use crate::docs::{int, key, string, Syntax, LIMITER_KEY, WRITE_ACL};
use crate::error::Error;
use crate::store::LimiterKey;
use crate::{clock, reply};

pub const COMMAND: Command = Command {
    name: c"RL.REFUND",
    flags: WRITE,
    acl: WRITE_ACL,
    keys: LIMITER_KEY,
    arity: -5,
    summary: c"Gives back units taken earlier by the same limiter spec (best effort); replies refunded, limit, remaining, 0, reset_after_ms.",
    complexity: c"O(1), O(N) for LOG",
    syntax: Syntax::Args(&[key(), string("spec").multiple(), int("cost").after("COST")]),
    handler: run,
};

fn run(ctx: &Context, args: &[RedisString]) -> Result<Handled, Error> {
    let [_, key, rest @ ..] = args else {
        return Err(Error::WrongArity);
    };
    if rest.len() < 3 {
        return Err(Error::WrongArity);
    }
    let mut rest = rest.iter();
    let spec = spec::parse(&mut rest).map_err(|e| Error::text(format_args!("spec: {e}")))?;
    let amount = parse_cost(rest.as_slice()).map_err(Error::text)?;
    let now = clock::now();
    let key = LimiterKey::open(ctx, key);
    let (refunded, after) = spec::refund(&spec, &key, now, amount)?;
    Ok(reply::send(ctx, &reply::refund(refunded, &after)).into())
}

/// The mandatory `COST n` after the spec, and nothing else.
fn parse_cost(args: &[RedisString]) -> Result<u64, RefundArgError> {
    match args {
        [] => Err(RefundArgError::NoCost),
        [name, value] if name.as_slice().eq_ignore_ascii_case(b"COST") => {
            integer(value, crate::config::cost_range()).map_err(|e| RefundArgError::Arg(e.into()))
        }
        [name] if name.as_slice().eq_ignore_ascii_case(b"COST") => Err(RefundArgError::Arg(
            ArgError::MissingValue("COST", crate::config::cost_range()),
        )),
        [name, ..] if name.as_slice().eq_ignore_ascii_case(b"COST") => {
            Err(RefundArgError::Arg(ArgError::RepeatedOption("COST")))
        }
        [other, ..] => Err(RefundArgError::Unknown(shown(other.as_slice()))),
    }
}

/// A bad argument after the spec.
enum RefundArgError {
    NoCost,
    Arg(ArgError),
    Unknown(String),
}

impl std::fmt::Display for RefundArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefundArgError::NoCost => {
                write!(f, "RL.REFUND needs COST n: the units to give back")
            }
            RefundArgError::Arg(e) => write!(f, "{e}"),
            RefundArgError::Unknown(given) => {
                write!(f, "unknown option '{given}', expected COST n")
            }
        }
    }
}
