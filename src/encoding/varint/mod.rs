//! The field codec of stored values: [`Writer`] (the generic little-endian writer, and what
//! a variable-length state is written with), [`Compact`] (a fixed-size state's version 2 value
//! built straight in a stack buffer) and [`Reader`].
//!
//! Varints are LEB128 in their shortest form. Writing and reading them is on every call's hot
//! path, so they go a word at a time (SWAR): a varint below 2^56 is one 8-byte store, or one
//! 8-byte load whose continuation bits give its length, instead of a loop over its bytes.
//! That code is easy to get subtly wrong, so `reference` keeps the byte-by-byte versions it
//! replaced and `tests` checks the word versions against them at every length and offset.

use super::{Encoded, MAGIC, MAX_LEN};
use redis_rl_core::Kind;

/// Appends little-endian fields to an [`Encoded`] value.
pub struct Writer<'a> {
    pub(super) out: &'a mut Encoded,
}

impl Writer<'_> {
    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        let out = &mut *self.out;
        if out.spill.is_empty() {
            if let Some(dst) = out.buf.get_mut(out.len..out.len + bytes.len()) {
                dst.copy_from_slice(bytes);
                out.len += bytes.len();
                return;
            }
            out.spill
                .extend_from_slice(out.buf.get(..out.len).unwrap_or(&[]));
        }
        out.spill.extend_from_slice(bytes);
    }

    /// Makes room for `additional` more bytes at once (a variable-length value that will
    /// outgrow the stack buffer: one allocation instead of repeated growth).
    pub(crate) fn reserve(&mut self, additional: usize) {
        let out = &mut *self.out;
        if out.spill.is_empty() && out.len + additional > MAX_LEN {
            out.spill.reserve(out.len + additional);
        }
    }

    /// The header of a value: the magic bytes, the format `version` and `kind`'s tag.
    pub(crate) fn header(&mut self, version: u8, kind: Kind) {
        self.bytes(&MAGIC);
        self.bytes(&[version, kind.tag()]);
    }

    /// An unsigned LEB128 varint: 7 bits per byte, low bits first (1 byte below 128).
    pub(crate) fn varint(&mut self, mut v: u64) {
        let spill = &mut self.out.spill;
        if !spill.is_empty() {
            // A long value (a log, leases): byte by byte, no copy call per varint.
            while v >= 0x80 {
                spill.push(u8::try_from(v & 0x7f).unwrap_or(0) | 0x80);
                v >>= 7;
            }
            spill.push(u8::try_from(v).unwrap_or(0));
            return;
        }
        let mut buf = [0u8; 10];
        let len = leb128(u128::from(v), &mut buf);
        self.bytes(buf.get(..len).unwrap_or(&[]));
    }

    /// An unsigned LEB128 varint of up to 128 bits (at most 19 bytes): the reference
    /// [`Compact::varint128`] is tested against.
    #[cfg(test)]
    pub(crate) fn varint128(&mut self, v: u128) {
        let mut buf = [0u8; 19];
        let len = leb128(v, &mut buf);
        self.bytes(buf.get(..len).unwrap_or(&[]));
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn u128(&mut self, v: u128) {
        self.bytes(&v.to_le_bytes());
    }
}

/// Writes `v` as an unsigned LEB128 varint at the start of `buf` and returns its length
/// (`buf` holds at least the 10 bytes of a `u64`, or 19 of a `u128`).
fn leb128(mut v: u128, buf: &mut [u8]) -> usize {
    let mut len = 0;
    for byte in buf.iter_mut() {
        let low = u8::try_from(v & 0x7f).unwrap_or(0);
        v >>= 7;
        len += 1;
        if v == 0 {
            *byte = low;
            break;
        }
        *byte = low | 0x80;
    }
    len
}

/// The continuation bits of a varint's bytes (all but the last byte have the high bit set).
const CONTINUATION: u64 = 0x8080_8080_8080_8080;

/// Spreads the low 56 bits of `v` over 8 bytes, 7 bits in each (the inverse of [`gather`]).
#[inline(always)]
const fn spread(v: u64) -> u64 {
    let v = (v & 0x0fff_ffff) | ((v & 0x00ff_ffff_f000_0000) << 4);
    let v = (v & 0x0000_3fff_0000_3fff) | ((v & 0x0fff_c000_0fff_c000) << 2);
    (v & 0x007f_007f_007f_007f) | ((v & 0x3f80_3f80_3f80_3f80) << 1)
}

