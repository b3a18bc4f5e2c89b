//! `RL.FIXED key limit window_ms [COST n] [PEEK]`.

use redis_module::{Context, RedisError, RedisResult, RedisString};
use redis_rl_core::fixed_window::{check, FixedWindowParams, FixedWindowState};
use redis_rl_core::limits;

use super::limiter::decide;
use crate::args::{integer, ArgError, Options};

pub fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let [_, key, limit, window_ms, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let params = parse(limit, window_ms).map_err(|e| RedisError::String(e.to_string()))?;
    let options = Options::parse(options).map_err(|e| RedisError::String(e.to_string()))?;
    decide::<FixedWindowState>(ctx, key, options, |state, now, cost| {
        check(state, now, &params, cost)
    })
}

fn parse(limit: &RedisString, window_ms: &RedisString) -> Result<FixedWindowParams, ArgError> {
    Ok(FixedWindowParams::new(
        integer(limit, limits::count("limit"))?,
        integer(window_ms, limits::duration_ms("window_ms"))?,
    )?)
}
