//! `RL.QUOTA key limit period [TZ minutes] [ANCHOR day] [COST n] [UPTO] [FORCE] [PEEK]`.

use redis_rl_core::quota::Quota;

use super::{limiter, Command};

pub const COMMAND: Command = limiter::command::<Quota>(
    c"RL.QUOTA",
    c"Counts a request against a quota per calendar period (DAY, WEEK from Monday, MONTH from an anchor day, YEAR) at a fixed UTC offset; replies allowed, limit, remaining, retry_after_ms (until the next period), reset_after_ms (and granted with UPTO).",
    c"O(1)",
);
