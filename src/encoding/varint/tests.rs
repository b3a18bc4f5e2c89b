//! The word-at-a-time varint codec against its byte-by-byte reference, at every length,
//! offset and truncation.

use proptest::prelude::*;

use super::reference;
use super::{Compact, Reader, Writer};
use crate::encoding::{Encoded, HEADER_LEN, MAX_LEN};

#[test]
fn u128_varints_round_trip_in_their_shortest_form() {
    for v in [
        0,
        1,
        127,
        128,
        u128::from(u64::MAX),
        u128::MAX >> 2,
        u128::MAX,
    ] {
        let mut out = Encoded::empty();
        Writer { out: &mut out }.varint128(v);
        let bytes = out.as_bytes();
        let expected_len = (128 - v.leading_zeros()).div_ceil(7).max(1) as usize;
        assert_eq!(bytes.len(), expected_len, "{v}");
        let mut r = Reader::over(bytes);
        assert_eq!(r.varint128(), Some(v));
        assert!(r.is_empty());
    }
    let decode = |bytes: &[u8]| Reader::over(bytes).varint128();
    assert_eq!(decode(&[0x80, 0x00]), None, "not the shortest form");
    assert_eq!(decode(&[0x80]), None, "truncated");
    let mut too_big = vec![0xff; 18];
    too_big.push(0x04);
    assert_eq!(decode(&too_big), None, "129 bits");
}

#[test]
fn varints_round_trip_in_their_shortest_form() {
    for v in [0, 1, 127, 128, 16_383, 16_384, u64::MAX >> 1, u64::MAX] {
        let mut out = Encoded::empty();
        Writer { out: &mut out }.varint(v);
        let bytes = out.as_bytes();
        let expected_len = (64 - v.leading_zeros()).div_ceil(7).max(1) as usize;
        assert_eq!(bytes.len(), expected_len, "{v}");
        let mut r = Reader::over(bytes);
        assert_eq!(r.varint(), Some(v));
        assert!(r.is_empty());
    }
    let decode = |bytes: &[u8]| Reader::over(bytes).varint();
    assert_eq!(decode(&[0x80, 0x00]), None, "not the shortest form");
    assert_eq!(decode(&[0x80]), None, "truncated");
    assert_eq!(
        decode(&[0xff; 9].iter().chain(&[0x02]).copied().collect::<Vec<_>>()),
        None
    );
}

#[test]
fn a_long_value_spills_to_the_heap_whole() {
    let mut out = Encoded::empty();
    let mut w = Writer { out: &mut out };
    for i in 0..100u64 {
        w.u64(i);
    }
    let values = [0, 127, 128, 16_384, u64::MAX];
    for v in values {
        w.varint(v);
    }
    let (fixed, varints) = out.as_bytes().split_at(800);
    let mut r = Reader::over(varints);
    assert_eq!(values.map(|_| r.varint().unwrap()), values);
    assert!(r.is_empty());
    let bytes = fixed;
    assert_eq!(bytes.len(), 800);
    assert!(bytes
        .chunks(8)
        .enumerate()
        .all(|(i, c)| c == (i as u64).to_le_bytes()));
}

/// The bytes [`Compact`] writes for `values` after a header.
fn compact_bytes(values: &[u128]) -> Vec<u8> {
    let mut out = Encoded::empty();
    let mut w = Compact {
        buf: &mut out.buf,
        len: HEADER_LEN,
    };
    for &v in values {
        w.varint128(v);
    }
    out.len = w.len;
    out.as_bytes()[HEADER_LEN..].to_vec()
}

/// The bytes [`Compact::varint`] writes for `values` after a header.
fn compact_bytes_u64(values: &[u64]) -> Vec<u8> {
    let mut buf = [0; MAX_LEN];
    let mut w = Compact {
        buf: &mut buf,
        len: HEADER_LEN,
    };
    for &v in values {
        w.varint(v);
    }
    let len = w.len;
    buf[HEADER_LEN..len].to_vec()
}

