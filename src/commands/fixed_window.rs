//! `RL.FIXED key limit window_ms [COST n] [UPTO] [PEEK]`.

use redis_rl_core::fixed_window::FixedWindow;

use super::{limiter, Command};

pub const COMMAND: Command = limiter::command::<FixedWindow>(
    c"RL.FIXED",
    c"Counts a request in a fixed window aligned to the epoch; replies allowed, limit, remaining, retry_after_ms, reset_after_ms (and granted with UPTO).",
    c"O(1)",
);
