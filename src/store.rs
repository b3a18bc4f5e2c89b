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
//!
//! A write also publishes the keyspace notifications its replicated form publishes on a
//! replica (`set` and `expire` for `SET ... PXAT`, `del` for `DEL`), so subscribers and other
//! modules see the same events on the master and on its replicas.
//!
//! Reading never changes a value, not even its encoding. The server's direct access to a
//! string (`RedisModule_StringDMA`) converts an integer or embedded string to a raw one,
//! even to read it, so only a value that can be a valid state of the command's limiter
//! and cannot be stored embedded (see [`LimiterKey::read`]) is read that way; anything else
//! is copied through `GET` (a value of a valid length) or `GETRANGE` (only the header of a
//! value that cannot be valid, whatever its size).
//!
//! The server-side cost of a call is mostly the server's own (measured with callgrind: `make
//! cache-misses`, and the instruction counts in benches/RESULTS.md): opening the key looks it up (and deletes it if it has
//! expired), and a new key goes through `setKey` (a second lookup, an insertion, a removal of
//! an expiry it cannot have) before its expiry is set. What the store controls: a write of
//! the same length goes into the buffer the read already holds (one direct-access call per
//! call), a key the read found missing is created without asking again, a short value that
//! shrinks is cut in place (no delete and re-create), and on Valkey 9 an expiry that has not
//! changed is not set again (the server keeps it in the key's object, free to read).

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use redis_module::{raw, Context, RedisString};
use redis_rl_core::concurrency::ConcurrencyState;
use redis_rl_core::decision::keeps_expiry;
use redis_rl_core::{Micros, Millis};

use crate::encoding::{lease_table, Stored, HEADER_LEN};
use crate::error::Error;
use crate::replication;

mod copy;
mod effects;

pub use copy::peek;
use copy::{get_range, get_whole, refusal};
pub use effects::delete;
use effects::{
    delete_open, notify, replicate_pexpireat, replicate_set, replicate_setrange, signal_modified,
};

/// Strings up to this many bytes may be stored embedded or as an integer (Redis 7.0 embeds up
/// to 44 bytes, Valkey 9.1 a whole key entry of up to 128), which a direct read would
/// convert to a raw string. Values this short of a variable-length state (a log, leases) are
/// copied through `GET`; the fixed-size states are read directly (see [`LimiterKey::read`]).
/// On the servers whose rule is known, [`may_be_embedded`] is exact.
const MAY_BE_EMBEDDED: usize = 128;

/// Which rule decides whether the server may store a string embedded or as an integer: 0
/// unknown ([`MAY_BE_EMBEDDED`] bytes), else one of the constants below. Set once at load.
static EMBEDDING: AtomicU8 = AtomicU8::new(0);
/// Redis 7.x: `OBJ_ENCODING_EMBSTR_SIZE_LIMIT`, 44 bytes, whatever the key (`object.c`,
/// 7.0.15 to 7.4; an integer is at most 20 characters).
const EMBEDDING_REDIS_7: u8 = 1;
/// Valkey 9.1: `shouldEmbedStringObject` embeds the value with its key (and expiry) when the
/// whole object takes at most 128 bytes: 8 bytes of object, the key (its length + 3 below 32
/// bytes, + 5 from 32), 8 with an expiry, the value (its length + 4). So a value of `len`
/// bytes under a key of `key_len` bytes may be embedded only if `len + key_len <= 113`
/// (measured: 112 under a 1-byte key, 98 under 15, 79 under 32, 51 under 60, the same after
/// `DEBUG RELOAD`).
const EMBEDDING_VALKEY_9_1: u8 = 2;

/// True if the server keeps a key's expiry in the key's own object, so that
/// `RedisModule_GetAbsExpire` reads it without a lookup: Valkey 9 (measured on 9.1: 12
/// instructions, while `RedisModule_SetAbsExpire` looks the key up again, about 400). On
/// Redis 7.0 reading costs as much as setting (`getExpire` looks the key up in the expires
/// dictionary, then in the main one: 516 instructions vs 509), so the store always sets it.
static EXPIRY_IN_KEY: AtomicBool = AtomicBool::new(false);

/// Tells the store which server it runs in (at load): `valkey` with its (major, minor)
/// version, or Redis with its major version.
pub fn set_server(valkey: Option<(u32, u32)>, redis_major: Option<u32>) {
    let rule = match (valkey, redis_major) {
        (Some((9, 1)), _) => EMBEDDING_VALKEY_9_1,
        (None, Some(7)) => EMBEDDING_REDIS_7,
        _ => 0,
    };
    EMBEDDING.store(rule, Ordering::Relaxed);
    EXPIRY_IN_KEY.store(
        valkey.is_some_and(|(major, _)| major >= 9),
        Ordering::Relaxed,
    );
}

