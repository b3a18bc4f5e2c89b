//! Writing a lease table: in-place changes (with the byte ranges they touch, replicated as
//! `SETRANGE`) and whole rebuilds.

use super::*;

/// Where a renewed or new lease goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Expired leases to drop first (the head of the list).
    pub expired: u16,
    /// The lease's record.
    pub slot: u16,
    /// The record it is linked after (`NONE`: first on the list).
    pub after: u16,
    /// Its new expiry (us since the epoch).
    pub expires_at: u64,
}

/// A decided change to a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Drop the `expired` leases, then move the lease in `slot` to `expires_at`, after
    /// record `after`.
    Renew(Placement),
    /// Drop the `expired` leases, then put a new lease in `slot`, after record `after`.
    Insert(Placement),
    /// Drop the `expired` leases, then free the lease in `slot`.
    Release { expired: u16, slot: u16 },
    /// The last lease held is released: delete the key.
    Delete,
    /// Rewrite the whole table (a new id longer than the records, or the table too full).
    Rebuild,
}

/// Ranges closer than this many bytes are replicated as one (one `SETRANGE` costs more than a
/// few unchanged bytes).
const GAP: usize = 16;
/// Merged ranges held without an allocation (a renewal or an insertion touches 2 to 4).
const INLINE: usize = 8;

/// Byte ranges changed in place as `(offset, length)`, merged as they are marked: sorted, and
/// any two ranges at most [`GAP`] bytes apart joined (what sorting every mark and merging
/// neighbours gives). Up to [`INLINE`] ranges take no allocation.
#[derive(Debug, Default)]
pub struct Dirty {
    inline: [(usize, usize); INLINE],
    len: usize,
    /// Every range, once there are more than [`INLINE`] (many expired leases dropped at once).
    spilled: Vec<(usize, usize)>,
    /// The range (start, end) the last new mark ended up in: ranges only grow, so it stays
    /// inside one, and most marks of a call fall in it (a record's fields, the header).
    hot: (usize, usize),
}

/// Where a mark of `start..end` goes among sorted, merged `ranges`: it replaces
/// `ranges[first..last]` (those it touches, none if `first == last`) with the returned range.
fn merge(ranges: &[(usize, usize)], start: usize, end: usize) -> (usize, usize, (usize, usize)) {
    let first = ranges.partition_point(|&(at, len)| at + len + GAP < start);
    let (mut start, mut end, mut last) = (start, end, first);
    while let Some(&(at, len)) = ranges.get(last) {
        if at > end + GAP {
            break;
        }
        (start, end) = (start.min(at), end.max(at + len));
        last += 1;
    }
    (first, last, (start, end - start))
}

impl Dirty {
    #[inline]
    fn mark(&mut self, at: usize, len: usize) {
        if at >= self.hot.0 && at + len <= self.hot.1 {
            return;
        }
        self.add(at, len);
    }

    fn add(&mut self, at: usize, len: usize) {
        if !self.spilled.is_empty() {
            let (first, last, range) = merge(&self.spilled, at, at + len);
            self.hot = (range.0, range.0 + range.1);
            let after = self.spilled.split_off(last.min(self.spilled.len()));
            self.spilled.truncate(first);
            self.spilled.push(range);
            self.spilled.extend(after);
            return;
        }
        let n = self.len;
        let end = at + len;
        // The first range, or one that joins the only range (a small table: header and
        // records within a few bytes of each other).
        let single = match (n, self.inline.first()) {
            (0, _) => Some((at, end)),
            (1, Some(&(o, l))) if at <= o + l + GAP && o <= end + GAP => {
                Some((at.min(o), end.max(o + l)))
            }
            _ => None,
        };
        if let (Some((start, end)), Some(slot)) = (single, self.inline.first_mut()) {
            *slot = (start, end - start);
            self.len = 1;
            self.hot = (start, end);
            return;
        }
        let ranges = self.inline.get(..n).unwrap_or_default();
        // Most marks of a call fall in a range already marked (a record's fields, the header).
        if ranges.iter().any(|&(o, l)| at >= o && at + len <= o + l) {
            return;
        }
        let (first, last, range) = merge(ranges, at, at + len);
        self.hot = (range.0, range.0 + range.1);
        match last - first {
            // A new range at `first`: the ones from there move up one.
            0 if n < INLINE => {
                if let Some(tail) = self.inline.get_mut(first..=n) {
                    let moved = tail.len() - 1;
                    tail.copy_within(..moved, 1);
                    if let Some(slot) = tail.first_mut() {
                        *slot = range;
                    }
                }
                self.len = n + 1;
            }
            0 => {
                self.spilled.reserve(2 * INLINE);
                self.spilled
                    .extend_from_slice(self.inline.get(..first).unwrap_or_default());
                self.spilled.push(range);
                self.spilled
                    .extend_from_slice(self.inline.get(first..n).unwrap_or_default());
            }
            // `first..last` become one range: the ones after it move down.
            joined => {
                if let Some(slot) = self.inline.get_mut(first) {
                    *slot = range;
                }
                if let Some(tail) = self.inline.get_mut(first + 1..n) {
                    tail.copy_within(joined - 1.., 0);
                }
                self.len = n - (joined - 1);
            }
        }
    }

