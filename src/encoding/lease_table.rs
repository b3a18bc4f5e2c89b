//! Stored form of a concurrency limiter, format version 2: a lease table changed in place.
//!
//! Version 1 (see `concurrency.rs`) is a list of leases that every call decodes, rewrites
//! and replicates whole: with 10,000 leases of 36-byte ids, about 380 KB per call. Version 2
//! keeps fixed-size records in an open-addressing hash table (by id) threaded on a doubly
//! linked list ordered by expiry, so a call reads and changes a handful of records:
//!
//! ```text
//! offset 0   "\0RL", version 2, tag 'C'
//! offset 5   u16 width       bytes of id room in every record (the longest id held, 1..=256)
//! offset 7   u16 capacity    records (a power of two, 2..=32768)
//! offset 9   u16 live        records on the list (held leases, and expired ones not yet dropped)
//! offset 11  u16 used        records not empty (live and free): probing stops at an empty one
//! offset 13  u16 head        record of the soonest expiry (0xffff: none)
//! offset 15  u16 tail        record of the latest expiry (0xffff: none)
//! offset 17  capacity records of 14 + width bytes:
//!            u8 state (0 empty, 1 live, 2 free), u8 id length - 1, u16 prev, u16 next,
//!            u64 expires_at (us since the epoch), id (zero-padded to width)
//! ```
//!
//! All integers are little-endian. A record's home is `fnv1a64(id) mod capacity`, probed
//! linearly. The list runs from the soonest expiry to the latest (ties in insertion order),
//! so the leases expired at `now` are a prefix of it.
//!
//! A call first decides from the table without changing it (denials and PEEK stop there),
//! with every record it will touch read and checked, then changes those records in place
//! and reports the byte ranges it changed, which are replicated as `SETRANGE`. When a new
//! id is longer than `width`, or the table would be more than three quarters full, the
//! table is rebuilt at twice the leases held (a whole rewrite, amortized over the calls
//! that filled it).

use redis_rl_core::concurrency::{ConcurrencyParams, ConcurrencyState, Lease, MAX_ID_LEN};
use redis_rl_core::{Decision, Micros, Millis, Outcome};

use super::MAGIC;

/// The format version of a lease table.
pub const VERSION: u8 = 2;
/// The algorithm tag (the same as version 1's).
const TAG: u8 = b'C';
/// Length of the header and the table's fixed fields.
const FIXED: usize = 17;
/// Bytes of a record before its id.
const RECORD_FIXED: usize = 14;
/// "No record" in a link.
const NONE: u16 = u16::MAX;
/// A key holding one lease takes two records.
const MIN_CAPACITY: usize = 2;
/// Twice the largest limit (10,000), rounded up to a power of two.
const MAX_CAPACITY: usize = 32_768;
/// The longest valid value: the largest table of the widest records.
pub const MAX_LEN: usize = FIXED + MAX_CAPACITY * (RECORD_FIXED + MAX_ID_LEN);

const EMPTY: u8 = 0;
const LIVE: u8 = 1;
const FREE: u8 = 2;

/// Offsets of the table's fields.
const WIDTH: usize = 5;
const CAPACITY: usize = 7;
const LIVE_COUNT: usize = 9;
const USED: usize = 11;
const HEAD: usize = 13;
const TAIL: usize = 15;

/// Offsets within a record.
const STATE: usize = 0;
const ID_LEN: usize = 1;
const PREV: usize = 2;
const NEXT: usize = 4;
const EXPIRES_AT: usize = 6;
const ID: usize = RECORD_FIXED;

/// True if `bytes` starts with a version 2 concurrency header.
pub fn is_table(bytes: &[u8]) -> bool {
    bytes.get(..5) == Some(&[MAGIC[0], MAGIC[1], MAGIC[2], VERSION, TAG][..])
}

/// FNV-1a, 64 bits: the id's home record (part of the stored format).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(*bytes.get(at..)?.first_chunk::<2>()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(*bytes.get(at..)?.first_chunk::<8>()?))
}