/// Sets the open key (holding a value) to expire at `target_ms` and returns the expiry it
/// has then, which is what replicas and the AOF must be given.
///
/// Where reading the expiry is free (see [`EXPIRY_IN_KEY`]), an expiry that still lies
/// within half the TTL slack of the target is kept (see
/// [`redis_rl_core::decision::keeps_expiry`]): a window limiter called again within its
/// window, or a busy bucket, then skips the server's lookup (about 400 instructions). `fresh` says the key was just
/// created (it has no expiry yet).
fn set_expiry(
    key: *mut raw::RedisModuleKey,
    set_abs_expire: unsafe extern "C" fn(*mut raw::RedisModuleKey, raw::mstime_t) -> i32,
    target_ms: i64,
    fresh: bool,
) -> i64 {
    if !fresh && EXPIRY_IN_KEY.load(Ordering::Relaxed) {
        // SAFETY: the API table is filled at module load; the key is open.
        let current =
            unsafe { raw::RedisModule_GetAbsExpire }.map_or(-1, |get| unsafe { get(key) });
        if let (Ok(current_ms), Ok(target)) = (u64::try_from(current), u64::try_from(target_ms)) {
            let slack = crate::config::ttl_slack();
            if keeps_expiry(Millis(current_ms), Millis(target), slack) {
                return current;
            }
        }
    }
    // SAFETY: the key is open for writing and holds a string.
    unsafe { set_abs_expire(key, target_ms) };
    target_ms
}

/// True if the server may hold a string of `len` bytes under a key of `key_len` bytes
/// embedded or as an integer (then a direct read would convert it to a raw string).
fn may_be_embedded(len: usize, key_len: impl FnOnce() -> usize) -> bool {
    match EMBEDDING.load(Ordering::Relaxed) {
        EMBEDDING_REDIS_7 => len <= 44,
        EMBEDDING_VALKEY_9_1 => len <= 113 && len + key_len() <= 113,
        _ => len <= MAY_BE_EMBEDDED,
    }
}

/// A limiter key open for one command: read it, then maybe write it. Closed on drop.
pub struct LimiterKey<'a> {
    ctx: &'a Context,
    name: &'a RedisString,
    key: *mut raw::RedisModuleKey,
    /// What the last read learned, so that the write after it skips the server calls that
    /// would only tell it again.
    seen: Cell<Seen>,
}

/// What [`LimiterKey::read`] learned about the key, for [`LimiterKey::write`].
#[derive(Clone, Copy)]
enum Seen {
    /// Nothing (no read yet, or the key changed since).
    Unknown,
    /// The key is missing.
    Missing,
    /// The value is a raw string of `len` bytes at `ptr`, unshared: the buffer Redis gives
    /// for writing in place (`RedisModule_StringDMA` in write mode).
    Writable { ptr: *mut u8, len: usize },
}

impl<'a> LimiterKey<'a> {
    /// Opens `name` for reading and writing. Opening does not create the key.
    pub fn open(ctx: &'a Context, name: &'a RedisString) -> Self {
        let key = raw::open_key(
            ctx.get_raw(),
            name.inner,
            raw::KeyMode::READ | raw::KeyMode::WRITE,
        );
        LimiterKey {
            ctx,
            name,
            key,
            seen: Cell::new(Seen::Unknown),
        }
    }

    /// The key's type (`None` only if the server lacks the API).
    fn key_type(&self) -> Option<raw::KeyType> {
        // SAFETY: the key is open; the API table is filled at module load.
        unsafe { raw::RedisModule_KeyType.map(|f| raw::KeyType::from(f(self.key))) }
    }

    /// True if the server may hold this key's value of `len` bytes embedded or as an integer
    /// (see [`may_be_embedded`]).
    fn may_be_embedded(&self, len: usize) -> bool {
        may_be_embedded(len, || self.name.as_slice().len())
    }

    /// The value's length in bytes (a string key).
    fn len(&self) -> usize {
        // SAFETY: the key is open; the API table is filled at module load.
        unsafe { raw::RedisModule_ValueLength.map_or(0, |f| f(self.key)) }
    }

