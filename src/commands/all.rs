//! `RL.ALL numkeys key [key ...] spec [spec ...] [COST n] [PEEK]`: one request checked against
//! several limiters at once, all or nothing.
//!
//! Every key is read and decided first; only if every dimension allows the request are the
//! new states written. A request denied by any dimension therefore consumes nothing anywhere.

use std::fmt;

use redis_module::{Context, RedisString, RedisValue};

use super::spec::{self, Spec, SpecError};
use super::{Command, Handled};
use crate::args::{integer, ArgError, Options};
use crate::docs::{int, key, string, Keys, Syntax, COST, PEEK, WRITE_ACL};
use crate::error::Error;
use crate::{clock, config, reply, store};

pub const COMMAND: Command = Command {
    name: c"RL.ALL",
    // Movable keys: declared per call through the getkeys API.
    flags: c"write deny-oom fast getkeys-api",
    acl: WRITE_ACL,
    keys: Keys::Counted,
    arity: -4,
    summary: c"Checks one request against several limiters, all or nothing; replies allowed, denied_index and each key's limit, remaining, retry_after_ms, reset_after_ms.",
    complexity: c"O(N) where N is the number of keys",
    syntax: Syntax::Args(&[
        int("numkeys"),
        key().multiple(),
        string("spec").multiple(),
        COST,
        PEEK,
    ]),
    handler: run,
};

/// A bad RL.ALL call, with the public error text as `Display`.
#[derive(Debug)]
enum AllError {
    NumKeys(ArgError),
    TooFewKeys { numkeys: u64 },
    DuplicateKey(usize),
    Spec(usize, SpecError),
    Options(ArgError),
}

impl fmt::Display for AllError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllError::NumKeys(e) | AllError::Options(e) => write!(f, "{e}"),
            AllError::TooFewKeys { numkeys } => {
                write!(f, "numkeys is {numkeys} but fewer keys follow")
            }
            AllError::DuplicateKey(i) => {
                write!(
                    f,
                    "key {i} repeats an earlier key: each key may appear once"
                )
            }
            AllError::Spec(i, e) => write!(f, "spec {i}: {e}"),
        }
    }
}

impl From<AllError> for Error {
    fn from(e: AllError) -> Self {
        Error::text(e)
    }
}

/// The parsed call.
struct Request<'a> {
    keys: &'a [RedisString],
    specs: Vec<Spec>,
    options: Options,
}

fn parse(args: &[RedisString]) -> Result<Request<'_>, AllError> {
    let [_, numkeys, rest @ ..] = args else {
        return Err(AllError::NumKeys(ArgError::Param(
            config::numkeys_range().error(),
        )));
    };
    let numkeys =
        integer(numkeys, config::numkeys_range()).map_err(|e| AllError::NumKeys(e.into()))?;
    let n = usize::try_from(numkeys).unwrap_or(usize::MAX);
    let (keys, rest) = rest
        .split_at_checked(n)
        .ok_or(AllError::TooFewKeys { numkeys })?;
    for (i, key) in keys.iter().enumerate() {
        if keys.iter().take(i).any(|k| k.as_slice() == key.as_slice()) {
            return Err(AllError::DuplicateKey(i + 1));
        }
    }
    let mut rest = rest.iter();
    let mut specs = Vec::with_capacity(n);
    for i in 1..=n {
        specs.push(spec::parse(&mut rest).map_err(|e| AllError::Spec(i, e))?);
    }
    let options = Options::parse(rest.as_slice()).map_err(AllError::Options)?;
    Ok(Request {
        keys,
        specs,
        options,
    })
}

/// Tells Redis where the keys are (`getkeys-api`), so cluster routing and ACLs see them.
fn declare_keys(ctx: &Context, args: &[RedisString]) {
    let Some(numkeys) = args
        .get(1)
        .and_then(|n| integer(n, config::numkeys_range()).ok())
    else {
        return;
    };
    let last = usize::try_from(numkeys)
        .unwrap_or(0)
        .saturating_add(1)
        .min(args.len().saturating_sub(1));
    for pos in 2..=last {
        ctx.key_at_pos(i32::try_from(pos).unwrap_or(0));
    }
}

fn run(ctx: &Context, args: &[RedisString]) -> Result<Handled, Error> {
    if ctx.is_keys_position_request() {
        declare_keys(ctx, args);
        return Ok(RedisValue::NoReply.into());
    }
    if args.len() < 4 {
        return Err(Error::WrongArity);
    }
    let request = parse(args)?;
    let now = clock::now();
    let cost = request.options.cost;
    let mut evaluated = Vec::with_capacity(request.keys.len());
    for (key, spec) in request.keys.iter().zip(&request.specs) {
        evaluated.push(spec::evaluate(spec, ctx, key, now, cost)?);
    }
    let denied = evaluated.iter().position(|e| !e.decision.is_allowed());
    if denied.is_some() {
        // Nothing is taken anywhere: report each allowing dimension as it stands.
        for ((key, spec), e) in request.keys.iter().zip(&request.specs).zip(&mut evaluated) {
            if e.decision.is_allowed() {
                e.decision = spec::evaluate(spec, ctx, key, now, 0)?.decision;
            }
        }
    } else if !request.options.peek {
        for (key, e) in request.keys.iter().zip(&evaluated) {
            if let Some((value, expiry)) = &e.write {
                store::write(ctx, key, value.as_bytes(), *expiry)?;
            }
        }
    }
    let per_key = evaluated
        .iter()
        .map(|e| reply::dimension(&e.decision))
        .collect();
    let reply = RedisValue::Array(vec![
        RedisValue::Integer(i64::from(denied.is_none())),
        RedisValue::Integer(denied.map_or(0, |i| i64::try_from(i + 1).unwrap_or(0))),
        RedisValue::Array(per_key),
    ]);
    Ok(Handled {
        reply,
        decided: (!request.options.peek).then_some(denied.is_none()),
    })
}