/// One record as read.
#[derive(Clone, Copy)]
struct Record<'a> {
    state: u8,
    id: &'a [u8],
    prev: u16,
    next: u16,
    expires_at: u64,
}

/// A checked view of a version 2 value. Its header is checked when it is made; records are
/// checked as they are read, and any inconsistency is reported as corrupt.
pub struct Table<'a> {
    bytes: &'a [u8],
    width: usize,
    capacity: usize,
    live: u16,
    used: u16,
    head: u16,
    tail: u16,
}

/// A value that is not a consistent lease table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corrupt;

impl<'a> Table<'a> {
    /// Checks the header and the length; `Corrupt` if they are not a valid table's.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Corrupt> {
        if !is_table(bytes) {
            return Err(Corrupt);
        }
        let field = |at| u16_at(bytes, at).ok_or(Corrupt);
        let width = usize::from(field(WIDTH)?);
        let capacity = usize::from(field(CAPACITY)?);
        let (live, used, head, tail) =
            (field(LIVE_COUNT)?, field(USED)?, field(HEAD)?, field(TAIL)?);
        let valid = (1..=MAX_ID_LEN).contains(&width)
            && capacity.is_power_of_two()
            && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity)
            && bytes.len() == FIXED + capacity * (RECORD_FIXED + width)
            && live <= used
            && usize::from(used) < capacity
            && (live == 0) == (head == NONE)
            && (live == 0) == (tail == NONE);
        if !valid {
            return Err(Corrupt);
        }
        Ok(Table {
            bytes,
            width,
            capacity,
            live,
            used,
            head,
            tail,
        })
    }

    fn record_at(&self, slot: u16) -> usize {
        FIXED + usize::from(slot) * (RECORD_FIXED + self.width)
    }

    fn record(&self, slot: u16) -> Result<Record<'a>, Corrupt> {
        if usize::from(slot) >= self.capacity {
            return Err(Corrupt);
        }
        let at = self.record_at(slot);
        let bytes: &'a [u8] = self.bytes;
        let rec = bytes
            .get(at..at + RECORD_FIXED + self.width)
            .ok_or(Corrupt)?;
        let state = *rec.get(STATE).ok_or(Corrupt)?;
        let id_len = usize::from(*rec.get(ID_LEN).ok_or(Corrupt)?) + 1;
        let id = rec.get(ID..ID + id_len).ok_or(Corrupt)?;
        Ok(Record {
            state,
            id,
            prev: u16_at(rec, PREV).ok_or(Corrupt)?,
            next: u16_at(rec, NEXT).ok_or(Corrupt)?,
            expires_at: u64_at(rec, EXPIRES_AT).ok_or(Corrupt)?,
        })
    }

    /// A record on the list: live, and linked back to `prev`.
    fn linked(&self, slot: u16, prev: u16) -> Result<Record<'a>, Corrupt> {
        let rec = self.record(slot)?;
        if rec.state != LIVE || rec.prev != prev {
            return Err(Corrupt);
        }
        Ok(rec)
    }

    /// The leases expired at `now` (a prefix of the list): how many, and the first record
    /// after them (`NONE` if none).
    fn expired_prefix(&self, now: Micros) -> Result<(u16, u16), Corrupt> {
        let (mut count, mut cur, mut prev) = (0u16, self.head, NONE);
        while cur != NONE {
            let rec = self.linked(cur, prev)?;
            if rec.expires_at > now.0 {
                break;
            }
            count += 1;
            if count > self.live {
                return Err(Corrupt);
            }
            (prev, cur) = (cur, rec.next);
        }
        if cur == NONE && prev != self.tail {
            return Err(Corrupt);
        }
        Ok((count, cur))
    }

    /// The record holding `id` (live, whether expired or not), and the first record on its
    /// probe path that a new lease may take once the expired leases are dropped.
    fn lookup(&self, id: &[u8], now: Micros) -> Result<(Option<u16>, Option<u16>), Corrupt> {
        let mask = self.capacity - 1;
        let home = usize::try_from(fnv1a64(id)).unwrap_or(0) & mask;
        let mut reusable = None;
        for step in 0..self.capacity {
            let slot = u16::try_from((home + step) & mask).map_err(|_| Corrupt)?;
            let rec = self.record(slot)?;
            match rec.state {
                EMPTY => return Ok((None, reusable.or(Some(slot)))),
                LIVE if rec.id == id => return Ok((Some(slot), reusable)),
                LIVE if rec.expires_at > now.0 => {}
                LIVE | FREE => {
                    reusable = reusable.or(Some(slot));
                }
                _ => return Err(Corrupt),
            }
        }
        // `used < capacity`: some record is empty, so a full loop means corruption.
        Err(Corrupt)
    }

    /// Walks `steps` records on from `from`.
    fn nth_from(&self, from: u16, steps: u64) -> Result<Record<'a>, Corrupt> {
        let mut rec = self.record(from)?;
        for _ in 0..steps {
            rec = self.record(rec.next)?;
        }
        Ok(rec)
    }

    /// Where a lease expiring at `expires_at` goes: after the returned record (`NONE`: first
    /// among the leases held at `now`), walking back from the tail past later expiries and
    /// skipping `moving` (the lease being renewed).
    fn position(&self, expires_at: u64, now: Micros, moving: Option<u16>) -> Result<u16, Corrupt> {
        let mut cur = self.tail;
        for _ in 0..=self.live {
            if cur == NONE {
                return Ok(NONE);
            }
            let rec = self.record(cur)?;
            if rec.state != LIVE {
                return Err(Corrupt);
            }
            if Some(cur) != moving && rec.expires_at <= expires_at {
                return Ok(if rec.expires_at <= now.0 { NONE } else { cur });
            }
            cur = rec.prev;
        }
        Err(Corrupt)
    }

    /// Every lease on the list, soonest expiry first (for a rebuild and for conversion).
    pub fn leases(&self) -> Result<ConcurrencyState, Corrupt> {
        let mut leases = Vec::with_capacity(usize::from(self.live));
        let (mut cur, mut prev) = (self.head, NONE);
        while cur != NONE {
            let rec = self.linked(cur, prev)?;
            if leases.len() >= usize::from(self.live) {
                return Err(Corrupt);
            }
            leases.push(Lease {
                id: rec.id.to_vec(),
                expires_at: Micros(rec.expires_at),
            });
            (prev, cur) = (cur, rec.next);
        }
        if leases.len() != usize::from(self.live) || prev != self.tail {
            return Err(Corrupt);
        }
        Ok(ConcurrencyState { leases })
    }

    /// Decides an ACQUIRE at `now` without changing anything: the decision, and unless it
    /// is a denial, the change to make.
    pub fn acquire(
        &self,
        now: Micros,
        params: &ConcurrencyParams,
        id: &[u8],
    ) -> Result<(Decision, Option<Change>), Corrupt> {
        let (expired, first_held) = self.expired_prefix(now)?;
        let held = u64::from(self.live - expired);
        let (record, reusable) = self.lookup(id, now)?;
        let found = match record {
            Some(slot) if self.record(slot)?.expires_at > now.0 => Some(slot),
            _ => None,
        };
        // An expired record of this id is dropped with the other expired leases: reusable.
        let reusable = reusable.or(record);
        let limit = params.limit();
        let decision = |outcome, held: u64| Decision {
            outcome,
            limit,
            remaining: limit.saturating_sub(held),
            reset_after: Millis(0),
        };
        if found.is_none() && held >= limit {
            // One more fits once `held - limit + 1` leases have expired: the soonest ones.
            let frees = self.nth_from(first_held, held - limit)?.expires_at;
            let retry_after = Micros(frees.saturating_sub(now.0)).ceil_millis();
            return Ok((decision(Outcome::Denied { retry_after }, held), None));
        }
        let after_call = held + u64::from(found.is_none());
        let allowed = decision(Outcome::Allowed, after_call);
        let expires_at = now.0.saturating_add(params.lease_ms().saturating_mul(1000));
        let change = match found {
            Some(slot) => {
                let after = self.position(expires_at, now, Some(slot))?;
                Change::Renew {
                    expired,
                    slot,
                    after,
                    expires_at,
                }
            }
            None => {
                let slot = reusable.ok_or(Corrupt)?;
                let takes_empty = self.record(slot)?.state == EMPTY;
                let used = usize::from(self.used) + usize::from(takes_empty);
                if id.len() > self.width || used * 4 > self.capacity * 3 {
                    Change::Rebuild
                } else {
                    Change::Insert {
                        expired,
                        slot,
                        after: self.position(expires_at, now, None)?,
                        expires_at,
                    }
                }
            }
        };
        Ok((allowed, Some(change)))
    }

    /// Decides a RELEASE at `now` without changing anything: `None` if `id` holds no live
    /// lease.
    pub fn release(&self, now: Micros, id: &[u8]) -> Result<Option<Change>, Corrupt> {
        let (expired, _) = self.expired_prefix(now)?;
        let (found, _) = self.lookup(id, now)?;
        let Some(slot) = found else {
            return Ok(None);
        };
        let rec = self.record(slot)?;
        if rec.expires_at <= now.0 {
            return Ok(None);
        }
        Ok(Some(if self.live - expired == 1 {
            Change::Delete
        } else {
            Change::Release { expired, slot }
        }))
    }
}

