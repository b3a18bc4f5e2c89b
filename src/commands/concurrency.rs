//! `RL.CONCURRENCY key limit lease_ms ACQUIRE id [PEEK]` and `RL.CONCURRENCY key RELEASE id`.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};
use redis_rl_core::concurrency::{self, acquire, release, ConcurrencyParams, ConcurrencyState};
use redis_rl_core::limits;

use crate::args::{integer, ArgError, Options};
use crate::encoding::Stored;
use crate::{clock, reply, store};

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
fn run_acquire(
    ctx: &Context,
    key: &RedisString,
    params: &ConcurrencyParams,
    id: &[u8],
    peek: bool,
) -> RedisResult {
    let stored = store::read::<ConcurrencyState>(ctx, key)?;
    let now = clock::now();
    let (decision, new_state) = acquire(stored, now, params, id);
    if peek {
        return reply::send(ctx, &reply::decision(&decision));
    }
    crate::stats::record_decision(decision.is_allowed());
    if let Some(state) = new_state {
        write(ctx, key, &state)?;
    }
    reply::send(ctx, &reply::decision(&decision))
}

/// Replies 1 if `id` held a lease (now released), else 0. The last lease released deletes
/// the key (replicated as `DEL`); otherwise the remaining leases are written.
fn run_release(ctx: &Context, key: &RedisString, id: &[u8]) -> RedisResult {
    let stored = store::read::<ConcurrencyState>(ctx, key)?;
    let now = clock::now();
    match release(stored, now, id) {
        concurrency::Release::NotHeld => return Ok(RedisValue::Integer(0)),
        concurrency::Release::Released(Some(state)) => write(ctx, key, &state)?,
        concurrency::Release::Released(None) => store::delete(ctx, key)?,
    }
    Ok(RedisValue::Integer(1))
}

/// Stores the leases, the key expiring once the last of them has (plus the TTL slack).
fn write(ctx: &Context, key: &RedisString, state: &ConcurrencyState) -> Result<(), RedisError> {
    let expiry = state
        .idle_at()
        .ceil_millis()
        .saturating_add(crate::config::ttl_slack());
    store::write(ctx, key, state.encode().as_bytes(), expiry)
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
