//! `RL.TOKENBUCKET key capacity refill_tokens refill_ms [COST n] [UPTO] [PEEK]`.

use redis_rl_core::token_bucket::TokenBucket;

use super::{limiter, Command};

pub const COMMAND: Command = limiter::command::<TokenBucket>(
    c"RL.TOKENBUCKET",
    c"Takes tokens from a token bucket that refills continuously; replies allowed, limit, remaining, retry_after_ms, reset_after_ms (and granted with UPTO).",
    c"O(1)",
);
