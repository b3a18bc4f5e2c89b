//! [`Layers`]: what the ops of one limiter share: the wire (module or twin), the circuit
//! breaker, the deny cache, the local fallback limiter, and whether the host's client is a
//! cluster client.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;

use crate::fleet::FleetConfig;
use crate::layers::decider::ServerImpl;
use crate::layers::deny_cache::DenyCache;
use crate::layers::fallback::LocalLimiter;
use crate::layers::lease::{LeaseConfig, LeaseStats};
use crate::limiter::policy::Policy;
use crate::transport::breaker::{Breaker, BreakerConfig, BreakerState};

use super::across::{AcrossSlots, Schedule};
use super::fleet::Fleet;
use super::leases::{Due, Leases};
use super::op::{Call, Op};
use super::wire::{Retry, ScriptWire};

/// The settings of [`Layers`].
#[derive(Clone, Debug)]
pub struct LayersConfig {
    /// The module, the twin, or the module where loaded (default).
    pub server_impl: ServerImpl,
    /// The host's client is a cluster client: the keys of one `check_all` must share a slot.
    pub cluster: bool,
    /// Keys the deny cache remembers (default 10000; `None` turns it off).
    pub deny_cache: Option<NonZeroUsize>,
    /// When the circuit breaker opens and for how long.
    pub breaker: BreakerConfig,
    /// Keys the local fallback holds at most (default 100000).
    pub local_capacity: usize,
    /// Every error of a call that has a failure mode (`check`, `check_all`) is decided by
    /// it, as the async [`crate::Limiter`]'s `check` never fails; off (default): only an
    /// outage is, and an error that is the call's own (a wrong type, a missing module with
    /// the server implementation `module`) is the op's.
    pub errors_fail_over: bool,
    /// Fleet membership (validate it first: [`FleetConfig::validate`]): the host runs the
    /// heartbeats [`Layers::pending`] gives from its own timer.
    pub fleet: Option<FleetConfig>,
    /// The local fallback divides each limit by the live fleet size once known (no static
    /// `instances` configured).
    pub fleet_divides: bool,
    /// Leases for hot keys ([`Policy::hot`]) of a `check_all` (default: none): their
    /// unspent units are given back by the refunds [`Layers::pending`] gives.
    pub leases: Option<LeaseConfig>,
}

impl Default for LayersConfig {
    fn default() -> Self {
        Self {
            server_impl: ServerImpl::Auto,
            cluster: false,
            deny_cache: NonZeroUsize::new(10_000),
            breaker: BreakerConfig::default(),
            local_capacity: 100_000,
            errors_fail_over: false,
            fleet: None,
            fleet_divides: false,
            leases: None,
        }
    }
}

/// The layers of one limiter, shared by its [`Op`]s (make one per limiter, in an `Arc`).
#[derive(Debug)]
pub struct Layers {
    pub(crate) wire: ScriptWire,
    pub(crate) breaker: Breaker,
    pub(crate) deny: Option<DenyCache>,
    pub(crate) local: LocalLimiter,
    pub(crate) cluster: bool,
    pub(crate) errors_fail_over: bool,
    pub(crate) fleet: Option<Fleet>,
    pub(crate) leases: Option<Leases>,
}

impl Layers {
    /// The layers `config` describes.
    pub fn new(config: LayersConfig) -> Self {
        Self {
            wire: ScriptWire::new(config.server_impl),
            breaker: Breaker::new(config.breaker),
            deny: config.deny_cache.map(DenyCache::new),
            local: LocalLimiter::new(config.local_capacity),
            cluster: config.cluster,
            errors_fail_over: config.errors_fail_over,
            fleet: config
                .fleet
                .map(|fleet| Fleet::new(fleet, config.fleet_divides)),
            leases: config.leases.map(Leases::new),
        }
    }

    /// Takes `cost` units of `key` (`peek`: only says what taking them would answer).
    pub fn check(self: &Arc<Self>, key: String, policy: Policy, cost: u64, peek: bool) -> Op {
        Op::new(
            self.clone(),
            Call::Check {
                key,
                policy,
                cost,
                peek,
            },
        )
    }

    /// Several keys all or nothing: add them with [`Op::add`], then start.
    pub fn check_all(self: &Arc<Self>) -> Op {
        Op::new(
            self.clone(),
            Call::All {
                items: Vec::new(),
                costs: Vec::new(),
            },
        )
    }

    /// Several keys all or nothing across hash slots (one `RL.ALL` per slot on a cluster,
    /// refunds when a slot denies), shadow keys checked on their own: add them with
    /// [`AcrossSlots::add`], then run its rounds.
    pub fn check_all_across(self: &Arc<Self>, schedule: Schedule) -> AcrossSlots {
        AcrossSlots::new(self.clone(), schedule, None)
    }

    /// [`Layers::each`] across hash slots: one `RL.ALL ... PEEK` or `FORCE` per slot.
    pub fn each_across(self: &Arc<Self>, force: bool, schedule: Schedule) -> AcrossSlots {
        AcrossSlots::new(self.clone(), schedule, Some(force))
    }

    /// Up to `n` units of `key` (`COST n UPTO`), as many as are available.
    pub fn take_upto(self: &Arc<Self>, key: String, policy: Policy, n: u64, peek: bool) -> Op {
        Op::new(
            self.clone(),
            Call::Upto {
                key,
                policy,
                n,
                peek,
            },
        )
    }

