//! The stored value format: the only place that knows the bytes in a limiter key.
//!
//! Every value is a plain Redis string so that DEL, EXPIRE, DUMP/RESTORE, MIGRATE, RDB and
//! AOF all work unchanged:
//!
//! ```text
//! offset 0  3 bytes  magic "\0RL" (a NUL first: no text value starts like this)
//! offset 3  1 byte   format version (1, or 2: see below)
//! offset 4  1 byte   algorithm tag: 'T' token bucket, 'S' sliding window,
//!                    'L' sliding window log, 'C' concurrency, 'F' fixed window,
//!                    'G' GCRA
//! offset 5  ...      the fields of that algorithm (see each impl)
//! ```
//!
//! Version 1 has little-endian fixed-width fields (a log or a set of leases: a fixed part
//! then varint entries). Version 2 is written for the fixed-size states (T, S, F, G): the
//! same fields as LEB128 varints, a window's start as its index (start / window_ms), so that
//! a value is at most 30 bytes for realistic parameters (13 to 25: one string header size
//! class and one allocation class smaller than version 1's 29 and 37 bytes on Redis, 16 bytes
//! less per key). Version 1 values are still read, and become version 2 on their next write.
//! For the concurrency limiter, version 2 is its lease table (`lease_table`).
//!
//! Decoding checks magic, version, tag, exact length and field ranges (a varint in its
//! shortest form only, so every state has exactly one encoding), so anything we did not
//! write is refused with a clear error rather than misread.
//!
//! **Adding an algorithm**: a file with its `impl Stored` (and its `mod` line below). Its tag
//! and name come from the core registry, and the dispatch by tag ([`plausible_len`],
//! [`decode_any`]) is generated from the registry's list: a registered algorithm without an
//! `impl Stored` does not compile.

use std::fmt;

use redis_rl_core::algorithm::Algorithm as CoreAlgorithm;
use redis_rl_core::limits::MAX_DURATION_MS;

mod concurrency;
mod fixed_window;
mod gcra;
pub mod lease_table;
mod sliding_log;
mod sliding_window;
mod token_bucket;

/// First bytes of every value we write.
pub const MAGIC: [u8; 3] = *b"\0RL";
/// The first format version (still read; written for the variable-length states).
pub const VERSION: u8 = 1;
/// The compact format version of the fixed-size states (fields as varints).
pub const COMPACT_VERSION: u8 = 2;
/// Tags of the algorithms that have a compact (version 2) form.
const COMPACT_TAGS: &[u8] = b"TSFG";
/// Length of the header (magic, version, algorithm tag) that starts every value.
pub const HEADER_LEN: usize = MAGIC.len() + 2;
/// Room for the largest encoded value.
const MAX_LEN: usize = 64;

/// The kinds of limiter a key can hold: the core registry's [`Kind`](redis_rl_core::Kind)
/// (tag byte, and the name in error texts).
pub use redis_rl_core::Kind as Algorithm;

/// Why a stored value could not be read as the expected limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The value was not written by redis-rl.
    NotOurs,
    /// Written by another version of redis-rl.
    UnsupportedVersion(u8),
    /// A redis-rl limiter of a kind this version does not know.
    UnknownAlgorithm(u8),
    /// A redis-rl limiter of another kind than the command's.
    WrongAlgorithm {
        /// What the key holds.
        stored: Algorithm,
        /// What the command works on.
        expected: Algorithm,
    },
    /// Our header, but a wrong length or impossible field values.
    Corrupt(Algorithm),
}

impl fmt::Display for DecodeError {
    /// The public error text, without the `ERR ` prefix (`crate::error` adds it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::NotOurs => {
                write!(f, "key holds a value that is not a redis-rl limiter")
            }
            DecodeError::UnsupportedVersion(v) => write!(
                f,
                "key holds a redis-rl limiter in format version {v}, this module reads version {VERSION}"
            ),
            DecodeError::UnknownAlgorithm(tag) => write!(
                f,
                "key holds a redis-rl limiter of a kind this module does not know (tag {tag})"
            ),
            DecodeError::WrongAlgorithm { stored, expected } => write!(
                f,
                "key holds a {} limiter, not a {} limiter",
                stored.name(),
                expected.name()
            ),
            DecodeError::Corrupt(algorithm) => {
                write!(f, "key holds a corrupt redis-rl {} limiter", algorithm.name())
            }
        }
    }
}

/// An encoded value: on the stack for the fixed-size states (no allocation on the hot
/// path); a variable-length state (a log, a set of leases) spills to the heap.
pub struct Encoded {
    buf: [u8; MAX_LEN],
    len: usize,
    /// The whole value once it outgrew `buf` (empty until then: no allocation).
    spill: Vec<u8>,
}

impl Encoded {
    /// The bytes to store.
    pub fn as_bytes(&self) -> &[u8] {
        if self.spill.is_empty() {
            self.buf.get(..self.len).unwrap_or(&[])
        } else {
            &self.spill
        }
    }
}

/// A limiter state that can be stored in a key.
pub trait Stored: Sized {
    /// The tag written in the header.
    const ALGORITHM: Algorithm;
    /// Length of the fields after the header (for a variable-length state, the least).
    const BODY_LEN: usize;
    /// True for a state whose length varies (a log, a set of leases): its body is at least
    /// `BODY_LEN` bytes and `decode_body` must read all of it.
    const VARIABLE_LEN: bool = false;
    /// Longest body a valid value can have (`BODY_LEN` for a fixed-size state). A longer
    /// value is refused as corrupt before any of it is read, so a damaged value never
    /// makes the module reserve memory in proportion to its size.
    const MAX_BODY_LEN: usize = Self::BODY_LEN;
    /// The least and most bytes of a compact (version 2) body, for a state that has that
    /// form (then it is the one written); `None`: version 1 only.
    const COMPACT_BODY: Option<(usize, usize)> = None;

    /// True if a value of `len` bytes (header included) may be a valid state: only such a
    /// value is ever read whole.
    fn plausible_len(len: usize) -> bool {
        let Some(body) = len.checked_sub(HEADER_LEN) else {
            return false;
        };
        Self::plausible_body(VERSION, body) || Self::plausible_body(COMPACT_VERSION, body)
    }

    /// True if a body of `len` bytes may be valid in format `version`.
    fn plausible_body(version: u8, len: usize) -> bool {
        match (version, Self::COMPACT_BODY) {
            (COMPACT_VERSION, Some((least, most))) => (least..=most).contains(&len),
            (COMPACT_VERSION, None) => false,
            _ if Self::VARIABLE_LEN => (Self::BODY_LEN..=Self::MAX_BODY_LEN).contains(&len),
            _ => len == Self::BODY_LEN,
        }
    }

