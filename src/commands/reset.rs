//! `RL.RESET key`: deletes a limiter, whatever its algorithm.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::encoding::{self, DecodeError};
use crate::store;

pub fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let [_, key] = args else {
        return Err(RedisError::WrongArity);
    };
    // Only the header is looked at (the value may be huge), without changing anything.
    let Some(value) = store::peek(ctx, key, false)? else {
        return Ok(RedisValue::Integer(0));
    };
    // Any value with our header goes, even a corrupt or newer-format one: resetting is the
    // way out of a key this module cannot read. Anything else is left untouched.
    if !encoding::is_limiter(&value.bytes) {
        return Err(RedisError::String(DecodeError::NotOurs.to_string()));
    }
    store::delete(ctx, key)?;
    Ok(RedisValue::Integer(1))
}
