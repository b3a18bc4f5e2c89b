//! Stored form of a sliding window log.

use redis_rl_core::sliding_log::{LogEntry, SlidingLogState, MAX_LIMIT};
use redis_rl_core::Micros;

use super::{duration_ms_in_range, Kind, Reader, Stored, Writer};

/// Sliding window log fields: a varint (LEB128) of `window_ms`, then one varint per entry,
/// oldest first, holding the microseconds since the previous entry (since the epoch for the
/// first) shifted left by one, with the low bit set when a second varint follows holding the
/// entry's count (2 or more); a count of 1 is implied. The first entry takes 8 bytes, each
/// later one 1 to 3 bytes under any real traffic (see the README for measured sizes). Times
/// below 2^63 µs fit the shift.
impl Stored for SlidingLogState {
    const KIND: Kind = Kind::SlidingLog;
    const BODY_LEN: usize = 0;
    const VARIABLE_LEN: bool = true;
    /// `window_ms` takes at most 6 bytes (below 2^42), an entry at most 10 for its time and
    /// 2 for its count (below 2^14), and a valid log holds at most [`MAX_LIMIT`] entries
    /// (every entry counts at least one unit): about 120 KB.
    const MAX_BODY_LEN: usize = 6 + 12 * MAX_LIMIT as usize;

    fn encode_body(&self, out: &mut Writer<'_>) {
        // 3 bytes an entry covers gaps up to 1 s; more grows the buffer once or twice.
        out.reserve(16 + 3 * self.entries.len());
        // The varints go to a buffer on the stack, handed over a chunk at a time (one copy
        // per chunk rather than per varint).
        let mut chunk = Chunk::default();
        chunk.varint(self.window_ms);
        let mut previous = 0;
        for e in &self.entries {
            let delta = e.at.0.saturating_sub(previous).min(u64::MAX >> 1);
            previous = e.at.0;
            if e.count == 1 {
                chunk.varint(delta << 1);
            } else {
                chunk.varint(delta << 1 | 1);
                chunk.varint(e.count);
            }
            if chunk.len >= CHUNK {
                out.bytes(chunk.take());
            }
        }
        out.bytes(chunk.take());
    }

    fn decode_body(body: &mut Reader<'_>) -> Option<Self> {
        let window_ms = duration_ms_in_range(body.varint()?)?;
        let mut at = 0u64;
        // About 2 bytes an entry under steady traffic: one allocation, rarely two; never more
        // entries than a valid log holds, whatever the value's size.
        let most = usize::try_from(MAX_LIMIT).unwrap_or(0);
        let mut entries = Vec::with_capacity((body.remaining() / 2).min(most));
        let mut total = 0u64;
        while !body.is_empty() {
            let word = body.varint()?;
            let count = if word & 1 == 1 {
                Some(body.varint()?).filter(|&c| c >= 2)?
            } else {
                1
            };
            at = at.checked_add(word >> 1)?;
            total = total.checked_add(count).filter(|&t| t <= MAX_LIMIT)?;
            entries.push(LogEntry {
                at: Micros(at),
                count,
            });
        }
        Some(SlidingLogState { window_ms, entries })
    }
}

/// Bytes of varints gathered before they are copied out.
const CHUNK: usize = 64;

/// Varints gathered on the stack: [`CHUNK`] bytes, plus room for the two longest varints of an
/// entry (10 bytes each) written after the chunk filled.
struct Chunk {
    buf: [u8; CHUNK + 20],
    len: usize,
}

impl Default for Chunk {
    fn default() -> Self {
        Chunk {
            buf: [0; CHUNK + 20],
            len: 0,
        }
    }
}

