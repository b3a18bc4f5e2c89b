//! Stored form of a concurrency limiter's leases, format version 1 (read, and converted to
//! version 2 on the next write: see `lease_table.rs`).

use redis_rl_core::concurrency::{ConcurrencyState, Lease, MAX_ID_LEN, MAX_LIMIT};
use redis_rl_core::Micros;

use super::{Kind, Reader, Stored, Writer};

/// Concurrency fields, per lease (soonest expiry first): a varint (LEB128) of the
/// microseconds since the previous lease's expiry (since the epoch for the first), a varint
/// of the id's length (1 to 256) and the id's bytes. An empty body is no lease.
impl Stored for ConcurrencyState {
    const KIND: Kind = Kind::Concurrency;
    const BODY_LEN: usize = 0;
    const VARIABLE_LEN: bool = true;
    /// A lease takes at most 10 bytes for its expiry, 2 for its id's length and
    /// [`MAX_ID_LEN`] for the id, and a valid value holds at most [`MAX_LIMIT`] leases:
    /// about 2.7 MB. A version 2 table (same tag) is larger at most: about 8.8 MB.
    const MAX_BODY_LEN: usize = {
        let list = (12 + MAX_ID_LEN) * MAX_LIMIT as usize;
        let table = super::lease_table::MAX_LEN - super::HEADER_LEN;
        if list > table {
            list
        } else {
            table
        }
    };

    fn encode_body(&self, out: &mut Writer<'_>) {
        let ids: usize = self.leases.iter().map(|l| l.id.len()).sum();
        out.reserve(ids + 8 * self.leases.len());
        let mut previous = 0;
        for lease in &self.leases {
            out.varint(lease.expires_at.0.saturating_sub(previous));
            previous = lease.expires_at.0;
            out.varint(u64::try_from(lease.id.len()).unwrap_or(0));
            out.bytes(&lease.id);
        }
    }

    fn decode_body(body: &mut Reader<'_>) -> Option<Self> {
        let mut expires_at = 0u64;
        // A lease takes at least 3 bytes.
        let most = usize::try_from(MAX_LIMIT).unwrap_or(0);
        let mut leases = Vec::with_capacity((body.remaining() / 3).min(most));
        while !body.is_empty() {
            if u64::try_from(leases.len()).ok()? >= MAX_LIMIT {
                return None;
            }
            expires_at = expires_at.checked_add(body.varint()?)?;
            let len = usize::try_from(body.varint()?)
                .ok()
                .filter(|len| (1..=MAX_ID_LEN).contains(len))?;
            leases.push(Lease {
                id: body.slice(len)?.to_vec(),
                expires_at: Micros(expires_at),
            });
        }
        Some(ConcurrencyState { leases })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::DecodeError;
    use proptest::prelude::*;

    fn lease(id: &[u8], at: u64) -> Lease {
        Lease {
            id: id.to_vec(),
            expires_at: Micros(at),
        }
    }

    fn with_body(body: &[u8]) -> Result<ConcurrencyState, DecodeError> {
        ConcurrencyState::decode(&[&b"\0RL\x01C"[..], body].concat())
    }

    #[test]
    fn layout_and_sizes() {
        let base = 1_700_000_000_000_000;
        let state = ConcurrencyState {
            leases: vec![lease(b"a", base), lease(b"job-2", base + 300)],
        };
        let bytes = state.encode().as_bytes().to_vec();
        let expected = [
            &b"\0RL\x01C"[..],
            // base (8 bytes), id length 1, "a".
            &[0x80, 0x80, 0xf9, 0xc0, 0xc1, 0xc4, 0x82, 0x03, 0x01, b'a'],
            // 300 (2 bytes), id length 5, "job-2".
            &[0xac, 0x02, 0x05],
            b"job-2",
        ]
        .concat();
        assert_eq!(bytes, expected);
        assert_eq!(ConcurrencyState::decode(&bytes), Ok(state));
        assert_eq!(with_body(b""), Ok(ConcurrencyState::default()));
    }

    #[test]
    fn refuses_impossible_leases() {
        let corrupt = Err(DecodeError::Corrupt(Kind::Concurrency));
        assert_eq!(with_body(&[0x00, 0x00]), corrupt, "empty id");
        assert_eq!(with_body(&[0x00, 0x02, b'a']), corrupt, "truncated id");
        assert_eq!(with_body(&[0x00, 0x81, 0x02]), corrupt, "id of 257 bytes");
        let longest = [&[0x00, 0x80, 0x02][..], &[b'x'; 256]].concat();
        assert!(with_body(&longest).is_ok());
        let full: Vec<u8> = (0..MAX_LIMIT).flat_map(|_| [0x00, 0x01, b'x']).collect();
        assert!(with_body(&full).is_ok());
        let over = [&full[..], &[0x00, 0x01, b'y']].concat();
        assert_eq!(
            with_body(&over),
            corrupt,
            "more leases than the largest limit"
        );
    }

    proptest! {
        #[test]
        fn round_trip(
            base in 0u64..u64::MAX / 2,
            leases in prop::collection::vec(
                (0u64..10_000_000_000, prop::collection::vec(any::<u8>(), 1..=MAX_ID_LEN)),
                0..50,
            ),
        ) {
            let mut at = base;
            let leases: Vec<_> = leases.into_iter().map(|(gap, id)| {
                at += gap;
                Lease { id, expires_at: Micros(at) }
            }).collect();
            let state = ConcurrencyState { leases };
            prop_assert_eq!(ConcurrencyState::decode(state.encode().as_bytes()), Ok(state));
        }

        /// Whatever decodes is a valid set of leases with exactly one encoding.
        #[test]
        fn random_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..300)) {
            let v = [&b"\0RL\x01C"[..], &body].concat();
            if let Ok(state) = ConcurrencyState::decode(&v) {
                let encoded = state.encode();
                prop_assert_eq!(encoded.as_bytes(), &v[..]);
            }
        }
    }
}