/// [`spread`] of a value below 2^28, over 4 bytes.
#[inline(always)]
const fn spread32(v: u32) -> u32 {
    let v = (v & 0x3fff) | ((v & 0x0fff_c000) << 2);
    (v & 0x007f_007f) | ((v & 0x3f80_3f80) << 1)
}

/// [`gather`] of 4 bytes.
#[inline(always)]
const fn gather32(w: u32) -> u32 {
    let w = w & 0x7f7f_7f7f;
    let w = (w & 0x007f_007f) | ((w & 0x7f00_7f00) >> 1);
    (w & 0x3fff) | ((w & 0x3fff_0000) >> 2)
}

/// Gathers the low 7 bits of each of 8 bytes into a 56-bit value (the inverse of [`spread`]).
#[inline(always)]
const fn gather(w: u64) -> u64 {
    let w = w & 0x7f7f_7f7f_7f7f_7f7f;
    let w = (w & 0x007f_007f_007f_007f) | ((w & 0x7f00_7f00_7f00_7f00) >> 1);
    let w = (w & 0x0000_3fff_0000_3fff) | ((w & 0x3fff_0000_3fff_0000) >> 2);
    (w & 0x0fff_ffff) | ((w & 0x0fff_ffff_0000_0000) >> 4)
}

/// Writes a fixed-size state's compact (version 2) value straight into a stack buffer (an
/// [`Encoded`]'s, or [`Stored::with_bytes`]'): at most a header and 40 bytes of varints, so
/// it never spills, and a varint below 2^56 is one 8-byte store, below 2^112 two (no loop, no
/// copy call).
pub struct Compact<'a> {
    pub(super) buf: &'a mut [u8; MAX_LEN],
    pub(super) len: usize,
}

impl Compact<'_> {
    /// An unsigned LEB128 varint, as [`Writer::varint`] writes it.
    #[inline(always)]
    pub(crate) fn varint(&mut self, v: u64) {
        self.len = put_varint(self.buf, self.len, v);
    }

    /// An unsigned LEB128 varint of up to 128 bits (at most 19 bytes), lowest bits first.
    #[inline(always)]
    pub(crate) fn varint128(&mut self, v: u128) {
        let low = u64::try_from(v & u128::from(WORD_MASK)).unwrap_or(0);
        let high = v >> WORD_BITS;
        // From 2^56 on, inline: a GCRA's TAT is there for most limits (no `u64` field is, so
        // `put_varint` builds those out of line).
        self.len = if high == 0 {
            put_varint(self.buf, self.len, low)
        } else {
            put_varint_wide(self.buf, self.len, low, high)
        };
    }
}

/// Bits in one 8-byte word of varint bytes (7 per byte).
const WORD_BITS: u32 = 56;
/// The values one 8-byte word of varint bytes can hold.
const WORD_MASK: u64 = (1 << WORD_BITS) - 1;

/// Writes `v` as a varint at `at` in `buf`; returns where it ends.
#[inline(always)]
fn put_varint(buf: &mut [u8; MAX_LEN], at: usize, v: u64) -> usize {
    if let Some(end) = put_varint_short(buf, at, v) {
        return end;
    }
    let (bytes, len) = wide_u64(v);
    if let Some(dst) = buf
        .get_mut(at..)
        .and_then(|rest| rest.first_chunk_mut::<16>())
    {
        *dst = bytes.to_le_bytes();
        return at + len;
    }
    put_varint_long(buf, at, u128::from(v))
}

/// The varint of a `u64` of 2^56 or more (9 or 10 bytes) as the first bytes of a 16-byte
/// little-endian word, and their count. Out of line: no `u64` field of a valid state gets
/// there (durations, counts and microseconds since the epoch are far below 2^56), so its code
/// stays out of the common path.
#[inline(never)]
fn wide_u64(v: u64) -> (u128, usize) {
    let first = spread(v & WORD_MASK) | CONTINUATION;
    let high = v >> WORD_BITS;
    let (second, len) = if high < 0x80 {
        (high, 1)
    } else {
        short_word(high)
    };
    (u128::from(first) | u128::from(second) << 64, 8 + len)
}

