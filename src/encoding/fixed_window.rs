//! Stored form of a fixed window counter.

use redis_rl_core::fixed_window::FixedWindowState;
use redis_rl_core::limits::MAX_COUNT;
use redis_rl_core::{Micros, Millis};

use super::{duration_ms_in_range, Algorithm, Reader, StateFields, StateValue, Stored, Writer};

/// Fixed window fields: `window_ms`, `window_start_ms`, `count`, all `u64` (29 bytes with
/// the header).
impl Stored for FixedWindowState {
    const ALGORITHM: Algorithm = Algorithm::FixedWindow;
    const BODY_LEN: usize = 8 * 3;

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

    fn describe(&self, now: Micros) -> StateFields {
        vec![
            ("window_ms", StateValue::Int(self.window_ms)),
            ("window_start_ms", StateValue::Int(self.window_start.0)),
            ("count", StateValue::Int(self.count_at(now))),
        ]
    }
}