    /// The changed ranges as `(offset, length)`, sorted.
    pub fn ranges(&self) -> &[(usize, usize)] {
        if self.spilled.is_empty() {
            self.inline.get(..self.len).unwrap_or_default()
        } else {
            &self.spilled
        }
    }
}

/// A table being changed in place.
struct Writer<'b> {
    bytes: &'b mut [u8],
    width: usize,
    dirty: Dirty,
}

impl Writer<'_> {
    fn put(&mut self, at: usize, value: &[u8]) {
        if let Some(dst) = self.bytes.get_mut(at..at + value.len()) {
            dst.copy_from_slice(value);
            self.dirty.mark(at, value.len());
        }
    }

    /// Writes `value` followed by zeros up to `room` bytes, marked as one range.
    fn put_padded(&mut self, at: usize, value: &[u8], room: usize) {
        if let Some(dst) = self.bytes.get_mut(at..at + room) {
            let (head, tail) = dst.split_at_mut(value.len().min(room));
            head.copy_from_slice(value.get(..head.len()).unwrap_or_default());
            tail.fill(0);
            self.dirty.mark(at, room);
        }
    }

    fn header(&mut self, field: usize, value: u16) {
        self.put(field, &value.to_le_bytes());
    }

    fn header_value(&self, field: usize) -> u16 {
        u16_at(self.bytes, field).unwrap_or(NONE)
    }

    fn at(&self, slot: u16, field: usize) -> usize {
        FIXED + usize::from(slot) * (RECORD_FIXED + self.width) + field
    }

    fn set(&mut self, slot: u16, field: usize, value: u16) {
        self.put(self.at(slot, field), &value.to_le_bytes());
    }

    fn get(&self, slot: u16, field: usize) -> u16 {
        u16_at(self.bytes, self.at(slot, field)).unwrap_or(NONE)
    }

    /// Drops the first `count` leases of the list (expired).
    fn pop(&mut self, count: u16) {
        for _ in 0..count {
            let head = self.header_value(HEAD);
            self.put(self.at(head, STATE), &[FREE]);
            self.unlink(head);
        }
    }

    fn unlink(&mut self, slot: u16) {
        let (prev, next) = (self.get(slot, PREV), self.get(slot, NEXT));
        self.point(prev, NEXT, HEAD, next);
        self.point(next, PREV, TAIL, prev);
        let live = self.header_value(LIVE_COUNT);
        self.header(LIVE_COUNT, live.saturating_sub(1));
    }

    fn link_after(&mut self, slot: u16, after: u16) {
        let next = if after == NONE {
            self.header_value(HEAD)
        } else {
            self.get(after, NEXT)
        };
        self.set(slot, PREV, after);
        self.set(slot, NEXT, next);
        self.point(after, NEXT, HEAD, slot);
        self.point(next, PREV, TAIL, slot);
        let live = self.header_value(LIVE_COUNT);
        self.header(LIVE_COUNT, live.saturating_add(1));
    }

    /// Points record `slot`'s link `field` at `to`; with no record (`NONE`, an end of the
    /// list), the list's `end` in the header instead.
    fn point(&mut self, slot: u16, field: usize, end: usize, to: u16) {
        if slot == NONE {
            self.header(end, to);
        } else {
            self.set(slot, field, to);
        }
    }
}

/// Applies a change decided by [`Table::acquire`] or [`Table::release`] on the same bytes
/// (`Renew`, `Insert` or `Release`; the others change nothing here), for lease `id`, and
/// returns the ranges changed and when the last lease now expires (us).
pub fn apply(bytes: &mut [u8], change: Change, id: &[u8]) -> (Dirty, u64) {
    let width = usize::from(u16_at(bytes, WIDTH).unwrap_or(0));
    let mut w = Writer {
        bytes,
        width,
        dirty: Dirty::default(),
    };
    let expired = match change {
        Change::Renew(place) | Change::Insert(place) => place.expired,
        Change::Release { expired, .. } => expired,
        Change::Delete | Change::Rebuild => 0,
    };
    w.pop(expired);
    match change {
        Change::Renew(place) => {
            w.unlink(place.slot);
            w.put(
                w.at(place.slot, EXPIRES_AT),
                &place.expires_at.to_le_bytes(),
            );
            w.link_after(place.slot, place.after);
        }
        Change::Insert(place) => {
            let at = w.at(place.slot, 0);
            if w.bytes.get(at + STATE) == Some(&EMPTY) {
                let used = w.header_value(USED);
                w.header(USED, used.saturating_add(1));
            }
            let id_len = u8::try_from(id.len().saturating_sub(1)).unwrap_or(0);
            w.put(at + STATE, &[LIVE, id_len]);
            w.put(at + EXPIRES_AT, &place.expires_at.to_le_bytes());
            w.put_padded(at + ID, id, width);
            w.link_after(place.slot, place.after);
        }
        Change::Release { slot, .. } => {
            w.unlink(slot);
            w.put(w.at(slot, STATE), &[FREE]);
        }
        Change::Delete | Change::Rebuild => {}
    }
    let tail = w.header_value(TAIL);
    let last = if tail == NONE {
        0
    } else {
        u64_at(w.bytes, w.at(tail, EXPIRES_AT)).unwrap_or(0)
    };
    (w.dirty, last)
}

