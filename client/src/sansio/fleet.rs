//! Fleet membership for a host that runs the heartbeat from its own timer: the same
//! `RL.CONCURRENCY` lease per member and the same checks as [`crate::fleet`] (a key holding
//! a lease longer than `ttl` is not believed; after a failed heartbeat the size only grows
//! for one `ttl`; it moves by at most a factor of [`crate::fleet::MAX_STEP`] per heartbeat),
//! driven by [`super::Layers::pending`]: no thread, no task of its own.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use redis::Value;

use crate::error::Result;
use crate::fleet::{
    bounded_step, forged, last_expiry_ms, members, millis, settled_size, FleetConfig, MAX_MEMBERS,
};

/// The heartbeat's schedule and what it learned.
#[derive(Debug, Default)]
struct Beat {
    /// When the next heartbeat is due (wall ms; 0: at once).
    due_ms: u64,
    /// A heartbeat is in flight: no second one.
    running: bool,
    /// The last heartbeat failed: the next good one starts a settling time.
    failed: bool,
    /// Until then (wall ms) the size only grows.
    settle_until_ms: Option<u64>,
}

/// One limiter's membership.
#[derive(Debug)]
pub(crate) struct Fleet {
    pub(crate) config: FleetConfig,
    /// Whether the local fallback divides by the fleet size (no static `instances`).
    divides: bool,
    /// The last size read (0: never read).
    size: AtomicU32,
    beat: Mutex<Beat>,
}

impl Fleet {
    pub(crate) fn new(config: FleetConfig, divides: bool) -> Self {
        Self {
            config,
            divides,
            size: AtomicU32::new(0),
            beat: Mutex::new(Beat::default()),
        }
    }

    fn beat(&self) -> std::sync::MutexGuard<'_, Beat> {
        self.beat.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live fleet size, once read.
    pub(crate) fn size(&self) -> Option<NonZeroU32> {
        NonZeroU32::new(self.size.load(Ordering::Relaxed))
    }

    /// What the local fallback divides by, when it divides by the fleet size.
    pub(crate) fn share(&self) -> Option<NonZeroU32> {
        self.size().filter(|_| self.divides)
    }

    /// Whether a heartbeat is due at `now_ms`; if so it is marked running.
    pub(crate) fn due(&self, now_ms: u64) -> bool {
        let mut beat = self.beat();
        if beat.running || now_ms < beat.due_ms {
            return false;
        }
        beat.running = true;
        beat.due_ms = now_ms.saturating_add(millis(self.config.heartbeat));
        true
    }

    /// `RL.CONCURRENCY key 10000 ttl_ms ACQUIRE id`.
    pub(crate) fn acquire(&self) -> Vec<String> {
        let c = &self.config;
        vec![
            "RL.CONCURRENCY".to_string(),
            c.key.clone(),
            MAX_MEMBERS.to_string(),
            millis(c.ttl).to_string(),
            "ACQUIRE".to_string(),
            c.id.clone(),
        ]
    }

    /// `RL.STATE key`: the expiry of the key's longest lease.
    pub(crate) fn state(&self) -> Vec<String> {
        vec!["RL.STATE".to_string(), self.config.key.clone()]
    }

    /// `RL.CONCURRENCY key RELEASE id`.
    pub(crate) fn release(&self) -> Vec<String> {
        vec![
            "RL.CONCURRENCY".to_string(),
            self.config.key.clone(),
            "RELEASE".to_string(),
            self.config.id.clone(),
        ]
    }

    /// The ACQUIRE reply's member count.
    pub(crate) fn read(reply: &Value) -> Result<NonZeroU32> {
        members(reply)
    }

    /// The heartbeat ended: `read` members counted at `now_ms`, believed when the RL.STATE
    /// reply `state` shows no lease longer than a member asks for (`None`: the heartbeat
    /// failed). Returns the size kept.
    pub(crate) fn ended(
        &self,
        now_ms: u64,
        read: Option<NonZeroU32>,
        state: Option<&Value>,
    ) -> Option<NonZeroU32> {
        let mut beat = self.beat();
        beat.running = false;
        let Some(read) = read else {
            beat.failed = true;
            return self.size();
        };
        let trusted = state
            .and_then(last_expiry_ms)
            .is_none_or(|last| !forged(last, now_ms, self.config.ttl));
        if state.is_none() || !trusted {
            // A count that could not be checked is not believed: forged leases would count.
            return self.size();
        }
        if std::mem::take(&mut beat.failed) {
            beat.settle_until_ms = Some(now_ms.saturating_add(millis(self.config.ttl)));
        }
        let previous = self.size();
        let size = bounded_step(
            previous,
            settled_size(previous, read, now_ms, beat.settle_until_ms),
        );
        self.size.store(size.get(), Ordering::Relaxed);
        Some(size)
    }
}
