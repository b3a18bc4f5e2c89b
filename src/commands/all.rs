//! `RL.ALL numkeys key [key ...] spec [spec ...] [COSTS n [n ...]] [COST n] [FORCE] [PEEK]`: one
//! request checked against several limiters at once, all or nothing (with `FORCE`, taken by
//! every one); `COSTS` gives each key its own cost (one per key, in key order).
//!
//! Every key is read and decided first; only if every dimension allows the request are the
//! new states written. A request denied by any dimension therefore consumes nothing anywhere.
//!
//! Each key is opened once and stays open from its read to its write; the specs are parsed
//! once. Up to [`ON_STACK`] keys (`rl.max-all-keys`' default) the call allocates nothing:
//! its per-key data lives on the stack and the reply is sent directly.

use std::fmt;
use std::os::raw::c_long;

use redis_module::{raw, Context, RedisString, RedisValue};
use redis_rl_core::decision::expire_at;
use redis_rl_core::{AnyState, Decision};

use super::spec::{self, Spec, SpecError};
use super::{Command, Handled};
use crate::args::{self, integer, ArgError, Options};
use crate::docs::{int, key, string, Keys, Syntax, COST, COSTS, FORCE, PEEK, WRITE_ACL};
use crate::error::Error;
use crate::store::LimiterKey;
use crate::{clock, config, reply};

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
        COSTS,
        COST,
        FORCE,
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
    TooFewCosts { numkeys: usize },
    CostAndCosts,
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
            AllError::TooFewCosts { numkeys } => {
                write!(f, "COSTS needs one cost per key ({numkeys})")
            }
            AllError::CostAndCosts => write!(f, "COST and COSTS cannot be given together"),
        }
    }
}

impl From<AllError> for Error {
    fn from(e: AllError) -> Self {
        Error::text(e)
    }
}

/// Keys whose per-call data lives on the stack; a call with more (`rl.max-all-keys` above its
/// default) makes one allocation for it.
const ON_STACK: usize = 16;

/// One key of the call, from parsing to the reply.
#[derive(Default)]
struct Dimension<'a> {
    /// The key's name, for the duplicate check.
    name: &'a [u8],
    /// Its limiter.
    spec: Option<Spec>,
    /// Its own cost (`COSTS`), else the call's.
    cost: Option<u64>,
    /// The key, open from its read to its write, and what was decided for it.
    decided: Option<Decided<'a>>,
}

/// A key read and decided, not yet written.
struct Decided<'a> {
    key: LimiterKey<'a>,
    decision: Decision,
    /// The state to store if the whole call is allowed.
    next: Option<AnyState>,
}

/// Runs `f` with `n` default dimensions: on the stack up to [`ON_STACK`] (in an array of 4
/// for the common small call, so that it does not set up and drop 16), else in one allocation.
fn with_dimensions<'a, R>(n: usize, f: impl FnOnce(&mut [Dimension<'a>]) -> R) -> R {
    const SMALL: usize = 4;
    if n <= SMALL {
        on_stack::<SMALL, R>(n, f)
    } else if n <= ON_STACK {
        on_stack::<ON_STACK, R>(n, f)
    } else {
        let mut slots: Vec<Dimension<'a>> =
            std::iter::repeat_with(Dimension::default).take(n).collect();
        f(&mut slots)
    }
}

/// [`with_dimensions`] in an array of `N` (`n <= N`).
fn on_stack<'a, const N: usize, R>(n: usize, f: impl FnOnce(&mut [Dimension<'a>]) -> R) -> R {
    let mut slots: [Dimension<'a>; N] = std::array::from_fn(|_| Dimension::default());
    let (used, _) = slots.split_at_mut(n.min(N));
    f(used)
}

/// The keys (after `numkeys`) and the arguments after them.
fn split_keys(args: &[RedisString]) -> Result<(&[RedisString], &[RedisString]), AllError> {
    let [_, numkeys, rest @ ..] = args else {
        return Err(AllError::NumKeys(ArgError::Param(
            config::numkeys_range().error(),
        )));
    };
    let numkeys =
        integer(numkeys, config::numkeys_range()).map_err(|e| AllError::NumKeys(e.into()))?;
    let n = usize::try_from(numkeys).unwrap_or(usize::MAX);
    rest.split_at_checked(n)
        .ok_or(AllError::TooFewKeys { numkeys })
}

/// Fills in each dimension's key name and spec, and parses the options after the specs.
fn parse<'a>(
    keys: &'a [RedisString],
    rest: &'a [RedisString],
    dimensions: &mut [Dimension<'a>],
) -> Result<Options, AllError> {
    for (d, key) in dimensions.iter_mut().zip(keys) {
        d.name = args::bytes(key);
    }
    for (i, d) in dimensions.iter().enumerate() {
        if dimensions
            .iter()
            .take(i)
            .any(|earlier| earlier.name == d.name)
        {
            return Err(AllError::DuplicateKey(i + 1));
        }
    }
    let mut rest = rest.iter();
    for (i, d) in dimensions.iter_mut().enumerate() {
        d.spec = Some(spec::parse(&mut rest).map_err(|e| AllError::Spec(i + 1, e))?);
    }
    let options = parse_costs(rest.as_slice(), dimensions)?;
    Options::parse(options).map_err(AllError::Options)
}

/// `COSTS n1 ... nk` right after the specs: each key's own cost (within `rl.max-cost`), so
/// that dimensions charged differently are still decided in one atomic call. Returns the
/// options after it.
fn parse_costs<'a>(
    rest: &'a [RedisString],
    dimensions: &mut [Dimension<'_>],
) -> Result<&'a [RedisString], AllError> {
    let Some((word, tail)) = rest.split_first() else {
        return Ok(rest);
    };
    if !args::bytes(word).eq_ignore_ascii_case(b"COSTS") {
        return Ok(rest);
    }
    let numkeys = dimensions.len();
    let (costs, options) = tail
        .split_at_checked(numkeys)
        .ok_or(AllError::TooFewCosts { numkeys })?;
    for (d, cost) in dimensions.iter_mut().zip(costs) {
        let cost = integer(cost, config::cost_range())
            .map_err(|e| AllError::Options(ArgError::Param(e)))?;
        d.cost = Some(cost);
    }
    // A cost's value is a number, never the word: any COST here is the option.
    if options
        .iter()
        .any(|a| args::bytes(a).eq_ignore_ascii_case(b"COST"))
    {
        return Err(AllError::CostAndCosts);
    }
    Ok(options)
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
    let (keys, rest) = split_keys(args)?;
    with_dimensions(keys.len(), |dimensions| {
        let options = parse(keys, rest, dimensions)?;
        decide(ctx, keys, dimensions, options)
    })
}

