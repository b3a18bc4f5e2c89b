//! Stored form of a GCRA limiter (RL.GCRA and RL.THROTTLE).

use redis_rl_core::gcra::GcraState;
use redis_rl_core::limits::{MAX_COUNT, MAX_DURATION_MS};

use super::{duration_ms_in_range, Compact, Kind, Reader, Stored, Writer};

/// GCRA fields: `tat: u128` (ticks of 1/`limit` µs since the epoch), `limit: u64`,
/// `period_ms: u64` (version 1: 37 bytes with the header).
impl Stored for GcraState {
    const KIND: Kind = Kind::Gcra;
    const BODY_LEN: usize = 16 + 8 + 8;
    const COMPACT_BODY: Option<(usize, usize)> = Some((3, 19 + 10 + 10));

    /// Version 2: `tat`, `limit`, `period_ms` as varints (about 16 to 22 bytes with the
    /// header).
    #[inline(always)]
    fn encode_compact(&self, out: &mut Compact<'_>) {
        out.varint128(self.tat);
        out.varint(self.limit);
        out.varint(self.period_ms);
    }

    #[inline(always)]
    fn decode_compact(body: &mut Reader<'_>) -> Option<Self> {
        let tat = body.varint128()?;
        let limit = body.varint()?;
        let period_ms = body.varint()?;
        valid(tat, limit, period_ms)
    }

    fn encode_body(&self, out: &mut Writer<'_>) {
        out.u128(self.tat);
        out.u64(self.limit);
        out.u64(self.period_ms);
    }

    fn decode_body(body: &mut Reader<'_>) -> Option<Self> {
        let tat = body.u128()?;
        let limit = body.u64()?;
        let period_ms = body.u64()?;
        valid(tat, limit, period_ms)
    }
}

/// The state if its fields are in range (both versions).
fn valid(tat: u128, limit: u64, period_ms: u64) -> Option<GcraState> {
    let period_ms = duration_ms_in_range(period_ms)?;
    // The furthest a TAT can be: the last representable instant plus the longest
    // possible burst (MAX_COUNT intervals of MAX_DURATION_MS with a limit of 1).
    let latest_us =
        u128::from(u64::MAX) + u128::from(MAX_COUNT) * u128::from(MAX_DURATION_MS) * 1000;
    // `tat / limit <= latest_us`, without a 128-bit division: `tat < (latest_us + 1) x
    // limit`, always true when that product is beyond `u128`.
    let ok = (1..=MAX_COUNT).contains(&limit)
        && (latest_us + 1)
            .checked_mul(u128::from(limit))
            .is_none_or(|bound| tat < bound);
    ok.then_some(GcraState {
        tat,
        limit,
        period_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::super::reference;
    use super::super::{algorithm_of, DecodeError};
    use super::*;
    use proptest::prelude::*;
    use redis_rl_core::gcra::{check, GcraParams};
    use redis_rl_core::Micros;

    fn state() -> GcraState {
        // 10 per second, 4 units taken at 1_700_000_000 s.
        let p = GcraParams::new(10, 1_000, None).unwrap();
        check(None, Micros(1_700_000_000_000_000), &p, 4).1.unwrap()
    }

    #[test]
    fn round_trips_in_16_bytes_and_reads_version_1() {
        let e = state().encode();
        assert_eq!(e.as_bytes().len(), 16);
        assert_eq!(&e.as_bytes()[..5], b"\0RL\x02G");
        assert_eq!(GcraState::decode(e.as_bytes()), Ok(state()));
        assert_eq!(algorithm_of(e.as_bytes()), Ok(Kind::Gcra));
        let v1 = state().encode_v1();
        assert_eq!(v1.as_bytes().len(), 37);
        assert_eq!(&v1.as_bytes()[..5], b"\0RL\x01G");
        assert_eq!(GcraState::decode(v1.as_bytes()), Ok(state()));
    }

    #[test]
    fn refuses_impossible_fields() {
        let corrupt = Err(DecodeError::Corrupt(Kind::Gcra));
        for bad in [
            GcraState {
                limit: 0,
                ..state()
            },
            GcraState {
                limit: MAX_COUNT + 1,
                ..state()
            },
            GcraState {
                period_ms: 0,
                ..state()
            },
            GcraState {
                tat: u128::MAX,
                ..state()
            },
        ] {
            assert_eq!(GcraState::decode(bad.encode().as_bytes()), corrupt);
            assert_eq!(GcraState::decode(bad.encode_v1().as_bytes()), corrupt);
        }
    }

    proptest! {
        #[test]
        fn round_trip(tat_us in any::<u64>(), limit in 1..=MAX_COUNT, period_ms in 1..=MAX_DURATION_MS) {
            let s = GcraState { tat: u128::from(tat_us) * u128::from(limit), limit, period_ms };
            prop_assert_eq!(GcraState::decode(s.encode().as_bytes()), Ok(s));
            prop_assert_eq!(GcraState::decode(s.encode_v1().as_bytes()), Ok(s));
        }

        /// The range check without a division is the one with it.
        #[test]
        fn tat_bound_is_the_divided_one(tat in reference::arb_u128(), limit in 1..=MAX_COUNT, period_ms in 1..=MAX_DURATION_MS) {
            let latest_us =
                u128::from(u64::MAX) + u128::from(MAX_COUNT) * u128::from(MAX_DURATION_MS) * 1000;
            let edge = (latest_us + 1).saturating_mul(u128::from(limit));
            for tat in [tat, edge - 1, edge, edge.saturating_add(1)] {
                prop_assert_eq!(valid(tat, limit, period_ms).is_some(), tat / u128::from(limit) <= latest_us);
            }
        }

        #[test]
        fn our_header_with_random_fields_never_panics(body in prop::collection::vec(any::<u8>(), 0..40)) {
            for version in [1, 2] {
                let mut v = vec![0, b'R', b'L', version, b'G'];
                v.extend_from_slice(&body);
                let _ = GcraState::decode(&v);
            }
        }

        /// Byte-identical to the generic writer's encoding, for any fields (also impossible
        /// ones), and the fast decode agrees with the general one on it, on every prefix and
        /// with a byte more.
        #[test]
        fn same_bytes_as_the_generic_writer(tat in reference::arb_u128(), limit in reference::arb_u64(), period_ms in reference::arb_u64(), extra in any::<u8>()) {
            let s = GcraState { tat, limit, period_ms };
            let old = reference::compact::<GcraState>(|out| {
                out.varint128(tat);
                out.varint(limit);
                out.varint(period_ms);
            });
            reference::encodes_like_generic(&s, &old, extra)?;
        }

        #[test]
        fn fast_decode_is_general_on_any_body(body in prop::collection::vec(any::<u8>(), 0..48)) {
            reference::fast_decode_is_general::<GcraState>(&body);
        }
    }
}
