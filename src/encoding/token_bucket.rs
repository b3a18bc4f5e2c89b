//! Stored form of a token bucket.

use redis_rl_core::limits::MAX_COUNT;
use redis_rl_core::token_bucket::TokenBucketState;
use redis_rl_core::Micros;

use super::{duration_ms_in_range, Compact, Kind, Reader, Stored, Writer};

/// 2020-01-01T00:00:00Z in microseconds: version 2 stores a bucket's instant from there, one
/// byte less than from 1970 until 2037.
pub const EPOCH_US: u64 = 1_577_836_800_000_000;

/// Token bucket fields: `updated_at_us: u64`, `refill_ms: u64`, `level: u128` (version 1:
/// 37 bytes with the header).
impl Stored for TokenBucketState {
    const KIND: Kind = Kind::TokenBucket;
    const BODY_LEN: usize = 8 + 8 + 16;
    const COMPACT_BODY: Option<(usize, usize)> = Some((3, 10 + 10 + 19));

    /// Version 2: `updated_at_us` as microseconds since 2020 ([`EPOCH_US`], wrapping below
    /// it), `refill_ms`, `level` as varints (16 to 24 bytes with the header: 7 for the
    /// instant until 2037, 2-4 for the period, up to 8 for a level of a billion tokens
    /// refilled every second).
    #[inline(always)]
    fn encode_compact(&self, out: &mut Compact<'_>) {
        out.varint(self.updated_at.0.wrapping_sub(EPOCH_US));
        out.varint(self.refill_ms);
        out.varint128(self.level);
    }

    #[inline(always)]
    fn decode_compact(body: &mut Reader<'_>) -> Option<Self> {
        let updated_at = body.varint()?.wrapping_add(EPOCH_US);
        let refill_ms = body.varint()?;
        let level = body.varint128()?;
        valid(updated_at, refill_ms, level)
    }

    fn encode_body(&self, out: &mut Writer<'_>) {
        out.u64(self.updated_at.0);
        out.u64(self.refill_ms);
        out.u128(self.level);
    }

    fn decode_body(body: &mut Reader<'_>) -> Option<Self> {
        let updated_at = body.u64()?;
        let refill_ms = body.u64()?;
        let level = body.u128()?;
        valid(updated_at, refill_ms, level)
    }
}

/// The state if its fields are in range (both versions).
fn valid(updated_at: u64, refill_ms: u64, level: u128) -> Option<TokenBucketState> {
    let refill_ms = duration_ms_in_range(refill_ms)?;
    let most = u128::from(MAX_COUNT) * u128::from(refill_ms) * 1000;
    (level <= most).then_some(TokenBucketState {
        level,
        updated_at: Micros(updated_at),
        refill_ms,
    })
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
        fn same_bytes_as_the_generic_writer(level in reference::arb_u128(), at in reference::arb_u64(), refill_ms in reference::arb_u64(), extra in any::<u8>()) {
            let s = TokenBucketState { level, updated_at: Micros(at), refill_ms };
            let old = reference::compact::<TokenBucketState>(|out| {
                out.varint(at.wrapping_sub(EPOCH_US));
                out.varint(refill_ms);
                out.varint128(level);
            });
            reference::encodes_like_generic(&s, &old, extra)?;
        }

        #[test]
        fn fast_decode_is_general_on_any_body(body in prop::collection::vec(any::<u8>(), 0..48)) {
            reference::fast_decode_is_general::<TokenBucketState>(&body);
        }
    }
}