/// A fresh table holding `state`'s leases (soonest expiry first), sized at twice their
/// number, with records as wide as the longest id.
pub fn build(state: &ConcurrencyState) -> Vec<u8> {
    let count = state.leases.len();
    let width = state
        .leases
        .iter()
        .map(|l| l.id.len())
        .max()
        .unwrap_or(1)
        .clamp(1, MAX_ID_LEN);
    let capacity = (2 * count)
        .next_power_of_two()
        .clamp(MIN_CAPACITY, MAX_CAPACITY);
    let record = RECORD_FIXED + width;
    let mut bytes = vec![0u8; FIXED + capacity * record];
    let mut slots = Vec::with_capacity(count);
    let mask = capacity - 1;
    for lease in &state.leases {
        let home = usize::try_from(fnv1a64(&lease.id)).unwrap_or(0) & mask;
        let slot = (0..capacity)
            .map(|step| (home + step) & mask)
            .find(|&slot| bytes.get(FIXED + slot * record) == Some(&EMPTY))
            .unwrap_or(0);
        let at = FIXED + slot * record;
        if let Some(rec) = bytes.get_mut(at..at + record) {
            let id_len = u8::try_from(lease.id.len().saturating_sub(1)).unwrap_or(0);
            rec.iter_mut().zip([LIVE, id_len]).for_each(|(b, v)| *b = v);
            if let Some(dst) = rec.get_mut(EXPIRES_AT..EXPIRES_AT + 8) {
                dst.copy_from_slice(&lease.expires_at.0.to_le_bytes());
            }
            if let Some(dst) = rec.get_mut(ID..ID + lease.id.len()) {
                dst.copy_from_slice(&lease.id);
            }
        }
        slots.push(u16::try_from(slot).unwrap_or(NONE));
    }
    for (i, &slot) in slots.iter().enumerate() {
        let prev = i.checked_sub(1).and_then(|p| slots.get(p)).copied();
        let next = slots.get(i + 1).copied();
        let at = FIXED + usize::from(slot) * record;
        if let Some(dst) = bytes.get_mut(at + PREV..at + EXPIRES_AT) {
            dst.copy_from_slice(
                &[
                    prev.unwrap_or(NONE).to_le_bytes(),
                    next.unwrap_or(NONE).to_le_bytes(),
                ]
                .concat(),
            );
        }
    }
    let n = u16::try_from(count).unwrap_or(NONE);
    let header = [
        &MAGIC[..],
        &[VERSION, TAG],
        &u16::try_from(width).unwrap_or(0).to_le_bytes(),
        &u16::try_from(capacity).unwrap_or(0).to_le_bytes(),
        &n.to_le_bytes(),
        &n.to_le_bytes(),
        &slots.first().copied().unwrap_or(NONE).to_le_bytes(),
        &slots.last().copied().unwrap_or(NONE).to_le_bytes(),
    ]
    .concat();
    if let Some(dst) = bytes.get_mut(..FIXED) {
        dst.copy_from_slice(&header);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every mark sorted, then neighbours at most `GAP` bytes apart merged.
    fn sorted_and_merged(marks: &[(usize, usize)]) -> Vec<(usize, usize)> {
        let mut ends: Vec<(usize, usize)> = marks.iter().map(|&(at, len)| (at, at + len)).collect();
        ends.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (start, end) in ends {
            match merged.last_mut() {
                Some(last) if start <= last.1 + GAP => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged.into_iter().map(|(s, e)| (s, e - s)).collect()
    }

    proptest! {
        /// Merging as marks come gives what sorting and merging them all gives, inline or
        /// spilled.
        #[test]
        fn marks_merge_as_a_sort_would(
            marks in prop::collection::vec((0usize..3_000, 1usize..40), 0..60),
        ) {
            let mut dirty = Dirty::default();
            for (i, &(at, len)) in marks.iter().enumerate() {
                dirty.mark(at, len);
                prop_assert_eq!(dirty.ranges(), &sorted_and_merged(&marks[..=i])[..]);
            }
        }
    }
}