    /// Gives back up to `amount` units of `key` (`RL.REFUND`).
    pub fn refund(self: &Arc<Self>, key: String, policy: Policy, amount: u64) -> Op {
        Op::new(
            self.clone(),
            Call::Refund {
                key,
                policy,
                amount,
                lease: false,
            },
        )
    }

    /// Settles a reservation of `reserved` units of `key` (taken earlier) against the
    /// `actual` cost: refunds `reserved - actual` (`RL.REFUND`), takes `actual - reserved`
    /// even over the limit (`FORCE`), or sends nothing when they are equal.
    pub fn settle(self: &Arc<Self>, key: String, policy: Policy, reserved: u64, actual: u64) -> Op {
        Op::new(
            self.clone(),
            Call::Settle {
                key,
                policy,
                reserved,
                actual,
            },
        )
    }

    /// Deletes `key`'s limiter state (`RL.RESET`) and its cached denial.
    pub fn reset(self: &Arc<Self>, key: String) -> Op {
        Op::new(self.clone(), Call::Reset { key })
    }

    /// Every key's own decision for its cost, from Redis itself (not the deny cache, whose
    /// waits would be stale; no failure mode: an error is the op's): `RL.ALL ... PEEK`
    /// (nothing taken) or `... FORCE` (taken even over the limits). Add the keys with
    /// [`Op::add`], then start.
    pub fn each(self: &Arc<Self>, force: bool) -> Op {
        Op::new(
            self.clone(),
            Call::Each {
                items: Vec::new(),
                costs: Vec::new(),
                force,
            },
        )
    }

    /// Work not tied to a request that is due at `now_ms` (wall-clock milliseconds since
    /// the Unix epoch), one op at a time: call it again until `None`. The fleet heartbeat,
    /// once per `heartbeat` and one at a time (its outcome is the fleet size, 0 while
    /// unknown); then the `RL.REFUND` of each lease that ended (past its lifetime, or
    /// replaced), its unspent units given back (never retried if it fails). The host runs
    /// it from its own timer, every few hundred ms with fleet membership, at least once per
    /// lease lifetime with leases.
    pub fn pending(self: &Arc<Self>, now_ms: u64) -> Option<Op> {
        if let Some(fleet) = &self.fleet {
            if fleet.due(now_ms) {
                return Some(Op::new(
                    self.clone(),
                    Call::Heartbeat { now_ms, read: None },
                ));
            }
        }
        let due = self
            .leases
            .as_ref()?
            .next_due(std::time::Instant::now(), false)?;
        Some(self.lease_refund(due))
    }

    /// Ends every lease at shutdown: the `RL.REFUND` ops of their unspent units.
    pub fn release_leases(self: &Arc<Self>) -> Vec<Op> {
        let Some(leases) = &self.leases else {
            return Vec::new();
        };
        let mut ops = Vec::new();
        while let Some(due) = leases.next_due(std::time::Instant::now(), true) {
            ops.push(self.lease_refund(due));
        }
        ops
    }

    fn lease_refund(self: &Arc<Self>, due: Due) -> Op {
        Op::new(
            self.clone(),
            Call::Refund {
                key: due.key,
                policy: due.policy,
                amount: due.units,
                lease: true,
            },
        )
    }

    /// The lease counts since start (zero without leases).
    pub fn lease_stats(&self) -> LeaseStats {
        self.leases.as_ref().map(Leases::stats).unwrap_or_default()
    }

    /// Leaves the fleet at shutdown (`RL.CONCURRENCY key RELEASE id`), so the others stop
    /// counting this member at their next heartbeat; `None` without membership.
    pub fn leave(self: &Arc<Self>) -> Option<Op> {
        self.fleet.as_ref()?;
        Some(Op::new(self.clone(), Call::Leave))
    }

    /// The live fleet size, once a heartbeat read it.
    pub fn fleet_size(&self) -> Option<u32> {
        self.fleet.as_ref()?.size().map(NonZeroU32::get)
    }

    /// Any of the module's commands (`RL.STATE key`, `RL.CONCURRENCY key ...`) as it goes
    /// out now: as is, or as a call of the Lua twin. Other commands are returned as they are.
    pub fn encode(&self, command: Vec<String>) -> Vec<String> {
        if is_module_command(&command) {
            self.wire.encode(command)
        } else {
            command
        }
    }

    /// The command to send after `message`, the error reply to `command` as
    /// [`Layers::encode`] sent it (the twin on a server without the module, `EVAL` after
    /// `NOSCRIPT`); `None` when the error is the call's own.
    pub fn retry(&self, command: &[String], message: &str) -> Option<Vec<String>> {
        if !is_module_command(command) {
            return None;
        }
        match self.wire.retry(command, message) {
            Retry::Send(next) => Some(next),
            Retry::No => None,
        }
    }

    /// Whether the next call goes to the Lua twin (else to the module's commands).
    pub fn twin(&self) -> bool {
        self.wire.twin()
    }

    /// The circuit breaker's state.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// The circuit breaker (its counters).
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Forgets a cached denial of `key` (after a reset or a refund).
    pub fn forget_denial(&self, key: &str) {
        if let Some(cache) = &self.deny {
            cache.forget(key);
        }
    }
}

fn is_module_command(command: &[String]) -> bool {
    command
        .first()
        .and_then(|name| name.get(..3))
        .is_some_and(|p| p.eq_ignore_ascii_case("RL."))
}
