//! Reading and writing limiter keys, and replicating writes as deterministic effects.
//!
//! A write is replicated as `SET key value PXAT abs_ms`, never as the RL.* call itself: the
//! call depends on the master's clock, so replaying it on a replica or from the AOF later
//! would give another result. The effect is the same bytes and the same absolute expiry
//! everywhere.

use redis_module::{raw, Context, RedisError, RedisString};
use redis_rl_core::Millis;

use crate::encoding::Stored;

/// Reads the limiter state in `key`: `None` if the key is missing.
///
/// A key of another type is WRONGTYPE; a string that is not ours (or another algorithm's)
/// is a clear error. Reading changes nothing.
pub fn read<S: Stored>(ctx: &Context, key: &RedisString) -> Result<Option<S>, RedisError> {
    let k = ctx.open_key(key);
    match k.key_type() {
        raw::KeyType::Empty => Ok(None),
        raw::KeyType::String => {
            let bytes = k.read().ok().flatten().unwrap_or(&[]);
            S::decode(bytes)
                .map(Some)
                .map_err(|e| RedisError::String(e.to_string()))
        }
        _ => Err(RedisError::WrongType),
    }
}

/// A stored value as it is, and its time to live.
pub struct RawValue {
    /// The value's bytes, not interpreted.
    pub bytes: Vec<u8>,
    /// Time left before the key expires; `None` if it has no expiry.
    pub ttl: Option<Millis>,
}

/// Reads the string in `key` without interpreting it, with its time to live: `None` if the
/// key is missing, WRONGTYPE if it holds another type. Reading changes nothing.
pub fn read_raw(ctx: &Context, key: &RedisString) -> Result<Option<RawValue>, RedisError> {
    let k = ctx.open_key(key);
    match k.key_type() {
        raw::KeyType::Empty => Ok(None),
        raw::KeyType::String => {
            let bytes = k.read().ok().flatten().unwrap_or(&[]).to_vec();
            let open = OpenKey(raw::open_key(ctx.get_raw(), key.inner, raw::KeyMode::READ));
            // SAFETY: the API table is filled at module load; the key is open for reading.
            let ms = unsafe { raw::RedisModule_GetExpire }.map_or(-1, |get| unsafe { get(open.0) });
            // REDISMODULE_NO_EXPIRE is -1.
            let ttl = u64::try_from(ms).ok().map(Millis);
            Ok(Some(RawValue { bytes, ttl }))
        }
        _ => Err(RedisError::WrongType),
    }
}

/// Deletes `key` and replicates `DEL key`.
pub fn delete(ctx: &Context, key: &RedisString) -> Result<(), RedisError> {
    // SAFETY: the API table is filled once at module load, before any command runs.
    let delete_key = unsafe { raw::RedisModule_DeleteKey }
        .ok_or(RedisError::Str("ERR redis-rl needs RedisModule_DeleteKey"))?;
    let open = OpenKey(raw::open_key(ctx.get_raw(), key.inner, raw::KeyMode::WRITE));
    // SAFETY: the key is open for writing.
    if raw::Status::from(unsafe { delete_key(open.0) }) != raw::Status::Ok {
        return Err(RedisError::Str("ERR redis-rl could not delete the key"));
    }
    drop(open);
    ctx.replicate("DEL", &[key.as_slice()]);
    Ok(())
}

/// An open key, closed on drop.
struct OpenKey(*mut raw::RedisModuleKey);

impl Drop for OpenKey {
    fn drop(&mut self) {
        raw::close_key(self.0);
    }
}

/// Stores `value` in `key`, expiring at the absolute instant `expire_at`, and replicates it.
///
/// The value is written in place when the key already holds a value of the same length.
pub fn write(
    ctx: &Context,
    key: &RedisString,
    value: &[u8],
    expire_at: Millis,
) -> Result<(), RedisError> {
    // SAFETY: the API table is filled once at module load, before any command runs.
    let set_abs_expire = unsafe { raw::RedisModule_SetAbsExpire }.ok_or(RedisError::Str(
        "ERR redis-rl needs RedisModule_SetAbsExpire (Redis 6.2 or later)",
    ))?;
    // Redis keeps expiries as signed milliseconds: clamp once, and replicate the same
    // number we set, or replicas and AOF would refuse a PXAT beyond i64::MAX.
    let expire_at_ms = i64::try_from(expire_at.0).unwrap_or(i64::MAX);
    let open = OpenKey(raw::open_key(ctx.get_raw(), key.inner, raw::KeyMode::WRITE));
    let mut len = 0;
    let mut dma = raw::string_dma(open.0, &mut len, raw::KeyMode::WRITE);
    if dma.is_null() {
        return Err(RedisError::WrongType);
    }
    if len != value.len() {
        if raw::string_truncate(open.0, value.len()) != raw::Status::Ok {
            return Err(RedisError::Str(
                "ERR redis-rl could not resize the key's value",
            ));
        }
        dma = raw::string_dma(open.0, &mut len, raw::KeyMode::WRITE);
        if dma.is_null() || len != value.len() {
            return Err(RedisError::Str(
                "ERR redis-rl could not write the key's value",
            ));
        }
    }
    // SAFETY: `dma` points to the key's value buffer of exactly `value.len()` bytes, valid
    // until the key is closed or modified, and `value` does not overlap it.
    unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), dma.cast::<u8>(), value.len()) };
    // SAFETY: the key is open for writing and holds a string.
    unsafe { set_abs_expire(open.0, expire_at_ms) };
    drop(open);

    replicate_set(ctx, key, value, expire_at_ms);
    Ok(())
}

/// Propagates `SET key value PXAT expire_at_ms` to replicas and the AOF.
///
/// Called through the raw API with a format string so that Redis builds the arguments from
/// our buffers directly: the crate's `Context::replicate` would first copy every argument
/// into a new module string and free it again (measured with callgrind: about 2,000
/// instructions per call, a sixth of RL.TOKENBUCKET).
fn replicate_set(ctx: &Context, key: &RedisString, value: &[u8], expire_at_ms: i64) {
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