    /// Reads the limiter state: `None` if the key is missing.
    ///
    /// A key of another type is WRONGTYPE; a string that is not ours (or another
    /// algorithm's) is a clear error. Reading changes nothing, the value's encoding
    /// included.
    ///
    /// A value whose length no valid state of `S` has is refused from its header alone
    /// (never read whole, so a huge damaged value costs nothing). A value of a valid length
    /// is read in place, except a variable-length one short enough to be stored embedded or
    /// as an integer, which is copied through `GET`. The fixed-size states are always
    /// read in place (the hot path: a `GET` would cost as much as the rest of the
    /// call): the values this module writes are raw strings, which that leaves as they are,
    /// but a string of exactly a fixed-size state's length (29 or 37 bytes) that is stored
    /// embedded (written by another client, or loaded from RDB, AOF or RESTORE) becomes raw,
    /// as the next write of this module would make it anyway.
    ///
    /// The in-place read asks for the buffer in write mode, which Redis gives as the same
    /// raw string unless it is shared (`refcount > 1`, e.g. a value set earlier in the same
    /// `MULTI`, still referenced by its pending propagation), which it copies first: the
    /// value and its encoding stay as they are, and a write of the same length then goes
    /// straight into that buffer.
    pub fn read<S: Stored>(&self) -> Result<Option<S>, Error> {
        self.seen.set(Seen::Unknown);
        match self.key_type() {
            Some(raw::KeyType::Empty) => {
                self.seen.set(Seen::Missing);
                return Ok(None);
            }
            Some(raw::KeyType::String) => {}
            _ => return Err(Error::WrongType),
        }
        let len = self.len();
        let in_place = S::plausible_len(len) && (!S::VARIABLE_LEN || !self.may_be_embedded(len));
        let decoded = if in_place {
            let mut dma_len = 0;
            let ptr = raw::string_dma(
                self.key,
                &mut dma_len,
                raw::KeyMode::READ | raw::KeyMode::WRITE,
            );
            if ptr.is_null() {
                return Err(Error::WrongType);
            }
            let ptr = ptr.cast::<u8>();
            self.seen.set(Seen::Writable { ptr, len: dma_len });
            // SAFETY: Redis returned a buffer of `dma_len` bytes, valid while the key is
            // open and unmodified; it is only read before this function returns.
            S::decode(unsafe { std::slice::from_raw_parts(ptr, dma_len) })
        } else {
            let whole = S::plausible_len(len);
            let bytes = if whole {
                get_whole(self.ctx, self.name)?
            } else {
                get_range(self.ctx, self.name, HEADER_LEN)?
            };
            if whole {
                S::decode(&bytes)
            } else {
                Err(refusal::<S>(&bytes))
            }
        };
        Ok(Some(decoded?))
    }