/// A decided change to a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Drop the `expired` leases, then move the lease in `slot` to `expires_at`, after
    /// record `after`.
    Renew {
        expired: u16,
        slot: u16,
        after: u16,
        expires_at: u64,
    },
    /// Drop the `expired` leases, then put a new lease in `slot`, after record `after`.
    Insert {
        expired: u16,
        slot: u16,
        after: u16,
        expires_at: u64,
    },
    /// Drop the `expired` leases, then free the lease in `slot`.
    Release { expired: u16, slot: u16 },
    /// The last lease held is released: delete the key.
    Delete,
    /// Rewrite the whole table (a new id longer than the records, or the table too full).
    Rebuild,
}

/// Byte ranges changed in place, merged.
#[derive(Debug, Default)]
pub struct Dirty(Vec<(usize, usize)>);

impl Dirty {
    fn mark(&mut self, at: usize, len: usize) {
        self.0.push((at, at + len));
    }

    /// The changed ranges as `(offset, length)`, sorted, with ranges closer than 16 bytes
    /// merged (one `SETRANGE` costs more than a few unchanged bytes).
    pub fn ranges(mut self) -> Vec<(usize, usize)> {
        self.0.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.0.len());
        for (start, end) in self.0 {
            match merged.last_mut() {
                Some(last) if start <= last.1 + 16 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged.into_iter().map(|(s, e)| (s, e - s)).collect()
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
            let next = self.get(head, NEXT);
            self.put(self.at(head, STATE), &[FREE]);
            self.header(HEAD, next);
            if next == NONE {
                self.header(TAIL, NONE);
            } else {
                self.set(next, PREV, NONE);
            }
            let live = self.header_value(LIVE_COUNT);
            self.header(LIVE_COUNT, live.saturating_sub(1));
        }
    }

