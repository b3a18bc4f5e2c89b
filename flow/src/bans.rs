//! Bans around a request's decision: which of a plan's subjects is banned, from the
//! `PTTL` replies the host read with the limiter call, and from bans read a moment ago
//! (believed for [`BAN_RECHECK_MS`] without asking again: a flood of banned requests costs
//! Redis one read per subject and second per process).

use std::collections::HashMap;
use std::sync::Mutex;

use redis_rl_policy::BanTarget;

/// How long a ban read from Redis is believed without reading it again, in milliseconds:
/// a lifted ban is lifted everywhere within this.
pub const BAN_RECHECK_MS: u64 = 1_000;
/// [`BAN_RECHECK_MS`] as a duration.
pub const BAN_RECHECK: std::time::Duration = std::time::Duration::from_millis(BAN_RECHECK_MS);
/// Bans remembered in process at most (past it, the ended ones are dropped, else the new
/// one is not remembered: it is read from Redis again).
pub const BAN_MEMORY: usize = 10_000;

/// The remaining milliseconds of a ban from its key's `PTTL` reply (`None`: not banned).
/// 0 is the ban's last millisecond (the key still exists, so a lift still finds it): 1 ms
/// more; -2 (no key) and -1 (a key without expiry, never written so by a front end) are no
/// ban.
pub fn ban_remaining_ms(pttl: i64) -> Option<u64> {
    u64::try_from(pttl).ok().map(|ms| ms.max(1))
}

/// Bans recently read from Redis: subject -> (read again at, ends at), in the host's
/// monotonic milliseconds.
#[derive(Debug, Default)]
pub struct BanMemory {
    bans: Mutex<HashMap<String, (u64, u64)>>,
}

impl BanMemory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, u64)>> {
        self.bans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first of `targets` banned as last read less than [`BAN_RECHECK_MS`] before
    /// `now_ms`: its plan item and the ban's remaining milliseconds.
    pub fn recall(&self, targets: &[BanTarget], now_ms: u64) -> Option<(usize, u64)> {
        if targets.is_empty() {
            return None;
        }
        let bans = self.lock();
        targets.iter().find_map(|t| {
            let (recheck, ends) = bans.get(&t.subject)?;
            (now_ms < *recheck && now_ms < *ends).then(|| (t.index, (ends - now_ms).max(1)))
        })
    }

    /// Remembers the ban of `targets`' item `index` with `remaining_ms` left.
    pub fn remember(&self, targets: &[BanTarget], index: usize, remaining_ms: u64, now_ms: u64) {
        let Some(t) = targets.iter().find(|t| t.index == index) else {
            return;
        };
        let ends = now_ms.saturating_add(remaining_ms);
        let mut bans = self.lock();
        if bans.len() >= BAN_MEMORY && !bans.contains_key(&t.subject) {
            bans.retain(|_, (recheck, ends)| now_ms < *recheck && now_ms < *ends);
            if bans.len() >= BAN_MEMORY {
                return;
            }
        }
        let recheck = ends.min(now_ms.saturating_add(BAN_RECHECK_MS));
        bans.insert(t.subject.clone(), (recheck, ends));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_rl_policy::Ban;

    fn target(index: usize, subject: &str) -> BanTarget {
        BanTarget {
            index,
            policy: "login".into(),
            subject: subject.into(),
            ban: Some(Ban::new(1, 1_000, 1_000).unwrap()),
        }
    }

    #[test]
    fn a_ban_read_is_recalled_with_its_remaining_time_for_at_most_a_second_and_bounded() {
        let memory = BanMemory::default();
        let targets = [target(0, "a"), target(3, "b")];
        assert_eq!(memory.recall(&targets, 10), None);
        memory.remember(&targets, 3, 600_000, 10);
        assert_eq!(memory.recall(&targets, 10), Some((3, 600_000)));
        assert_eq!(memory.recall(&targets, 509), Some((3, 599_501)));
        // Believed for BAN_RECHECK_MS, however long the ban: then read again.
        assert_eq!(memory.recall(&targets, 10 + BAN_RECHECK_MS), None);
        // An ended ban is not recalled.
        memory.remember(&targets, 0, 5, 100);
        assert_eq!(memory.recall(&targets[..1], 104), Some((0, 1)));
        assert_eq!(memory.recall(&targets[..1], 105), None);
        // Full: ended entries make room; live ones are kept and the new one is not stored.
        for i in 0..BAN_MEMORY {
            memory.remember(&[target(0, &format!("k{i}"))], 0, 60_000, 200);
        }
        memory.remember(&[target(0, "new")], 0, 60_000, 300);
        assert_eq!(memory.recall(&[target(0, "new")], 300), None);
        assert!(memory.len() <= BAN_MEMORY);
    }

    #[test]
    fn pttl_replies_read_as_bans() {
        assert_eq!(ban_remaining_ms(-2), None);
        assert_eq!(ban_remaining_ms(-1), None);
        assert_eq!(ban_remaining_ms(0), Some(1));
        assert_eq!(ban_remaining_ms(1_500), Some(1_500));
    }
}