    /// Stores `value`, expiring at the absolute instant `expire_at`, and replicates it.
    ///
    /// The value is written in place when the key already holds a value of the same length.
    pub fn write(&self, value: &[u8], expire_at: Millis) -> Result<(), Error> {
        // SAFETY: the API table is filled once at module load, before any command runs.
        let set_abs_expire = unsafe { raw::RedisModule_SetAbsExpire }.ok_or(Error::Fixed(
            "redis-rl needs RedisModule_SetAbsExpire (Redis 6.2 or later)",
        ))?;
        // Redis keeps expiries as signed milliseconds: clamp once, and replicate the same
        // number we set, or replicas and AOF would refuse a PXAT beyond i64::MAX.
        let expire_at_ms = i64::try_from(expire_at.0).unwrap_or(i64::MAX);
        let seen = self.seen.replace(Seen::Unknown);
        let fresh = matches!(seen, Seen::Missing);
        match seen {
            // The read's buffer, of the same length: the common case of a live key.
            Seen::Writable { ptr, len } if len == value.len() => {
                // SAFETY: `ptr` is the key's unshared value buffer of exactly `len` bytes
                // from the read's write-mode DMA; nothing changed the key since (every
                // change goes through this handle and resets `seen`), and `value` does not
                // overlap it.
                unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), ptr, len) };
            }
            // A new key: an exact-size raw string, written in place.
            Seen::Missing if !value.is_empty() => self.create(value)?,
            _ => self.store(value)?,
        }
        let expire_at_ms = set_expiry(self.key, set_abs_expire, expire_at_ms, fresh);
        signal_modified(self.ctx, self.name);
        notify(self.ctx, raw::NotifyEvent::STRING, c"set", self.name);
        notify(self.ctx, raw::NotifyEvent::GENERIC, c"expire", self.name);
        replication::replicate(self.ctx, || {
            replicate_set(self.ctx, self.name, value, expire_at_ms);
        });
        Ok(())
    }

    /// Creates the missing key as a raw string of exactly `value` (not empty):
    /// `RedisModule_StringTruncate` on a missing key, then written in place.
    ///
    /// Creating it whole instead (`RedisModule_CreateString` + `RedisModule_StringSet`: one
    /// allocation, no zeroing) was measured (callgrind, `scripts/cold_paths.py`): on Redis
    /// 7.0 it saves 200-300 instructions of the first call but stores the value embedded, and
    /// the key's next call, which needs a raw string to write in place, pays about 870 to
    /// convert it; on Valkey 9.1 it saves nothing (its `StringSet` copies the string into a
    /// new object embedding the key). A raw string from the start is cheaper for every key
    /// called more than once.
    fn create(&self, value: &[u8]) -> Result<(), Error> {
        if raw::string_truncate(self.key, value.len()) != raw::Status::Ok {
            return Err(Error::Fixed("redis-rl could not write the key's value"));
        }
        let mut len = 0;
        let dma = raw::string_dma(self.key, &mut len, raw::KeyMode::WRITE);
        if dma.is_null() || len != value.len() {
            return Err(Error::Fixed("redis-rl could not write the key's value"));
        }
        // SAFETY: `dma` points to the new value buffer of exactly `value.len()` bytes, valid
        // until the key is closed or modified, and `value` does not overlap it.
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), dma.cast::<u8>(), len) };
        Ok(())
    }

    /// Stores `value` whatever the key holds (a string or nothing): in place when the
    /// lengths match, or when a short value shrinks.
    fn store(&self, value: &[u8]) -> Result<(), Error> {
        let mut len = 0;
        let mut dma = raw::string_dma(self.key, &mut len, raw::KeyMode::WRITE);
        if dma.is_null() {
            return Err(Error::WrongType);
        }
        if value.len() < len && len <= MAY_BE_EMBEDDED {
            // A compact state whose varints shrank: cut the string in place. It keeps its
            // allocation (at most that of the longer value it held, a few bytes more than an
            // exact one), which spares deleting and re-creating the key (two dictionary
            // deletions, an insertion, two expiry lookups and four allocations).
            if raw::string_truncate(self.key, value.len()) != raw::Status::Ok {
                return Err(Error::Fixed("redis-rl could not write the key's value"));
            }
            dma = raw::string_dma(self.key, &mut len, raw::KeyMode::WRITE);
            if dma.is_null() {
                return Err(Error::WrongType);
            }
        }
        if len != value.len() && value.len() <= MAY_BE_EMBEDDED {
            // A new key, or a short value that grew (a compact state whose varints grew, or
            // a longer value that became short): let Redis create an exact-size raw string,
            // written in place below. A string made with RedisModule_CreateString would be
            // an embedded string, which the next call's DMA access would copy into a raw
            // one; growing the old string in place would reserve twice the length.
            if self.key_type() != Some(raw::KeyType::Empty) {
                // SAFETY: the API table is filled at module load; the key is open for writing.
                let deleted = unsafe { raw::RedisModule_DeleteKey }
                    .map(|delete| raw::Status::from(unsafe { delete(self.key) }));
                if deleted != Some(raw::Status::Ok) {
                    return Err(Error::Fixed("redis-rl could not write the key's value"));
                }
            }
            if raw::string_truncate(self.key, value.len()) != raw::Status::Ok {
                return Err(Error::Fixed("redis-rl could not write the key's value"));
            }
            dma = raw::string_dma(self.key, &mut len, raw::KeyMode::WRITE);
            if dma.is_null() {
                return Err(Error::WrongType);
            }
        }
        if len == value.len() {
            // The common case (fixed-size states, and new keys): overwrite in place.
            // SAFETY: `dma` points to the key's value buffer of exactly `value.len()` bytes,
            // valid until the key is closed or modified, and `value` does not overlap it.
            unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), dma.cast::<u8>(), len) };
        } else {
            // A new size of a long value (logs, leases): a fresh string of exactly this size
            // (growing in place would reserve up to twice the room, which the key keeps).
            let fresh = RedisString::create_from_slice(self.ctx.get_raw(), value);
            if raw::string_set(self.key, fresh.inner) != raw::Status::Ok {
                return Err(Error::Fixed("redis-rl could not write the key's value"));
            }
        }
        Ok(())
    }
}

