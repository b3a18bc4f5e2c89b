//! `RL.SLIDING key limit window_ms [COST n] [UPTO] [PEEK]`.

use redis_rl_core::sliding_window::SlidingWindow;

use super::{limiter, Command};

pub const COMMAND: Command = limiter::command::<SlidingWindow>(
    c"RL.SLIDING",
    c"Counts a request in a sliding window counter (previous window weighted); replies allowed, limit, remaining, retry_after_ms, reset_after_ms (and granted with UPTO).",
    c"O(1)",
);
