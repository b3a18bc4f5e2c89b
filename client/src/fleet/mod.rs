//! Fleet membership: each limiter (one per gateway process) holds an `RL.CONCURRENCY`
//! lease named by its instance id on one fleet key, renewed by a heartbeat, and reads the
//! live fleet size from the reply (`limit - remaining`: the leases held, its own included).
//!
//! Why a concurrency lease: it is the module's own "who is alive" primitive. A crashed
//! gateway stops renewing and is no longer counted once its lease expires (`ttl`); a gateway
//! that stops cleanly releases it at once; the renewal is one O(1) call of a few hundred
//! bytes however large the fleet. A new gateway is counted by the others at their next
//! heartbeat (within `heartbeat`, 1 s by default).
//!
//! The size is what the local fallback divides each limit by while Redis is down
//! ([`crate::layers::failover`]): the last size known before the outage, so a fleet that scaled
//! since the configuration was written still shares each limit once, not `N` times.
//!
//! Trust: anyone who can write the fleet key can change what it counts. Two bounds limit
//! what that buys: a reading from a key holding a lease longer than this member's `ttl`
//! (no gateway of the fleet asks for one) is not believed (the size stays), and the size
//! used moves by at most a factor of [`MAX_STEP`] per heartbeat, so a deleted or flooded key
//! takes several heartbeats to move it far, and is logged meanwhile.

#[cfg(feature = "transport")]
pub mod bans;
#[cfg(feature = "transport")]
pub(crate) mod denials;
#[cfg(feature = "transport")]
pub mod offenders;

use std::time::Duration;

use redis::Value;
use std::num::NonZeroU32;

use crate::error::{Error, Result};
// The heartbeat task's (feature `transport`).
#[cfg(feature = "transport")]
use {
    crate::transport::{is_unknown_command, wall_ms, Transport},
    std::sync::atomic::{AtomicBool, AtomicU32, Ordering},
    std::sync::Arc,
    std::time::Instant,
};

/// The most members one fleet key counts (`RL.CONCURRENCY`'s largest `limit`).
pub const MAX_MEMBERS: u64 = 10_000;

/// The largest factor by which the size used changes in one heartbeat (up or down).
pub const MAX_STEP: u32 = 2;

/// Fleet membership settings ([`crate::Limiter::join_fleet`]).
///
/// ```
/// use redis_rl_client::FleetConfig;
/// let fleet = FleetConfig::new("rl:{fleet}");
/// assert_eq!(fleet.heartbeat, std::time::Duration::from_secs(1));
/// assert!(fleet.ttl > fleet.heartbeat);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetConfig {
    /// The fleet key (one per fleet; every member names the same one).
    pub key: String,
    /// This member's id (default: unique per process and start).
    pub id: String,
    /// Time between renewals (default 1 s): how soon a new member is counted by the others.
    pub heartbeat: Duration,
    /// Lease time (default 3 s): how long a member that stopped renewing (crashed,
    /// partitioned) is still counted.
    pub ttl: Duration,
}

impl FleetConfig {
    /// Membership on `key` with a fresh id, a 1 s heartbeat and a 3 s lease.
    pub fn new(key: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            id: instance_id(),
            heartbeat: Duration::from_secs(1),
            ttl: Duration::from_secs(3),
        }
    }

    /// Checks the numbers the server would refuse, and that a lease outlives a heartbeat.
    pub fn validate(&self) -> Result<()> {
        if self.key.is_empty() || self.id.is_empty() || self.id.len() > 256 {
            return Err(Error::Config(
                "fleet: key must not be empty and id must be 1 to 256 bytes".to_string(),
            ));
        }
        if self.heartbeat.is_zero() || self.ttl <= self.heartbeat {
            return Err(Error::Config(format!(
                "fleet: heartbeat ({:?}) must be positive and shorter than ttl ({:?})",
                self.heartbeat, self.ttl
            )));
        }
        // The server refuses a lease outside this range: every heartbeat would fail.
        let range = redis_rl_core::concurrency::LEASE_MS;
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        if range.check(ttl_ms).is_err() {
            return Err(Error::Config(format!(
                "fleet: ttl_ms must be between {} and {} (RL.CONCURRENCY's lease_ms), got {ttl_ms}",
                range.min, range.max
            )));
        }
        Ok(())
    }
}

