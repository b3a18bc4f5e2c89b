//! Per-command counters for the `INFO rl` section: calls, allowed, denied, errors.
//!
//! Counting costs a few relaxed atomic increments per call. Commands run on Redis's main
//! thread, so the command being counted is kept in a thread-local set by the dispatcher;
//! the deciding code records allowed/denied without knowing which command it serves.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The counters of one command.
pub struct CommandStats {
    /// The command name as shown in INFO (lower case, without the `rl.` prefix).
    pub name: &'static str,
    calls: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
}

impl CommandStats {
    /// Zeroed counters for `name`.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            calls: AtomicU64::new(0),
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// `(calls, allowed, denied, errors)`.
    pub fn snapshot(&self) -> (u64, u64, u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.allowed.load(Ordering::Relaxed),
            self.denied.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

thread_local! {
    static CURRENT: Cell<Option<&'static CommandStats>> = const { Cell::new(None) };
}

/// Counts one call of `stats`' command and makes it the target of [`record_decision`] while
/// `run` executes; counts an error if `run` returns one.
pub fn count<T, E>(
    stats: &'static CommandStats,
    run: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    stats.calls.fetch_add(1, Ordering::Relaxed);
    CURRENT.with(|c| c.set(Some(stats)));
    let result = run();
    CURRENT.with(|c| c.set(None));
    if result.is_err() {
        stats.errors.fetch_add(1, Ordering::Relaxed);
    }
    result
}

/// Records the outcome of the call being counted (not for PEEK: a peek decides nothing).
pub fn record_decision(allowed: bool) {
    CURRENT.with(|c| {
        if let Some(stats) = c.get() {
            let counter = if allowed {
                &stats.allowed
            } else {
                &stats.denied
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// RL.TOKENBUCKET.
pub static TOKENBUCKET: CommandStats = CommandStats::new("tokenbucket");
/// RL.SLIDING.
pub static SLIDING: CommandStats = CommandStats::new("sliding");
/// RL.FIXED.
pub static FIXED: CommandStats = CommandStats::new("fixed");
/// RL.LOG.
pub static LOG: CommandStats = CommandStats::new("log");
/// RL.GCRA.
pub static GCRA: CommandStats = CommandStats::new("gcra");
/// RL.THROTTLE.
pub static THROTTLE: CommandStats = CommandStats::new("throttle");
/// RL.CONCURRENCY.
pub static CONCURRENCY: CommandStats = CommandStats::new("concurrency");
/// RL.ALL.
pub static ALL: CommandStats = CommandStats::new("all");
/// RL.REFUND.
pub static REFUND: CommandStats = CommandStats::new("refund");
/// RL.RESET.
pub static RESET: CommandStats = CommandStats::new("reset");
/// RL.STATE.
pub static STATE: CommandStats = CommandStats::new("state");

/// Every command's counters, in the order INFO shows them.
static EVERY: [&CommandStats; 11] = [
    &TOKENBUCKET,
    &SLIDING,
    &FIXED,
    &LOG,
    &GCRA,
    &THROTTLE,
    &CONCURRENCY,
    &ALL,
    &REFUND,
    &RESET,
    &STATE,
];

/// The `INFO rl` section: `<command>_calls`, `_allowed`, `_denied`, `_errors` per command.
///
/// Registered with `RedisModule_RegisterInfoFunc` at load.
pub extern "C" fn info(ctx: *mut redis_module::raw::RedisModuleInfoCtx, _for_crash_report: i32) {
    use redis_module::raw;
    // SAFETY: the API table is filled at module load; Redis calls this with a valid context.
    let (Some(add_section), Some(add_field)) =
        (unsafe { raw::RedisModule_InfoAddSection }, unsafe {
            raw::RedisModule_InfoAddFieldULongLong
        })
    else {
        return;
    };
    // SAFETY: valid context; an empty name makes the section the module's own ("rl").
    unsafe { add_section(ctx, c"".as_ptr()) };
    for stats in EVERY {
        let (calls, allowed, denied, errors) = stats.snapshot();
        for (suffix, value) in [
            ("calls", calls),
            ("allowed", allowed),
            ("denied", denied),
            ("errors", errors),
        ] {
            if let Ok(field) = std::ffi::CString::new(format!("{}_{suffix}", stats.name)) {
                // SAFETY: valid context and NUL-terminated field name.
                unsafe { add_field(ctx, field.as_ptr(), value) };
            }
        }
    }
}
