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
                Change::Renew(Placement {
                    expired,
                    slot,
                    after,
                    expires_at,
                })
            }
            None => {
                let slot = reusable.ok_or(Corrupt)?;
                let takes_empty = self.record(slot)?.state == EMPTY;
                let used = usize::from(self.used) + usize::from(takes_empty);
                if id.len() > self.width || used * 4 > self.capacity * 3 {
                    Change::Rebuild
                } else {
                    Change::Insert(Placement {
                        expired,
                        slot,
                        after: self.position(expires_at, now, None)?,
                        expires_at,
                    })
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

mod write;
pub use write::{apply, build, Change, Dirty, Placement};

#[cfg(test)]
mod tests;