impl LimiterKey<'_> {
    /// Reads a concurrency limiter's value: a version 2 lease table (in place, or copied
    /// through `GET` when it is short enough to be stored embedded), a version 1 list
    /// decoded, or `Missing`. Errors as [`LimiterKey::read`].
    pub fn read_leases(&self) -> Result<Leases<'_>, Error> {
        self.seen.set(Seen::Unknown);
        match self.key_type() {
            Some(raw::KeyType::Empty) => return Ok(Leases::Missing),
            Some(raw::KeyType::String) => {}
            _ => return Err(Error::WrongType),
        }
        let len = self.len();
        let short = self.may_be_embedded(len);
        if !short && len <= lease_table::MAX_LEN {
            let mut dma_len = 0;
            let ptr = raw::string_dma(self.key, &mut dma_len, raw::KeyMode::READ);
            if ptr.is_null() {
                return Err(Error::WrongType);
            }
            // SAFETY: Redis returned a buffer of `dma_len` bytes, valid while the key is
            // open and unmodified; the caller reads it before changing the key.
            let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), dma_len) };
            if lease_table::is_table(bytes) {
                return Ok(Leases::Table(Cow::Borrowed(bytes)));
            }
        } else if short {
            let bytes = get_whole(self.ctx, self.name)?;
            if lease_table::is_table(&bytes) {
                return Ok(Leases::Table(Cow::Owned(bytes)));
            }
        }
        Ok(self
            .read::<ConcurrencyState>()?
            .map_or(Leases::Missing, Leases::List))
    }

    /// Changes the value in place with `change`, which returns the byte ranges it changed
    /// and the instant (us) the limiter becomes idle; sets the key to expire then (plus the
    /// TTL slack), and replicates the ranges as `SETRANGE` and the expiry as `PEXPIREAT`
    /// (the server wraps them in MULTI/EXEC), publishing the notifications those publish on
    /// a replica (`setrange` per range, then `expire`).
    pub fn patch(
        &self,
        change: impl FnOnce(&mut [u8]) -> (lease_table::Dirty, u64),
    ) -> Result<(), Error> {
        self.seen.set(Seen::Unknown);
        // SAFETY: the API table is filled once at module load, before any command runs.
        let set_abs_expire = unsafe { raw::RedisModule_SetAbsExpire }.ok_or(Error::Fixed(
            "redis-rl needs RedisModule_SetAbsExpire (Redis 6.2 or later)",
        ))?;
        let mut len = 0;
        let dma = raw::string_dma(self.key, &mut len, raw::KeyMode::WRITE);
        if dma.is_null() {
            return Err(Error::WrongType);
        }
        // SAFETY: `dma` points to the key's value buffer of `len` bytes, valid until the key
        // is closed or modified otherwise; nothing else refers to it during this call.
        let bytes = unsafe { std::slice::from_raw_parts_mut(dma.cast::<u8>(), len) };
        let (dirty, idle_at_us) = change(bytes);
        let expire_at = Micros(idle_at_us)
            .ceil_millis()
            .saturating_add(crate::config::ttl_slack());
        let expire_at_ms = i64::try_from(expire_at.0).unwrap_or(i64::MAX);
        let expire_at_ms = set_expiry(self.key, set_abs_expire, expire_at_ms, false);
        signal_modified(self.ctx, self.name);
        let ranges = dirty.ranges();
        let changed = || {
            ranges
                .iter()
                .filter_map(|&(offset, length)| Some((offset, bytes.get(offset..offset + length)?)))
        };
        for _ in changed() {
            notify(self.ctx, raw::NotifyEvent::STRING, c"setrange", self.name);
        }
        notify(self.ctx, raw::NotifyEvent::GENERIC, c"expire", self.name);
        replication::replicate(self.ctx, || {
            for (offset, range) in changed() {
                replicate_setrange(self.ctx, self.name, offset, range);
            }
            replicate_pexpireat(self.ctx, self.name, expire_at_ms);
        });
        Ok(())
    }

    /// Deletes the key and replicates `DEL key`.
    pub fn delete(&self) -> Result<(), Error> {
        self.seen.set(Seen::Unknown);
        delete_open(self.ctx, self.name, self.key)
    }
}

/// A concurrency limiter's value, as [`LimiterKey::read_leases`] finds it.
pub enum Leases<'k> {
    /// No key.
    Missing,
    /// A version 1 value (a list of leases), decoded.
    List(ConcurrencyState),
    /// A version 2 value (a lease table), in place (or a copy of a short one).
    Table(Cow<'k, [u8]>),
}

impl Drop for LimiterKey<'_> {
    fn drop(&mut self) {
        raw::close_key(self.key);
    }
}

/// An open key, closed on drop.
struct OpenKey(*mut raw::RedisModuleKey);

impl Drop for OpenKey {
    fn drop(&mut self) {
        raw::close_key(self.0);
    }
}
