//! The flow shared by every single-key limiting command.

use redis_module::{Context, RedisResult, RedisString};
use redis_rl_core::decision::expire_at;
use redis_rl_core::{Decision, Micros};

use crate::args::Options;
use crate::encoding::Stored;
use crate::store::LimiterKey;
use crate::{clock, config, reply, stats};

/// Reads `key`, lets `check` decide at the server's current time, stores the new state
/// (unless PEEK, a denial or a no-op) and replies.
pub fn decide<S: Stored>(
    ctx: &Context,
    key: &RedisString,
    options: Options,
    check: impl FnOnce(Option<S>, Micros, u64) -> (Decision, Option<S>),
) -> RedisResult {
    decide_replying(ctx, key, options, check, reply::decision)
}

/// [`decide`] with another reply format (RL.THROTTLE answers like redis-cell).
pub fn decide_replying<S: Stored>(
    ctx: &Context,
    key: &RedisString,
    options: Options,
    check: impl FnOnce(Option<S>, Micros, u64) -> (Decision, Option<S>),
    reply: fn(&Decision) -> reply::Fields,
) -> RedisResult {
    let key = LimiterKey::open(ctx, key);
    let stored = key.read::<S>()?;
    let now = clock::now();
    let (decision, new_state) = check(stored, now, options.cost);
    if !options.peek {
        stats::record_decision(decision.is_allowed());
    }
    if let (false, Some(state)) = (options.peek, new_state) {
        let expiry = expire_at(now, decision.reset_after, config::ttl_slack());
        key.write(state.encode().as_bytes(), expiry)?;
    }
    reply::send(ctx, &reply(&decision))
}
