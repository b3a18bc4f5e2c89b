//! What the fast paths are checked against: the value as the generic [`Writer`] wrote it,
//! the varint reader as it was, and field values that reach every varint length.

use proptest::prelude::*;

use super::Writer;
use crate::encoding::{Encoded, Stored, COMPACT_VERSION, HEADER_LEN, MAGIC, VERSION};

/// A compact value of `S` as the generic writer writes it: header, then what `fields`
/// writes (the encoding before [`Compact`]).
pub(crate) fn compact<S: Stored>(fields: impl FnOnce(&mut Writer<'_>)) -> Vec<u8> {
    let mut out = Encoded::empty();
    let mut w = Writer { out: &mut out };
    w.header(COMPACT_VERSION, S::KIND);
    fields(&mut w);
    out.as_bytes().to_vec()
}

/// The varint reader before the one-load fast path: the value and the bytes it used.
pub(crate) fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, shift) in (0..64).step_by(7).enumerate() {
        let b = *bytes.get(i)?;
        if shift == 63 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return (b != 0 || shift == 0).then_some((v, i + 1));
        }
    }
    None
}

/// The 128-bit varint reader before the fast path.
pub(crate) fn varint128(bytes: &[u8]) -> Option<(u128, usize)> {
    let mut v = 0u128;
    for (i, shift) in (0..128).step_by(7).enumerate() {
        let b = *bytes.get(i)?;
        if shift == 126 && b > 3 {
            return None;
        }
        v |= u128::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return (b != 0 || shift == 0).then_some((v, i + 1));
        }
    }
    None
}

/// Any `u64`, with every bit length and the edges of every varint length equally likely.
pub(crate) fn arb_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (any::<u64>(), 0u32..64).prop_map(|(v, shift)| v >> shift),
        (0u32..10).prop_map(|bytes| (1u64 << (7 * bytes)).wrapping_sub(1)),
        (0u32..10).prop_map(|bytes| 1u64 << (7 * bytes)),
        Just(0),
        Just(u64::MAX),
    ]
}

/// Any `u128`, as [`arb_u64`].
pub(crate) fn arb_u128() -> impl Strategy<Value = u128> {
    prop_oneof![
        any::<u128>(),
        (any::<u128>(), 0u32..128).prop_map(|(v, shift)| v >> shift),
        (0u32..19).prop_map(|bytes| (1u128 << (7 * bytes)).wrapping_sub(1)),
        (0u32..19).prop_map(|bytes| 1u128 << (7 * bytes)),
        arb_u64().prop_map(u128::from),
        Just(u128::MAX),
    ]
}

/// `state` encodes to exactly `old` (the generic writer's bytes), through `encode` and
/// `with_bytes` alike, and the fast decode agrees with the general one on every prefix of
/// its body and on the body with `extra` appended.
pub(crate) fn encodes_like_generic<S: Stored + PartialEq + std::fmt::Debug>(
    state: &S,
    old: &[u8],
    extra: u8,
) -> Result<(), TestCaseError> {
    let new = state.encode();
    prop_assert_eq!(new.as_bytes(), old);
    prop_assert_eq!(state.with_bytes(<[u8]>::to_vec), old.to_vec());
    let body = &old[HEADER_LEN..];
    for cut in 0..=body.len() {
        fast_decode_is_general::<S>(&body[..cut]);
    }
    let mut longer = body.to_vec();
    longer.push(extra);
    fast_decode_is_general::<S>(&longer);
    Ok(())
}

/// Every stored value of `S` with the compact header and `body` decodes as the general
/// path decodes it (the same state or the same error).
pub(crate) fn fast_decode_is_general<S: Stored + PartialEq + std::fmt::Debug>(body: &[u8]) {
    for version in [VERSION, COMPACT_VERSION, 3] {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&[version, S::KIND.tag()]);
        v.extend_from_slice(body);
        assert_eq!(S::decode(&v), S::decode_general(&v), "{v:?}");
    }
}
