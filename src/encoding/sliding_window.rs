//! Stored form of a sliding window counter.

use redis_rl_core::limits::MAX_COUNT;
use redis_rl_core::sliding_window::SlidingWindowState;
use redis_rl_core::Millis;

use super::{duration_ms_in_range, Compact, Kind, Reader, Stored, Writer};

/// Sliding window fields: `window_ms`, `window_start_ms`, `previous`, `current`, all `u64`
/// (37 bytes with the header).
impl Stored for SlidingWindowState {
    const KIND: Kind = Kind::SlidingWindow;
    const BODY_LEN: usize = 8 * 4;
    const COMPACT_BODY: Option<(usize, usize)> = Some((4, 10 * 4));

    /// Version 2: `window_ms`, the current window's index (`window_start / window_ms`),
    /// `previous` and `current` as varints (about 14 bytes with the header).
    #[inline(always)]
    fn encode_compact(&self, out: &mut Compact<'_>) {
        out.varint(self.window_ms);
        out.varint(self.window_start.0 / self.window_ms.max(1));
        out.varint(self.previous);
        out.varint(self.current);
    }

    #[inline(always)]
    fn decode_compact(body: &mut Reader<'_>) -> Option<Self> {
        let window_ms = duration_ms_in_range(body.varint()?)?;
        let window_start = body.varint()?.checked_mul(window_ms)?;
        let previous = body.varint()?;
        let current = body.varint()?;
        let counts_ok = previous <= MAX_COUNT && current <= MAX_COUNT;
        counts_ok.then_some(SlidingWindowState {
            window_ms,
            window_start: Millis(window_start),
            previous,
            current,
        })
    }

    fn encode_body(&self, out: &mut Writer<'_>) {
        out.u64(self.window_ms);
        out.u64(self.window_start.0);
        out.u64(self.previous);
        out.u64(self.current);
    }

    fn decode_body(body: &mut Reader<'_>) -> Option<Self> {
        let window_ms = duration_ms_in_range(body.u64()?)?;
        let window_start = body.u64()?;
        let previous = body.u64()?;
        let current = body.u64()?;
        let aligned = window_start % window_ms == 0;
        let counts_ok = previous <= MAX_COUNT && current <= MAX_COUNT;
        (aligned && counts_ok).then_some(SlidingWindowState {
            window_ms,
            window_start: Millis(window_start),
            previous,
            current,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::reference;
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Byte-identical to the generic writer's encoding, for any fields (also impossible
        /// ones), and the fast decode agrees with the general one on it, on every prefix and
        /// with a byte more.
        #[test]
        fn same_bytes_as_the_generic_writer(window_ms in reference::arb_u64(), start in reference::arb_u64(), previous in reference::arb_u64(), current in reference::arb_u64(), extra in any::<u8>()) {
            let s = SlidingWindowState { window_ms, window_start: Millis(start), previous, current };
            let old = reference::compact::<SlidingWindowState>(|out| {
                out.varint(window_ms);
                out.varint(start / window_ms.max(1));
                out.varint(previous);
                out.varint(current);
            });
            reference::encodes_like_generic(&s, &old, extra)?;
        }

        #[test]
        fn fast_decode_is_general_on_any_body(body in prop::collection::vec(any::<u8>(), 0..48)) {
            reference::fast_decode_is_general::<SlidingWindowState>(&body);
        }
    }
}