/// Reads and decides every key, writes them all if every one allows the request, replies.
fn decide<'a>(
    ctx: &'a Context,
    keys: &'a [RedisString],
    dimensions: &mut [Dimension<'a>],
    options: Options,
) -> Result<Handled, Error> {
    let now = clock::now();
    let mut denied = None;
    for (i, (d, name)) in dimensions.iter_mut().zip(keys).enumerate() {
        let Some(spec) = &d.spec else { continue };
        let key = LimiterKey::open(ctx, name);
        let cost = d.cost.unwrap_or(options.cost);
        let (decision, next) = spec::check(spec, &key, now, cost, options.force)?;
        if denied.is_none() && !decision.is_allowed() {
            denied = Some(i);
        }
        d.decided = Some(Decided {
            key,
            decision,
            next,
        });
    }
    if denied.is_some() {
        // Nothing is taken anywhere: report each allowing dimension as it stands (read
        // again from the key still open, which is unchanged).
        for d in dimensions.iter_mut() {
            let (Some(spec), Some(e)) = (&d.spec, &mut d.decided) else {
                continue;
            };
            if e.decision.is_allowed() {
                e.decision = spec::check(spec, &e.key, now, 0, false)?.0;
            }
        }
    } else if !options.peek {
        for e in dimensions.iter().filter_map(|d| d.decided.as_ref()) {
            if let Some(next) = &e.next {
                let expiry = expire_at(now, e.decision.reset_after, config::ttl_slack());
                e.key.write(spec::encode(next).as_bytes(), expiry)?;
            }
        }
    }
    Ok(Handled {
        reply: send(ctx, denied, dimensions),
        decided: (!options.peek).then_some(denied.is_none()),
    })
}

/// Replies `[allowed, denied_index, [[limit, remaining, retry_after_ms, reset_after_ms], ...]]`
/// through the server's reply functions directly (no intermediate `RedisValue`, which would
/// allocate; no wrapper checking each function pointer again) and returns `NoReply`.
fn send(ctx: &Context, denied: Option<usize>, dimensions: &[Dimension<'_>]) -> RedisValue {
    let allowed = i64::from(denied.is_none());
    let index = denied.map_or(0, |i| i64::try_from(i + 1).unwrap_or(0));
    let per_key = || {
        dimensions.iter().filter_map(|d| {
            let [_, per_key @ ..] = reply::decision(&d.decided.as_ref()?.decision);
            Some(per_key)
        })
    };
    // SAFETY: the API table is filled at module load.
    let (Some(array), Some(long_long)) = (unsafe { raw::RedisModule_ReplyWithArray }, unsafe {
        raw::RedisModule_ReplyWithLongLong
    }) else {
        // Never on a server that loaded the module; let the dispatcher reply instead.
        let int = RedisValue::Integer;
        let per_key = per_key().map(|f| RedisValue::Array(f.into_iter().map(int).collect()));
        return RedisValue::Array(vec![
            int(allowed),
            int(index),
            RedisValue::Array(per_key.collect()),
        ]);
    };
    let c = ctx.get_raw();
    // SAFETY: a command's context; each array header is followed by exactly its elements.
    unsafe {
        array(c, 3);
        long_long(c, allowed);
        long_long(c, index);
        array(c, c_long::try_from(dimensions.len()).unwrap_or(0));
        for fields in per_key() {
            array(c, 4);
            for field in fields {
                long_long(c, field);
            }
        }
    }
    RedisValue::NoReply
}