impl Chunk {
    /// Appends `v` as an unsigned LEB128 varint (as [`Writer::varint`] writes it).
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push(u8::try_from(v & 0x7f).unwrap_or(0) | 0x80);
            v >>= 7;
        }
        self.push(u8::try_from(v).unwrap_or(0));
    }

    fn push(&mut self, byte: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = byte;
            self.len += 1;
        }
    }

    /// The bytes gathered, and an empty chunk for the next ones.
    fn take(&mut self) -> &[u8] {
        let len = std::mem::take(&mut self.len);
        self.buf.get(..len).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::DecodeError;
    use proptest::prelude::*;

    /// `window_ms` 1000 as a varint.
    const WINDOW: [u8; 2] = [0xe8, 0x07];

    fn entry(at: u64, count: u64) -> LogEntry {
        LogEntry {
            at: Micros(at),
            count,
        }
    }

    fn log(entries: Vec<LogEntry>) -> SlidingLogState {
        SlidingLogState {
            window_ms: 1_000,
            entries,
        }
    }

    fn with_body(body: &[u8]) -> Result<SlidingLogState, DecodeError> {
        SlidingLogState::decode(&[&b"\0RL\x01L"[..], body].concat())
    }

    fn with_entries(entries: &[u8]) -> Result<SlidingLogState, DecodeError> {
        with_body(&[&WINDOW[..], entries].concat())
    }

    #[test]
    fn layout_and_sizes() {
        let base = 1_700_000_000_000_000;
        let state = log(vec![
            entry(base, 1),
            entry(base + 100, 3),
            entry(base + 10_000, 1),
        ]);
        let bytes = state.encode().as_bytes().to_vec();
        let expected = [
            &b"\0RL\x01L"[..],
            &WINDOW,
            // base << 1: 8 bytes.
            &[0x80, 0x80, 0xf2, 0x81, 0x83, 0x89, 0x85, 0x06],
            // 100 << 1 | 1 = 201, then the count 3.
            &[0xc9, 0x01, 0x03],
            // 9_900 << 1 = 19_800.
            &[0xd8, 0x9a, 0x01],
        ]
        .concat();
        assert_eq!(bytes, expected);
        assert_eq!(SlidingLogState::decode(&bytes), Ok(state));
        assert_eq!(with_entries(b""), Ok(log(vec![])));
    }

    #[test]
    fn a_full_log_round_trips() {
        let state = log((0..MAX_LIMIT)
            .map(|i| entry(1_000_000 + i * 1_000, 1))
            .collect());
        let encoded = state.encode();
        // 1 ms apart: 2000 takes 2 bytes; the first entry (2_000_000) takes 3.
        let expected_len = 5 + 2 + 3 + 2 * (MAX_LIMIT as usize - 1);
        assert_eq!(encoded.as_bytes().len(), expected_len);
        assert_eq!(SlidingLogState::decode(encoded.as_bytes()), Ok(state));
    }

    #[test]
    fn refuses_impossible_logs() {
        let corrupt = Err(DecodeError::Corrupt(Kind::SlidingLog));
        assert_eq!(with_body(b""), corrupt, "no window");
        assert_eq!(with_body(&[0x00]), corrupt, "window 0");
        assert_eq!(with_entries(&[0x01, 0x01]), corrupt, "count 1 spelled out");
        assert_eq!(with_entries(&[0x80]), corrupt, "truncated varint");
        let top = [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        // Two steps of 2^63 - 1 µs still fit a u64, a third does not.
        assert!(with_entries(&[top, top].concat()).is_ok());
        assert_eq!(
            with_entries(&[top, top, top].concat()),
            corrupt,
            "time overflow"
        );
        // 10_000 units at one instant, then 1 more: over the largest limit.
        assert!(with_entries(&[0x01, 0x90, 0x4e]).is_ok());
        assert_eq!(with_entries(&[0x01, 0x90, 0x4e, 0x00]), corrupt);
    }

    #[test]
    fn a_value_longer_than_any_valid_log_is_corrupt_whatever_its_bytes() {
        let longest = SlidingLogState::MAX_BODY_LEN;
        assert!(SlidingLogState::plausible_len(5 + longest));
        assert!(!SlidingLogState::plausible_len(5 + longest + 1));
        let huge = [&WINDOW[..], &vec![0u8; longest]].concat();
        assert_eq!(
            with_body(&huge),
            Err(DecodeError::Corrupt(Kind::SlidingLog))
        );
    }

    proptest! {
        #[test]
        fn round_trip(
            window_ms in 1u64..=redis_rl_core::limits::MAX_DURATION_MS,
            base in 0u64..u64::MAX / 4,
            gaps in prop::collection::vec((0u64..10_000_000_000, 1u64..50), 0..200),
        ) {
            let mut at = base;
            let entries: Vec<_> = gaps.into_iter().map(|(gap, count)| {
                at += gap;
                entry(at, count)
            }).collect();
            let state = SlidingLogState { window_ms, entries };
            prop_assert_eq!(SlidingLogState::decode(state.encode().as_bytes()), Ok(state));
        }

        /// Whatever decodes is a valid log with exactly one encoding.
        #[test]
        fn random_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..200)) {
            for v in [[&b"\0RL\x01L"[..], &body].concat(), [&b"\0RL\x01L"[..], &WINDOW, &body].concat()] {
                if let Ok(state) = SlidingLogState::decode(&v) {
                    prop_assert!(state.total() <= MAX_LIMIT);
                    let encoded = state.encode();
                    prop_assert_eq!(encoded.as_bytes(), &v[..]);
                }
            }
        }
    }
}
