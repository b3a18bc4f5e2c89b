//! The reply format, the one place where a decision becomes wire integers (and `-1`).

use redis_module::RedisValue;
use redis_rl_core::{Decision, Outcome};

fn int(v: u64) -> RedisValue {
    RedisValue::Integer(i64::try_from(v).unwrap_or(i64::MAX))
}

/// `[allowed (1|0), limit, remaining, retry_after_ms, reset_after_ms]`.
///
/// `retry_after_ms` is 0 when allowed and -1 when the call can never succeed.
pub fn decision(d: &Decision) -> RedisValue {
    let (allowed, retry_after) = match d.outcome {
        Outcome::Allowed => (int(1), int(0)),
        Outcome::Denied { retry_after } => (int(0), int(retry_after.0)),
        Outcome::Never => (int(0), RedisValue::Integer(-1)),
    };
    RedisValue::Array(vec![
        allowed,
        int(d.limit),
        int(d.remaining),
        retry_after,
        int(d.reset_after.0),
    ])
}
