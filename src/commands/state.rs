//! `RL.STATE key`: a read-only view of a limiter, for debugging. Never writes.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::{clock, encoding, reply, store};

pub fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let [_, key] = args else {
        return Err(RedisError::WrongArity);
    };
    let Some(value) = store::read_raw(ctx, key)? else {
        return Ok(RedisValue::Null);
    };
    let (algorithm, fields) = encoding::describe(&value.bytes, clock::now())
        .map_err(|e| RedisError::String(e.to_string()))?;
    Ok(reply::state(ctx, algorithm.name(), &fields, value.ttl))
}
