//! Stored form of a sliding window log.

use redis_rl_core::sliding_log::{LogEntry, SlidingLogState, MAX_LIMIT};
use redis_rl_core::Micros;

use super::{duration_ms_in_range, Encoded, Kind, Reader, Stored, Writer};

/// Bytes of a version 2 log's fixed part (`window_ms` u64, the total count u16) and of each
/// of its entries (the instant u64, the count u16).
const FIXED_HEAD: usize = 10;
const FIXED_ENTRY: usize = 10;
/// Bytes of a version 3 log's fixed part (`window_ms` u64, the running count before its
/// first entry u24) and of each of its entries (the instant u56, the running count u24).
const TWIN_HEAD: usize = 11;
const TWIN_ENTRY: usize = 10;

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
    /// Version 2 (read, never written here): the fixed-width log the Lua twin writes, whose
    /// entries it reads and drops at computed offsets with `struct.unpack` and a substring,
    /// a constant number of Lua operations per call where version 1's varints take a loop
    /// over the whole log. Little-endian: `window_ms` (8 bytes), the total count of the
    /// entries (2), then per entry, oldest first, its instant in µs (8) and its count (2,
    /// at least 1), instants never decreasing. Five times the size of version 1 (10 bytes
    /// an entry against about 2), which is why the module keeps writing version 1.
    const COMPACT_BODY: Option<(usize, usize)> =
        Some((FIXED_HEAD, FIXED_HEAD + FIXED_ENTRY * MAX_LIMIT as usize));
    /// Version 3 (read, never written here): the fixed-width log the Lua twin writes since
    /// version 2 cost it a rewrite of the header on every call. Little-endian: `window_ms`
    /// (8 bytes), the running count before the first entry (3), then per entry, oldest
    /// first, its instant in µs (7) and the running count through it (3): an entry's count
    /// is its running count less the one before it (at least 1), the log's total is the
    /// last running count less the first field. An append leaves the bytes before it as
    /// they are (the twin appends in place), and dropping the oldest entries only moves the
    /// first running count. Instants never decrease.
    const TWIN_BODY: Option<(usize, usize)> =
        Some((TWIN_HEAD, TWIN_HEAD + TWIN_ENTRY * MAX_LIMIT as usize));

    /// Version 1, whatever was read (see `COMPACT_BODY`).
    fn encode(&self) -> Encoded {
        self.encode_fields()
    }

    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.encode_fields().as_bytes())
    }

    fn decode_compact(body: &mut Reader<'_>) -> Option<Self> {
        let window_ms = duration_ms_in_range(body.u64()?)?;
        let total = u64::from(body.u16()?);
        if total > MAX_LIMIT || !body.remaining().is_multiple_of(FIXED_ENTRY) {
            return None;
        }
        let mut entries = Vec::with_capacity(body.remaining() / FIXED_ENTRY);
        let (mut previous, mut sum) = (0, 0);
        while !body.is_empty() {
            let at = body.u64()?;
            let count = u64::from(body.u16()?);
            if at < previous || count == 0 {
                return None;
            }
            previous = at;
            sum += count;
            entries.push(LogEntry {
                at: Micros(at),
                count,
            });
        }
        (sum == total).then_some(SlidingLogState { window_ms, entries })
    }

    fn decode_twin(body: &mut Reader<'_>) -> Option<Self> {
        let window_ms = duration_ms_in_range(body.u64()?)?;
        let base = body.uint::<3>()?;
        if !body.remaining().is_multiple_of(TWIN_ENTRY) {
            return None;
        }
        let mut entries = Vec::with_capacity(body.remaining() / TWIN_ENTRY);
        let (mut previous_at, mut previous_run) = (0, base);
        while !body.is_empty() {
            let at = body.uint::<7>()?;
            let run = body.uint::<3>()?;
            if at < previous_at || run <= previous_run || run - base > MAX_LIMIT {
                return None;
            }
            entries.push(LogEntry {
                at: Micros(at),
                count: run - previous_run,
            });
            (previous_at, previous_run) = (at, run);
        }
        Some(SlidingLogState { window_ms, entries })
    }

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

    /// Version 2 as the Lua twin writes it: `window_ms`, the total count, then instant and
    /// count per entry, fixed-width little-endian.
    fn fixed(window_ms: u64, total: u16, entries: &[(u64, u16)]) -> Vec<u8> {
        let mut v = [
            &b"\0RL\x02L"[..],
            &window_ms.to_le_bytes(),
            &total.to_le_bytes(),
        ]
        .concat();
        for (at, count) in entries {
            v.extend_from_slice(&at.to_le_bytes());
            v.extend_from_slice(&count.to_le_bytes());
        }
        v
    }

    #[test]
    fn reads_the_twins_fixed_width_log_and_writes_version_1() {
        let base = 1_700_000_000_000_000;
        let value = fixed(1_000, 4, &[(base, 1), (base + 100, 3)]);
        let state = SlidingLogState::decode(&value).unwrap();
        assert_eq!(state, log(vec![entry(base, 1), entry(base + 100, 3)]));
        assert_eq!(&state.encode().as_bytes()[..5], b"\0RL\x01L");
        assert_eq!(
            SlidingLogState::decode(&fixed(1_000, 0, &[])),
            Ok(log(vec![]))
        );
        assert!(SlidingLogState::plausible_len(value.len()));
        let corrupt = Err(DecodeError::Corrupt(Kind::SlidingLog));
        assert_eq!(
            SlidingLogState::decode(&fixed(0, 1, &[(base, 1)])),
            corrupt,
            "window 0"
        );
        assert_eq!(
            SlidingLogState::decode(&fixed(1_000, 2, &[(base, 1)])),
            corrupt,
            "total"
        );
        assert_eq!(
            SlidingLogState::decode(&fixed(1_000, 0, &[(base, 0)])),
            corrupt,
            "count 0"
        );
        assert_eq!(
            SlidingLogState::decode(&fixed(1_000, 2, &[(base, 1), (base - 1, 1)])),
            corrupt,
            "instants going back"
        );
        assert_eq!(
            SlidingLogState::decode(&fixed(1_000, 10_001, &[(base, 10_001)])),
            corrupt,
            "over the largest limit"
        );
        assert_eq!(
            SlidingLogState::decode(&value[..value.len() - 1]),
            corrupt,
            "truncated"
        );
    }

    /// Version 3 as the Lua twin writes it: `window_ms`, the running count before the
    /// first entry, then instant and running count per entry (7 and 3 bytes little-endian).
    fn twin(window_ms: u64, base: u32, entries: &[(u64, u32)]) -> Vec<u8> {
        let mut v = [
            &b"\0RL\x03L"[..],
            &window_ms.to_le_bytes(),
            &base.to_le_bytes()[..3],
        ]
        .concat();
        for (at, run) in entries {
            v.extend_from_slice(&at.to_le_bytes()[..7]);
            v.extend_from_slice(&run.to_le_bytes()[..3]);
        }
        v
    }

    #[test]
    fn reads_the_twins_running_count_log_and_writes_version_1() {
        let base = 1_700_000_000_000_000;
        let value = twin(1_000, 70_000, &[(base, 70_001), (base + 100, 70_004)]);
        let state = SlidingLogState::decode(&value).unwrap();
        assert_eq!(state, log(vec![entry(base, 1), entry(base + 100, 3)]));
        assert_eq!(&state.encode().as_bytes()[..5], b"\0RL\x01L");
        assert_eq!(
            SlidingLogState::decode(&twin(1_000, 5, &[])),
            Ok(log(vec![]))
        );
        assert!(SlidingLogState::plausible_len(value.len()));
        assert_eq!(crate::encoding::algorithm_of(&value), Ok(Kind::SlidingLog));
        let full: Vec<_> = (1..=10_000).map(|i| (base + i, i as u32)).collect();
        assert_eq!(
            SlidingLogState::decode(&twin(1_000, 0, &full)).map(|s| s.total()),
            Ok(10_000)
        );
        let too_many = [&full[..], &[(base + 20_000, 10_001)]].concat();
        let corrupt = Err(DecodeError::Corrupt(Kind::SlidingLog));
        for (value, why) in [
            (twin(0, 0, &[(base, 1)]), "window 0"),
            (twin(1_000, 3, &[(base, 3)]), "count 0"),
            (twin(1_000, 3, &[(base, 2)]), "running count going back"),
            (
                twin(1_000, 0, &[(base, 1), (base - 1, 2)]),
                "instants going back",
            ),
            (twin(1_000, 7, &[(base, 10_008)]), "over the largest limit"),
            (twin(1_000, 0, &too_many), "one entry too many"),
            (value[..value.len() - 1].to_vec(), "truncated"),
        ] {
            assert_eq!(SlidingLogState::decode(&value), corrupt, "{why}");
        }
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

        /// Any version 3 body (the twin's running counts) decodes to a valid log or is
        /// refused, never more than the largest limit, and the log round-trips through the
        /// version 1 the module writes.
        #[test]
        fn random_twin_bodies_are_valid_or_refused(
            base in 0u32..64,
            steps in prop::collection::vec((0u64..3, 0u32..3), 0..40),
        ) {
            let mut entries = vec![];
            let (mut at, mut run) = (1_700_000_000_000_000u64, base);
            for (gap, more) in steps {
                at = at.wrapping_add(gap).wrapping_sub(1);
                run = run.wrapping_add(more).wrapping_sub(1) & 0xff_ffff;
                entries.push((at, run));
            }
            if let Ok(state) = SlidingLogState::decode(&twin(1_000, base, &entries)) {
                prop_assert!(state.total() <= MAX_LIMIT);
                prop_assert!(state.entries.iter().all(|e| e.count >= 1));
                prop_assert_eq!(SlidingLogState::decode(state.encode().as_bytes()), Ok(state));
            }
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
