//! Stored form of a GCRA limiter (RL.GCRA and RL.THROTTLE).

use redis_rl_core::gcra::GcraState;
use redis_rl_core::limits::{MAX_COUNT, MAX_DURATION_MS};
use redis_rl_core::Micros;

use super::{duration_ms_in_range, Algorithm, Reader, StateFields, StateValue, Stored, Writer};

/// GCRA fields: `tat: u128` (ticks of 1/`limit` µs since the epoch), `limit: u64`,
/// `period_ms: u64` (37 bytes with the header).
impl Stored for GcraState {
    const ALGORITHM: Algorithm = Algorithm::Gcra;
    const BODY_LEN: usize = 16 + 8 + 8;

    fn encode_body(&self, out: &mut Writer<'_>) {
        out.u128(self.tat);
        out.u64(self.limit);
        out.u64(self.period_ms);
    }

    fn decode_body(body: &mut Reader<'_>) -> Option<Self> {
        let tat = body.u128()?;
        let limit = body.u64()?;
        let period_ms = duration_ms_in_range(body.u64()?)?;
        // The furthest a TAT can be: the last representable instant plus the longest
        // possible burst (MAX_COUNT intervals of MAX_DURATION_MS with a limit of 1).
        let latest_us =
            u128::from(u64::MAX) + u128::from(MAX_COUNT) * u128::from(MAX_DURATION_MS) * 1000;
        let ok = (1..=MAX_COUNT).contains(&limit) && tat / u128::from(limit) <= latest_us;
        ok.then_some(GcraState {
            tat,
            limit,
            period_ms,
        })
    }

    fn describe(&self, now: Micros) -> StateFields {
        vec![
            ("limit", StateValue::Int(self.limit)),
            ("period_ms", StateValue::Int(self.period_ms)),
            ("tat_ms", StateValue::Int(self.tat_ms().0)),
            ("used", StateValue::Int(self.used_at(now))),
        ]
    }
}
