//! The stored value format: the only place that knows the bytes in a limiter key.
//!
//! Every value is a plain Redis string so that DEL, EXPIRE, DUMP/RESTORE, MIGRATE, RDB and
//! AOF all work unchanged:
//!
//! ```text
//! offset 0  3 bytes  magic "\0RL" (a NUL first: no text value starts like this)
//! offset 3  1 byte   format version (1)
//! offset 4  1 byte   algorithm tag: 'T' token bucket, 'S' sliding window
//! offset 5  ...      fixed-size little-endian fields of that algorithm (see each impl)
//! ```
//!
//! Decoding checks magic, version, tag, exact length and field ranges, so anything we did
//! not write is refused with a clear error rather than misread.

use std::fmt;

use redis_rl_core::limits::MAX_DURATION_MS;

mod sliding_window;
mod token_bucket;

/// First bytes of every value we write.
pub const MAGIC: [u8; 3] = *b"\0RL";
/// The format version this module writes and reads.
pub const VERSION: u8 = 1;
const HEADER_LEN: usize = MAGIC.len() + 2;
/// Room for the largest encoded value.
const MAX_LEN: usize = 64;

/// The kinds of limiter a key can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// RL.TOKENBUCKET.
    TokenBucket,
    /// RL.SLIDING.
    SlidingWindow,
}

impl Algorithm {
    const fn tag(self) -> u8 {
        match self {
            Algorithm::TokenBucket => b'T',
            Algorithm::SlidingWindow => b'S',
        }
    }

    const fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            b'T' => Some(Algorithm::TokenBucket),
            b'S' => Some(Algorithm::SlidingWindow),
            _ => None,
        }
    }

    /// The name used in error texts.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token bucket",
            Algorithm::SlidingWindow => "sliding window",
        }
    }
}

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
    /// The public error text (Redis adds nothing: the `ERR ` prefix is ours).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::NotOurs => {
                write!(f, "ERR key holds a value that is not a redis-rl limiter")
            }
            DecodeError::UnsupportedVersion(v) => write!(
                f,
                "ERR key holds a redis-rl limiter in format version {v}, this module reads version {VERSION}"
            ),
            DecodeError::UnknownAlgorithm(tag) => write!(
                f,
                "ERR key holds a redis-rl limiter of a kind this module does not know (tag {tag})"
            ),
            DecodeError::WrongAlgorithm { stored, expected } => write!(
                f,
                "ERR key holds a {} limiter, not a {} limiter",
                stored.name(),
                expected.name()
            ),
            DecodeError::Corrupt(algorithm) => {
                write!(f, "ERR key holds a corrupt redis-rl {} limiter", algorithm.name())
            }
        }
    }
}

/// An encoded value on the stack (no allocation on the hot path).
pub struct Encoded {
    buf: [u8; MAX_LEN],
    len: usize,
}

impl Encoded {
    /// The bytes to store.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

/// A limiter state that can be stored in a key.
pub trait Stored: Sized {
    /// The tag written in the header.
    const ALGORITHM: Algorithm;
    /// Length of the fields after the header.
    const BODY_LEN: usize;

