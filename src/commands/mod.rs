//! Command handlers: parse, read the key, call the core, write the key, reply.
//!
//! No arithmetic lives here; the decisions are made in `redis_rl_core`.

mod limiter;
mod sliding_window;
mod token_bucket;

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{Context, RedisError, RedisResult, RedisString};

/// `RL.TOKENBUCKET key capacity refill_tokens refill_ms [COST n] [PEEK]`.
pub fn rl_tokenbucket(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, token_bucket::run)
}

/// `RL.SLIDING key limit window_ms [COST n] [PEEK]`.
pub fn rl_sliding(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, sliding_window::run)
}

/// Runs a handler so that a bug can never unwind into redis-server (which would abort it):
/// a panic becomes an error reply instead, after the handler has written nothing more.
fn guarded(
    ctx: &Context,
    args: Vec<RedisString>,
    handler: fn(&Context, &[RedisString]) -> RedisResult,
) -> RedisResult {
    catch_unwind(AssertUnwindSafe(|| handler(ctx, &args))).unwrap_or(Err(RedisError::Str(
        "ERR internal error in redis-rl (a bug: please report it with the command)",
    )))
}
