//! Command handlers: parse, read the key, call the core, write the key, reply.
//!
//! No arithmetic lives here; the decisions are made in `redis_rl_core`.

mod all;
mod concurrency;
mod fixed_window;
mod gcra;
mod limiter;
mod refund;
mod reset;
mod sliding_log;
mod sliding_window;
mod spec;
mod state;
mod throttle;
mod token_bucket;

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{Context, RedisError, RedisResult, RedisString};

use crate::stats;

/// `RL.TOKENBUCKET key capacity refill_tokens refill_ms [COST n] [PEEK]`.
pub fn rl_tokenbucket(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::TOKENBUCKET, token_bucket::run)
}

/// `RL.SLIDING key limit window_ms [COST n] [PEEK]`.
pub fn rl_sliding(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::SLIDING, sliding_window::run)
}

/// `RL.ALL numkeys key [key ...] spec [spec ...] [COST n] [PEEK]`.
pub fn rl_all(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::ALL, all::run)
}

/// `RL.REFUND key spec COST n`.
pub fn rl_refund(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::REFUND, refund::run)
}

/// `RL.FIXED key limit window_ms [COST n] [PEEK]`.
pub fn rl_fixed(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::FIXED, fixed_window::run)
}

/// `RL.GCRA key limit period_ms [BURST b] [COST n] [PEEK]`.
pub fn rl_gcra(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::GCRA, gcra::run)
}

/// `RL.THROTTLE key max_burst count period_s [quantity]` (redis-cell's `CL.THROTTLE`).
pub fn rl_throttle(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::THROTTLE, throttle::run)
}

/// `RL.RESET key`.
pub fn rl_reset(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::RESET, reset::run)
}

/// `RL.STATE key`.
pub fn rl_state(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::STATE, state::run)
}

/// `RL.LOG key limit window_ms [COST n] [PEEK]`.
pub fn rl_log(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::LOG, sliding_log::run)
}

/// `RL.CONCURRENCY key limit lease_ms ACQUIRE id` / `RL.CONCURRENCY key RELEASE id`.
pub fn rl_concurrency(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, &stats::CONCURRENCY, concurrency::run)
}

/// Runs a handler, counted in `INFO rl`, so that a bug can never unwind into redis-server
/// (which would abort it): a panic becomes an error reply instead.
fn guarded(
    ctx: &Context,
    args: Vec<RedisString>,
    counters: &'static stats::CommandStats,
    handler: fn(&Context, &[RedisString]) -> RedisResult,
) -> RedisResult {
    stats::count(counters, || {
        catch_unwind(AssertUnwindSafe(|| handler(ctx, &args))).unwrap_or(Err(RedisError::Str(
            "ERR internal error in redis-rl (a bug: please report it with the command)",
        )))
    })
}