/// An id unique to this process and start: pid, start time and the std hasher's random keys.
fn instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    format!("{}-{:016x}", std::process::id(), h.finish())
}

/// What the limiter knows of its fleet, shared by the heartbeat and the failover layer.
#[cfg(feature = "transport")]
#[derive(Debug)]
pub(crate) struct FleetView {
    /// The last size read from Redis (0: never read).
    size: AtomicU32,
    /// Whether the local fallback divides by the fleet size.
    divide: AtomicBool,
}

#[cfg(feature = "transport")]
impl FleetView {
    pub(crate) fn new(divide: bool) -> Self {
        Self {
            size: AtomicU32::new(0),
            divide: AtomicBool::new(divide),
        }
    }

    /// The last size known (None before the first heartbeat answered).
    pub(crate) fn size(&self) -> Option<NonZeroU32> {
        NonZeroU32::new(self.size.load(Ordering::Relaxed))
    }

    fn set(&self, size: NonZeroU32) {
        self.size.store(size.get(), Ordering::Relaxed);
        metrics::gauge!("rl_fleet_size").set(f64::from(size.get()));
    }

    /// What the local fallback divides a policy's limit by: the fleet size when it is
    /// known and fleet-aware fallback is on, else (`None`) the policy's own `instances`.
    pub(crate) fn share(&self) -> Option<NonZeroU32> {
        if self.divide.load(Ordering::Relaxed) {
            self.size()
        } else {
            None
        }
    }
}

/// `RL.CONCURRENCY key 10000 ttl_ms ACQUIRE id`.
#[cfg(feature = "transport")]
fn acquire(config: &FleetConfig) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.CONCURRENCY");
    cmd.arg(&config.key)
        .arg(MAX_MEMBERS)
        .arg(millis(config.ttl))
        .arg("ACQUIRE")
        .arg(&config.id);
    cmd
}

/// `RL.STATE key`: the expiry of the key's longest lease.
#[cfg(feature = "transport")]
fn state(config: &FleetConfig) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.STATE");
    cmd.arg(&config.key);
    cmd
}

/// `last_expiry_ms` of an `RL.STATE` reply (a flat list of names and values, or a map).
pub(crate) fn last_expiry_ms(v: &Value) -> Option<u64> {
    let pairs: Vec<(&Value, &Value)> = match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|c| Some((c.first()?, c.get(1)?)))
            .collect(),
        Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs.into_iter().find_map(|(k, v)| {
        let name = match k {
            Value::BulkString(b) => b.as_slice(),
            Value::SimpleString(s) => s.as_bytes(),
            _ => return None,
        };
        match (name, v) {
            (b"last_expiry_ms", Value::Int(n)) => u64::try_from(*n).ok(),
            _ => None,
        }
    })
}

/// `RL.CONCURRENCY key RELEASE id`.
#[cfg(feature = "transport")]
fn release(config: &FleetConfig) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.CONCURRENCY");
    cmd.arg(&config.key).arg("RELEASE").arg(&config.id);
    cmd
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The members counted by an ACQUIRE reply `[allowed, limit, remaining, retry_after_ms, 0]`:
/// `limit - remaining` (a full key, which did not count this member, counts as full).
pub(crate) fn members(v: &Value) -> Result<NonZeroU32> {
    const CMD: &str = "RL.CONCURRENCY";
    let bad = |detail: &str| Error::Reply {
        command: CMD,
        detail: detail.to_string(),
    };
    let Value::Array(items) = v else {
        return Err(bad("expected an array"));
    };
    let int = |i: usize| match items.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n).map_err(|_| bad("negative count")),
        _ => Err(bad("expected integers")),
    };
    let held = int(1)?.saturating_sub(int(2)?);
    let held = u32::try_from(held).unwrap_or(u32::MAX);
    Ok(NonZeroU32::new(held).unwrap_or(NonZeroU32::MIN))
}

/// The running membership: the heartbeat task, stopped when this is dropped.
#[cfg(feature = "transport")]
#[derive(Debug)]
pub(crate) struct Membership {
    config: FleetConfig,
    transport: Arc<Transport>,
    task: tokio::task::JoinHandle<()>,
}

