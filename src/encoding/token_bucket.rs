//! Stored form of a token bucket.

use redis_rl_core::limits::MAX_COUNT;
use redis_rl_core::token_bucket::TokenBucketState;
use redis_rl_core::Micros;

use super::{duration_ms_in_range, Algorithm, Reader, StateFields, StateValue, Stored, Writer};

/// Token bucket fields: `updated_at_us: u64`, `refill_ms: u64`, `level: u128` (37 bytes with the header).
impl Stored for TokenBucketState {
    const ALGORITHM: Algorithm = Algorithm::TokenBucket;
    const BODY_LEN: usize = 8 + 8 + 16;

    fn encode_body(&self, out: &mut Writer<'_>) {
        out.u64(self.updated_at.0);
        out.u64(self.refill_ms);
        out.u128(self.level);
    }

    fn decode_body(body: &mut Reader<'_>) -> Option<Self> {
        let updated_at = Micros(body.u64()?);
        let refill_ms = duration_ms_in_range(body.u64()?)?;
        let level = body.u128()?;
        let most = u128::from(MAX_COUNT) * u128::from(refill_ms) * 1000;
        (level <= most).then_some(TokenBucketState {
            level,
            updated_at,
            refill_ms,
        })
    }

    /// The bucket does not store its capacity or refill rate (each call passes them), so
    /// its level now cannot be known: this shows the whole tokens left at the last write.
    fn describe(&self, _now: Micros) -> StateFields {
        let unit = u128::from(self.refill_ms.max(1)) * 1000;
        let tokens = u64::try_from(self.level / unit).unwrap_or(u64::MAX);
        vec![
            ("refill_ms", StateValue::Int(self.refill_ms)),
            ("tokens_at_update", StateValue::Int(tokens)),
            ("updated_at_ms", StateValue::Int(self.updated_at.0 / 1000)),
        ]
    }
}
