//! Reading and writing limiter keys, and replicating writes as deterministic effects.
//!
//! A write is replicated as `SET key value PXAT abs_ms`, never as the RL.* call itself: the
//! call depends on the master's clock, so replaying it on a replica or from the AOF later
//! would give another result. The effect is the same bytes and the same absolute expiry
//! everywhere.
//!
//! A command opens its key once ([`LimiterKey`]), reads it, and writes it only if the
//! decision changed it. The module runs with implicit "modified key" signals turned off
//! (see `lib.rs`), so a read or a denial does not invalidate a `WATCH` or a client-side
//! cache: only a real write signals the key as modified.

use redis_module::{raw, Context, RedisError, RedisString};
use redis_rl_core::Millis;

use crate::encoding::Stored;

/// A limiter key open for one command: read it, then maybe write it. Closed on drop.
pub struct LimiterKey<'a> {
    ctx: &'a Context,
    name: &'a RedisString,
    key: *mut raw::RedisModuleKey,
}

impl<'a> LimiterKey<'a> {
    /// Opens `name` for reading and writing. Opening does not create the key.
    pub fn open(ctx: &'a Context, name: &'a RedisString) -> Self {
        let key = raw::open_key(
            ctx.get_raw(),
            name.inner,
            raw::KeyMode::READ | raw::KeyMode::WRITE,
        );
        LimiterKey { ctx, name, key }
    }

    /// The key's type (`None` only if the server lacks the API).
    fn key_type(&self) -> Option<raw::KeyType> {
        // SAFETY: the key is open; the API table is filled at module load.
        unsafe { raw::RedisModule_KeyType.map(|f| raw::KeyType::from(f(self.key))) }
    }

    /// The stored string, `None` if the key is missing; WRONGTYPE for another type.
    fn bytes(&self) -> Result<Option<&[u8]>, RedisError> {
        match self.key_type() {
            Some(raw::KeyType::Empty) => Ok(None),
            Some(raw::KeyType::String) => {
                let mut len = 0;
                let ptr = raw::string_dma(self.key, &mut len, raw::KeyMode::READ);
                if ptr.is_null() {
                    return Err(RedisError::WrongType);
                }
                // SAFETY: Redis returned a buffer of `len` bytes, valid while the key is open
                // and unmodified; the borrow of `self` keeps it so.
                Ok(Some(unsafe {
                    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
                }))
            }
            _ => Err(RedisError::WrongType),
        }
    }

    /// Reads the limiter state: `None` if the key is missing.
    ///
    /// A key of another type is WRONGTYPE; a string that is not ours (or another
    /// algorithm's) is a clear error. Reading changes nothing.
    pub fn read<S: Stored>(&self) -> Result<Option<S>, RedisError> {
        match self.bytes()? {
            None => Ok(None),
            Some(bytes) => S::decode(bytes)
                .map(Some)
                .map_err(|e| RedisError::String(e.to_string())),
        }
    }

    /// Stores `value`, expiring at the absolute instant `expire_at`, and replicates it.
    ///
    /// The value is written in place when the key already holds a value of the same length.
    pub fn write(&self, value: &[u8], expire_at: Millis) -> Result<(), RedisError> {
        // SAFETY: the API table is filled once at module load, before any command runs.
        let set_abs_expire = unsafe { raw::RedisModule_SetAbsExpire }.ok_or(RedisError::Str(
            "ERR redis-rl needs RedisModule_SetAbsExpire (Redis 6.2 or later)",
        ))?;
        // Redis keeps expiries as signed milliseconds: clamp once, and replicate the same
        // number we set, or replicas and AOF would refuse a PXAT beyond i64::MAX.
        let expire_at_ms = i64::try_from(expire_at.0).unwrap_or(i64::MAX);
        let mut len = 0;
        let mut dma = raw::string_dma(self.key, &mut len, raw::KeyMode::WRITE);
        if dma.is_null() {
            return Err(RedisError::WrongType);
        }
        if len != value.len() && self.key_type() == Some(raw::KeyType::Empty) {
            // A new key: let Redis create an exact-size raw string, written in place below.
            // A string made with RedisModule_CreateString would be an embedded string, which
            // the next call's DMA access would copy into a raw one.
            if raw::string_truncate(self.key, value.len()) != raw::Status::Ok {
                return Err(RedisError::Str(
                    "ERR redis-rl could not write the key's value",
                ));
            }
            dma = raw::string_dma(self.key, &mut len, raw::KeyMode::WRITE);
            if dma.is_null() {
                return Err(RedisError::WrongType);
            }
        }
        if len == value.len() {
            // The common case (fixed-size states, and new keys): overwrite in place.
            // SAFETY: `dma` points to the key's value buffer of exactly `value.len()` bytes,
            // valid until the key is closed or modified, and `value` does not overlap it.
            unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), dma.cast::<u8>(), len) };
        } else {
            // A new size (logs, leases): a fresh string of exactly this size (growing in place
            // would reserve up to twice the room, which a log or lease key keeps).
            let fresh = RedisString::create_from_slice(self.ctx.get_raw(), value);
            if raw::string_set(self.key, fresh.inner) != raw::Status::Ok {
                return Err(RedisError::Str(
                    "ERR redis-rl could not write the key's value",
                ));
            }
        }
        // SAFETY: the key is open for writing and holds a string.
        unsafe { set_abs_expire(self.key, expire_at_ms) };
        signal_modified(self.ctx, self.name);
        replicate_set(self.ctx, self.name, value, expire_at_ms);
        Ok(())
    }
}

impl Drop for LimiterKey<'_> {
    fn drop(&mut self) {
        raw::close_key(self.key);
    }
}

/// Reads the limiter state in `key`: `None` if the key is missing (see [`LimiterKey::read`]).
pub fn read<S: Stored>(ctx: &Context, key: &RedisString) -> Result<Option<S>, RedisError> {
    LimiterKey::open(ctx, key).read()
}

/// Stores `value` in `key` (see [`LimiterKey::write`]).
pub fn write(
    ctx: &Context,
    key: &RedisString,
    value: &[u8],
    expire_at: Millis,
) -> Result<(), RedisError> {
    LimiterKey::open(ctx, key).write(value, expire_at)
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
    signal_modified(ctx, key);
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

/// Tells Redis the key changed (invalidates `WATCH` and client-side caches).
fn signal_modified(ctx: &Context, key: &RedisString) {
    // SAFETY: the API table is filled at module load; valid context and key name.
    if let Some(signal) = unsafe { raw::RedisModule_SignalModifiedKey } {
        unsafe { signal(ctx.get_raw(), key.inner) };
    }
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