/// [`put_varint`] of a value below 2^56 (at most 8 bytes) with one store; `None` (nothing
/// written) for a larger value, or at the end of `buf`.
#[inline(always)]
fn put_varint_short(buf: &mut [u8; MAX_LEN], at: usize, v: u64) -> Option<usize> {
    if v < 0x80 {
        let [low, ..] = v.to_le_bytes();
        *buf.get_mut(at)? = low;
        return Some(at + 1);
    }
    if v > WORD_MASK {
        return None;
    }
    let dst = buf.get_mut(at..)?.first_chunk_mut::<8>()?;
    let (word, len) = short_word(v);
    *dst = word.to_le_bytes();
    Some(at + len)
}

/// The varint of `v`, from 128 to 2^56 - 1 (2 to 8 bytes), as a little-endian word whose
/// bytes after the varint are 0, and its length.
#[inline(always)]
fn short_word(v: u64) -> (u64, usize) {
    // Up to 4 bytes (counts, periods, window indexes): in 32 bits, the length from
    // comparisons.
    if let Ok(short) = u32::try_from(v) {
        if short < 1 << 28 {
            let groups = u64::from(spread32(short));
            return if short < 1 << 14 {
                (groups | 0x80, 2)
            } else if short < 1 << 21 {
                (groups | 0x8080, 3)
            } else {
                (groups | 0x80_8080, 4)
            };
        }
    }
    let groups = spread(v);
    // The bit offset of the last byte in use (`groups` is not 0: `v` >= 128); every byte
    // before it gets its continuation bit. The bytes after the varint are overwritten by the
    // next field or left out of the value's length.
    let last = (63 - groups.leading_zeros()) & !7;
    let word = groups | (CONTINUATION & ((1u64 << last) - 1));
    (word, (last / 8) as usize + 1)
}

/// [`Compact::varint128`] of `low + high x 2^56` with `high` not 0 (9 to 19 bytes, a GCRA's
/// TAT for any limit of more than ~64 per period): the low 56 bits are 8 bytes that all continue, one
/// store; `high` follows as [`put_varint_short`] writes it (below 2^112), or as a second such
/// word and then byte by byte. Inline, so that no call gets the buffer's address.
#[inline(always)]
fn put_varint_wide(buf: &mut [u8; MAX_LEN], at: usize, low: u64, high: u128) -> usize {
    let first = spread(low) | CONTINUATION;
    if let Some(dst) = buf
        .get_mut(at..)
        .and_then(|rest| rest.first_chunk_mut::<8>())
    {
        *dst = first.to_le_bytes();
        let next = at + 8;
        if let Some(end) = u64::try_from(high)
            .ok()
            .and_then(|high| put_varint_short(buf, next, high))
        {
            return end;
        }
        let second = u64::try_from(high & u128::from(WORD_MASK)).unwrap_or(0);
        if let Some(dst) = buf
            .get_mut(next..)
            .and_then(|rest| rest.first_chunk_mut::<8>())
        {
            *dst = (spread(second) | CONTINUATION).to_le_bytes();
            return put_varint_long(buf, next + 8, high >> WORD_BITS);
        }
    }
    // At the end of `buf` (never for our states: the buffer has room for 8-byte stores).
    put_varint_long(buf, at, u128::from(low) | high << WORD_BITS)
}

/// [`put_varint`] of any value, byte by byte: what the word stores leave (bits 112 and up,
/// at most 3 bytes). Inline, so that no call gets the buffer's address and the compiler can
/// build the value in its final place.
#[inline(always)]
fn put_varint_long(buf: &mut [u8; MAX_LEN], mut at: usize, mut v: u128) -> usize {
    loop {
        let [low, ..] = v.to_le_bytes();
        v >>= 7;
        let byte = if v == 0 { low & 0x7f } else { low | 0x80 };
        if let Some(dst) = buf.get_mut(at) {
            *dst = byte;
            at += 1;
        }
        if v == 0 {
            return at;
        }
    }
}

/// Reads little-endian fields from the front of a slice.
pub struct Reader<'a> {
    /// What is left to read: the end of `value`.
    pub(super) bytes: &'a [u8],
    /// The whole value (a varint near its end is read with one load of its last 8 bytes).
    pub(super) value: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of all of `bytes`.
    #[cfg(test)]
    fn over(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            value: bytes,
        }
    }
}

