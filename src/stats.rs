//! Per-command counters for the `INFO rl` section: calls, allowed, denied, errors.
//!
//! Counting costs a relaxed load and store per counter and call (see `bump`). The
//! dispatcher counts each call from what its handler returned (`commands::Handled`), so the
//! deciding code never needs to know which command it serves.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::commands::{COMMANDS, COUNTERS};

/// The counters of one command.
pub struct CommandStats {
    calls: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
}

impl CommandStats {
    /// Zeroed counters.
    pub const fn new() -> Self {
        Self {
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

impl Default for CommandStats {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts one call: an error, or a reply with its decision (`Some(allowed)`) if it made one.
#[inline]
pub fn count<E>(stats: &CommandStats, outcome: Result<Option<bool>, E>) {
    bump(&stats.calls);
    let counter = match outcome {
        Err(_) => &stats.errors,
        Ok(Some(true)) => &stats.allowed,
        Ok(Some(false)) => &stats.denied,
        Ok(None) => return,
    };
    bump(counter);
}

/// Adds one to a counter. Only the server's main thread runs commands, so a load and a store
/// suffice: an atomic read-modify-write (`lock`-prefixed on x86) would be a full barrier on
/// every call for nothing. Readers (INFO, on the same thread) see every increment.
#[inline]
fn bump(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// The command's name as INFO shows it: lower case, without the `rl.` prefix.
fn info_name(name: &std::ffi::CStr) -> String {
    let name = name.to_string_lossy().to_ascii_lowercase();
    name.strip_prefix("rl.").unwrap_or(&name).to_string()
}

/// The release (Cargo.toml's workspace version), for `INFO rl`.
const VERSION: &std::ffi::CStr = cstr(concat!(env!("CARGO_PKG_VERSION"), "\0"));
/// The commit the module was built from (build.rs), for `INFO rl`.
const GIT_COMMIT: &std::ffi::CStr = cstr(concat!(env!("RL_GIT_COMMIT"), "\0"));

/// A compile-time C string of a `concat!` ending in NUL (a bad one fails the build).
const fn cstr(text: &'static str) -> &'static std::ffi::CStr {
    match std::ffi::CStr::from_bytes_with_nul(text.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("not a C string"),
    }
}

/// The `INFO rl` section: `version` and `git_commit` (the build's), `<command>_calls`, `_allowed`, `_denied`, `_errors` per command,
/// in the order of the command table, then the replication mode (`replication_mode`:
/// `effects` or `verbatim`) and `writes_replayed` (RL writes that ran from the replication
/// stream or while loading: non-zero only if a master ever sent an RL call itself, see
/// `replication.rs`).
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
    for (command, stats) in COMMANDS.iter().zip(COUNTERS) {
        let name = info_name(command.name);
        let (calls, allowed, denied, errors) = stats.snapshot();
        for (suffix, value) in [
            ("calls", calls),
            ("allowed", allowed),
            ("denied", denied),
            ("errors", errors),
        ] {
            if let Ok(field) = std::ffi::CString::new(format!("{name}_{suffix}")) {
                // SAFETY: valid context and NUL-terminated field name.
                unsafe { add_field(ctx, field.as_ptr(), value) };
            }
        }
    }
    // SAFETY: the API table is filled at module load; valid context and NUL-terminated texts.
    if let Some(add_text) = unsafe { raw::RedisModule_InfoAddFieldCString } {
        for (field, text) in [(c"version", VERSION), (c"git_commit", GIT_COMMIT)] {
            unsafe { add_text(ctx, field.as_ptr(), text.as_ptr()) };
        }
    }
    let mode = match crate::replication::mode() {
        crate::replication::Mode::Replicate => c"effects",
        crate::replication::Mode::Verbatim => c"verbatim",
    };
    // SAFETY: the API table is filled at module load; valid context and NUL-terminated texts.
    if let Some(add_text) = unsafe { raw::RedisModule_InfoAddFieldCString } {
        unsafe { add_text(ctx, c"replication_mode".as_ptr(), mode.as_ptr()) };
    }
    // SAFETY: as above.
    unsafe {
        add_field(
            ctx,
            c"writes_replayed".as_ptr(),
            crate::replication::replayed(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_names_are_the_command_names_in_lower_case() {
        assert_eq!(info_name(c"RL.TOKENBUCKET"), "tokenbucket");
        let names: Vec<String> = COMMANDS.iter().map(|c| info_name(c.name)).collect();
        assert_eq!(
            names,
            [
                "tokenbucket",
                "sliding",
                "fixed",
                "log",
                "gcra",
                "quota",
                "throttle",
                "concurrency",
                "all",
                "refund",
                "reset",
                "state"
            ]
        );
    }

    #[test]
    fn counts_calls_decisions_and_errors() {
        let s = CommandStats::new();
        count::<()>(&s, Ok(Some(true)));
        count::<()>(&s, Ok(Some(false)));
        count::<()>(&s, Ok(None));
        count(&s, Err(()));
        assert_eq!(s.snapshot(), (4, 1, 1, 1));
    }
}