/// The bytes the generic [`Writer`] writes for `values`.
fn writer_bytes(values: &[u128]) -> Vec<u8> {
    let mut out = Encoded::empty();
    let mut w = Writer { out: &mut out };
    for &v in values {
        match u64::try_from(v) {
            Ok(v) => w.varint(v),
            Err(_) => w.varint128(v),
        }
    }
    out.as_bytes().to_vec()
}

/// `reader` and `reference` agree on `bytes`: the same value, or both refuse it, and the
/// same bytes used.
fn reads_as_reference(bytes: &[u8]) {
    // Alone, at the end of a longer value (read near its end with one load), and followed
    // by more bytes (a byte that ends a truncated varint, then bytes that would continue it).
    let mut after = vec![0xff; 8];
    after.extend_from_slice(bytes);
    let mut before = bytes.to_vec();
    before.push(0x01);
    before.extend_from_slice(&[0xff; 15]);
    for (value, start) in [(bytes, 0), (&after[..], 8), (&before[..], 0)] {
        let read = &value[start..];
        let mut r = Reader { bytes: read, value };
        let got = r.varint().map(|v| (v, read.len() - r.remaining()));
        assert_eq!(got, reference::varint(read), "{value:x?} from {start}");
        let mut r = Reader { bytes: read, value };
        let got = r.varint128().map(|v| (v, read.len() - r.remaining()));
        assert_eq!(got, reference::varint128(read), "{value:x?} from {start}");
    }
}

/// Values at and around every varint length (2^(7 k) - 1 and 2^(7 k)) and the edges of
/// the one- and two-word fast paths and of `u64`.
fn boundary_values() -> Vec<u128> {
    let mut values = vec![
        0,
        (1 << 56) - 1,
        1 << 56,
        1 << 63,
        u128::from(u64::MAX),
        1 << 64,
        1 << 70,
        (1 << 112) - 1,
        1 << 112,
        1 << 126,
        u128::MAX >> 1,
        u128::MAX,
    ];
    for k in 1..=18 {
        let edge = 1u128 << (7 * k);
        values.extend([
            edge - 1,
            edge,
            edge + 1,
            edge | (edge >> 1),
            (edge << 7).wrapping_sub(2),
        ]);
    }
    values.sort_unstable();
    values.dedup();
    values
}

#[test]
fn varints_of_every_length_read_as_before() {
    for v in boundary_values() {
        let shortest = writer_bytes(&[v]);
        // The value and every truncation of it.
        for cut in 0..=shortest.len() {
            reads_as_reference(&shortest[..cut]);
        }
        // Longer spellings: a trailing 0 after one to three more continued bytes.
        let mut longer = shortest.clone();
        for _ in 0..3 {
            *longer.last_mut().unwrap() |= 0x80;
            longer.push(0);
            reads_as_reference(&longer);
        }
    }
    // Every last byte after every number of continued bytes (all 7-bit groups full, or
    // empty): the too-large, the shortest and the non-shortest forms of each length.
    for len in 1..=20 {
        for fill in [0xff, 0x80] {
            for last in 0..=255u8 {
                let mut bytes = vec![fill; len - 1];
                bytes.push(last);
                reads_as_reference(&bytes);
            }
        }
    }
    let read = |bytes: &[u8]| {
        (
            Reader::over(bytes).varint(),
            Reader::over(bytes).varint128(),
        )
    };
    let mut full = [0xff; 19];
    full[9] = 0x01;
    assert_eq!(read(&full[..10]), (Some(u64::MAX), Some(u64::MAX.into())));
    full[9] = 0x02;
    assert_eq!(read(&full[..10]), (None, Some((1 << 64) + (1 << 63) - 1)));
    full[9] = 0xff;
    full[18] = 0x03;
    assert_eq!(read(&full), (None, Some(u128::MAX)));
    full[18] = 0x04;
    assert_eq!(read(&full), (None, None));
    let mut two_56 = [0x80; 9];
    two_56[8] = 0x01;
    assert_eq!(read(&two_56), (Some(1 << 56), Some(1 << 56)));
    two_56[8] = 0x00;
    assert_eq!(read(&two_56), (None, None), "not the shortest form");
    assert_eq!(read(&two_56[..8]), (None, None), "truncated");
}

