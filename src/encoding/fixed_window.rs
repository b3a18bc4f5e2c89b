//! Stored form of a fixed window counter.

use redis_rl_core::fixed_window::FixedWindowState;
use redis_rl_core::limits::MAX_COUNT;
use redis_rl_core::Millis;

use super::{duration_ms_in_range, Compact, Kind, Reader, Stored, Writer};

/// Fixed window fields: `window_ms`, `window_start_ms`, `count`, all `u64` (29 bytes with
/// the header).
impl Stored for FixedWindowState {
    const KIND: Kind = Kind::FixedWindow;
    const BODY_LEN: usize = 8 * 3;
    const COMPACT_BODY: Option<(usize, usize)> = Some((3, 10 * 3));

    /// Version 2: `window_ms`, the window's index (`window_start / window_ms`) and `count`
    /// as varints (about 13 bytes with the header).
    #[inline(always)]
    fn encode_compact(&self, out: &mut Compact<'_>) {
        out.varint(self.window_ms);
        out.varint(self.window_start.0 / self.window_ms.max(1));
        out.varint(self.count);
    }

    #[inline(always)]
    fn decode_compact(body: &mut Reader<'_>) -> Option<Self> {
        let window_ms = duration_ms_in_range(body.varint()?)?;
        let window_start = body.varint()?.checked_mul(window_ms)?;
        let count = body.varint()?;
        (count <= MAX_COUNT).then_some(FixedWindowState {
            window_ms,
            window_start: Millis(window_start),
            count,
        })
    }

    fn encode_body(&self, out: &mut Writer<'_>) {
        out.u64(self.window_ms);
        out.u64(self.window_start.0);
        out.u64(self.count);
    }

    fn decode_body(body: &mut Reader<'_>) -> Option<Self> {
        let window_ms = duration_ms_in_range(body.u64()?)?;
        let window_start = body.u64()?;
        let count = body.u64()?;
        let aligned = window_start % window_ms == 0;
        (aligned && count <= MAX_COUNT).then_some(FixedWindowState {
            window_ms,
            window_start: Millis(window_start),
            count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::reference;
    use super::super::{is_limiter, DecodeError};
    use super::*;
    use proptest::prelude::*;

    fn state() -> FixedWindowState {
        FixedWindowState {
            window_ms: 60_000,
            window_start: Millis(1_700_000_040_000),
            count: 42,
        }
    }

    #[test]
    fn round_trips_in_13_bytes_and_reads_version_1() {
        let e = state().encode();
        assert_eq!(e.as_bytes(), b"\0RL\x02F\xe0\xd4\x03\x96\xaa\xc1\x0d\x2a");
        assert_eq!(FixedWindowState::decode(e.as_bytes()), Ok(state()));
        assert!(is_limiter(e.as_bytes()));
        let v1 = state().encode_v1();
        assert_eq!(v1.as_bytes().len(), 29);
        assert_eq!(&v1.as_bytes()[..5], b"\0RL\x01F");
        assert_eq!(FixedWindowState::decode(v1.as_bytes()), Ok(state()));
    }

    #[test]
    fn refuses_impossible_fields() {
        let corrupt = Err(DecodeError::Corrupt(Kind::FixedWindow));
        let misaligned = FixedWindowState {
            window_start: Millis(1_500),
            ..state()
        };
        assert_eq!(
            FixedWindowState::decode(misaligned.encode_v1().as_bytes()),
            corrupt
        );
        for bad in [
            FixedWindowState {
                window_ms: 0,
                ..state()
            },
            FixedWindowState {
                count: MAX_COUNT + 1,
                ..state()
            },
        ] {
            assert_eq!(FixedWindowState::decode(bad.encode().as_bytes()), corrupt);
            assert_eq!(
                FixedWindowState::decode(bad.encode_v1().as_bytes()),
                corrupt
            );
        }
    }

    proptest! {
        #[test]
        fn round_trip(window_ms in 1u64..1_000_000, index in 0u64..10_000_000, count in 0..=MAX_COUNT) {
            let s = FixedWindowState { window_ms, window_start: Millis(window_ms * index), count };
            prop_assert_eq!(FixedWindowState::decode(s.encode().as_bytes()), Ok(s));
            prop_assert_eq!(FixedWindowState::decode(s.encode_v1().as_bytes()), Ok(s));
        }

        #[test]
        fn our_header_with_random_fields_never_panics(body in prop::collection::vec(any::<u8>(), 0..40)) {
            for version in [1, 2] {
                let mut v = vec![0, b'R', b'L', version, b'F'];
                v.extend_from_slice(&body);
                let _ = FixedWindowState::decode(&v);
            }
        }

        /// Byte-identical to the generic writer's encoding, for any fields (also impossible
        /// ones), and the fast decode agrees with the general one on it, on every prefix and
        /// with a byte more.
        #[test]
        fn same_bytes_as_the_generic_writer(window_ms in reference::arb_u64(), start in reference::arb_u64(), count in reference::arb_u64(), extra in any::<u8>()) {
            let s = FixedWindowState { window_ms, window_start: Millis(start), count };
            let old = reference::compact::<FixedWindowState>(|out| {
                out.varint(window_ms);
                out.varint(start / window_ms.max(1));
                out.varint(count);
            });
            reference::encodes_like_generic(&s, &old, extra)?;
        }

        #[test]
        fn fast_decode_is_general_on_any_body(body in prop::collection::vec(any::<u8>(), 0..48)) {
            reference::fast_decode_is_general::<FixedWindowState>(&body);
        }
    }
}