#[cfg(feature = "transport")]
impl Membership {
    /// Starts the heartbeat on the current tokio runtime (the first renewal at once).
    pub(crate) fn start(
        config: FleetConfig,
        transport: Arc<Transport>,
        view: Arc<FleetView>,
    ) -> Result<Self> {
        config.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::Config("fleet: join_fleet needs a tokio runtime (the heartbeat task)".into())
        })?;
        let task = runtime.spawn(heartbeat(config.clone(), transport.clone(), view));
        Ok(Self {
            config,
            transport,
            task,
        })
    }

    /// Stops the heartbeat and releases the lease, so the others stop counting this member
    /// at their next heartbeat (best effort: otherwise it expires after `ttl`).
    pub(crate) async fn leave(self) {
        self.task.abort();
        let cmd = release(&self.config);
        let slot = self.transport.slot_of(&self.config.key);
        if let Err(e) = self.transport.call(&cmd, slot).await {
            tracing::debug!(error = %e, "fleet: release failed; the lease expires on its own");
        }
    }
}

#[cfg(feature = "transport")]
impl Drop for Membership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The size to keep after a reading of `read` members at `now`.
///
/// Why not simply `read`: after an outage (a restarted server, a failover to a replica
/// without the latest renewals) every member's lease may be gone, and the members register
/// again one by one over a heartbeat, the first one reading 1, the second 2, ... A reading
/// is then only a lower bound until every member had a chance to renew, that is for one
/// lease time (`ttl`) after the first successful heartbeat following a failed one: until
/// `settle_until`, the size only grows. A member that really left is still dropped, one
/// lease time later, as it is anyway when it crashes.
pub(crate) fn settled_size<T: PartialOrd>(
    previous: Option<NonZeroU32>,
    read: NonZeroU32,
    now: T,
    settle_until: Option<T>,
) -> NonZeroU32 {
    match (previous, settle_until) {
        (Some(previous), Some(until)) if now < until => previous.max(read),
        _ => read,
    }
}

/// `target` moved toward by at most a factor of [`MAX_STEP`] from `previous`.
pub(crate) fn bounded_step(previous: Option<NonZeroU32>, target: NonZeroU32) -> NonZeroU32 {
    let Some(previous) = previous else {
        return target;
    };
    let up = previous.saturating_mul(NonZeroU32::MIN.saturating_add(MAX_STEP - 1));
    let down = NonZeroU32::new(previous.get() / MAX_STEP).unwrap_or(NonZeroU32::MIN);
    target.clamp(down, up)
}

/// True when the key holds a lease ending after what a member of this fleet can ask for:
/// someone wrote it with a longer lease (by hand or as an attack), so its count is not
/// believed. `margin` absorbs the clock difference between this host and the server.
pub(crate) fn forged(last_expiry_ms: u64, now_ms: u64, ttl: Duration) -> bool {
    let margin = ttl.max(Duration::from_secs(1));
    let latest = now_ms
        .saturating_add(millis(ttl))
        .saturating_add(millis(margin));
    last_expiry_ms > latest
}

/// One heartbeat: renew, read the size, and check that no lease outlives the fleet's ttl.
#[cfg(feature = "transport")]
async fn renew(
    config: &FleetConfig,
    transport: &Transport,
    cmd: &redis::Cmd,
    slot: Option<u16>,
) -> Result<Reading> {
    let read = members(&transport.call(cmd, slot).await?)?;
    // RL.STATE is read-only and cheap. A count that could not be checked (refused to the
    // limiter's user, not answered in time) is not believed: forged leases would count.
    let trusted = match transport.call(&state(config), slot).await {
        Ok(v) => match last_expiry_ms(&v) {
            Some(last) if forged(last, wall_ms(), config.ttl) => Trust::Forged,
            _ => Trust::Yes,
        },
        Err(e) => Trust::Unchecked(e.to_string()),
    };
    Ok(Reading { read, trusted })
}

/// Whether a reading's count is believed.
#[cfg(feature = "transport")]
enum Trust {
    Yes,
    /// The key holds a lease longer than a member can ask for.
    Forged,
    /// RL.STATE failed: the leases' length is unknown.
    Unchecked(String),
}

#[cfg(feature = "transport")]
struct Reading {
    read: NonZeroU32,
    trusted: Trust,
}