    /// Writes the fields in the compact form (only called when `COMPACT_BODY` is set).
    fn encode_compact(&self, _out: &mut Compact<'_>) {}
    /// Reads the compact fields; `None` if a field is out of range.
    fn decode_compact(_body: &mut Reader<'_>) -> Option<Self> {
        None
    }

    /// Writes the fields into `out` (exactly `BODY_LEN` bytes).
    fn encode_body(&self, out: &mut Writer<'_>);
    /// Reads the fields; `None` if a field is out of range.
    fn decode_body(body: &mut Reader<'_>) -> Option<Self>;

    /// The full stored value: header then fields.
    #[inline(always)]
    fn encode(&self) -> Encoded {
        let mut out = Encoded {
            buf: [0u8; MAX_LEN],
            len: 0,
            spill: Vec::new(),
        };
        if Self::COMPACT_BODY.is_some() {
            out.len = self.write_compact(&mut out.buf);
        } else {
            let mut w = Writer { out: &mut out };
            w.bytes(&MAGIC);
            w.bytes(&[VERSION, Self::ALGORITHM.tag()]);
            self.encode_body(&mut w);
        }
        out
    }

    /// Calls `f` with the full stored value (as [`Self::encode`]'s bytes). A fixed-size
    /// state is built in a buffer on this stack frame and never moved: the write path.
    #[inline(always)]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        if Self::COMPACT_BODY.is_some() {
            let mut buf = [0u8; MAX_LEN];
            let len = self.write_compact(&mut buf);
            return f(buf.get(..len).unwrap_or(&[]));
        }
        f(self.encode().as_bytes())
    }

    /// Writes the compact value (header and varints) at the start of `buf`; returns its
    /// length.
    #[inline(always)]
    fn write_compact(&self, buf: &mut [u8; MAX_LEN]) -> usize {
        if let Some(header) = buf.first_chunk_mut::<HEADER_LEN>() {
            *header = compact_header(Self::ALGORITHM);
        }
        let mut w = Compact {
            buf,
            len: HEADER_LEN,
        };
        self.encode_compact(&mut w);
        w.len
    }

    /// The value in format version 1 (what older modules wrote): tests of reading it.
    #[cfg(test)]
    fn encode_v1(&self) -> Encoded {
        let mut out = Encoded {
            buf: [0u8; MAX_LEN],
            len: 0,
            spill: Vec::new(),
        };
        let mut w = Writer { out: &mut out };
        w.bytes(&MAGIC);
        w.bytes(&[VERSION, Self::ALGORITHM.tag()]);
        self.encode_body(&mut w);
        out
    }

    /// Reads a stored value, refusing anything that is not exactly our format.
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if let (Some((least, most)), Some((header, body))) =
            (Self::COMPACT_BODY, bytes.split_first_chunk::<HEADER_LEN>())
        {
            // The common case, our own compact value: the header in one comparison. What
            // follows is what the general path below does for this header.
            if *header == compact_header(Self::ALGORITHM) {
                let mut reader = Reader {
                    bytes: body,
                    value: bytes,
                };
                return (least..=most)
                    .contains(&body.len())
                    .then(|| Self::decode_compact(&mut reader))
                    .flatten()
                    .filter(|_| reader.is_empty())
                    .ok_or(DecodeError::Corrupt(Self::ALGORITHM));
            }
        }
        Self::decode_general(bytes)
    }

    /// [`Self::decode`] for any header: the precise error, or a version 1 value.
    fn decode_general(bytes: &[u8]) -> Result<Self, DecodeError> {
        let stored = algorithm_of(bytes)?;
        if stored != Self::ALGORITHM {
            return Err(DecodeError::WrongAlgorithm {
                stored,
                expected: Self::ALGORITHM,
            });
        }
        let version = bytes.get(MAGIC.len()).copied().unwrap_or(0);
        let body = bytes.get(HEADER_LEN..).unwrap_or(&[]);
        if !Self::plausible_body(version, body.len()) {
            return Err(DecodeError::Corrupt(stored));
        }
        let mut reader = Reader {
            bytes: body,
            value: bytes,
        };
        let state = if version == COMPACT_VERSION && Self::COMPACT_BODY.is_some() {
            Self::decode_compact(&mut reader)
        } else {
            Self::decode_body(&mut reader)
        };
        state
            .filter(|_| reader.is_empty())
            .ok_or(DecodeError::Corrupt(stored))
    }
}

/// The header of a compact (version 2) value of `algorithm`.
const fn compact_header(algorithm: Algorithm) -> [u8; HEADER_LEN] {
    let [m0, m1, m2] = MAGIC;
    [m0, m1, m2, COMPACT_VERSION, algorithm.tag()]
}

/// The algorithm of a stored value, from its header: an error if the value is not a
/// limiter this module can read.
pub fn algorithm_of(bytes: &[u8]) -> Result<Algorithm, DecodeError> {
    let header = bytes.get(..HEADER_LEN).ok_or(DecodeError::NotOurs)?;
    let (magic, rest) = header.split_at(MAGIC.len());
    if magic != MAGIC {
        return Err(DecodeError::NotOurs);
    }
    let [version, tag] = [rest.first(), rest.get(1)].map(|b| b.copied().unwrap_or(0));
    // Version 2 is the compact form of the fixed-size states, and the concurrency
    // limiter's lease table.
    let v2 = (version == lease_table::VERSION && tag == b'C')
        || (version == COMPACT_VERSION && COMPACT_TAGS.contains(&tag));
    if version != VERSION && !v2 {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    Algorithm::from_tag(tag).ok_or(DecodeError::UnknownAlgorithm(tag))
}

/// Something done with a decoded state of any algorithm (RL.STATE's view): the generic
/// method gets the state with its algorithm's type.
pub trait Visit {
    /// What it gives.
    type Out;
    /// Does it with `state`, a state of algorithm `A`.
    fn visit<A: CoreAlgorithm>(self, state: A::State) -> Self::Out;
}

/// Generates the dispatch by tag from the core registry: one arm per algorithm.
macro_rules! by_tag {
    (
        limiters: [$($l:ident = $lt:ty),* $(,)?],
        others: [$($o:ident = $ot:ty),* $(,)?] $(,)?
    ) => {
        /// True if a value of `len` bytes whose header names `algorithm` may be a valid
        /// state of it: RL.STATE reads a value whole only then (anything else is corrupt,
        /// whatever its bytes).
        pub fn plausible_len(algorithm: Algorithm, len: usize) -> bool {
            match algorithm {
                $(Algorithm::$l => <<$lt as CoreAlgorithm>::State as Stored>::plausible_len(len),)*
                $(Algorithm::$o => <<$ot as CoreAlgorithm>::State as Stored>::plausible_len(len),)*
            }
        }

        /// Decodes a value of any algorithm's format version 1 and hands the state to
        /// `visit`.
        fn decode_v1<V: Visit>(bytes: &[u8], visit: V) -> Result<V::Out, DecodeError> {
            match algorithm_of(bytes)? {
                $(Algorithm::$l => Ok(visit.visit::<$lt>(Stored::decode(bytes)?)),)*
                $(Algorithm::$o => Ok(visit.visit::<$ot>(Stored::decode(bytes)?)),)*
            }
        }
    };
}

redis_rl_core::registry!(by_tag);

/// Decodes a stored value of any algorithm (the one in its header) and hands the state to
/// `visit` (a concurrency limiter's lease table as its leases).
pub fn decode_any<V: Visit>(bytes: &[u8], visit: V) -> Result<V::Out, DecodeError> {
    if algorithm_of(bytes)? == Algorithm::Concurrency && lease_table::is_table(bytes) {
        let leases = lease_table::Table::parse(bytes)
            .and_then(|table| table.leases())
            .map_err(|_| DecodeError::Corrupt(Algorithm::Concurrency))?;
        return Ok(visit.visit::<redis_rl_core::concurrency::Concurrency>(leases));
    }
    decode_v1(bytes, visit)
}

/// True if the value carries the redis-rl header, whatever its version, algorithm or
/// contents: what RL.RESET may delete (including a corrupt or newer-format limiter).
pub fn is_limiter(bytes: &[u8]) -> bool {
    bytes.len() >= HEADER_LEN && bytes.starts_with(&MAGIC)
}

/// `ms` if it is a valid duration parameter.
pub(crate) fn duration_ms_in_range(ms: u64) -> Option<u64> {
    (1..=MAX_DURATION_MS).contains(&ms).then_some(ms)
}

/// Appends little-endian fields to an [`Encoded`] value.
pub struct Writer<'a> {
    out: &'a mut Encoded,
}

