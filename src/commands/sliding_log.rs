//! `RL.LOG key limit window_ms [COST n] [PEEK]`.

use redis_module::{Context, RedisError, RedisResult, RedisString};
use redis_rl_core::limits;
use redis_rl_core::sliding_log::{check, SlidingLogParams, SlidingLogState};

use super::limiter::decide;
use crate::args::{integer, ArgError, Options};

pub fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let [_, key, limit, window_ms, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let params = parse(limit, window_ms).map_err(|e| RedisError::String(e.to_string()))?;
    let options = Options::parse(options).map_err(|e| RedisError::String(e.to_string()))?;
    decide::<SlidingLogState>(ctx, key, options, |state, now, cost| {
        check(state, now, &params, cost)
    })
}

fn parse(limit: &RedisString, window_ms: &RedisString) -> Result<SlidingLogParams, ArgError> {
    Ok(SlidingLogParams::new(
        integer(limit, crate::config::log_limit_range())?,
        integer(window_ms, limits::duration_ms("window_ms"))?,
    )?)
}
