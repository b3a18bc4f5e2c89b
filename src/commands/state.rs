//! `RL.STATE key`: a read-only view of a limiter, for debugging. Never writes.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::{clock, encoding, reply, store};

pub fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let [_, key] = args else {
        return Err(RedisError::WrongArity);
    };
    // Looked at without changing it (not even its encoding), and copied whole only when
    // its length is one a valid limiter has.
    let Some(value) = store::peek(ctx, key, true)? else {
        return Ok(RedisValue::Null);
    };
    let (algorithm, fields) = value
        .whole()
        .and_then(|(_, bytes)| encoding::describe(bytes, clock::now()))
        .map_err(|e| RedisError::String(e.to_string()))?;
    Ok(reply::state(ctx, algorithm.name(), &fields, value.ttl))
}