impl Writer<'_> {
    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        let out = &mut *self.out;
        if out.spill.is_empty() {
            if let Some(dst) = out.buf.get_mut(out.len..out.len + bytes.len()) {
                dst.copy_from_slice(bytes);
                out.len += bytes.len();
                return;
            }
            out.spill
                .extend_from_slice(out.buf.get(..out.len).unwrap_or(&[]));
        }
        out.spill.extend_from_slice(bytes);
    }

    /// Makes room for `additional` more bytes at once (a variable-length value that will
    /// outgrow the stack buffer: one allocation instead of repeated growth).
    pub(crate) fn reserve(&mut self, additional: usize) {
        let out = &mut *self.out;
        if out.spill.is_empty() && out.len + additional > MAX_LEN {
            out.spill.reserve(out.len + additional);
        }
    }

    /// An unsigned LEB128 varint: 7 bits per byte, low bits first (1 byte below 128).
    pub(crate) fn varint(&mut self, mut v: u64) {
        let spill = &mut self.out.spill;
        if !spill.is_empty() {
            // A long value (a log, leases): byte by byte, no copy call per varint.
            while v >= 0x80 {
                spill.push(u8::try_from(v & 0x7f).unwrap_or(0) | 0x80);
                v >>= 7;
            }
            spill.push(u8::try_from(v).unwrap_or(0));
            return;
        }
        let mut buf = [0u8; 10];
        let mut len = 0;
        for byte in buf.iter_mut() {
            let low = u8::try_from(v & 0x7f).unwrap_or(0);
            v >>= 7;
            len += 1;
            if v == 0 {
                *byte = low;
                break;
            }
            *byte = low | 0x80;
        }
        self.bytes(buf.get(..len).unwrap_or(&[]));
    }

    /// An unsigned LEB128 varint of up to 128 bits (at most 19 bytes): the reference
    /// [`Compact::varint128`] is tested against.
    #[cfg(test)]
    pub(crate) fn varint128(&mut self, mut v: u128) {
        let mut buf = [0u8; 19];
        let mut len = 0;
        for byte in buf.iter_mut() {
            let low = u8::try_from(v & 0x7f).unwrap_or(0);
            v >>= 7;
            len += 1;
            if v == 0 {
                *byte = low;
                break;
            }
            *byte = low | 0x80;
        }
        self.bytes(buf.get(..len).unwrap_or(&[]));
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn u128(&mut self, v: u128) {
        self.bytes(&v.to_le_bytes());
    }
}

/// The continuation bits of a varint's bytes (all but the last byte have the high bit set).
const CONTINUATION: u64 = 0x8080_8080_8080_8080;

/// Spreads the low 56 bits of `v` over 8 bytes, 7 bits in each (the inverse of [`gather`]).
#[inline(always)]
const fn spread(v: u64) -> u64 {
    let v = (v & 0x0fff_ffff) | ((v & 0x00ff_ffff_f000_0000) << 4);
    let v = (v & 0x0000_3fff_0000_3fff) | ((v & 0x0fff_c000_0fff_c000) << 2);
    (v & 0x007f_007f_007f_007f) | ((v & 0x3f80_3f80_3f80_3f80) << 1)
}

/// [`spread`] of a value below 2^28, over 4 bytes.
#[inline(always)]
const fn spread32(v: u32) -> u32 {
    let v = (v & 0x3fff) | ((v & 0x0fff_c000) << 2);
    (v & 0x007f_007f) | ((v & 0x3f80_3f80) << 1)
}

/// [`gather`] of 4 bytes.
#[inline(always)]
const fn gather32(w: u32) -> u32 {
    let w = w & 0x7f7f_7f7f;
    let w = (w & 0x007f_007f) | ((w & 0x7f00_7f00) >> 1);
    (w & 0x3fff) | ((w & 0x3fff_0000) >> 2)
}

/// Gathers the low 7 bits of each of 8 bytes into a 56-bit value (the inverse of [`spread`]).
#[inline(always)]
const fn gather(w: u64) -> u64 {
    let w = w & 0x7f7f_7f7f_7f7f_7f7f;
    let w = (w & 0x007f_007f_007f_007f) | ((w & 0x7f00_7f00_7f00_7f00) >> 1);
    let w = (w & 0x0000_3fff_0000_3fff) | ((w & 0x3fff_0000_3fff_0000) >> 2);
    (w & 0x0fff_ffff) | ((w & 0x0fff_ffff_0000_0000) >> 4)
}

/// Writes a fixed-size state's compact (version 2) value straight into a stack buffer (an
/// [`Encoded`]'s, or [`Stored::with_bytes`]'): at most a header and 40 bytes of varints, so
/// it never spills, and a varint below 2^56 is one 8-byte store, below 2^112 two (no loop, no
/// copy call).
pub struct Compact<'a> {
    buf: &'a mut [u8; MAX_LEN],
    len: usize,
}

impl Compact<'_> {
    /// An unsigned LEB128 varint, as [`Writer::varint`] writes it.
    #[inline(always)]
    pub(crate) fn varint(&mut self, v: u64) {
        self.len = put_varint(self.buf, self.len, v);
    }

    /// An unsigned LEB128 varint of up to 128 bits (at most 19 bytes), lowest bits first.
    #[inline(always)]
    pub(crate) fn varint128(&mut self, v: u128) {
        let low = u64::try_from(v & u128::from(WORD_MASK)).unwrap_or(0);
        let high = v >> WORD_BITS;
        // From 2^56 on, inline: a GCRA's TAT is there for most limits (no `u64` field is, so
        // `put_varint` builds those out of line).
        self.len = if high == 0 {
            put_varint(self.buf, self.len, low)
        } else {
            put_varint_wide(self.buf, self.len, low, high)
        };
    }
}

/// Bits in one 8-byte word of varint bytes (7 per byte).
const WORD_BITS: u32 = 56;
/// The values one 8-byte word of varint bytes can hold.
const WORD_MASK: u64 = (1 << WORD_BITS) - 1;

