//! What a write tells the rest of the server: the modified-key signal, keyspace
//! notifications, and the deterministic effects replicas and the AOF are given; and deletion.

use redis_module::{raw, Context, RedisString};

use super::OpenKey;
use crate::error::Error;
use crate::replication;

/// Deletes `key` and replicates `DEL key`.
pub fn delete(ctx: &Context, key: &RedisString) -> Result<(), Error> {
    let open = OpenKey(raw::open_key(ctx.get_raw(), key.inner, raw::KeyMode::WRITE));
    delete_open(ctx, key, open.0)
}

/// Deletes the key open (for writing) as `open` and replicates `DEL key`.
pub(super) fn delete_open(
    ctx: &Context,
    key: &RedisString,
    open: *mut raw::RedisModuleKey,
) -> Result<(), Error> {
    // SAFETY: the API table is filled once at module load, before any command runs.
    let delete_key = unsafe { raw::RedisModule_DeleteKey }
        .ok_or(Error::Fixed("redis-rl needs RedisModule_DeleteKey"))?;
    // SAFETY: the key is open for writing.
    if raw::Status::from(unsafe { delete_key(open) }) != raw::Status::Ok {
        return Err(Error::Fixed("redis-rl could not delete the key"));
    }
    signal_modified(ctx, key);
    notify(ctx, raw::NotifyEvent::GENERIC, c"del", key);
    replication::replicate(ctx, || {
        ctx.replicate("DEL", &[key.as_slice()]);
    });
    Ok(())
}

/// Tells Redis the key changed (invalidates `WATCH` and client-side caches).
pub(super) fn signal_modified(ctx: &Context, key: &RedisString) {
    // SAFETY: the API table is filled at module load; valid context and key name.
    if let Some(signal) = unsafe { raw::RedisModule_SignalModifiedKey } {
        unsafe { signal(ctx.get_raw(), key.inner) };
    }
}

/// Publishes the keyspace notification `event` for `key` (the server checks whether any
/// class of events is on, and tells modules that subscribe to them).
pub(super) fn notify(
    ctx: &Context,
    class: raw::NotifyEvent,
    event: &std::ffi::CStr,
    key: &RedisString,
) {
    // SAFETY: the API table is filled at module load; a valid context, a NUL-terminated
    // event name and a key name that outlive the call.
    if let Some(notify) = unsafe { raw::RedisModule_NotifyKeyspaceEvent } {
        unsafe { notify(ctx.get_raw(), class.bits(), event.as_ptr(), key.inner) };
    }
}

/// Propagates `SETRANGE key offset bytes`.
pub(super) fn replicate_setrange(ctx: &Context, key: &RedisString, offset: usize, bytes: &[u8]) {
    // SAFETY: the API table is filled at module load, before any command runs.
    let Some(replicate) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    let offset = std::os::raw::c_longlong::try_from(offset).unwrap_or(0);
    // SAFETY: "slb" takes a module string, a long long, and a buffer and its length,
    // matching the arguments; all of them outlive the call, and Redis copies them.
    unsafe {
        replicate(
            ctx.get_raw(),
            c"SETRANGE".as_ptr(),
            c"slb".as_ptr(),
            key.inner,
            offset,
            bytes.as_ptr().cast::<std::os::raw::c_char>(),
            bytes.len(),
        );
    }
}

/// Propagates `PEXPIREAT key expire_at_ms`.
pub(super) fn replicate_pexpireat(ctx: &Context, key: &RedisString, expire_at_ms: i64) {
    // SAFETY: the API table is filled at module load, before any command runs.
    let Some(replicate) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    // SAFETY: "sl" takes a module string and a long long, matching the arguments.
    unsafe {
        replicate(
            ctx.get_raw(),
            c"PEXPIREAT".as_ptr(),
            c"sl".as_ptr(),
            key.inner,
            std::os::raw::c_longlong::from(expire_at_ms),
        );
    }
}

/// Propagates `SET key value PXAT expire_at_ms` to replicas and the AOF.
///
/// Called through the raw API with a format string so that Redis builds the arguments from
/// our buffers directly: the crate's `Context::replicate` would first copy every argument
/// into a new module string and free it again (measured with callgrind: about 2,000
/// instructions per call, a sixth of RL.TOKENBUCKET).
pub(super) fn replicate_set(ctx: &Context, key: &RedisString, value: &[u8], expire_at_ms: i64) {
    // SAFETY: the API table is filled at module load, before any command runs.
    let Some(replicate) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    // SAFETY: "sbcl" takes a module string, a buffer and its length, a C string and a long
    // long, matching the arguments; all of them outlive the call, and Redis copies them.
    unsafe {
        replicate(
            ctx.get_raw(),
            c"SET".as_ptr(),
            c"sbcl".as_ptr(),
            key.inner,
            value.as_ptr().cast::<std::os::raw::c_char>(),
            value.len(),
            c"PXAT".as_ptr(),
            std::os::raw::c_longlong::from(expire_at_ms),
        );
    }
}
