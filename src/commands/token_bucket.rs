//! `RL.TOKENBUCKET key capacity refill_tokens refill_ms [COST n] [PEEK]`.

use redis_module::{Context, RedisError, RedisResult, RedisString};
use redis_rl_core::limits;
use redis_rl_core::token_bucket::{check, TokenBucketParams, TokenBucketState};

use super::limiter::decide;
use crate::args::{integer, ArgError, Options};

pub fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let [_, key, capacity, refill_tokens, refill_ms, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let params =
        parse(capacity, refill_tokens, refill_ms).map_err(|e| RedisError::String(e.to_string()))?;
    let options = Options::parse(options).map_err(|e| RedisError::String(e.to_string()))?;
    decide::<TokenBucketState>(ctx, key, options, |state, now, cost| {
        check(state, now, &params, cost)
    })
}

fn parse(
    capacity: &RedisString,
    refill_tokens: &RedisString,
    refill_ms: &RedisString,
) -> Result<TokenBucketParams, ArgError> {
    Ok(TokenBucketParams::new(
        integer(capacity, limits::count("capacity"))?,
        integer(refill_tokens, limits::count("refill_tokens"))?,
        integer(refill_ms, limits::duration_ms("refill_ms"))?,
    )?)
}
