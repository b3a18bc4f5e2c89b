//! Module configuration: `CONFIG GET/SET rl.<name>` and `loadmodule libredis_rl.so <name> <value> ...`.
//!
//! Each value is an atomic read on the hot path (commands run on Redis's main thread; the
//! atomics only make the statics safe to share). Redis validates the ranges on CONFIG SET
//! and at load, with its own error text naming the config.

use std::sync::atomic::{AtomicI64, Ordering};

use redis_rl_core::limits::{self, Range, MAX_COUNT};
use redis_rl_core::{sliding_log, throttle};
use redis_rl_core::{Algorithm, Kind, Millis};

/// `rl.max-cost`: the largest cost a call may ask for, however it arrives: `COST n`,
/// RL.THROTTLE's `quantity`, or the implicit cost of 1 when neither is given (default and
/// ceiling: 10^15).
pub static MAX_COST: AtomicI64 = AtomicI64::new(MAX_COUNT as i64);
/// Ceiling of `rl.max-cost`.
pub const MAX_COST_CEILING: i64 = MAX_COUNT as i64;

/// `rl.max-all-keys`: the most keys one RL.ALL may check (default 16).
pub static MAX_ALL_KEYS: AtomicI64 = AtomicI64::new(16);
/// Ceiling of `rl.max-all-keys`.
pub const MAX_ALL_KEYS_CEILING: i64 = 256;

/// `rl.max-log-entries`: the largest `limit` of RL.LOG, so the most entries one log key holds
/// (default and ceiling: 10000).
pub static MAX_LOG_ENTRIES: AtomicI64 = AtomicI64::new(sliding_log::MAX_LIMIT as i64);
/// Ceiling of `rl.max-log-entries`.
pub const MAX_LOG_ENTRIES_CEILING: i64 = sliding_log::MAX_LIMIT as i64;

/// `rl.ttl-slack-ms`: how long a key outlives the moment its limiter is idle (default 1000).
pub static TTL_SLACK_MS: AtomicI64 = AtomicI64::new(1_000);
/// Ceiling of `rl.ttl-slack-ms` (one day).
pub const TTL_SLACK_CEILING: i64 = 86_400_000;

fn read(value: &AtomicI64) -> u64 {
    u64::try_from(value.load(Ordering::Relaxed)).unwrap_or(0)
}

/// The accepted range of `COST n` under the current configuration.
pub fn cost_range() -> Range {
    Range {
        max: read(&MAX_COST),
        ..limits::COST
    }
}

/// The accepted range of RL.THROTTLE's `quantity` (its cost) under the current configuration.
pub fn quantity_range() -> Range {
    Range {
        max: read(&MAX_COST),
        ..throttle::QUANTITY
    }
}

/// The accepted range of RL.ALL's `numkeys` under the current configuration.
pub fn numkeys_range() -> Range {
    Range {
        name: "numkeys",
        min: 1,
        max: read(&MAX_ALL_KEYS),
        spelling: redis_rl_core::limits::Spelling::Integer,
    }
}

/// The accepted range of parameter `range` of algorithm `A` under the current
/// configuration: the registry's range, except RL.LOG's `limit`, capped by
/// `rl.max-log-entries`.
pub fn param_range<A: Algorithm>(range: Range) -> Range {
    param_range_of(Kind::from_tag(A::TAG), range)
}

/// [`param_range`] for the algorithm of `kind`.
pub fn param_range_of(kind: Option<Kind>, range: Range) -> Range {
    if kind == Some(Kind::SlidingLog) && range == sliding_log::LIMIT {
        log_limit_range()
    } else {
        range
    }
}

/// The accepted range of RL.LOG's `limit` under the current configuration.
pub fn log_limit_range() -> Range {
    Range {
        max: read(&MAX_LOG_ENTRIES),
        ..sliding_log::LIMIT
    }
}

/// How long a written key outlives its limiter's idle instant.
pub fn ttl_slack() -> Millis {
    Millis(read(&TTL_SLACK_MS))
}
