//! `RL.CONCURRENCY key limit lease_ms ACQUIRE id [PEEK]` and `RL.CONCURRENCY key RELEASE id`.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};
use redis_rl_core::concurrency::{self, acquire, release, ConcurrencyParams, ConcurrencyState};
use redis_rl_core::{limits, Micros};

use crate::args::{integer, ArgError, Options};
use crate::encoding::lease_table::{self, Change, Table};
use crate::encoding::{Algorithm, DecodeError};
use crate::store::{Leases, LimiterKey};
use crate::{clock, reply};

/// The error for anything but `ACQUIRE` or `RELEASE` where the operation belongs.
const OPERATION: &str = "ERR expected 'limit lease_ms ACQUIRE id' or 'RELEASE id' after the key";

pub fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
    match args {
        [_, key, operation, id] => {
            if !operation.as_slice().eq_ignore_ascii_case(b"RELEASE") {
                return Err(RedisError::Str(OPERATION));
            }
            run_release(ctx, key, parse_id(id)?)
        }
        [_, key, limit, lease_ms, operation, id, options @ ..] => {
            if !operation.as_slice().eq_ignore_ascii_case(b"ACQUIRE") {
                return Err(RedisError::Str(OPERATION));
            }
            let params = parse(limit, lease_ms).map_err(|e| RedisError::String(e.to_string()))?;
            let id = parse_id(id)?;
            let peek =
                Options::parse_peek_only(options).map_err(|e| RedisError::String(e.to_string()))?;
            run_acquire(ctx, key, &params, id, peek)
        }
        _ => Err(RedisError::WrongArity),
    }
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
) -> RedisResult {
    let key = LimiterKey::open(ctx, name);
    let now = clock::now();
    match key.read_leases()? {
        Leases::Table(bytes) => {
            let table = Table::parse(bytes).map_err(corrupt)?;
            let (decision, change) = table.acquire(now, params, id).map_err(corrupt)?;
            if peek {
                return reply::send(ctx, &reply::decision(&decision));
            }
            crate::stats::record_decision(decision.is_allowed());
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
            reply::send(ctx, &reply::decision(&decision))
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
) -> RedisResult {
    let (decision, new_state) = acquire(stored, now, params, id);
    if peek {
        return reply::send(ctx, &reply::decision(&decision));
    }
    crate::stats::record_decision(decision.is_allowed());
    if let Some(state) = new_state {
        write(key, &state)?;
    }
    reply::send(ctx, &reply::decision(&decision))
}

/// Replies 1 if `id` held a lease (now released), else 0. The last lease released deletes
/// the key (replicated as `DEL`); otherwise the lease's record is freed in place (a version
/// 1 list is rewritten as a table).
fn run_release(ctx: &Context, name: &RedisString, id: &[u8]) -> RedisResult {
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
            let change = Table::parse(bytes)
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
    Ok(RedisValue::Integer(i64::from(released)))
}

/// Stores the leases as a new table, the key expiring once the last of them has (plus the
/// TTL slack).
fn write(key: &LimiterKey<'_>, state: &ConcurrencyState) -> Result<(), RedisError> {
    let expiry = state
        .idle_at()
        .ceil_millis()
        .saturating_add(crate::config::ttl_slack());
    key.write(&lease_table::build(state), expiry)
}

/// The error for a lease table that is not consistent.
fn corrupt(_: lease_table::Corrupt) -> RedisError {
    RedisError::String(DecodeError::Corrupt(Algorithm::Concurrency).to_string())
}

fn parse(limit: &RedisString, lease_ms: &RedisString) -> Result<ConcurrencyParams, ArgError> {
    Ok(ConcurrencyParams::new(
        integer(limit, concurrency::LIMIT)?,
        integer(lease_ms, limits::duration_ms("lease_ms"))?,
    )?)
}

fn parse_id(id: &RedisString) -> Result<&[u8], RedisError> {
    concurrency::check_id(id.as_slice()).map_err(|e| RedisError::String(format!("ERR {e}")))
}