#[cfg(feature = "transport")]
async fn heartbeat(config: FleetConfig, transport: Arc<Transport>, view: Arc<FleetView>) {
    let cmd = acquire(&config);
    let slot = transport.slot_of(&config.key);
    let mut warned = false;
    // When a failing heartbeat or an untrusted key was last logged at warn level.
    let mut last_warn: Option<Instant> = None;
    let warn_due = |last: &mut Option<Instant>| {
        let due = last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
        if due {
            *last = Some(Instant::now());
        }
        due
    };
    // Set by a failed heartbeat; the next successful one starts the settling time.
    let mut failed = false;
    let mut settle_until: Option<Instant> = None;
    let mut interval = tokio::time::interval(config.heartbeat);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        match renew(&config, &transport, &cmd, slot).await {
            Ok(Reading {
                trusted: Trust::Forged,
                read,
            }) => {
                if warn_due(&mut last_warn) {
                    tracing::warn!(
                        fleet = %config.key,
                        read = read.get(),
                        ttl_ms = millis(config.ttl),
                        "fleet: the key holds a lease longer than ttl_ms (written by something \
                         other than this fleet's gateways): its count is ignored, the size stays"
                    );
                }
                metrics::counter!("rl_fleet_untrusted_total").increment(1);
            }
            Ok(Reading {
                trusted: Trust::Unchecked(error),
                read,
            }) => {
                if warn_due(&mut last_warn) {
                    tracing::warn!(
                        fleet = %config.key,
                        read = read.get(),
                        %error,
                        "fleet: RL.STATE failed, so the leases' length cannot be checked: the \
                         count is ignored, the size stays (the limiter's user needs RL.STATE)"
                    );
                }
                metrics::counter!("rl_fleet_untrusted_total").increment(1);
            }
            Ok(Reading { read, .. }) => {
                let now = Instant::now();
                if std::mem::take(&mut failed) {
                    settle_until = Some(now + config.ttl);
                    if last_warn.take().is_some() {
                        tracing::info!(fleet = %config.key, "fleet: heartbeat works again");
                    }
                }
                let size = bounded_step(
                    view.size(),
                    settled_size(view.size(), read, now, settle_until),
                );
                if view.size() != Some(size) {
                    tracing::info!(
                        fleet = %config.key,
                        id = %config.id,
                        size = size.get(),
                        "fleet size"
                    );
                }
                view.set(size);
            }
            // Keep the last size: it is what the fallback needs during an outage.
            Err(e) if is_unknown_command(&e) && !warned => {
                warned = true;
                failed = true;
                tracing::warn!(
                    "fleet: the server has no RL.CONCURRENCY (Lua twin?): fleet size unknown, \
                     the local fallback divides by `instances`"
                );
            }
            // Without the module there is no membership: said once above, not every minute.
            Err(e) if is_unknown_command(&e) => {
                failed = true;
                tracing::debug!(error = %e, "fleet: heartbeat failed");
            }
            Err(e) => {
                failed = true;
                metrics::counter!("rl_fleet_heartbeat_failures_total").increment(1);
                if warn_due(&mut last_warn) {
                    tracing::warn!(
                        fleet = %config.key,
                        error = %e,
                        "fleet: heartbeat failed; the fleet size stays at its last value"
                    );
                } else {
                    tracing::debug!(error = %e, "fleet: heartbeat failed");
                }
            }
        }
    }
}

#[cfg(all(test, feature = "transport"))]
mod tests {
    use super::*;
    use crate::transport::command::words;

