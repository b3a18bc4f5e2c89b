//! The reply format, the one place where a decision becomes wire integers (and `-1`).

use redis_module::{raw, Context, RedisValue};
use redis_rl_core::algorithm::StateValue;
use redis_rl_core::throttle::Throttled;
use redis_rl_core::{Decision, Millis, Outcome};

/// An integer field: counts and durations above `i64::MAX` (only possible at the extreme
/// documented bounds) are reported as `i64::MAX`.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The reply of every single-key limiting command, before it is sent.
pub type Fields = [i64; 5];

/// `[allowed (1|0), limit, remaining, retry_after_ms, reset_after_ms]`.
///
/// `retry_after_ms` is 0 when allowed and -1 when the call can never succeed.
pub fn decision(d: &Decision) -> Fields {
    let (allowed, retry_after) = match d.outcome {
        Outcome::Allowed => (1, 0),
        Outcome::Denied { retry_after } => (0, int(retry_after.0)),
        Outcome::Never => (0, -1),
    };
    [
        allowed,
        int(d.limit),
        int(d.remaining),
        retry_after,
        int(d.reset_after.0),
    ]
}

/// A partial grant's reply (`UPTO`): the five fields, then `granted`, the units taken (or,
/// with PEEK, that would be taken); 0 when denied.
pub fn with_granted(fields: Fields, granted: u64) -> [i64; 6] {
    let [allowed, limit, remaining, retry_after, reset_after] = fields;
    [
        allowed,
        limit,
        remaining,
        retry_after,
        reset_after,
        int(granted),
    ]
}

/// RL.REFUND: `[refunded, limit, remaining, 0, reset_after_ms]`, the state after the refund.
pub fn refund(refunded: u64, after: &Decision) -> Fields {
    let [_, limit, remaining, _, reset_after] = decision(after);
    [int(refunded), limit, remaining, 0, reset_after]
}

/// RL.THROTTLE, redis-cell's reply:
/// `[limited (0|1), max_burst + 1, remaining, retry_after_s, reset_after_s]`, where
/// `retry_after_s` is -1 when allowed and when the quantity can never pass.
pub fn throttle(d: &Decision) -> Fields {
    let t = Throttled::from(d);
    [
        i64::from(t.limited),
        int(t.limit),
        int(t.remaining),
        t.retry_after_s.map_or(-1, int),
        int(t.reset_after_s),
    ]
}

/// Sends an array of integers straight to the client (no intermediate `RedisValue`, which
/// would allocate on every call) and returns `NoReply` for the dispatcher.
///
/// Calls the server's functions directly: the crate's wrappers check the function pointer
/// and convert the status of every field, which costs more than the call itself. A fixed
/// size, so the loop unrolls.
#[inline(always)]
pub fn send<const N: usize>(ctx: &Context, fields: &[i64; N]) -> RedisValue {
    // SAFETY: the API table is filled at module load.
    let (Some(array), Some(long_long)) = (unsafe { raw::RedisModule_ReplyWithArray }, unsafe {
        raw::RedisModule_ReplyWithLongLong
    }) else {
        // Never on a server that loaded the module; let the dispatcher reply instead.
        return RedisValue::Array(fields.iter().map(|&f| RedisValue::Integer(f)).collect());
    };
    let c = ctx.get_raw();
    // SAFETY: a command's context; an array header followed by exactly its fields.
    unsafe {
        array(c, N.try_into().unwrap_or(0));
        for &field in fields {
            long_long(c, field);
        }
    }
    RedisValue::NoReply
}

/// RL.STATE: `algorithm`, the algorithm's own fields, then `ttl_ms` (-1: no expiry), in
/// that order. A map in RESP3; in RESP2 the server sends the same pairs as a flat array
/// `[name, value, ...]`. Replies directly (to keep the order) and returns `NoReply`.
pub fn state(
    ctx: &Context,
    algorithm: &str,
    fields: &[(&'static str, StateValue)],
    ttl: Option<Millis>,
) -> RedisValue {
    let c = ctx.get_raw();
    let text = |s: &str| raw::reply_with_string_buffer(c, s.as_ptr().cast(), s.len());
    let integer = |v: i64| raw::reply_with_long_long(c, v);
    let pairs = std::os::raw::c_long::try_from(fields.len() + 2).unwrap_or(0);
    raw::reply_with_map(c, pairs);
    text("algorithm");
    text(algorithm);
    for (name, value) in fields {
        text(name);
        match value {
            StateValue::Int(v) => integer(i64::try_from(*v).unwrap_or(i64::MAX)),
        };
    }
    text("ttl_ms");
    integer(ttl.map_or(-1, |t| i64::try_from(t.0).unwrap_or(i64::MAX)));
    RedisValue::NoReply
}