/// Writes `v` as a varint at `at` in `buf`; returns where it ends.
#[inline(always)]
fn put_varint(buf: &mut [u8; MAX_LEN], at: usize, v: u64) -> usize {
    if let Some(end) = put_varint_short(buf, at, v) {
        return end;
    }
    let (bytes, len) = wide_u64(v);
    if let Some(dst) = buf
        .get_mut(at..)
        .and_then(|rest| rest.first_chunk_mut::<16>())
    {
        *dst = bytes.to_le_bytes();
        return at + len;
    }
    put_varint_long(buf, at, u128::from(v))
}

/// The varint of a `u64` of 2^56 or more (9 or 10 bytes) as the first bytes of a 16-byte
/// little-endian word, and their count. Out of line: no `u64` field of a valid state gets
/// there (durations, counts and microseconds since the epoch are far below 2^56), so its code
/// stays out of the common path.
#[inline(never)]
fn wide_u64(v: u64) -> (u128, usize) {
    let first = spread(v & WORD_MASK) | CONTINUATION;
    let high = v >> WORD_BITS;
    let (second, len) = if high < 0x80 {
        (high, 1)
    } else {
        short_word(high)
    };
    (u128::from(first) | u128::from(second) << 64, 8 + len)
}

/// [`put_varint`] of a value below 2^56 (at most 8 bytes) with one store; `None` (nothing
/// written) for a larger value, or at the end of `buf`.
#[inline(always)]
fn put_varint_short(buf: &mut [u8; MAX_LEN], at: usize, v: u64) -> Option<usize> {
    if v < 0x80 {
        let [low, ..] = v.to_le_bytes();
        *buf.get_mut(at)? = low;
        return Some(at + 1);
    }
    if v > WORD_MASK {
        return None;
    }
    let dst = buf.get_mut(at..)?.first_chunk_mut::<8>()?;
    let (word, len) = short_word(v);
    *dst = word.to_le_bytes();
    Some(at + len)
}

/// The varint of `v`, from 128 to 2^56 - 1 (2 to 8 bytes), as a little-endian word whose
/// bytes after the varint are 0, and its length.
#[inline(always)]
fn short_word(v: u64) -> (u64, usize) {
    // Up to 4 bytes (counts, periods, window indexes): in 32 bits, the length from
    // comparisons.
    if let Ok(short) = u32::try_from(v) {
        if short < 1 << 28 {
            let groups = u64::from(spread32(short));
            return if short < 1 << 14 {
                (groups | 0x80, 2)
            } else if short < 1 << 21 {
                (groups | 0x8080, 3)
            } else {
                (groups | 0x80_8080, 4)
            };
        }
    }
    let groups = spread(v);
    // The bit offset of the last byte in use (`groups` is not 0: `v` >= 128); every byte
    // before it gets its continuation bit. The bytes after the varint are overwritten by the
    // next field or left out of the value's length.
    let last = (63 - groups.leading_zeros()) & !7;
    let word = groups | (CONTINUATION & ((1u64 << last) - 1));
    (word, (last / 8) as usize + 1)
}

/// [`Compact::varint128`] of `low + high x 2^56` with `high` not 0 (9 to 19 bytes, a GCRA's
/// TAT for any limit of more than ~64 per period): the low 56 bits are 8 bytes that all continue, one
/// store; `high` follows as [`put_varint_short`] writes it (below 2^112), or as a second such
/// word and then byte by byte. Inline, so that no call gets the buffer's address.
#[inline(always)]
fn put_varint_wide(buf: &mut [u8; MAX_LEN], at: usize, low: u64, high: u128) -> usize {
    let first = spread(low) | CONTINUATION;
    if let Some(dst) = buf
        .get_mut(at..)
        .and_then(|rest| rest.first_chunk_mut::<8>())
    {
        *dst = first.to_le_bytes();
        let next = at + 8;
        if let Some(end) = u64::try_from(high)
            .ok()
            .and_then(|high| put_varint_short(buf, next, high))
        {
            return end;
        }
        let second = u64::try_from(high & u128::from(WORD_MASK)).unwrap_or(0);
        if let Some(dst) = buf
            .get_mut(next..)
            .and_then(|rest| rest.first_chunk_mut::<8>())
        {
            *dst = (spread(second) | CONTINUATION).to_le_bytes();
            return put_varint_long(buf, next + 8, high >> WORD_BITS);
        }
    }
    // At the end of `buf` (never for our states: the buffer has room for 8-byte stores).
    put_varint_long(buf, at, u128::from(low) | high << WORD_BITS)
}

/// [`put_varint`] of any value, byte by byte: what the word stores leave (bits 112 and up,
/// at most 3 bytes). Inline, so that no call gets the buffer's address and the compiler can
/// build the value in its final place.
#[inline(always)]
fn put_varint_long(buf: &mut [u8; MAX_LEN], mut at: usize, mut v: u128) -> usize {
    loop {
        let [low, ..] = v.to_le_bytes();
        v >>= 7;
        let byte = if v == 0 { low & 0x7f } else { low | 0x80 };
        if let Some(dst) = buf.get_mut(at) {
            *dst = byte;
            at += 1;
        }
        if v == 0 {
            return at;
        }
    }
}

/// Reads little-endian fields from the front of a slice.
pub struct Reader<'a> {
    /// What is left to read: the end of `value`.
    bytes: &'a [u8],
    /// The whole value (a varint near its end is read with one load of its last 8 bytes).
    value: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of all of `bytes`.
    #[cfg(test)]
    fn over(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            value: bytes,
        }
    }
}