impl Reader<'_> {
    /// The next 8 bytes as a little-endian word, zeros after the end of the value; `None`
    /// if nothing is left, or the whole value is shorter than 8 bytes and so is the rest.
    #[inline(always)]
    fn word(&self) -> Option<u64> {
        word_at(self.bytes, self.value)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.bytes.split_first_chunk::<N>()?;
        self.bytes = rest;
        Some(*head)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.take::<2>().map(u16::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }

    /// An unsigned little-endian field of `N` bytes (at most 8).
    pub(crate) fn uint<const N: usize>(&mut self) -> Option<u64> {
        let bytes = self.take::<N>()?;
        let mut wide = [0u8; 8];
        wide.get_mut(..N)?.copy_from_slice(&bytes);
        Some(u64::from_le_bytes(wide))
    }

    pub(crate) fn u128(&mut self) -> Option<u128> {
        self.take::<16>().map(u128::from_le_bytes)
    }

    /// A varint of at most 16 bytes, read with one or two 8-byte loads, refusing one of 9
    /// bytes or more with more than `high_bits` bits above its low 56 bits.
    #[inline(always)]
    fn varint_fast(&mut self, high_bits: u32) -> Fast {
        let Some((&first, rest)) = self.bytes.split_first() else {
            return Fast::Refused;
        };
        if first < 0x80 {
            self.bytes = rest;
            return Fast::Short(u64::from(first));
        }
        let Some(word) = self.word() else {
            return Fast::Slow;
        };
        let stops = !word & CONTINUATION;
        if stops != 0 {
            let Some((value, len)) = stopping_in(word, stops) else {
                return Fast::Refused;
            };
            // Past the end (a zero after it stopped the varint): truncated.
            let Some(rest) = self.bytes.get(len..) else {
                return Fast::Refused;
            };
            self.bytes = rest;
            return Fast::Short(value);
        }
        let (read, rest) = if high_bits < WORD_BITS {
            varint_wide_u64(self.bytes, self.value, word)
        } else {
            varint_wide(self.bytes, self.value, word, high_bits)
        };
        self.bytes = rest;
        read
    }

    /// A varint as [`Writer::varint`] writes it; `None` if truncated, too large for a
    /// `u64` or not in its shortest form (so every value has exactly one encoding).
    #[inline(always)]
    pub(crate) fn varint(&mut self) -> Option<u64> {
        match self.varint_fast(64 - WORD_BITS) {
            Fast::Short(v) => Some(v),
            Fast::Wide { low, high } => Some(low | high << WORD_BITS),
            Fast::Refused => None,
            Fast::Slow => {
                let (v, len) = varint_long::<u64>(self.bytes, 64)?;
                self.bytes = self.bytes.get(len..)?;
                Some(v)
            }
        }
    }

    /// A varint as [`Compact::varint128`] writes it; `None` if truncated, too large for a
    /// `u128` or not in its shortest form.
    #[inline(always)]
    pub(crate) fn varint128(&mut self) -> Option<u128> {
        match self.varint_fast(WORD_BITS) {
            Fast::Short(v) => Some(u128::from(v)),
            Fast::Wide { low, high } => Some(u128::from(low) | u128::from(high) << WORD_BITS),
            Fast::Refused => None,
            Fast::Slow => {
                let (v, len) = varint_long::<u128>(self.bytes, 128)?;
                self.bytes = self.bytes.get(len..)?;
                Some(v)
            }
        }
    }

    /// True when every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// How many bytes are left to read.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len()
    }
}

/// What [`Reader::varint_fast`] read.
enum Fast {
    /// A varint of at most 8 bytes.
    Short(u64),
    /// A varint of 9 to 16 bytes: its low 56 bits and the bits above.
    Wide { low: u64, high: u64 },
    /// Truncated, too large or not in its shortest form.
    Refused,
    /// For the byte loop: a longer varint, or one in a value shorter than 8 bytes.
    Slow,
}