    fn unlink(&mut self, slot: u16) {
        let (prev, next) = (self.get(slot, PREV), self.get(slot, NEXT));
        if prev == NONE {
            self.header(HEAD, next);
        } else {
            self.set(prev, NEXT, next);
        }
        if next == NONE {
            self.header(TAIL, prev);
        } else {
            self.set(next, PREV, prev);
        }
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
        if after == NONE {
            self.header(HEAD, slot);
        } else {
            self.set(after, NEXT, slot);
        }
        if next == NONE {
            self.header(TAIL, slot);
        } else {
            self.set(next, PREV, slot);
        }
        let live = self.header_value(LIVE_COUNT);
        self.header(LIVE_COUNT, live.saturating_add(1));
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
    match change {
        Change::Renew {
            expired,
            slot,
            after,
            expires_at,
        } => {
            w.pop(expired);
            w.unlink(slot);
            w.put(w.at(slot, EXPIRES_AT), &expires_at.to_le_bytes());
            w.link_after(slot, after);
        }
        Change::Insert {
            expired,
            slot,
            after,
            expires_at,
        } => {
            w.pop(expired);
            let at = w.at(slot, 0);
            if w.bytes.get(at + STATE) == Some(&EMPTY) {
                let used = w.header_value(USED);
                w.header(USED, used.saturating_add(1));
            }
            let id_len = u8::try_from(id.len().saturating_sub(1)).unwrap_or(0);
            w.put(at + STATE, &[LIVE, id_len]);
            w.put(at + EXPIRES_AT, &expires_at.to_le_bytes());
            let mut room = vec![0u8; width];
            if let Some(dst) = room.get_mut(..id.len()) {
                dst.copy_from_slice(id);
            }
            w.put(at + ID, &room);
            w.link_after(slot, after);
        }
        Change::Release { expired, slot } => {
            w.pop(expired);
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
    use redis_rl_core::concurrency::{self, acquire, release, Concurrency};
    use redis_rl_core::Algorithm as _;

    fn params(limit: u64, lease_ms: u64) -> ConcurrencyParams {
        ConcurrencyParams::new(limit, lease_ms).unwrap()
    }

    /// The leases held at `now`, as the core sees them.
    fn held(state: &ConcurrencyState, now: Micros) -> Vec<Lease> {
        let mut leases: Vec<_> = state
            .leases
            .iter()
            .filter(|l| l.expires_at > now)
            .cloned()
            .collect();
        leases.sort_by(|a, b| (a.expires_at, &a.id).cmp(&(b.expires_at, &b.id)));
        leases
    }

    #[test]
    fn layout_of_a_small_table() {
        let state = ConcurrencyState {
            leases: vec![Lease {
                id: b"ab".to_vec(),
                expires_at: Micros(7),
            }],
        };
        let bytes = build(&state);
        assert_eq!(bytes.len(), FIXED + 2 * (RECORD_FIXED + 2));
        assert_eq!(&bytes[..5], b"\0RL\x02C");
        assert_eq!(u16_at(&bytes, WIDTH), Some(2));
        assert_eq!(u16_at(&bytes, CAPACITY), Some(2));
        assert_eq!(u16_at(&bytes, LIVE_COUNT), Some(1));
        let slot = (fnv1a64(b"ab") & 1) as usize;
        let rec = &bytes[FIXED + slot * 16..FIXED + slot * 16 + 16];
        assert_eq!(
            rec,
            &[1, 1, 0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0, 0, 0, 0, 0, b'a', b'b']
        );
        let table = Table::parse(&bytes).unwrap();
        assert_eq!(table.leases().unwrap(), state);
    }

    #[test]
    fn damaged_tables_are_corrupt_and_never_loop() {
        let state = ConcurrencyState {
            leases: (0..5)
                .map(|i| Lease {
                    id: vec![b'a' + i],
                    expires_at: Micros(100 + u64::from(i)),
                })
                .collect(),
        };
        let good = build(&state);
        for i in 5..good.len() {
            for v in [0u8, 1, 2, 0xff] {
                let mut bad = good.clone();
                bad[i] = v;
                if let Ok(table) = Table::parse(&bad) {
                    let _ = table.leases();
                    let _ = table.acquire(Micros(50), &params(10, 1), b"z");
                    let _ = table.acquire(Micros(102), &params(2, 1), b"c");
                    let _ = table.release(Micros(50), b"c");
                }
            }
        }
        assert_eq!(Table::parse(&good[..good.len() - 1]).err(), Some(Corrupt));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Acquire {
            id: u8,
            len: usize,
            limit: u64,
            lease_ms: u64,
            peek: bool,
        },
        Release {
            id: u8,
            len: usize,
        },
    }

    fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
        let op = prop_oneof![
            (0u8..12, 1usize..40, 1u64..8, 1u64..50, any::<bool>()).prop_map(
                |(id, len, limit, lease_ms, peek)| Op::Acquire {
                    id,
                    len,
                    limit,
                    lease_ms,
                    peek
                }
            ),
            (0u8..12, 1usize..40).prop_map(|(id, len)| Op::Release { id, len }),
        ];
        prop::collection::vec((0u64..20_000, op), 1..120)
    }

    fn id_of(id: u8, len: usize) -> Vec<u8> {
        // An id's length is fixed by its number, so one id never has two lengths.
        vec![b'a' + id; 1 + (len * usize::from(id)) % 40]
    }

    proptest! {
        /// Every call on the table decides as the core decides on the same leases, and
        /// leaves the same leases held (the table is only ever changed in place or rebuilt).
        #[test]
        fn the_table_decides_and_holds_as_the_core(ops in ops()) {
            let mut model: Option<ConcurrencyState> = None;
            let mut bytes: Option<Vec<u8>> = None;
            let mut now = 1_000_000u64;
            for (step, op) in ops {
                now += step;
                let at = Micros(now);
                match op {
                    Op::Acquire { id, len, limit, lease_ms, peek } => {
                        let id = id_of(id, len);
                        let p = params(limit, lease_ms);
                        let (expected, next) = acquire(model.clone(), at, &p, &id);
                        let table_bytes = bytes.clone().unwrap_or_else(|| build(&ConcurrencyState::default()));
                        let table = Table::parse(&table_bytes).unwrap();
                        let (decision, change) = table.acquire(at, &p, &id).unwrap();
                        prop_assert_eq!(decision, expected);
                        prop_assert_eq!(change.is_some(), next.is_some());
                        if peek {
                            continue;
                        }
                        if let Some(change) = change {
                            let mut changed = table_bytes.clone();
                            match change {
                                Change::Rebuild => {
                                    let (_, rebuilt) = acquire(Some(table.leases().unwrap()), at, &p, &id);
                                    changed = build(&rebuilt.unwrap());
                                }
                                _ => {
                                    let (dirty, _) = apply(&mut changed, change, &id);
                                    // Only the reported ranges changed.
                                    let mut check = table_bytes.clone();
                                    for (off, len) in dirty.ranges() {
                                        check[off..off + len].copy_from_slice(&changed[off..off + len]);
                                    }
                                    prop_assert_eq!(&check, &changed);
                                }
                            }
                            bytes = Some(changed);
                            model = next;
                        }
                    }
                    Op::Release { id, len } => {
                        let id = id_of(id, len);
                        let expected = release(model.clone(), at, &id);
                        let Some(table_bytes) = bytes.clone() else {
                            prop_assert_eq!(expected, concurrency::Release::NotHeld);
                            continue;
                        };
                        let table = Table::parse(&table_bytes).unwrap();
                        let change = table.release(at, &id).unwrap();
                        match (change, expected) {
                            (None, concurrency::Release::NotHeld) => {}
                            (Some(Change::Delete), concurrency::Release::Released(None)) => {
                                bytes = None;
                                model = None;
                            }
                            (Some(change), concurrency::Release::Released(Some(next))) => {
                                let mut changed = table_bytes.clone();
                                apply(&mut changed, change, &id);
                                bytes = Some(changed);
                                model = Some(next);
                            }
                            (change, expected) => prop_assert!(false, "{:?} vs {:?}", change, expected),
                        }
                    }
                }
                if let (Some(b), Some(m)) = (&bytes, &model) {
                    let table = Table::parse(b).unwrap();
                    let leases = table.leases().unwrap();
                    prop_assert_eq!(held(&leases, at), held(m, at));
                    // The list is in expiry order.
                    prop_assert!(leases.leases.windows(2).all(|w| w[0].expires_at <= w[1].expires_at));
                    let described = Concurrency::view(&leases, at);
                    let core_view = Concurrency::view(m, at);
                    prop_assert_eq!(described, core_view);
                }
            }
        }
    }
}