    /// Writes the fields into `out` (exactly `BODY_LEN` bytes).
    fn encode_body(&self, out: &mut Writer<'_>);
    /// Reads the fields; `None` if a field is out of range.
    fn decode_body(body: &mut Reader<'_>) -> Option<Self>;

    /// The full stored value: header then fields.
    fn encode(&self) -> Encoded {
        let mut buf = [0u8; MAX_LEN];
        let mut w = Writer {
            buf: &mut buf,
            at: 0,
        };
        w.bytes(&MAGIC);
        w.bytes(&[VERSION, Self::ALGORITHM.tag()]);
        self.encode_body(&mut w);
        let len = w.at;
        Encoded { buf, len }
    }

    /// Reads a stored value, refusing anything that is not exactly our format.
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let header = bytes.get(..HEADER_LEN).ok_or(DecodeError::NotOurs)?;
        let (magic, rest) = header.split_at(MAGIC.len());
        if magic != MAGIC {
            return Err(DecodeError::NotOurs);
        }
        let [version, tag] = [rest.first(), rest.get(1)].map(|b| b.copied().unwrap_or(0));
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let stored = Algorithm::from_tag(tag).ok_or(DecodeError::UnknownAlgorithm(tag))?;
        if stored != Self::ALGORITHM {
            return Err(DecodeError::WrongAlgorithm {
                stored,
                expected: Self::ALGORITHM,
            });
        }
        let body = bytes.get(HEADER_LEN..).unwrap_or(&[]);
        if body.len() != Self::BODY_LEN {
            return Err(DecodeError::Corrupt(stored));
        }
        Self::decode_body(&mut Reader { bytes: body }).ok_or(DecodeError::Corrupt(stored))
    }
}

/// `ms` if it is a valid duration parameter.
pub(crate) fn duration_ms_in_range(ms: u64) -> Option<u64> {
    (1..=MAX_DURATION_MS).contains(&ms).then_some(ms)
}

/// Appends little-endian fields to a fixed buffer.
pub struct Writer<'a> {
    buf: &'a mut [u8; MAX_LEN],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, bytes: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.at..self.at + bytes.len()) {
            dst.copy_from_slice(bytes);
            self.at += bytes.len();
        }
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn u128(&mut self, v: u128) {
        self.bytes(&v.to_le_bytes());
    }
}

/// Reads little-endian fields from the front of a slice.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use redis_rl_core::sliding_window::SlidingWindowState;
    use redis_rl_core::token_bucket::TokenBucketState;
    use redis_rl_core::{Micros, Millis};

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
        assert_eq!(b.as_bytes().len(), 37);
        assert_eq!(&b.as_bytes()[..5], b"\0RL\x01T");
        assert_eq!(TokenBucketState::decode(b.as_bytes()), Ok(bucket()));
        let w = window().encode();
        assert_eq!(w.as_bytes().len(), 37);
        assert_eq!(SlidingWindowState::decode(w.as_bytes()), Ok(window()));
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
        v[3] = 2;
        assert_eq!(
            TokenBucketState::decode(&v),
            Err(DecodeError::UnsupportedVersion(2))
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
        assert!(SlidingWindowState::decode(w.encode().as_bytes()).is_err());
        let mut b = bucket();
        b.refill_ms = 0;
        assert!(TokenBucketState::decode(b.encode().as_bytes()).is_err());
    }

    #[test]
    fn error_texts_are_the_documented_ones() {
        assert_eq!(
            DecodeError::NotOurs.to_string(),
            "ERR key holds a value that is not a redis-rl limiter"
        );
        assert_eq!(
            DecodeError::WrongAlgorithm {
                stored: Algorithm::TokenBucket,
                expected: Algorithm::SlidingWindow
            }
            .to_string(),
            "ERR key holds a token bucket limiter, not a sliding window limiter"
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_decode_to_a_value_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
            let _ = TokenBucketState::decode(&bytes);
            let _ = SlidingWindowState::decode(&bytes);
        }

        #[test]
        fn our_header_with_random_fields_never_panics(body in prop::collection::vec(any::<u8>(), 0..40)) {
            for tag in [b'T', b'S'] {
                let mut v = b"\0RL\x01".to_vec();
                v.push(tag);
                v.extend_from_slice(&body);
                let _ = TokenBucketState::decode(&v);
                let _ = SlidingWindowState::decode(&v);
            }
        }

        #[test]
        fn round_trip(level in 0u128..1_000_000_000_000_000_000, at in any::<u64>(), refill_ms in 1u64..1_000_000) {
            let s = TokenBucketState { level, updated_at: Micros(at), refill_ms };
            prop_assert_eq!(TokenBucketState::decode(s.encode().as_bytes()), Ok(s));
        }
    }
}