impl Reader<'_> {
    /// The next 8 bytes as a little-endian word, zeros after the end of the value; `None`
    /// if nothing is left, or the whole value is shorter than 8 bytes and so is the rest.
    #[inline(always)]
    fn word(&self) -> Option<u64> {
        word_at(self.bytes, self.value)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.bytes.split_first_chunk::<N>()?;
        self.bytes = rest;
        Some(*head)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }

    pub(crate) fn u128(&mut self) -> Option<u128> {
        self.take::<16>().map(u128::from_le_bytes)
    }

    /// A varint of at most 16 bytes, read with one or two 8-byte loads, refusing one of 9
    /// bytes or more with more than `high_bits` bits above its low 56 bits.
    #[inline(always)]
    fn varint_fast(&mut self, high_bits: u32) -> Fast {
        let Some((&first, rest)) = self.bytes.split_first() else {
            return Fast::Refused;
        };
        if first < 0x80 {
            self.bytes = rest;
            return Fast::Short(u64::from(first));
        }
        let Some(word) = self.word() else {
            return Fast::Slow;
        };
        let stops = !word & CONTINUATION;
        if stops != 0 {
            let Some((value, len)) = stopping_in(word, stops) else {
                return Fast::Refused;
            };
            // Past the end (a zero after it stopped the varint): truncated.
            let Some(rest) = self.bytes.get(len..) else {
                return Fast::Refused;
            };
            self.bytes = rest;
            return Fast::Short(value);
        }
        let (read, rest) = if high_bits < WORD_BITS {
            varint_wide_u64(self.bytes, self.value, word)
        } else {
            varint_wide(self.bytes, self.value, word, high_bits)
        };
        self.bytes = rest;
        read
    }

    /// A varint as [`Writer::varint`] writes it; `None` if truncated, too large for a
    /// `u64` or not in its shortest form (so every value has exactly one encoding).
    #[inline(always)]
    pub(crate) fn varint(&mut self) -> Option<u64> {
        match self.varint_fast(64 - WORD_BITS) {
            Fast::Short(v) => Some(v),
            Fast::Wide { low, high } => Some(low | high << WORD_BITS),
            Fast::Refused => None,
            Fast::Slow => {
                let (v, len) = varint_long::<u64>(self.bytes, 64)?;
                self.bytes = self.bytes.get(len..)?;
                Some(v)
            }
        }
    }

    /// A varint as [`Compact::varint128`] writes it; `None` if truncated, too large for a
    /// `u128` or not in its shortest form.
    #[inline(always)]
    pub(crate) fn varint128(&mut self) -> Option<u128> {
        match self.varint_fast(WORD_BITS) {
            Fast::Short(v) => Some(u128::from(v)),
            Fast::Wide { low, high } => Some(u128::from(low) | u128::from(high) << WORD_BITS),
            Fast::Refused => None,
            Fast::Slow => {
                let (v, len) = varint_long::<u128>(self.bytes, 128)?;
                self.bytes = self.bytes.get(len..)?;
                Some(v)
            }
        }
    }

    /// True when every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// How many bytes are left to read.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len()
    }
}

/// What [`Reader::varint_fast`] read.
enum Fast {
    /// A varint of at most 8 bytes.
    Short(u64),
    /// A varint of 9 to 16 bytes: its low 56 bits and the bits above.
    Wide { low: u64, high: u64 },
    /// Truncated, too large or not in its shortest form.
    Refused,
    /// For the byte loop: a longer varint, or one in a value shorter than 8 bytes.
    Slow,
}

/// [`Reader::varint_fast`] after a `word` of 8 bytes that all continue (so they are all in
/// `bytes`: past the end of the value, `word` has zeros): the rest of the varint is in the next
/// 8 bytes. What was read, and the bytes after it (all of `bytes` unless a varint was read).
#[inline(always)]
fn varint_wide<'a>(bytes: &'a [u8], value: &[u8], word: u64, high_bits: u32) -> (Fast, &'a [u8]) {
    let Some(next) = bytes.get(8..).and_then(|after| word_at(after, value)) else {
        return (Fast::Slow, bytes);
    };
    let next_stops = !next & CONTINUATION;
    if next_stops == 0 {
        return (Fast::Slow, bytes);
    }
    let Some((high, len)) = stopping_in(next, next_stops) else {
        return (Fast::Refused, bytes);
    };
    // A full-width varint's last byte holds only the top bits.
    if high_bits < WORD_BITS && high >> high_bits != 0 {
        return (Fast::Refused, bytes);
    }
    let Some(rest) = bytes.get(8 + len..) else {
        return (Fast::Refused, bytes);
    };
    let low = gather(word);
    (Fast::Wide { low, high }, rest)
}

/// [`varint_wide`] of a `u64` (2^56 or more): out of line, as no `u64` field of a valid state
/// gets there (see [`wide_u64`]).
#[inline(never)]
fn varint_wide_u64<'a>(bytes: &'a [u8], value: &[u8], word: u64) -> (Fast, &'a [u8]) {
    varint_wide(bytes, value, word, 64 - WORD_BITS)
}

/// The 8 bytes at the front of `bytes`, the end of `value`, as a little-endian word, zeros
/// after the end of the value; `None` if `bytes` is empty, or it and `value` are shorter
/// than 8 bytes.
#[inline(always)]
fn word_at(bytes: &[u8], value: &[u8]) -> Option<u64> {
    if let Some(word) = bytes.first_chunk::<8>() {
        return Some(u64::from_le_bytes(*word));
    }
    // Fewer than 8 bytes left, at the end of `value`: its last 8 bytes, shifted so that what
    // is left comes first.
    let last = u64::from_le_bytes(*value.last_chunk::<8>()?);
    let before = 8 - bytes.len();
    last.checked_shr(8 * u32::try_from(before).ok()?)
}

/// The varint bytes at the front of `word` (`stops`, its clear continuation bits, is not 0):
/// their value (at most 56 bits) and how many there are; `None` if the last of them is 0:
/// never the only byte of a varint here, so a longer spelling of a shorter varint, or one of
/// the zeros past the end of a value that stop a truncated varint.
#[inline(always)]
fn stopping_in(word: u64, stops: u64) -> Option<(u64, usize)> {
    // The last byte's stop bit is bit `8 x len - 1`.
    let stop_bit = stops.trailing_zeros();
    let len = (stop_bit as usize + 1) / 8;
    if (word >> (stop_bit - 7)) & 0x7f == 0 {
        return None;
    }
    // The varint's bytes only (all bits up to its stop bit).
    let mine = word & (stops ^ (stops - 1));
    let value = match u32::try_from(mine) {
        Ok(short) => u64::from(gather32(short)),
        Err(_) => gather(mine),
    };
    Some((value, len))
}

/// A varint of at most `bits` bits at the front of `bytes`, byte by byte (one of 17 bytes
/// or more, or in a value shorter than 8 bytes): the value and its length; `None` if
/// truncated, too large or not in its shortest form.
#[inline(never)]
fn varint_long<T>(bytes: &[u8], bits: u32) -> Option<(T, usize)>
where
    T: From<u8> + std::ops::Shl<u32, Output = T> + std::ops::BitOrAssign,
{
    let mut v = T::from(0);
    for (i, &b) in bytes.iter().enumerate() {
        let shift = u32::try_from(i).ok()? * 7;
        // The last byte of a full-width varint holds only the top bits.
        if shift >= bits || (shift + 7 > bits && b >> (bits - shift) != 0) {
            return None;
        }
        v |= T::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return (b != 0 || i == 0).then_some((v, i + 1));
        }
    }
    None
}

impl<'a> Reader<'a> {
    /// The next `len` bytes.
    pub(crate) fn slice(&mut self, len: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.bytes.split_at_checked(len)?;
        self.bytes = rest;
        Some(head)
    }
}

/// What the fast paths are checked against: the value as the generic [`Writer`] wrote it,
/// the varint reader as it was, and field values that reach every varint length.
#[cfg(test)]
pub(crate) mod reference {
    use super::*;
    use proptest::prelude::*;

    /// A compact value of `S` as the generic writer writes it: header, then what `fields`
    /// writes (the encoding before [`Compact`]).
    pub(crate) fn compact<S: Stored>(fields: impl FnOnce(&mut Writer<'_>)) -> Vec<u8> {
        let mut out = Encoded {
            buf: [0; MAX_LEN],
            len: 0,
            spill: Vec::new(),
        };
        let mut w = Writer { out: &mut out };
        w.bytes(&MAGIC);
        w.bytes(&[COMPACT_VERSION, S::ALGORITHM.tag()]);
        fields(&mut w);
        out.as_bytes().to_vec()
    }

    /// The varint reader before the one-load fast path: the value and the bytes it used.
    pub(crate) fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
        let mut v = 0u64;
        for (i, shift) in (0..64).step_by(7).enumerate() {
            let b = *bytes.get(i)?;
            if shift == 63 && b > 1 {
                return None;
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return (b != 0 || shift == 0).then_some((v, i + 1));
            }
        }
        None
    }