#[test]
fn varints_of_every_length_are_the_writers_bytes_at_every_offset() {
    for v in boundary_values() {
        let len = writer_bytes(&[v]).len();
        // After 0 to 59 one-byte varints: every alignment, and the end of the buffer (where
        // an 8-byte store does not fit).
        for pad in 0..=MAX_LEN - HEADER_LEN - len {
            let mut values = vec![0; pad];
            values.push(v);
            let bytes = compact_bytes(&values);
            assert_eq!(bytes, writer_bytes(&values), "{v} after {pad}");
            if let Ok(v) = u64::try_from(v) {
                let mut narrow = vec![0; pad];
                narrow.push(v);
                assert_eq!(compact_bytes_u64(&narrow), bytes, "{v} after {pad}");
            }
            let mut r = Reader::over(&bytes);
            for &want in &values {
                assert_eq!(r.varint128(), Some(want));
            }
            assert!(r.is_empty());
        }
    }
}

#[test]
fn every_two_byte_prefix_reads_as_before_near_and_far_from_the_end() {
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            for tail in [
                &[][..],
                &[0x01],
                &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
            ] {
                let mut bytes = vec![a, b];
                bytes.extend_from_slice(tail);
                reads_as_reference(&bytes);
                reads_as_reference(&bytes[..1]);
            }
        }
    }
    reads_as_reference(&[]);
}

#[test]
fn the_longest_compact_values_fit_the_buffer() {
    // Four 10-byte varints (a sliding window of impossible fields) and three of 19.
    let max = [u128::from(u64::MAX); 4];
    assert_eq!(compact_bytes(&max).len(), 40);
    assert_eq!(compact_bytes(&max), writer_bytes(&max));
    let max = [u128::MAX; 3];
    assert_eq!(compact_bytes(&max).len(), 57);
    assert_eq!(compact_bytes(&max), writer_bytes(&max));
}

proptest! {
    #[test]
    fn compact_varints_are_the_writers_bytes(
        values in prop::collection::vec(
            prop_oneof![reference::arb_u64().prop_map(u128::from), reference::arb_u128()],
            0..4,
        ),
    ) {
        prop_assert_eq!(compact_bytes(&values), writer_bytes(&values));
    }

    #[test]
    fn varints_read_as_before(
        bytes in prop::collection::vec(
            prop_oneof![any::<u8>(), 0x80u8..=0xff, Just(0x80u8), Just(0u8), Just(1u8)],
            0..24,
        ),
    ) {
        for start in 0..bytes.len().min(12) {
            reads_as_reference(&bytes[start..]);
        }
    }

    #[test]
    fn written_varints_read_back_one_after_another(
        values in prop::collection::vec(reference::arb_u64(), 1..4),
    ) {
        let wide: Vec<u128> = values.iter().copied().map(u128::from).collect();
        let bytes = compact_bytes(&wide);
        let mut r = Reader::over(&bytes);
        for &v in &values {
            prop_assert_eq!(r.varint(), Some(v));
        }
        prop_assert!(r.is_empty());
    }

    #[test]
    fn written_wide_varints_read_back_one_after_another(
        values in prop::collection::vec(reference::arb_u128(), 1..4),
        tail in prop::collection::vec(any::<u8>(), 0..10),
    ) {
        let mut bytes = compact_bytes(&values);
        bytes.extend_from_slice(&tail);
        let mut r = Reader::over(&bytes);
        for &v in &values {
            prop_assert_eq!(r.varint128(), Some(v));
        }
        prop_assert_eq!(r.remaining(), tail.len());
    }

    #[test]
    fn compact_u64_varints_are_the_writers_bytes(
        values in prop::collection::vec(reference::arb_u64(), 0..6),
    ) {
        let wide: Vec<u128> = values.iter().copied().map(u128::from).collect();
        prop_assert_eq!(compact_bytes_u64(&values), writer_bytes(&wide));
    }
}
