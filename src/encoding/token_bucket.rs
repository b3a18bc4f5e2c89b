//! Stored form of a token bucket.

use redis_rl_core::limits::MAX_COUNT;
use redis_rl_core::token_bucket::TokenBucketState;
use redis_rl_core::Micros;

use super::{duration_ms_in_range, Algorithm, Reader, Stored, Writer};

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
}
