//! `RL.GCRA key limit period_ms [BURST b] [COST n] [PEEK]`.

use redis_module::{Context, RedisError, RedisResult, RedisString};
use redis_rl_core::gcra::{check, GcraParams, GcraState};
use redis_rl_core::limits;

use super::limiter::decide;
use crate::args::{integer, ArgError, Options};

pub fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let [_, key, limit, period_ms, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let (params, options) =
        parse(limit, period_ms, options).map_err(|e| RedisError::String(e.to_string()))?;
    decide::<GcraState>(ctx, key, options, |state, now, cost| {
        check(state, now, &params, cost)
    })
}

fn parse(
    limit: &RedisString,
    period_ms: &RedisString,
    options: &[RedisString],
) -> Result<(GcraParams, Options), ArgError> {
    let limit = integer(limit, limits::count("limit"))?;
    let period_ms = integer(period_ms, limits::duration_ms("period_ms"))?;
    let (options, burst) = Options::parse_with_burst(options)?;
    Ok((GcraParams::new(limit, period_ms, burst)?, options))
}