    fn ints(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|&n| Value::Int(n)).collect())
    }

    #[test]
    fn the_size_is_the_leases_held() {
        assert_eq!(members(&ints(&[1, 10_000, 9_997, 0, 0])).unwrap().get(), 3);
        assert_eq!(
            members(&ints(&[0, 10_000, 0, 50, 0])).unwrap().get(),
            10_000
        );
        assert_eq!(members(&ints(&[1, 10_000, 10_000, 0, 0])).unwrap().get(), 1);
        assert!(members(&Value::Okay).is_err());
        assert!(members(&ints(&[1, -1, 0, 0, 0])).is_err());
    }

    #[test]
    fn commands_name_the_fleet_key_and_the_id() {
        let mut c = FleetConfig::new("rl:{fleet}");
        c.id = "gw-1".into();
        assert_eq!(
            words(&acquire(&c)),
            [
                "RL.CONCURRENCY",
                "rl:{fleet}",
                "10000",
                "3000",
                "ACQUIRE",
                "gw-1"
            ]
        );
        assert_eq!(
            words(&release(&c)),
            ["RL.CONCURRENCY", "rl:{fleet}", "RELEASE", "gw-1"]
        );
        assert_ne!(FleetConfig::new("k").id, FleetConfig::new("k").id);
    }

    #[test]
    fn bad_settings_are_refused() {
        let mut c = FleetConfig::new("k");
        assert!(c.validate().is_ok());
        c.ttl = c.heartbeat;
        assert!(c.validate().is_err());
        let mut c = FleetConfig::new("");
        assert!(c.validate().is_err());
        c = FleetConfig::new("k");
        c.id = "x".repeat(257);
        assert!(c.validate().is_err());
    }

    #[test]
    fn after_a_failed_heartbeat_the_size_only_grows_for_one_lease_time() {
        let n = |k| NonZeroU32::new(k).unwrap();
        let t0 = Instant::now();
        let ttl = Duration::from_secs(3);
        // Steady: a reading is the size, smaller or larger.
        assert_eq!(settled_size(Some(n(4)), n(3), t0, None), n(3));
        assert_eq!(settled_size(Some(n(4)), n(5), t0, None), n(5));
        assert_eq!(settled_size(None, n(1), t0, None), n(1));
        // Re-registering after an outage: 1, 2, 3 read while settling keep the 4 known.
        let until = Some(t0 + ttl);
        for k in 1..=3 {
            assert_eq!(settled_size(Some(n(4)), n(k), t0, until), n(4));
        }
        assert_eq!(settled_size(Some(n(4)), n(6), t0, until), n(6));
        // One lease time later a member that left is dropped.
        assert_eq!(settled_size(Some(n(4)), n(3), t0 + ttl, until), n(3));
    }

    #[test]
    fn a_ttl_the_server_refuses_is_refused_here() {
        let mut c = FleetConfig::new("k");
        c.ttl = Duration::from_millis(1_000_000_000_000_000);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("ttl_ms must be between"), "{err}");
        c.ttl = Duration::from_millis(1_000_000_000_000);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn the_size_moves_by_at_most_a_factor_of_two_per_heartbeat() {
        let n = |k| NonZeroU32::new(k).unwrap();
        assert_eq!(bounded_step(None, n(10_000)), n(10_000), "first reading");
        assert_eq!(bounded_step(Some(n(4)), n(10_000)), n(8));
        assert_eq!(bounded_step(Some(n(8)), n(1)), n(4));
        assert_eq!(bounded_step(Some(n(1)), n(1)), n(1));
        assert_eq!(bounded_step(Some(n(4)), n(5)), n(5));
        assert_eq!(bounded_step(Some(n(u32::MAX)), n(u32::MAX)), n(u32::MAX));
    }

    #[test]
    fn a_lease_longer_than_the_ttl_marks_the_key_as_forged() {
        let ttl = Duration::from_secs(3);
        let now = 1_700_000_000_000;
        assert!(!forged(now + 3_000, now, ttl), "a member's own lease");
        assert!(!forged(now + 5_000, now, ttl), "clock difference");
        assert!(forged(now + 31_000_000_000, now, ttl), "a 1-year lease");
        let flat = Value::Array(vec![
            Value::BulkString(b"held".to_vec()),
            Value::Int(2),
            Value::BulkString(b"last_expiry_ms".to_vec()),
            Value::Int(42),
        ]);
        assert_eq!(last_expiry_ms(&flat), Some(42));
        assert_eq!(last_expiry_ms(&Value::Nil), None);
    }

    #[test]
    fn the_divisor_is_the_fleet_size_once_known() {
        let four = NonZeroU32::new(4).unwrap();
        let view = FleetView::new(true);
        let divisor = |view: &FleetView| view.share().unwrap_or(four);
        assert_eq!(divisor(&view), four, "unknown: the policy's instances");
        view.set(NonZeroU32::new(3).unwrap());
        assert_eq!(divisor(&view).get(), 3);
        let static_view = FleetView::new(false);
        static_view.set(NonZeroU32::new(3).unwrap());
        assert_eq!(divisor(&static_view), four);
    }
}
