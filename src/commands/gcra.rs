//! `RL.GCRA key limit period_ms [BURST b] [COST n] [UPTO] [PEEK]`.

use redis_rl_core::gcra::Gcra;

use super::{limiter, Command};

pub const COMMAND: Command = limiter::command::<Gcra>(
    c"RL.GCRA",
    c"Generic cell rate algorithm (one stored timestamp); replies allowed, limit, remaining, retry_after_ms, reset_after_ms (and granted with UPTO).",
    c"O(1)",
);
