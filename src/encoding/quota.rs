//! Stored form of a calendar quota: the period's start, its length and the count.

use redis_rl_core::limits::MAX_COUNT;
use redis_rl_core::quota::QuotaState;
use redis_rl_core::Millis;

use super::{Compact, Kind, Reader, Stored, Writer};

/// The longest period a state can hold, in milliseconds: a leap year (366 days) with a
/// day's slack for a calendar whose offset changed between two periods.
const MAX_PERIOD_MS: u64 = 367 * 86_400_000;

impl Stored for QuotaState {
    const KIND: Kind = Kind::Quota;
    const BODY_LEN: usize = 8 * 3;
    const COMPACT_BODY: Option<(usize, usize)> = Some((3, 10 * 3));

    #[inline(always)]
    fn encode_compact(&self, out: &mut Compact<'_>) {
        out.varint(self.period_start.0);
        out.varint(self.period_end.0.saturating_sub(self.period_start.0));
        out.varint(self.count);
    }

    #[inline(always)]
    fn decode_compact(body: &mut Reader<'_>) -> Option<Self> {
        let start = body.varint()?;
        let length = body.varint()?;
        let count = body.varint()?;
        valid(start, start.checked_add(length)?, count)
    }

    fn encode_body(&self, out: &mut Writer<'_>) {
        out.u64(self.period_start.0);
        out.u64(self.period_end.0);
        out.u64(self.count);
    }

    fn decode_body(body: &mut Reader<'_>) -> Option<Self> {
        let start = body.u64()?;
        let end = body.u64()?;
        let count = body.u64()?;
        valid(start, end, count)
    }
}

fn valid(start: u64, end: u64, count: u64) -> Option<QuotaState> {
    let length = end.checked_sub(start)?;
    ((1..=MAX_PERIOD_MS).contains(&length) && count <= MAX_COUNT).then_some(QuotaState {
        period_start: Millis(start),
        period_end: Millis(end),
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{is_limiter, DecodeError};
    use super::*;
    use proptest::prelude::*;

    fn state() -> QuotaState {
        QuotaState {
            period_start: Millis(1_764_547_200_000), // 2025-12-01
            period_end: Millis(1_767_225_600_000),   // 2026-01-01
            count: 42,
        }
    }

    #[test]
    fn round_trips_in_compact_form_and_reads_version_1() {
        let e = state().encode();
        assert_eq!(&e.as_bytes()[..5], b"\0RL\x02Q");
        assert!(e.as_bytes().len() <= 5 + 6 + 5 + 1);
        assert_eq!(QuotaState::decode(e.as_bytes()), Ok(state()));
        assert!(is_limiter(e.as_bytes()));
        let v1 = state().encode_v1();
        assert_eq!(v1.as_bytes().len(), 29);
        assert_eq!(QuotaState::decode(v1.as_bytes()), Ok(state()));
    }

    #[test]
    fn refuses_impossible_fields() {
        let corrupt = Err(DecodeError::Corrupt(Kind::Quota));
        for bad in [
            QuotaState {
                period_end: state().period_start,
                ..state()
            },
            QuotaState {
                period_end: Millis(state().period_start.0 + MAX_PERIOD_MS + 1),
                ..state()
            },
            QuotaState {
                count: MAX_COUNT + 1,
                ..state()
            },
        ] {
            assert_eq!(QuotaState::decode(bad.encode().as_bytes()), corrupt);
            assert_eq!(QuotaState::decode(bad.encode_v1().as_bytes()), corrupt);
        }
    }

    proptest! {
        #[test]
        fn round_trip(start in 0u64..1u64 << 50, length in 1..=MAX_PERIOD_MS, count in 0..=MAX_COUNT) {
            let s = QuotaState { period_start: Millis(start), period_end: Millis(start + length), count };
            prop_assert_eq!(QuotaState::decode(s.encode().as_bytes()), Ok(s));
            prop_assert_eq!(QuotaState::decode(s.encode_v1().as_bytes()), Ok(s));
        }

        #[test]
        fn any_body_never_panics(body in prop::collection::vec(any::<u8>(), 0..40)) {
            for version in [1, 2] {
                let mut v = vec![0, b'R', b'L', version, b'Q'];
                v.extend_from_slice(&body);
                let _ = QuotaState::decode(&v);
            }
        }
    }
}