/// [`Reader::varint_fast`] after a `word` of 8 bytes that all continue (so they are all in
/// `bytes`: past the end of the value, `word` has zeros): the rest of the varint is in the next
/// 8 bytes. What was read, and the bytes after it (all of `bytes` unless a varint was read).
#[inline(always)]
fn varint_wide<'a>(bytes: &'a [u8], value: &[u8], word: u64, high_bits: u32) -> (Fast, &'a [u8]) {
    let Some(next) = bytes.get(8..).and_then(|after| word_at(after, value)) else {
        return (Fast::Slow, bytes);
    };
    let next_stops = !next & CONTINUATION;
    if next_stops == 0 {
        return (Fast::Slow, bytes);
    }
    let Some((high, len)) = stopping_in(next, next_stops) else {
        return (Fast::Refused, bytes);
    };
    // A full-width varint's last byte holds only the top bits.
    if high_bits < WORD_BITS && high >> high_bits != 0 {
        return (Fast::Refused, bytes);
    }
    let Some(rest) = bytes.get(8 + len..) else {
        return (Fast::Refused, bytes);
    };
    let low = gather(word);
    (Fast::Wide { low, high }, rest)
}

/// [`varint_wide`] of a `u64` (2^56 or more): out of line, as no `u64` field of a valid state
/// gets there (see [`wide_u64`]).
#[inline(never)]
fn varint_wide_u64<'a>(bytes: &'a [u8], value: &[u8], word: u64) -> (Fast, &'a [u8]) {
    varint_wide(bytes, value, word, 64 - WORD_BITS)
}

/// The 8 bytes at the front of `bytes`, the end of `value`, as a little-endian word, zeros
/// after the end of the value; `None` if `bytes` is empty, or it and `value` are shorter
/// than 8 bytes.
#[inline(always)]
fn word_at(bytes: &[u8], value: &[u8]) -> Option<u64> {
    if let Some(word) = bytes.first_chunk::<8>() {
        return Some(u64::from_le_bytes(*word));
    }
    // Fewer than 8 bytes left, at the end of `value`: its last 8 bytes, shifted so that what
    // is left comes first.
    let last = u64::from_le_bytes(*value.last_chunk::<8>()?);
    let before = 8 - bytes.len();
    last.checked_shr(8 * u32::try_from(before).ok()?)
}

/// The varint bytes at the front of `word` (`stops`, its clear continuation bits, is not 0):
/// their value (at most 56 bits) and how many there are; `None` if the last of them is 0:
/// never the only byte of a varint here, so a longer spelling of a shorter varint, or one of
/// the zeros past the end of a value that stop a truncated varint.
#[inline(always)]
fn stopping_in(word: u64, stops: u64) -> Option<(u64, usize)> {
    // The last byte's stop bit is bit `8 x len - 1`.
    let stop_bit = stops.trailing_zeros();
    let len = (stop_bit as usize + 1) / 8;
    if (word >> (stop_bit - 7)) & 0x7f == 0 {
        return None;
    }
    // The varint's bytes only (all bits up to its stop bit).
    let mine = word & (stops ^ (stops - 1));
    let value = match u32::try_from(mine) {
        Ok(short) => u64::from(gather32(short)),
        Err(_) => gather(mine),
    };
    Some((value, len))
}

/// A varint of at most `bits` bits at the front of `bytes`, byte by byte (one of 17 bytes
/// or more, or in a value shorter than 8 bytes): the value and its length; `None` if
/// truncated, too large or not in its shortest form.
#[inline(never)]
fn varint_long<T>(bytes: &[u8], bits: u32) -> Option<(T, usize)>
where
    T: From<u8> + std::ops::Shl<u32, Output = T> + std::ops::BitOrAssign,
{
    let mut v = T::from(0);
    for (i, &b) in bytes.iter().enumerate() {
        let shift = u32::try_from(i).ok()? * 7;
        // The last byte of a full-width varint holds only the top bits.
        if shift >= bits || (shift + 7 > bits && b >> (bits - shift) != 0) {
            return None;
        }
        v |= T::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return (b != 0 || i == 0).then_some((v, i + 1));
        }
    }
    None
}

impl<'a> Reader<'a> {
    /// The next `len` bytes.
    pub(crate) fn slice(&mut self, len: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.bytes.split_at_checked(len)?;
        self.bytes = rest;
        Some(head)
    }
}

#[cfg(test)]
pub(crate) mod reference;
#[cfg(test)]
mod tests;