    /// The 128-bit varint reader before the fast path.
    pub(crate) fn varint128(bytes: &[u8]) -> Option<(u128, usize)> {
        let mut v = 0u128;
        for (i, shift) in (0..128).step_by(7).enumerate() {
            let b = *bytes.get(i)?;
            if shift == 126 && b > 3 {
                return None;
            }
            v |= u128::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return (b != 0 || shift == 0).then_some((v, i + 1));
            }
        }
        None
    }

    /// Any `u64`, with every bit length and the edges of every varint length equally likely.
    pub(crate) fn arb_u64() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            (any::<u64>(), 0u32..64).prop_map(|(v, shift)| v >> shift),
            (0u32..10).prop_map(|bytes| (1u64 << (7 * bytes)).wrapping_sub(1)),
            (0u32..10).prop_map(|bytes| 1u64 << (7 * bytes)),
            Just(0),
            Just(u64::MAX),
        ]
    }

    /// Any `u128`, as [`arb_u64`].
    pub(crate) fn arb_u128() -> impl Strategy<Value = u128> {
        prop_oneof![
            any::<u128>(),
            (any::<u128>(), 0u32..128).prop_map(|(v, shift)| v >> shift),
            (0u32..19).prop_map(|bytes| (1u128 << (7 * bytes)).wrapping_sub(1)),
            (0u32..19).prop_map(|bytes| 1u128 << (7 * bytes)),
            arb_u64().prop_map(u128::from),
            Just(u128::MAX),
        ]
    }

    /// `state` encodes to exactly `old` (the generic writer's bytes), through `encode` and
    /// `with_bytes` alike, and the fast decode agrees with the general one on every prefix of
    /// its body and on the body with `extra` appended.
    pub(crate) fn encodes_like_generic<S: Stored + PartialEq + std::fmt::Debug>(
        state: &S,
        old: &[u8],
        extra: u8,
    ) -> Result<(), TestCaseError> {
        let new = state.encode();
        prop_assert_eq!(new.as_bytes(), old);
        prop_assert_eq!(state.with_bytes(<[u8]>::to_vec), old.to_vec());
        let body = &old[HEADER_LEN..];
        for cut in 0..=body.len() {
            fast_decode_is_general::<S>(&body[..cut]);
        }
        let mut longer = body.to_vec();
        longer.push(extra);
        fast_decode_is_general::<S>(&longer);
        Ok(())
    }

    /// Every stored value of `S` with the compact header and `body` decodes as the general
    /// path decodes it (the same state or the same error).
    pub(crate) fn fast_decode_is_general<S: Stored + PartialEq + std::fmt::Debug>(body: &[u8]) {
        for version in [VERSION, COMPACT_VERSION, 3] {
            let mut v = MAGIC.to_vec();
            v.extend_from_slice(&[version, S::ALGORITHM.tag()]);
            v.extend_from_slice(body);
            assert_eq!(S::decode(&v), S::decode_general(&v), "{v:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use redis_rl_core::sliding_window::SlidingWindowState;
    use redis_rl_core::token_bucket::TokenBucketState;
    use redis_rl_core::{Micros, Millis};

    const MAX_COUNT_FOR_TESTS: u64 = redis_rl_core::limits::MAX_COUNT;

    fn bucket() -> TokenBucketState {
        TokenBucketState {
            level: 123_456_789,
            updated_at: Micros(1_700_000_000_000_000),
            refill_ms: 60_000,
        }
    }

    fn window() -> SlidingWindowState {
        SlidingWindowState {
            window_ms: 1_000,
            window_start: Millis(1_700_000_000_000),
            previous: 7,
            current: 3,
        }
    }

    #[test]
    fn round_trips_and_sizes() {
        let b = bucket().encode();
        assert_eq!(b.as_bytes().len(), 5 + 7 + 3 + 4);
        assert_eq!(&b.as_bytes()[..5], b"\0RL\x02T");
        assert_eq!(TokenBucketState::decode(b.as_bytes()), Ok(bucket()));
        let w = window().encode();
        assert_eq!(
            w.as_bytes(),
            b"\0RL\x02S\xe8\x07\x80\xe2\xcf\xaa\x06\x07\x03"
        );
        assert_eq!(SlidingWindowState::decode(w.as_bytes()), Ok(window()));
        // Version 1, as older modules wrote it, is still read.
        let b1 = bucket().encode_v1();
        assert_eq!(b1.as_bytes().len(), 37);
        assert_eq!(&b1.as_bytes()[..5], b"\0RL\x01T");
        assert_eq!(TokenBucketState::decode(b1.as_bytes()), Ok(bucket()));
        let w1 = window().encode_v1();
        assert_eq!(w1.as_bytes().len(), 37);
        assert_eq!(SlidingWindowState::decode(w1.as_bytes()), Ok(window()));
        // A version 1 length with the version 2 byte (or the other way round) is corrupt.
        let mut mixed = b1.as_bytes().to_vec();
        mixed[3] = 2;
        assert_eq!(
            TokenBucketState::decode(&mixed),
            Err(DecodeError::Corrupt(Algorithm::TokenBucket))
        );
        let mut mixed = b.as_bytes().to_vec();
        mixed[3] = 1;
        assert_eq!(
            TokenBucketState::decode(&mixed),
            Err(DecodeError::Corrupt(Algorithm::TokenBucket))
        );
    }

    #[test]
    fn u128_varints_round_trip_in_their_shortest_form() {
        for v in [
            0,
            1,
            127,
            128,
            u128::from(u64::MAX),
            u128::MAX >> 2,
            u128::MAX,
        ] {
            let mut out = Encoded {
                buf: [0; MAX_LEN],
                len: 0,
                spill: Vec::new(),
            };
            Writer { out: &mut out }.varint128(v);
            let bytes = out.as_bytes();
            let expected_len = (128 - v.leading_zeros()).div_ceil(7).max(1) as usize;
            assert_eq!(bytes.len(), expected_len, "{v}");
            let mut r = Reader::over(bytes);
            assert_eq!(r.varint128(), Some(v));
            assert!(r.is_empty());
        }
        let decode = |bytes: &[u8]| Reader::over(bytes).varint128();
        assert_eq!(decode(&[0x80, 0x00]), None, "not the shortest form");
        assert_eq!(decode(&[0x80]), None, "truncated");
        let mut too_big = vec![0xff; 18];
        too_big.push(0x04);
        assert_eq!(decode(&too_big), None, "129 bits");
    }

    #[test]
    fn refuses_what_is_not_ours_with_the_reason() {
        assert_eq!(
            TokenBucketState::decode(b"hello"),
            Err(DecodeError::NotOurs)
        );
        assert_eq!(TokenBucketState::decode(b""), Err(DecodeError::NotOurs));
        let mut v = bucket().encode().as_bytes().to_vec();
        assert_eq!(
            SlidingWindowState::decode(&v),
            Err(DecodeError::WrongAlgorithm {
                stored: Algorithm::TokenBucket,
                expected: Algorithm::SlidingWindow
            })
        );
        v[3] = 3;
        assert_eq!(
            TokenBucketState::decode(&v),
            Err(DecodeError::UnsupportedVersion(3))
        );
        v[3] = 1;
        v[4] = b'?';
        assert_eq!(
            TokenBucketState::decode(&v),
            Err(DecodeError::UnknownAlgorithm(b'?'))
        );
        v[4] = b'T';
        v.pop();
        assert_eq!(
            TokenBucketState::decode(&v),
            Err(DecodeError::Corrupt(Algorithm::TokenBucket))
        );
    }

    #[test]
    fn refuses_impossible_fields() {
        let mut w = window();
        w.window_start = Millis(1_500);
        assert!(SlidingWindowState::decode(w.encode_v1().as_bytes()).is_err());
        let mut b = bucket();
        b.refill_ms = 0;
        assert!(TokenBucketState::decode(b.encode().as_bytes()).is_err());
        assert!(TokenBucketState::decode(b.encode_v1().as_bytes()).is_err());
    }

    #[test]
    fn varints_round_trip_in_their_shortest_form() {
        for v in [0, 1, 127, 128, 16_383, 16_384, u64::MAX >> 1, u64::MAX] {
            let mut out = Encoded {
                buf: [0; MAX_LEN],
                len: 0,
                spill: Vec::new(),
            };
            Writer { out: &mut out }.varint(v);
            let bytes = out.as_bytes();
            let expected_len = (64 - v.leading_zeros()).div_ceil(7).max(1) as usize;
            assert_eq!(bytes.len(), expected_len, "{v}");
            let mut r = Reader::over(bytes);
            assert_eq!(r.varint(), Some(v));
            assert!(r.is_empty());
        }
        let decode = |bytes: &[u8]| Reader::over(bytes).varint();
        assert_eq!(decode(&[0x80, 0x00]), None, "not the shortest form");
        assert_eq!(decode(&[0x80]), None, "truncated");
        assert_eq!(
            decode(&[0xff; 9].iter().chain(&[0x02]).copied().collect::<Vec<_>>()),
            None
        );
    }

    #[test]
    fn a_long_value_spills_to_the_heap_whole() {
        let mut out = Encoded {
            buf: [0; MAX_LEN],
            len: 0,
            spill: Vec::new(),
        };
        let mut w = Writer { out: &mut out };
        for i in 0..100u64 {
            w.u64(i);
        }
        let values = [0, 127, 128, 16_384, u64::MAX];
        for v in values {
            w.varint(v);
        }
        let (fixed, varints) = out.as_bytes().split_at(800);
        let mut r = Reader::over(varints);
        assert_eq!(values.map(|_| r.varint().unwrap()), values);
        assert!(r.is_empty());
        let bytes = fixed;
        assert_eq!(bytes.len(), 800);
        assert!(bytes
            .chunks(8)
            .enumerate()
            .all(|(i, c)| c == (i as u64).to_le_bytes()));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_decode_to_a_value_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
            let _ = TokenBucketState::decode(&bytes);
            let _ = SlidingWindowState::decode(&bytes);
        }

        #[test]
        fn our_header_with_random_fields_never_panics(body in prop::collection::vec(any::<u8>(), 0..40)) {
            for (tag, version) in [(b'T', 1), (b'S', 1), (b'T', 2), (b'S', 2)] {
                let mut v = vec![0, b'R', b'L', version, tag];
                v.extend_from_slice(&body);
                let _ = TokenBucketState::decode(&v);
                let _ = SlidingWindowState::decode(&v);
            }
        }

        #[test]
        fn round_trip(level in 0u128..1_000_000_000_000_000_000, at in any::<u64>(), refill_ms in 1u64..1_000_000) {
            let s = TokenBucketState { level, updated_at: Micros(at), refill_ms };
            prop_assert_eq!(TokenBucketState::decode(s.encode().as_bytes()), Ok(s));
            prop_assert_eq!(TokenBucketState::decode(s.encode_v1().as_bytes()), Ok(s));
        }

        #[test]
        fn window_round_trip(window_ms in 1u64..1_000_000_000_000, index in 0u64..10_000_000, previous in 0..=MAX_COUNT_FOR_TESTS, current in 0..=MAX_COUNT_FOR_TESTS) {
            let s = SlidingWindowState { window_ms, window_start: Millis(window_ms * index), previous, current };
            prop_assert_eq!(SlidingWindowState::decode(s.encode().as_bytes()), Ok(s));
            prop_assert_eq!(SlidingWindowState::decode(s.encode_v1().as_bytes()), Ok(s));
        }
    }

    /// The bytes [`Compact`] writes for `values` after a header.
    fn compact_bytes(values: &[u128]) -> Vec<u8> {
        let mut out = Encoded {
            buf: [0; MAX_LEN],
            len: 0,
            spill: Vec::new(),
        };
        let mut w = Compact {
            buf: &mut out.buf,
            len: HEADER_LEN,
        };
        for &v in values {
            w.varint128(v);
        }
        out.len = w.len;
        out.as_bytes()[HEADER_LEN..].to_vec()
    }

    /// The bytes [`Compact::varint`] writes for `values` after a header.
    fn compact_bytes_u64(values: &[u64]) -> Vec<u8> {
        let mut buf = [0; MAX_LEN];
        let mut w = Compact {
            buf: &mut buf,
            len: HEADER_LEN,
        };
        for &v in values {
            w.varint(v);
        }
        let len = w.len;
        buf[HEADER_LEN..len].to_vec()
    }

    /// The bytes the generic [`Writer`] writes for `values`.
    fn writer_bytes(values: &[u128]) -> Vec<u8> {
        let mut out = Encoded {
            buf: [0; MAX_LEN],
            len: 0,
            spill: Vec::new(),
        };
        let mut w = Writer { out: &mut out };
        for &v in values {
            match u64::try_from(v) {
                Ok(v) => w.varint(v),
                Err(_) => w.varint128(v),
            }
        }
        out.as_bytes().to_vec()
    }

    /// `reader` and `reference` agree on `bytes`: the same value, or both refuse it, and the
    /// same bytes used.
    fn reads_as_reference(bytes: &[u8]) {
        // Alone, at the end of a longer value (read near its end with one load), and followed
        // by more bytes (a byte that ends a truncated varint, then bytes that would continue it).
        let mut after = vec![0xff; 8];
        after.extend_from_slice(bytes);
        let mut before = bytes.to_vec();
        before.push(0x01);
        before.extend_from_slice(&[0xff; 15]);
        for (value, start) in [(bytes, 0), (&after[..], 8), (&before[..], 0)] {
            let read = &value[start..];
            let mut r = Reader { bytes: read, value };
            let got = r.varint().map(|v| (v, read.len() - r.remaining()));
            assert_eq!(got, reference::varint(read), "{value:x?} from {start}");
            let mut r = Reader { bytes: read, value };
            let got = r.varint128().map(|v| (v, read.len() - r.remaining()));
            assert_eq!(got, reference::varint128(read), "{value:x?} from {start}");
        }
    }

    /// Values at and around every varint length (2^(7 k) - 1 and 2^(7 k)) and the edges of
    /// the one- and two-word fast paths and of `u64`.
    fn boundary_values() -> Vec<u128> {
        let mut values = vec![
            0,
            (1 << 56) - 1,
            1 << 56,
            1 << 63,
            u128::from(u64::MAX),
            1 << 64,
            1 << 70,
            (1 << 112) - 1,
            1 << 112,
            1 << 126,
            u128::MAX >> 1,
            u128::MAX,
        ];
        for k in 1..=18 {
            let edge = 1u128 << (7 * k);
            values.extend([
                edge - 1,
                edge,
                edge + 1,
                edge | (edge >> 1),
                (edge << 7).wrapping_sub(2),
            ]);
        }
        values.sort_unstable();
        values.dedup();
        values
    }

    #[test]
    fn varints_of_every_length_read_as_before() {
        for v in boundary_values() {
            let shortest = writer_bytes(&[v]);
            // The value and every truncation of it.
            for cut in 0..=shortest.len() {
                reads_as_reference(&shortest[..cut]);
            }
            // Longer spellings: a trailing 0 after one to three more continued bytes.
            let mut longer = shortest.clone();
            for _ in 0..3 {
                *longer.last_mut().unwrap() |= 0x80;
                longer.push(0);
                reads_as_reference(&longer);
            }
        }
        // Every last byte after every number of continued bytes (all 7-bit groups full, or
        // empty): the too-large, the shortest and the non-shortest forms of each length.
        for len in 1..=20 {
            for fill in [0xff, 0x80] {
                for last in 0..=255u8 {
                    let mut bytes = vec![fill; len - 1];
                    bytes.push(last);
                    reads_as_reference(&bytes);
                }
            }
        }
        let read = |bytes: &[u8]| {
            (
                Reader::over(bytes).varint(),
                Reader::over(bytes).varint128(),
            )
        };
        let mut full = [0xff; 19];
        full[9] = 0x01;
        assert_eq!(read(&full[..10]), (Some(u64::MAX), Some(u64::MAX.into())));
        full[9] = 0x02;
        assert_eq!(read(&full[..10]), (None, Some((1 << 64) + (1 << 63) - 1)));
        full[9] = 0xff;
        full[18] = 0x03;
        assert_eq!(read(&full), (None, Some(u128::MAX)));
        full[18] = 0x04;
        assert_eq!(read(&full), (None, None));
        let mut two_56 = [0x80; 9];
        two_56[8] = 0x01;
        assert_eq!(read(&two_56), (Some(1 << 56), Some(1 << 56)));
        two_56[8] = 0x00;
        assert_eq!(read(&two_56), (None, None), "not the shortest form");
        assert_eq!(read(&two_56[..8]), (None, None), "truncated");
    }

    #[test]
    fn varints_of_every_length_are_the_writers_bytes_at_every_offset() {
        for v in boundary_values() {
            let len = writer_bytes(&[v]).len();
            // After 0 to 59 one-byte varints: every alignment, and the end of the buffer (where
            // an 8-byte store does not fit).
            for pad in 0..=MAX_LEN - HEADER_LEN - len {
                let mut values = vec![0; pad];
                values.push(v);
                let bytes = compact_bytes(&values);
                assert_eq!(bytes, writer_bytes(&values), "{v} after {pad}");
                if let Ok(v) = u64::try_from(v) {
                    let mut narrow = vec![0; pad];
                    narrow.push(v);
                    assert_eq!(compact_bytes_u64(&narrow), bytes, "{v} after {pad}");
                }
                let mut r = Reader::over(&bytes);
                for &want in &values {
                    assert_eq!(r.varint128(), Some(want));
                }
                assert!(r.is_empty());
            }
        }
    }

    #[test]
    fn every_two_byte_prefix_reads_as_before_near_and_far_from_the_end() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                for tail in [
                    &[][..],
                    &[0x01],
                    &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
                ] {
                    let mut bytes = vec![a, b];
                    bytes.extend_from_slice(tail);
                    reads_as_reference(&bytes);
                    reads_as_reference(&bytes[..1]);
                }
            }
        }
        reads_as_reference(&[]);
    }

    #[test]
    fn the_longest_compact_values_fit_the_buffer() {
        // Four 10-byte varints (a sliding window of impossible fields) and three of 19.
        let max = [u128::from(u64::MAX); 4];
        assert_eq!(compact_bytes(&max).len(), 40);
        assert_eq!(compact_bytes(&max), writer_bytes(&max));
        let max = [u128::MAX; 3];
        assert_eq!(compact_bytes(&max).len(), 57);
        assert_eq!(compact_bytes(&max), writer_bytes(&max));
    }

    proptest! {
        #[test]
        fn compact_varints_are_the_writers_bytes(
            values in prop::collection::vec(
                prop_oneof![reference::arb_u64().prop_map(u128::from), reference::arb_u128()],
                0..4,
            ),
        ) {
            prop_assert_eq!(compact_bytes(&values), writer_bytes(&values));
        }

        #[test]
        fn varints_read_as_before(
            bytes in prop::collection::vec(
                prop_oneof![any::<u8>(), 0x80u8..=0xff, Just(0x80u8), Just(0u8), Just(1u8)],
                0..24,
            ),
        ) {
            for start in 0..bytes.len().min(12) {
                reads_as_reference(&bytes[start..]);
            }
        }

        #[test]
        fn written_varints_read_back_one_after_another(
            values in prop::collection::vec(reference::arb_u64(), 1..4),
        ) {
            let wide: Vec<u128> = values.iter().copied().map(u128::from).collect();
            let bytes = compact_bytes(&wide);
            let mut r = Reader::over(&bytes);
            for &v in &values {
                prop_assert_eq!(r.varint(), Some(v));
            }
            prop_assert!(r.is_empty());
        }

        #[test]
        fn written_wide_varints_read_back_one_after_another(
            values in prop::collection::vec(reference::arb_u128(), 1..4),
            tail in prop::collection::vec(any::<u8>(), 0..10),
        ) {
            let mut bytes = compact_bytes(&values);
            bytes.extend_from_slice(&tail);
            let mut r = Reader::over(&bytes);
            for &v in &values {
                prop_assert_eq!(r.varint128(), Some(v));
            }
            prop_assert_eq!(r.remaining(), tail.len());
        }

        #[test]
        fn compact_u64_varints_are_the_writers_bytes(
            values in prop::collection::vec(reference::arb_u64(), 0..6),
        ) {
            let wide: Vec<u128> = values.iter().copied().map(u128::from).collect();
            prop_assert_eq!(compact_bytes_u64(&values), writer_bytes(&wide));
        }
    }
}
