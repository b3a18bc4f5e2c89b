//! The stored value format: the only place that knows the bytes in a limiter key.
//!
//! Every value is a plain Redis string so that DEL, EXPIRE, DUMP/RESTORE, MIGRATE, RDB and
//! AOF all work unchanged:
//!
//! ```text
//! offset 0  3 bytes  magic "\0RL" (a NUL first: no text value starts like this)
//! offset 3  1 byte   format version (1, or 2, or 3 for a log: see below)
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
//! For the concurrency limiter, version 2 is its lease table (`lease_table`). For the sliding
//! window log, versions 2 and 3 are the fixed-width logs the Lua twin writes (`sliding_log`).
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
mod quota;
mod sliding_log;
mod sliding_window;
mod token_bucket;
mod varint;

#[cfg(test)]
pub(crate) use varint::reference;
pub use varint::{Compact, Reader, Writer};

/// First bytes of every value we write.
pub const MAGIC: [u8; 3] = *b"\0RL";
/// The first format version (still read; written for the variable-length states).
pub const VERSION: u8 = 1;
/// The compact format version of the fixed-size states (fields as varints).
pub const COMPACT_VERSION: u8 = 2;
/// The sliding window log the Lua twin writes since version 3 of its layout (read here,
/// never written: see `sliding_log`).
pub const TWIN_LOG_VERSION: u8 = 3;
/// Length of the header (magic, version, algorithm tag) that starts every value.
pub const HEADER_LEN: usize = MAGIC.len() + 2;
/// Room for the largest encoded value.
const MAX_LEN: usize = 64;

