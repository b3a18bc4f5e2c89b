//! Copies of a value through the server's own commands (`GET`, `GETRANGE`), which leave the
//! value and its encoding as they are, and a look at a key that changes nothing.

use redis_module::{raw, Context, RedisString};
use redis_rl_core::Millis;

use super::OpenKey;
use crate::encoding::{self, DecodeError, Stored, HEADER_LEN};
use crate::error::Error;

/// A string key looked at without changing it: its header, and the whole value only when
/// its length is one a valid state of the algorithm in that header has.
pub struct Peeked {
    /// The whole value if it may be valid, else only its first bytes (the header, or less
    /// for a shorter value): never more than a valid limiter holds.
    pub bytes: Vec<u8>,
    /// The value's length.
    pub len: usize,
    /// Time left before the key expires; `None` if it has no expiry.
    pub ttl: Option<Millis>,
}

impl Peeked {
    /// The value's algorithm and the whole value, or why it cannot be read: the error of a
    /// value whose header is not a readable limiter, or of one too long or too short for
    /// the algorithm it names.
    pub fn whole(&self) -> Result<(encoding::Kind, &[u8]), DecodeError> {
        let algorithm = encoding::algorithm_of(&self.bytes)?;
        if self.bytes.len() == self.len && encoding::plausible_len(algorithm, self.len) {
            Ok((algorithm, &self.bytes))
        } else {
            Err(DecodeError::Corrupt(algorithm))
        }
    }
}

/// Looks at the string in `key` without changing anything, not even its encoding: `None`
/// if the key is missing, WRONGTYPE if it holds another type. With `whole_if_valid`, the
/// whole value is copied when its length is one a valid state of the algorithm named in its
/// header has (at most a few MB); otherwise only the header is.
pub fn peek(
    ctx: &Context,
    key: &RedisString,
    whole_if_valid: bool,
) -> Result<Option<Peeked>, Error> {
    let open = OpenKey(raw::open_key(ctx.get_raw(), key.inner, raw::KeyMode::READ));
    // SAFETY: the API table is filled at module load; the key is open for reading.
    let key_type =
        unsafe { raw::RedisModule_KeyType }.map(|f| raw::KeyType::from(unsafe { f(open.0) }));
    match key_type {
        Some(raw::KeyType::Empty) => return Ok(None),
        Some(raw::KeyType::String) => {}
        _ => return Err(Error::WrongType),
    }
    // SAFETY: as above.
    let len = unsafe { raw::RedisModule_ValueLength }.map_or(0, |f| unsafe { f(open.0) });
    // SAFETY: as above.
    let ms = unsafe { raw::RedisModule_GetExpire }.map_or(-1, |get| unsafe { get(open.0) });
    drop(open);
    // REDISMODULE_NO_EXPIRE is -1.
    let ttl = u64::try_from(ms).ok().map(Millis);
    let mut bytes = get_range(ctx, key, HEADER_LEN)?;
    if whole_if_valid && len > bytes.len() {
        if let Ok(algorithm) = encoding::algorithm_of(&bytes) {
            if encoding::plausible_len(algorithm, len) {
                bytes = get_whole(ctx, key)?;
            }
        }
    }
    Ok(Some(Peeked { bytes, len, ttl }))
}

/// Reading a value through a command failed.
const READ_FAILED: Error = Error::Fixed("redis-rl could not read the key's value");

/// The first `len` bytes of the string in `key` (fewer if it is shorter), read through
/// `GETRANGE`: a copy that leaves the value and its encoding as they are.
pub(super) fn get_range(ctx: &Context, key: &RedisString, len: usize) -> Result<Vec<u8>, Error> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let end = i64::try_from(len - 1).map_err(|_| READ_FAILED)?;
    // SAFETY: the API table is filled at module load.
    let Some(call) = (unsafe { raw::RedisModule_Call }) else {
        return Err(READ_FAILED);
    };
    // SAFETY: "sll" takes a module string and two long longs, matching the arguments.
    let reply = unsafe {
        call(
            ctx.get_raw(),
            c"GETRANGE".as_ptr(),
            c"sll".as_ptr(),
            key.inner,
            0 as std::os::raw::c_longlong,
            std::os::raw::c_longlong::from(end),
        )
    };
    string_reply(reply)
}

/// The whole string in `key` (a value of a length a valid state has), read through `GET`: a
/// copy that leaves the value and its encoding as they are. (`GET` rather than `GETRANGE`:
/// the server builds no number arguments and parses none, about a quarter of the call.)
pub(super) fn get_whole(ctx: &Context, key: &RedisString) -> Result<Vec<u8>, Error> {
    // SAFETY: the API table is filled at module load.
    let Some(call) = (unsafe { raw::RedisModule_Call }) else {
        return Err(READ_FAILED);
    };
    // SAFETY: "s" takes a module string, matching the argument.
    let reply = unsafe { call(ctx.get_raw(), c"GET".as_ptr(), c"s".as_ptr(), key.inner) };
    string_reply(reply)
}

/// The bytes of a string reply of `RedisModule_Call` (copied), which is freed.
fn string_reply(reply: *mut raw::RedisModuleCallReply) -> Result<Vec<u8>, Error> {
    const FAILED: Error = READ_FAILED;
    // SAFETY: the API table is filled at module load.
    let (Some(string_ptr), Some(free)) = (unsafe {
        (
            raw::RedisModule_CallReplyStringPtr,
            raw::RedisModule_FreeCallReply,
        )
    }) else {
        return Err(FAILED);
    };
    if reply.is_null() {
        return Err(FAILED);
    }
    let mut reply_len = 0;
    // SAFETY: a live reply; the pointer it returns is valid until the reply is freed, and
    // it is copied before that.
    let bytes = unsafe {
        let ptr = string_ptr(reply, &mut reply_len);
        let bytes = if ptr.is_null() {
            None
        } else {
            Some(std::slice::from_raw_parts(ptr.cast::<u8>(), reply_len).to_vec())
        };
        free(reply);
        bytes
    };
    bytes.ok_or(FAILED)
}

/// Why a value of a length no valid `S` has is refused, from its first bytes: the header's
/// error, or another algorithm's, or corrupt.
pub(super) fn refusal<S: Stored>(header: &[u8]) -> DecodeError {
    match encoding::algorithm_of(header) {
        Err(e) => e,
        Ok(stored) if stored != S::KIND => DecodeError::WrongAlgorithm {
            stored,
            expected: S::KIND,
        },
        Ok(stored) => DecodeError::Corrupt(stored),
    }
}
