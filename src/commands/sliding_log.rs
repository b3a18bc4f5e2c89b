//! `RL.LOG key limit window_ms [COST n] [PEEK]` (`limit` at most `rl.max-log-entries`).

use redis_rl_core::sliding_log::SlidingLog;

use super::{limiter, Command};

pub const COMMAND: Command = limiter::command::<SlidingLog>(
    c"RL.LOG",
    c"Exact sliding window log of admitted units; replies allowed, limit, remaining, retry_after_ms, reset_after_ms.",
    c"O(N) where N is the number of entries in the window (at most limit)",
);
