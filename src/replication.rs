//! Replication mode: replicate a write's effect, or hand the call to the server verbatim
//! when the module can prove that nothing listens.
//!
//! Why: `RedisModule_Replicate` looks the command up by name and builds argument objects
//! before the server asks whether anything listens (an AOF, a replica, a replication
//! backlog, on Valkey a slot being exported); on a standalone master without persistence
//! that is a third of a call's cost for nothing. `RedisModule_ReplicateVerbatim` goes
//! straight to the server's own "does anything listen?" check and, when nothing does, only
//! counts the write for `save` points, as `Replicate` does.
//!
//! The module cannot ask the server that question per call (no context flag for "backlog
//! exists" or "has replicas"), so it tracks a mode:
//! - it starts in [`Mode::Replicate`] (the `SET ... PXAT` effect, exact everywhere);
//! - it switches to `Replicate` at once on every signal that a listener may appear: a
//!   command filter on `SYNC`, `PSYNC` and `REPLCONF` (seen before they create the
//!   backlog), role change, loading, fork child, persistence, config change (`appendonly`
//!   among others), replica change, master link change, and on Valkey the start of a slot
//!   export (atomic slot migration);
//! - it returns to [`Mode::Verbatim`] only when a periodic check (the server's cron event)
//!   finds master role, no AOF, no replication backlog, no replica and no slot export.
//!
//! If the prediction were ever wrong, a replica or an AOF would get the RL call itself
//! (replayed with another clock: drift, never a lost write). Such calls are counted when
//! they run (`INFO rl`, `writes_replayed`), so a wrong prediction is visible.
//!
//! Everything here runs on the server's main thread; the atomics only make the statics
//! safe to share, and are read with relaxed ordering.

use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use redis_module::{raw, Context};

/// How writes are replicated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Propagate the effect (`SET key value PXAT ms`, `SETRANGE`, `PEXPIREAT`, `DEL`).
    Replicate,
    /// Nothing listens: `RedisModule_ReplicateVerbatim` (counts the write, sends nothing).
    Verbatim,
}

/// True while in [`Mode::Verbatim`].
static VERBATIM: AtomicBool = AtomicBool::new(false);
/// False if a signal could not be subscribed to: the module then never leaves `Replicate`.
static TRACKING: AtomicBool = AtomicBool::new(false);
/// Slot exports in progress (Valkey atomic slot migration).
static EXPORTS: AtomicI64 = AtomicI64::new(0);
/// Cron ticks since the last periodic check.
static TICKS: AtomicU64 = AtomicU64::new(0);
/// Set when the current call has already handed itself to `ReplicateVerbatim`.
static SENT: AtomicBool = AtomicBool::new(false);
/// RL writes that ran from the replication stream or while loading.
static REPLAYED: AtomicU64 = AtomicU64::new(0);

/// In `Verbatim`, the check also runs (once a second at the default `hz`), as a safety net.
const VERBATIM_CHECK_EVERY: u64 = 10;

/// The current mode.
pub fn mode() -> Mode {
    if VERBATIM.load(Ordering::Relaxed) {
        Mode::Verbatim
    } else {
        Mode::Replicate
    }
}

/// RL writes that ran from the replication stream or while loading (`INFO rl`).
pub fn replayed() -> u64 {
    REPLAYED.load(Ordering::Relaxed)
}

/// A listener may appear: replicate effects from now on.
fn listener_may_appear() {
    VERBATIM.store(false, Ordering::Relaxed);
}

/// Called by the dispatcher before each command: the call has not been handed over yet.
#[inline]
pub fn begin_call() {
    SENT.store(false, Ordering::Relaxed);
}

/// Replicates one write of the current call: in `Verbatim` mode the call itself, once per
/// call, through `ReplicateVerbatim` (which sends nothing since nothing listens); otherwise
/// `effect` (the write's deterministic form), after counting a write that itself came from
/// the replication stream or a load.
pub fn replicate(ctx: &Context, effect: impl FnOnce()) {
    if VERBATIM.load(Ordering::Relaxed) {
        // A load and a store, not a swap: only the main thread runs commands, and a swap
        // is a locked instruction (a full barrier) on x86.
        if !SENT.load(Ordering::Relaxed) {
            SENT.store(true, Ordering::Relaxed);
            // SAFETY: the API table is filled at module load; a command's context.
            if let Some(verbatim) = unsafe { raw::RedisModule_ReplicateVerbatim } {
                unsafe { verbatim(ctx.get_raw()) };
            }
        }
        return;
    }
    count_replayed(ctx);
    effect();
}