/// The kinds of limiter a key can hold: the core registry's [`Kind`](redis_rl_core::Kind)
/// (tag byte, and the name in error texts).
pub use redis_rl_core::Kind;

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
        stored: Kind,
        /// What the command works on.
        expected: Kind,
    },
    /// Our header, but a wrong length or impossible field values.
    Corrupt(Kind),
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
    /// No bytes yet.
    pub(crate) const fn empty() -> Encoded {
        Encoded {
            buf: [0u8; MAX_LEN],
            len: 0,
            spill: Vec::new(),
        }
    }

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
    const KIND: Kind;
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
    /// The least and most bytes of a body in format [`TWIN_LOG_VERSION`], for the state
    /// that has that form (read with [`Self::decode_twin`], never written); `None`: no such
    /// form.
    const TWIN_BODY: Option<(usize, usize)> = None;

    /// True if a value of `len` bytes (header included) may be a valid state: only such a
    /// value is ever read whole.
    fn plausible_len(len: usize) -> bool {
        let Some(body) = len.checked_sub(HEADER_LEN) else {
            return false;
        };
        Self::plausible_body(VERSION, body)
            || Self::plausible_body(COMPACT_VERSION, body)
            || Self::plausible_body(TWIN_LOG_VERSION, body)
    }

    /// True if a body of `len` bytes may be valid in format `version`.
    fn plausible_body(version: u8, len: usize) -> bool {
        match (version, Self::COMPACT_BODY) {
            (COMPACT_VERSION, Some((least, most))) => (least..=most).contains(&len),
            (COMPACT_VERSION, None) => false,
            (TWIN_LOG_VERSION, _) => {
                Self::TWIN_BODY.is_some_and(|(least, most)| (least..=most).contains(&len))
            }
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
    /// Reads a [`TWIN_LOG_VERSION`] body (only called when `TWIN_BODY` is set); `None` if
    /// a field is out of range.
    fn decode_twin(_body: &mut Reader<'_>) -> Option<Self> {
        None
    }

    /// Writes the fields into `out` (exactly `BODY_LEN` bytes).
    fn encode_body(&self, out: &mut Writer<'_>);
    /// Reads the fields; `None` if a field is out of range.
    fn decode_body(body: &mut Reader<'_>) -> Option<Self>;

    /// The full stored value: header then fields.
    #[inline(always)]
    fn encode(&self) -> Encoded {
        if Self::COMPACT_BODY.is_none() {
            return self.encode_fields();
        }
        let mut out = Encoded::empty();
        out.len = self.write_compact(&mut out.buf);
        out
    }

    /// The value with its fields as [`Self::encode_body`] writes them (format version 1):
    /// what a variable-length state stores, and what older modules wrote for the others.
    #[inline(always)]
    fn encode_fields(&self) -> Encoded {
        let mut out = Encoded::empty();
        let mut w = Writer { out: &mut out };
        w.header(VERSION, Self::KIND);
        self.encode_body(&mut w);
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
            *header = compact_header(Self::KIND);
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
        self.encode_fields()
    }

    /// Reads a stored value, refusing anything that is not exactly our format.
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if let (Some((least, most)), Some((header, body))) =
            (Self::COMPACT_BODY, bytes.split_first_chunk::<HEADER_LEN>())
        {
            // The common case, our own compact value: the header in one comparison. What
            // follows is what the general path below does for this header.
            if *header == compact_header(Self::KIND) {
                let mut reader = Reader {
                    bytes: body,
                    value: bytes,
                };
                return (least..=most)
                    .contains(&body.len())
                    .then(|| Self::decode_compact(&mut reader))
                    .flatten()
                    .filter(|_| reader.is_empty())
                    .ok_or(DecodeError::Corrupt(Self::KIND));
            }
        }
        Self::decode_general(bytes)
    }

    /// [`Self::decode`] for any header: the precise error, or a version 1 value.
    fn decode_general(bytes: &[u8]) -> Result<Self, DecodeError> {
        let stored = algorithm_of(bytes)?;
        if stored != Self::KIND {
            return Err(DecodeError::WrongAlgorithm {
                stored,
                expected: Self::KIND,
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
        } else if version == TWIN_LOG_VERSION {
            Self::decode_twin(&mut reader)
        } else {
            Self::decode_body(&mut reader)
        };
        state
            .filter(|_| reader.is_empty())
            .ok_or(DecodeError::Corrupt(stored))
    }
}

/// The header of a compact (version 2) value of `algorithm`.
const fn compact_header(algorithm: Kind) -> [u8; HEADER_LEN] {
    let [m0, m1, m2] = MAGIC;
    [m0, m1, m2, COMPACT_VERSION, algorithm.tag()]
}

/// The algorithm of a stored value, from its header: an error if the value is not a
/// limiter this module can read.
pub fn algorithm_of(bytes: &[u8]) -> Result<Kind, DecodeError> {
    let header = bytes.get(..HEADER_LEN).ok_or(DecodeError::NotOurs)?;
    let (magic, rest) = header.split_at(MAGIC.len());
    if magic != MAGIC {
        return Err(DecodeError::NotOurs);
    }
    let [version, tag] = [rest.first(), rest.get(1)].map(|b| b.copied().unwrap_or(0));
    // Version 2 is the compact form of the fixed-size states, and the concurrency
    // limiter's lease table.
    let kind = Kind::from_tag(tag);
    let v2 = (version == lease_table::VERSION && kind == Some(Kind::Concurrency))
        || (version == COMPACT_VERSION && kind.is_some_and(has_compact_form))
        || (version == TWIN_LOG_VERSION && kind == Some(Kind::SlidingLog));
    if version != VERSION && !v2 {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    kind.ok_or(DecodeError::UnknownAlgorithm(tag))
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
        pub fn plausible_len(algorithm: Kind, len: usize) -> bool {
            match algorithm {
                $(Kind::$l => <<$lt as CoreAlgorithm>::State as Stored>::plausible_len(len),)*
                $(Kind::$o => <<$ot as CoreAlgorithm>::State as Stored>::plausible_len(len),)*
            }
        }

        /// True for an algorithm whose state has a compact (version 2) form.
        const fn has_compact_form(kind: Kind) -> bool {
            match kind {
                $(Kind::$l => <<$lt as CoreAlgorithm>::State as Stored>::COMPACT_BODY.is_some(),)*
                $(Kind::$o => <<$ot as CoreAlgorithm>::State as Stored>::COMPACT_BODY.is_some(),)*
            }
        }

        /// Decodes a value of any algorithm's format version 1 and hands the state to
        /// `visit`.
        fn decode_v1<V: Visit>(bytes: &[u8], visit: V) -> Result<V::Out, DecodeError> {
            match algorithm_of(bytes)? {
                $(Kind::$l => Ok(visit.visit::<$lt>(Stored::decode(bytes)?)),)*
                $(Kind::$o => Ok(visit.visit::<$ot>(Stored::decode(bytes)?)),)*
            }
        }
    };
}

redis_rl_core::registry!(by_tag);

/// Decodes a stored value of any algorithm (the one in its header) and hands the state to
/// `visit` (a concurrency limiter's lease table as its leases).
pub fn decode_any<V: Visit>(bytes: &[u8], visit: V) -> Result<V::Out, DecodeError> {
    if algorithm_of(bytes)? == Kind::Concurrency && lease_table::is_table(bytes) {
        let leases = lease_table::Table::parse(bytes)
            .and_then(|table| table.leases())
            .map_err(|_| DecodeError::Corrupt(Kind::Concurrency))?;
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

#[cfg(test)]
mod tests;
