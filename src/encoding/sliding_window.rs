//! Stored form of a sliding window counter.

use redis_rl_core::limits::MAX_COUNT;
use redis_rl_core::sliding_window::SlidingWindowState;
use redis_rl_core::Millis;

use super::{duration_ms_in_range, Algorithm, Reader, Stored, Writer};

/// Sliding window fields: `window_ms`, `window_start_ms`, `previous`, `current`, all `u64`
/// (37 bytes with the header).
impl Stored for SlidingWindowState {
    const ALGORITHM: Algorithm = Algorithm::SlidingWindow;
    const BODY_LEN: usize = 8 * 4;
    const COMPACT_BODY: Option<(usize, usize)> = Some((4, 10 * 4));

    /// Version 2: `window_ms`, the current window's index (`window_start / window_ms`),
    /// `previous` and `current` as varints (about 14 bytes with the header).
    fn encode_compact(&self, out: &mut Writer<'_>) {
        out.varint(self.window_ms);
        out.varint(self.window_start.0 / self.window_ms.max(1));
        out.varint(self.previous);
        out.varint(self.current);
    }

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