/// Counts a write whose call arrived over replication or runs while loading.
fn count_replayed(ctx: &Context) {
    // SAFETY: the API table is filled at module load; a command's context.
    let flags =
        unsafe { raw::RedisModule_GetContextFlags }.map_or(0, |f| unsafe { f(ctx.get_raw()) });
    let replayed =
        (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) as c_int;
    if flags & replayed != 0 {
        REPLAYED.fetch_add(1, Ordering::Relaxed);
    }
}

// Server event ids and subevents (redismodule.h; Valkey's valkeymodule.h for slot export).
const EVENT_ROLE_CHANGED: u64 = 0;
const EVENT_PERSISTENCE: u64 = 1;
const EVENT_LOADING: u64 = 3;
const EVENT_REPLICA_CHANGE: u64 = 6;
const EVENT_MASTER_LINK_CHANGE: u64 = 7;
const EVENT_CRON_LOOP: u64 = 8;
const EVENT_FORK_CHILD: u64 = 13;
const EVENT_CONFIG: u64 = 16;
/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` (Valkey 9.0+).
const EVENT_VALKEY_SLOT_MIGRATION: u64 = 19;
const SLOT_EXPORT_STARTED: u64 = 1;
const SLOT_EXPORT_ABORTED: u64 = 3;
const SLOT_EXPORT_COMPLETED: u64 = 5;

/// Subscribes to every signal and registers the command filter. If any of the signals
/// every server has cannot be subscribed to, the module stays in `Replicate` for good.
pub fn init(ctx: &Context, valkey: bool) {
    // SAFETY: the API table is filled before init runs.
    let (Some(subscribe), Some(filter)) =
        (unsafe { raw::RedisModule_SubscribeToServerEvent }, unsafe {
            raw::RedisModule_RegisterCommandFilter
        })
    else {
        return;
    };
    let sub = |id: u64, callback: raw::RedisModuleEventCallback| {
        // SAFETY: a valid context and a callback that lives as long as the module.
        let status = unsafe {
            subscribe(
                ctx.get_raw(),
                raw::RedisModuleEvent { id, dataver: 1 },
                callback,
            )
        };
        status == raw::REDISMODULE_OK as c_int
    };
    let mut all = true;
    for id in [
        EVENT_ROLE_CHANGED,
        EVENT_PERSISTENCE,
        EVENT_LOADING,
        EVENT_REPLICA_CHANGE,
        EVENT_MASTER_LINK_CHANGE,
        EVENT_FORK_CHILD,
        EVENT_CONFIG,
    ] {
        all &= sub(id, Some(on_signal));
    }
    all &= sub(EVENT_CRON_LOOP, Some(on_cron));
    if valkey {
        // Without slot migration (Valkey before 9.0) there is no slot export to watch.
        sub(EVENT_VALKEY_SLOT_MIGRATION, Some(on_slot_migration));
    }
    // SAFETY: a valid context and a callback that lives as long as the module.
    let registered = unsafe {
        filter(
            ctx.get_raw(),
            Some(on_command),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
        )
    };
    all &= !registered.is_null();
    TRACKING.store(all, Ordering::Relaxed);
}

/// Any of the signals: a listener may appear.
extern "C" fn on_signal(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    listener_may_appear();
}

/// Valkey atomic slot migration: an export in progress makes the server propagate.
extern "C" fn on_slot_migration(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    match subevent {
        SLOT_EXPORT_STARTED => {
            EXPORTS.fetch_add(1, Ordering::Relaxed);
        }
        SLOT_EXPORT_ABORTED | SLOT_EXPORT_COMPLETED => {
            // Never below zero (an export that started before the module loaded).
            let _ = EXPORTS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some((n - 1).max(0))
            });
        }
        _ => {}
    }
    listener_may_appear();
}

/// The command filter: `SYNC`, `PSYNC` and `REPLCONF` announce a replica before the backlog
/// exists. Runs for every command, so it only compares the name's length and bytes.
extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: the API table is filled at module load; the server passes a live filter
    // context, and the argument's bytes are only read during this call.
    let name = unsafe {
        let (Some(arg), Some(ptr)) = (
            raw::RedisModule_CommandFilterArgGet,
            raw::RedisModule_StringPtrLen,
        ) else {
            listener_may_appear();
            return;
        };
        let first = arg(fctx, 0);
        if first.is_null() {
            return;
        }
        let mut len = 0;
        let p = ptr(first, &mut len);
        if p.is_null() {
            return;
        }
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    };
    if announces_replica(name) {
        listener_may_appear();
    }
}

/// True for `SYNC`, `PSYNC` and `REPLCONF`, in any case.
fn announces_replica(name: &[u8]) -> bool {
    match name.len() {
        4 => name.eq_ignore_ascii_case(b"sync"),
        5 => name.eq_ignore_ascii_case(b"psync"),
        8 => name.eq_ignore_ascii_case(b"replconf"),
        _ => false,
    }
}

/// The cron event: the periodic check, at every tick in `Replicate` mode and once every
/// [`VERBATIM_CHECK_EVERY`] ticks in `Verbatim`.
extern "C" fn on_cron(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    if !TRACKING.load(Ordering::Relaxed) {
        return;
    }
    let ticks = TICKS.fetch_add(1, Ordering::Relaxed) + 1;
    if VERBATIM.load(Ordering::Relaxed) && !ticks.is_multiple_of(VERBATIM_CHECK_EVERY) {
        return;
    }
    let quiet = nothing_listens(ctx);
    VERBATIM.store(quiet, Ordering::Relaxed);
}

/// Master role, no AOF, no replication backlog, no replica, no slot export.
fn nothing_listens(ctx: *mut raw::RedisModuleCtx) -> bool {
    if EXPORTS.load(Ordering::Relaxed) != 0 {
        return false;
    }
    // SAFETY: the API table is filled at module load; the event's context is valid.
    let flags = unsafe { raw::RedisModule_GetContextFlags }.map_or(0, |f| unsafe { f(ctx) });
    let master = flags & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int != 0;
    let aof = flags & raw::REDISMODULE_CTX_FLAGS_AOF as c_int != 0;
    let loading = flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0;
    if !master || aof || loading {
        return false;
    }
    // SAFETY: as above.
    let (Some(get), Some(signed), Some(free)) = (
        unsafe { raw::RedisModule_GetServerInfo },
        unsafe { raw::RedisModule_ServerInfoGetFieldSigned },
        unsafe { raw::RedisModule_FreeServerInfo },
    ) else {
        return false;
    };
    // SAFETY: a valid context and NUL-terminated names; the info object is freed here.
    unsafe {
        let info = get(ctx, c"replication".as_ptr());
        if info.is_null() {
            return false;
        }
        let field = |name: &std::ffi::CStr| {
            let mut err: c_int = 0;
            let v = signed(info, name.as_ptr(), &mut err);
            (err == 0).then_some(v)
        };
        let quiet =
            field(c"repl_backlog_active") == Some(0) && field(c"connected_slaves") == Some(0);
        free(ctx, info);
        quiet
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_knows_the_commands_that_announce_a_replica() {
        for name in ["sync", "SYNC", "PSync", "psync", "REPLCONF", "replconf"] {
            assert!(announces_replica(name.as_bytes()), "{name}");
        }
        for name in ["SET", "SYNCX", "PSYN", "RL.TOKENBUCKET", "", "REPLICAOF"] {
            assert!(!announces_replica(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn it_starts_replicating_and_a_signal_returns_to_it() {
        assert_eq!(mode(), Mode::Replicate);
        VERBATIM.store(true, Ordering::Relaxed);
        on_signal(
            std::ptr::null_mut(),
            raw::RedisModuleEvent { id: 0, dataver: 1 },
            0,
            std::ptr::null_mut(),
        );
        assert_eq!(mode(), Mode::Replicate);
    }
}
