//! `RL.CONCURRENCY key limit lease_ms ACQUIRE id [PEEK]` and `RL.CONCURRENCY key RELEASE id`.

use redis_module::{raw, Context, RedisString, RedisValue};
use redis_rl_core::concurrency::{
    self, acquire, release, Concurrency, ConcurrencyParams, ConcurrencyState,
};
use redis_rl_core::{Algorithm as _, Decision, Micros};

use super::{Command, Handled, WRITE};
use crate::args::{integer, ArgError, Options};
use crate::docs::{group, int, key, string, Syntax, LIMITER_KEY, PEEK, WRITE_ACL};
use crate::encoding::lease_table::{self, Change, Table};
use crate::encoding::{DecodeError, Kind};
use crate::error::Error;
use crate::store::{Leases, LimiterKey};
use crate::{clock, reply};

pub const COMMAND: Command = Command {
    name: c"RL.CONCURRENCY",
    flags: WRITE,
    acl: WRITE_ACL,
    keys: LIMITER_KEY,
    arity: -4,
    summary:
        c"Acquires or releases a lease in a concurrency limiter (leases expire after lease_ms).",
    complexity: c"O(N) where N is the number of leases held (at most limit)",
    syntax: Syntax::Args(&[
        key(),
        group(
            "operation",
            raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
            &[
                group(
                    "acquire",
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
                    &[
                        int(concurrency::LIMIT.name),
                        int(concurrency::LEASE_MS.name),
                        string("id").after("ACQUIRE"),
                        PEEK,
                    ],
                ),
                string("release-id").after("RELEASE"),
            ],
        ),
    ]),
    handler: run,
};

/// The error for anything but `ACQUIRE` or `RELEASE` where the operation belongs.
const OPERATION: Error =
    Error::Fixed("expected 'limit lease_ms ACQUIRE id' or 'RELEASE id' after the key");

fn run(ctx: &Context, args: &[RedisString]) -> Result<Handled, Error> {
    match args {
        [_, key, operation, id] => {
            if !operation.as_slice().eq_ignore_ascii_case(b"RELEASE") {
                return Err(OPERATION);
            }
            run_release(ctx, key, parse_id(id)?)
        }
        [_, key, limit, lease_ms, operation, id, options @ ..] => {
            if !operation.as_slice().eq_ignore_ascii_case(b"ACQUIRE") {
                return Err(OPERATION);
            }
            let params = parse(limit, lease_ms)?;
            let id = parse_id(id)?;
            let peek = Options::parse_peek_only(options)?;
            run_acquire(ctx, key, &params, id, peek)
        }
        _ => Err(Error::WrongArity),
    }
}

/// The reply of an ACQUIRE, counted unless it is a PEEK.
fn replied(ctx: &Context, decision: &Decision, peek: bool) -> Result<Handled, Error> {
    Ok(Handled {
        reply: reply::send(ctx, &reply::decision(decision)),
        decided: (!peek).then_some(decision.is_allowed()),
    })
}

/// Replies `[allowed, limit, remaining, retry_after_ms, 0]`; writes only when allowed and
/// not a `PEEK` (which replies as the real call would, and takes or renews nothing).
///
/// A lease table (format version 2) decides and changes only the records the call touches,
/// replicated as `SETRANGE` + `PEXPIREAT`; a missing key, or a version 1 list (converted
/// here), is decided by the core and written as a new table.
fn run_acquire(
    ctx: &Context,
    name: &RedisString,
    params: &ConcurrencyParams,
    id: &[u8],
    peek: bool,
) -> Result<Handled, Error> {
    let key = LimiterKey::open(ctx, name);
    let now = clock::now();
    match key.read_leases()? {
        Leases::Table(bytes) => {
            let table = Table::parse(&bytes).map_err(corrupt)?;
            let (decision, change) = table.acquire(now, params, id).map_err(corrupt)?;
            if peek {
                return replied(ctx, &decision, peek);
            }
            match change {
                None => {}
                Some(Change::Rebuild) => {
                    let leases = table.leases().map_err(corrupt)?;
                    if let (_, Some(state)) = acquire(Some(leases), now, params, id) {
                        write(&key, &state)?;
                    }
                }
                Some(change) => key.patch(|bytes| lease_table::apply(bytes, change, id))?,
            }
            replied(ctx, &decision, peek)
        }
        Leases::List(state) => decide_by_core(ctx, &key, Some(state), now, params, id, peek),
        Leases::Missing => decide_by_core(ctx, &key, None, now, params, id, peek),
    }
}

/// An ACQUIRE on a missing key or a version 1 list: the core decides, and an allowed call
/// writes the leases as a new table.
fn decide_by_core(
    ctx: &Context,
    key: &LimiterKey<'_>,
    stored: Option<ConcurrencyState>,
    now: Micros,
    params: &ConcurrencyParams,
    id: &[u8],
    peek: bool,
) -> Result<Handled, Error> {
    let (decision, new_state) = acquire(stored, now, params, id);
    if let (false, Some(state)) = (peek, new_state) {
        write(key, &state)?;
    }
    replied(ctx, &decision, peek)
}

/// Replies 1 if `id` held a lease (now released), else 0. The last lease released deletes
/// the key (replicated as `DEL`); otherwise the lease's record is freed in place (a version
/// 1 list is rewritten as a table).
fn run_release(ctx: &Context, name: &RedisString, id: &[u8]) -> Result<Handled, Error> {
    let key = LimiterKey::open(ctx, name);
    let now = clock::now();
    let released = match key.read_leases()? {
        Leases::Missing => false,
        Leases::List(state) => match release(Some(state), now, id) {
            concurrency::Release::NotHeld => false,
            concurrency::Release::Released(Some(state)) => {
                write(&key, &state)?;
                true
            }
            concurrency::Release::Released(None) => {
                key.delete()?;
                true
            }
        },
        Leases::Table(bytes) => {
            let change = Table::parse(&bytes)
                .and_then(|table| table.release(now, id))
                .map_err(corrupt)?;
            match change {
                None => false,
                Some(Change::Delete) => {
                    key.delete()?;
                    true
                }
                Some(change) => {
                    key.patch(|bytes| lease_table::apply(bytes, change, id))?;
                    true
                }
            }
        }
    };
    Ok(RedisValue::Integer(i64::from(released)).into())
}

/// Stores the leases as a new table, the key expiring once the last of them has (plus the
/// TTL slack).
fn write(key: &LimiterKey<'_>, state: &ConcurrencyState) -> Result<(), Error> {
    let expiry = state
        .idle_at()
        .ceil_millis()
        .saturating_add(crate::config::ttl_slack());
    key.write(&lease_table::build(state), expiry)
}

/// The error for a lease table that is not consistent.
fn corrupt(_: lease_table::Corrupt) -> Error {
    DecodeError::Corrupt(Kind::Concurrency).into()
}

fn parse(limit: &RedisString, lease_ms: &RedisString) -> Result<ConcurrencyParams, ArgError> {
    let values = [
        integer(limit, concurrency::LIMIT)?,
        integer(lease_ms, concurrency::LEASE_MS)?,
    ];
    Ok(Concurrency::params(&values, &[])?)
}

fn parse_id(id: &RedisString) -> Result<&[u8], Error> {
    concurrency::check_id(id.as_slice()).map_err(Error::text)
}
