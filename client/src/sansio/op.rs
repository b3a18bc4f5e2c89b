//! [`Op`]: one call of the limiter as a state machine without I/O. [`Op::start`] gives the
//! command to send (or `None`: decided without Redis: the deny cache, or the breaker open);
//! [`Op::feed`] or [`Op::fail`] with what the host's client got gives the next command (the
//! twin instead of a missing module, `EVAL` after `NOSCRIPT`) or `None`: done; the result
//! is then read with [`Op::outcome`].

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use crate::layers::decider::{booking_of_one, cost_at, denied_at, parse_booking_of_one, unknown};
use crate::layers::failover::{all_or_nothing, failure_decision};
use crate::layers::lease::leasable;
use crate::limiter::decision::{parse_all, parse_refund, parse_single, parse_upto};
use crate::limiter::decision::{Decision, Grant, MultiDecision};
use crate::limiter::policy::Policy;
use crate::limiter::settle::Settled;
use crate::transport::breaker::Permit;

use super::layers::Layers;
use super::leases::{Reservation, Reserve};
use super::wire::Retry;

/// Most keys one `RL.ALL` takes (the module's `rl.max-all-keys` default).
pub const MAX_ALL_KEYS: usize = 16;

/// What an op was asked to do.
#[derive(Clone, Debug)]
pub(crate) enum Call {
    Check {
        key: String,
        policy: Policy,
        cost: u64,
        peek: bool,
    },
    All {
        items: Vec<(String, Policy)>,
        costs: Vec<u64>,
    },
    Upto {
        key: String,
        policy: Policy,
        n: u64,
        peek: bool,
    },
    Refund {
        key: String,
        policy: Policy,
        amount: u64,
        /// A lease's unspent units (counted in the lease stats).
        lease: bool,
    },
    /// A reservation of `reserved` units settled against the `actual` cost: the difference
    /// refunded, or taken with `FORCE`.
    Settle {
        key: String,
        policy: Policy,
        reserved: u64,
        actual: u64,
    },
    Reset {
        key: String,
    },
    Each {
        items: Vec<(String, Policy)>,
        costs: Vec<u64>,
        force: bool,
    },
    /// Fleet membership: renew (ACQUIRE), then check the key (RL.STATE).
    Heartbeat {
        now_ms: u64,
        read: Option<NonZeroU32>,
    },
    Leave,
}

/// How an op ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A `check`.
    Decision(Decision),
    /// A `check_all`.
    Multi(MultiDecision),
    /// A `take_upto`.
    Grant(Grant),
    /// The units a `refund` gave back; 1 when a `reset` deleted a limiter, else 0.
    Units(u64),
    /// What a `settle` did, and the units it gave back or charged.
    Settled {
        /// Exact, refunded or charged.
        settled: Settled,
        /// The units given back (refunded) or taken (charged); 0 when exact.
        units: u64,
    },
}

/// Why an op refused to go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// The call's arguments: nothing was sent.
    #[error("{0}")]
    Invalid(String),
    /// The server's error (or the breaker's refusal) for a call without a failure mode,
    /// or a reply that is not the command's.
    #[error("{0}")]
    Failed(String),
}

/// One call in progress.
#[derive(Debug)]
pub struct Op {
    layers: Arc<Layers>,
    call: Call,
    /// The module's form of the command last sent (the twin's is derived from it).
    module: Vec<String>,
    outcome: Option<Outcome>,
    /// A `check_all` with hot keys: their leases.
    lease: Option<LeasePhase>,
}

/// The hot keys of a `check_all`: served from leases in hand, or from batches taken first
/// (one `UPTO` each); the other keys then go to Redis in one `RL.ALL`.
#[derive(Debug)]
struct LeasePhase {
    /// Every key of the request, and its cost.
    items: Vec<(String, Policy)>,
    costs: Vec<u64>,
    /// The decisions of the keys served from leases.
    leased: Vec<Option<Decision>>,
    reserved: Vec<Reservation>,
    /// Batches to take: the key's index and the batch.
    takes: VecDeque<(usize, u64)>,
    /// The take in flight.
    current: Option<(usize, u64)>,
    /// The indexes of the keys sent in the `RL.ALL`.
    rest: Vec<usize>,
}

impl Drop for Op {
    /// An op the host gave up on during its takes (a cancelled request): the takes it held
    /// are released, so the next request of the key may take a batch.
    fn drop(&mut self) {
        let (Some(leases), Some(phase)) = (&self.layers.leases, self.lease.take()) else {
            return;
        };
        let held = phase.current.into_iter().chain(phase.takes);
        for (i, _) in held {
            if let Some((key, _)) = phase.items.get(i) {
                leases.cancel_take(key);
            }
        }
    }
}

/// The parameters as the server reads them after the key or spec word.
fn push_params(words: &mut Vec<String>, policy: &Policy) {
    words.extend(policy.args());
}

/// `COST n` (omitted when 1, the server's default) and `PEEK`.
fn push_cost_peek(words: &mut Vec<String>, cost: u64, peek: bool) {
    if cost != 1 {
        words.push("COST".into());
        words.push(cost.to_string());
    }
    if peek {
        words.push("PEEK".into());
    }
}

/// `RL.<ALG> key params... [COST n] [PEEK]`.
fn single_words(key: &str, policy: &Policy, cost: u64, peek: bool) -> Vec<String> {
    let mut w = vec![policy.kind().command().to_string(), key.to_string()];
    push_params(&mut w, policy);
    push_cost_peek(&mut w, cost, peek);
    w
}

/// `RL.REFUND key spec params... COST amount`.
fn refund_words(key: &str, policy: &Policy, amount: u64) -> Vec<String> {
    let mut w = vec![
        "RL.REFUND".to_string(),
        key.to_string(),
        policy.kind().spec_name().to_string(),
    ];
    push_params(&mut w, policy);
    w.extend(["COST".to_string(), amount.to_string()]);
    w
}

/// `RL.<ALG> key params... COST cost FORCE`: taken even over the limit.
fn force_words(key: &str, policy: &Policy, cost: u64) -> Vec<String> {
    let mut w = vec![policy.kind().command().to_string(), key.to_string()];
    push_params(&mut w, policy);
    w.extend(["COST".to_string(), cost.to_string(), "FORCE".to_string()]);
    w
}

/// Errors meaning "this server cannot answer now", not "bad request".
pub fn unavailable(message: &str) -> bool {
    [
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "READONLY",
    ]
    .iter()
    .any(|p| message.starts_with(p))
}

/// `RL.ALL n keys... specs... [COST n | COSTS n1 ... nk]`: one cost for every key, or each
/// its own where they differ.
fn all_command(items: &[(String, Policy)], costs: &[u64]) -> Vec<String> {
    let mut w = Vec::with_capacity(4 + items.len() * 6);
    w.push("RL.ALL".to_string());
    w.push(items.len().to_string());
    w.extend(items.iter().map(|(k, _)| k.clone()));
    for (_, p) in items {
        w.push(p.kind().spec_name().to_string());
        push_params(&mut w, p);
    }
    let first = costs.first().copied().unwrap_or(1);
    if costs.iter().all(|c| *c == first) {
        push_cost_peek(&mut w, first, false);
    } else {
        w.push("COSTS".into());
        w.extend(costs.iter().map(u64::to_string));
    }
    w
}

fn slot(key: &str) -> u16 {
    redis::cluster_routing::get_slot(key.as_bytes())
}

impl Op {
    pub(crate) fn new(layers: Arc<Layers>, call: Call) -> Self {
        Self {
            layers,
            call,
            module: Vec::new(),
            outcome: None,
            lease: None,
        }
    }

    fn module_command(&self) -> Result<Vec<String>, OpError> {
        Ok(match &self.call {
            Call::Check {
                key,
                policy,
                cost,
                peek,
            } => single_words(key, policy, *cost, *peek),
            // One key: the algorithm's own command, as the async client's decider sends it
            // (`layers/decider/one_key.rs`).
            Call::All { items, costs } => match booking_of_one(items, costs) {
                Some(((key, policy), cost)) => single_words(key, policy, cost, false),
                None => all_command(items, costs),
            },
            Call::Each {
                items,
                costs,
                force,
            } => {
                let mut w = all_command(items, costs);
                w.push(if *force { "FORCE" } else { "PEEK" }.to_string());
                w
            }
            Call::Reset { key } => vec!["RL.RESET".to_string(), key.clone()],
            Call::Heartbeat { .. } | Call::Leave => match &self.layers.fleet {
                Some(fleet) if matches!(self.call, Call::Leave) => fleet.release(),
                Some(fleet) => fleet.acquire(),
                None => Vec::new(),
            },
            Call::Upto {
                key,
                policy,
                n,
                peek,
            } => {
                if !policy.kind().upto() {
                    return Err(OpError::Invalid(format!(
                        "{} does not take UPTO",
                        policy.kind().command()
                    )));
                }
                let mut w = vec![policy.kind().command().to_string(), key.clone()];
                push_params(&mut w, policy);
                w.extend(["COST".to_string(), n.to_string(), "UPTO".to_string()]);
                if *peek {
                    w.push("PEEK".into());
                }
                w
            }
            Call::Refund {
                key,
                policy,
                amount,
                ..
            } => refund_words(key, policy, *amount),
            Call::Settle {
                key,
                policy,
                reserved,
                actual,
            } if actual < reserved => refund_words(key, policy, reserved - actual),
            Call::Settle {
                key,
                policy,
                reserved,
                actual,
            } => force_words(key, policy, actual.saturating_sub(*reserved)),
        })
    }

    /// What the policy's failure mode answers while Redis cannot.
    fn fallback(&self, key: &str, policy: &Policy, cost: u64, peek: bool) -> Decision {
        let layers = &self.layers;
        let mut d = failure_decision(
            key,
            policy,
            cost,
            peek,
            &layers.breaker,
            &layers.local,
            layers.fleet.as_ref().and_then(|f| f.share()),
        );
        d.shadow = policy.is_shadow();
        d
    }

    /// The failure modes' answer for the whole call (all or nothing for several keys: look
    /// at every key, take only when none denies). `None` for calls that have none.
    fn fall_back(&self) -> Option<Outcome> {
        match &self.call {
            Call::Check {
                key,
                policy,
                cost,
                peek,
            } => Some(Outcome::Decision(self.fallback(key, policy, *cost, *peek))),
            Call::All { items, costs } => {
                Some(Outcome::Multi(all_or_nothing(items.len(), |i, peek| {
                    items
                        .get(i)
                        .map(|(k, p)| self.fallback(k, p, cost_at(costs, i), peek))
                })))
            }
            _ => None,
        }
    }

    /// The deny cache's answer for the whole call, when it holds one: a denied key for a
    /// `check`, one unit of it for a `take_upto` (a grant of nothing), any enforced key for
    /// a `check_all` (the request is denied, the other keys unchecked).
    fn cached(&self) -> Option<Outcome> {
        let cache = self.layers.deny.as_ref()?;
        match &self.call {
            Call::Check {
                key,
                cost,
                policy,
                peek: false,
            } => cache.get(key, *cost).map(|mut d| {
                d.shadow = policy.is_shadow();
                Outcome::Decision(d)
            }),
            Call::Upto {
                key,
                n,
                peek: false,
                ..
            } if *n > 0 => cache.get(key, 1).map(|decision| {
                Outcome::Grant(Grant {
                    granted: 0,
                    decision,
                })
            }),
            Call::All { items, costs } => items.iter().enumerate().find_map(|(i, (key, p))| {
                if p.is_shadow() {
                    return None;
                }
                let d = cache.get(key, costs.get(i).copied().unwrap_or(1))?;
                Some(Outcome::Multi(denied_at(items, |(_, p)| p.params(), i, d)))
            }),
            _ => None,
        }
    }

    /// Whether the single key's policy is in shadow mode (a denial reported, not enforced).
    pub fn policy_shadow(&self) -> bool {
        match &self.call {
            Call::Check { policy, .. } => policy.is_shadow(),
            _ => false,
        }
    }

    /// Adds a key to a `check_all` op, with its own cost.
    pub fn add(&mut self, key: String, policy: Policy, cost: u64) -> Result<(), OpError> {
        let (Call::All { items, costs } | Call::Each { items, costs, .. }) = &mut self.call else {
            return Err(OpError::Failed(
                "add: only a checkAll op takes keys".to_string(),
            ));
        };
        if key.is_empty() {
            return Err(OpError::Invalid("key must not be empty".to_string()));
        }
        if items.iter().any(|(k, _)| *k == key) {
            return Err(OpError::Invalid(format!(
                "key {key:?} repeats an earlier key: each key may appear once"
            )));
        }
        if items.len() == MAX_ALL_KEYS {
            return Err(OpError::Invalid(
                "checkAll takes at most 16 keys (rl.max-all-keys)".to_string(),
            ));
        }
        items.push((key, policy));
        costs.push(cost);
        Ok(())
    }

    /// The first command to send, or `None` when decided without Redis.
    pub fn start(&mut self) -> Result<Option<Vec<String>>, OpError> {
        let started = self.start_call();
        self.merged(started)
    }

    fn start_call(&mut self) -> Result<Option<Vec<String>>, OpError> {
        match &self.call {
            Call::Check { key, .. }
            | Call::Upto { key, .. }
            | Call::Refund { key, .. }
            | Call::Settle { key, .. }
            | Call::Reset { key }
                if key.is_empty() =>
            {
                return Err(OpError::Invalid("key must not be empty".to_string()));
            }
            Call::All { items, .. } | Call::Each { items, .. } => {
                if items.is_empty() {
                    self.outcome = Some(Outcome::Multi(MultiDecision {
                        denied: None,
                        decisions: Vec::new(),
                    }));
                    return Ok(None);
                }
                if self.layers.cluster {
                    let first = items.first().map(|(k, _)| slot(k));
                    if items.iter().any(|(k, _)| Some(slot(k)) != first) {
                        return Err(OpError::Invalid(
                            "checkAll on a cluster: every key must be in one hash slot (give them a common {tag})".to_string(),
                        ));
                    }
                }
            }
            _ => {}
        }
        if self.lease.is_none() && self.hot_keys() {
            return self.lease_start();
        }
        if let Some(outcome) = self.cached() {
            self.outcome = Some(outcome);
            return Ok(None);
        }
        if let Call::Settle {
            reserved, actual, ..
        } = self.call
        {
            if reserved == actual {
                self.outcome = Some(Outcome::Settled {
                    settled: Settled::Exact,
                    units: 0,
                });
                return Ok(None);
            }
        }
        if matches!(self.call, Call::Heartbeat { .. } | Call::Leave) {
            if self.layers.fleet.is_none() {
                self.outcome = Some(Outcome::Units(0));
                return Ok(None);
            }
            if let Call::Heartbeat { now_ms, .. } = self.call {
                if self.layers.breaker.permit() == Permit::Reject {
                    // Redis is not called while the breaker is open: the size stays.
                    self.outcome = Some(Outcome::Units(self.heartbeat_ended(now_ms, None)));
                    return Ok(None);
                }
            }
        } else if self.layers.breaker.permit() == Permit::Reject {
            if let Some(outcome) = self.fall_back() {
                self.outcome = Some(outcome);
                return Ok(None);
            }
            return Err(OpError::Failed(
                "the circuit breaker is open: Redis was not called".to_string(),
            ));
        }
        self.module = self.module_command()?;
        Ok(Some(self.layers.wire.encode(self.module.clone())))
    }

    /// The key a cluster client routes the command by (the first key).
    pub fn routing_key(&self) -> &str {
        match &self.call {
            Call::Check { key, .. }
            | Call::Upto { key, .. }
            | Call::Refund { key, .. }
            | Call::Settle { key, .. }
            | Call::Reset { key } => key,
            Call::All { items, .. } | Call::Each { items, .. } => {
                items.first().map_or("", |(k, _)| k.as_str())
            }
            Call::Heartbeat { .. } | Call::Leave => self
                .layers
                .fleet
                .as_ref()
                .map_or("", |f| f.config.key.as_str()),
        }
    }

    /// The reply to the command last sent: `None` (done).
    pub fn feed(&mut self, reply: &Value) -> Result<Option<Vec<String>>, OpError> {
        let next = match self.lease.as_ref().and_then(|p| p.current) {
            Some(take) => self.lease_fed(take, reply),
            None => self.feed_call(reply),
        };
        self.merged(next)
    }

    fn feed_call(&mut self, reply: &Value) -> Result<Option<Vec<String>>, OpError> {
        match self.call {
            Call::Heartbeat { now_ms, read: None } => {
                self.layers.breaker.on_success();
                let read = match crate::sansio::fleet::Fleet::read(reply) {
                    Ok(read) => read,
                    Err(e) => {
                        self.heartbeat_ended(now_ms, None);
                        return Err(OpError::Failed(e.to_string()));
                    }
                };
                self.call = Call::Heartbeat {
                    now_ms,
                    read: Some(read),
                };
                self.module = match &self.layers.fleet {
                    Some(fleet) => fleet.state(),
                    None => Vec::new(),
                };
                return Ok(Some(self.layers.wire.encode(self.module.clone())));
            }
            Call::Heartbeat {
                now_ms,
                read: Some(read),
            } => {
                let size = self.heartbeat_ended(now_ms, Some((read, Some(reply))));
                self.outcome = Some(Outcome::Units(size));
                return Ok(None);
            }
            Call::Leave => {
                self.outcome = Some(Outcome::Units(0));
                return Ok(None);
            }
            _ => {}
        }
        let parsed = match &self.call {
            Call::Check {
                policy,
                key,
                cost,
                peek,
            } => parse_single(policy.kind().command(), reply).map(|mut d| {
                if !*peek {
                    if let Some(cache) = &self.layers.deny {
                        cache.remember(key, *cost, &d);
                    }
                }
                d.shadow = policy.is_shadow();
                Outcome::Decision(d)
            }),
            Call::All { items, costs } => match booking_of_one(items, costs) {
                Some(((_, policy), _)) => parse_booking_of_one(policy.kind().command(), reply),
                None => parse_all(reply, items.len())
                    .map(|(denied, decisions)| MultiDecision { denied, decisions }),
            }
            .map(|md| {
                let cache = self.layers.deny.as_ref();
                if let (Some(cache), Some(i)) = (cache, md.denied) {
                    if let (Some((key, _)), Some(d)) = (items.get(i), md.decisions.get(i)) {
                        cache.remember(key, cost_at(costs, i), d);
                    }
                }
                Outcome::Multi(md)
            }),
            Call::Each { items, .. } => parse_all(reply, items.len())
                .map(|(denied, decisions)| Outcome::Multi(MultiDecision { denied, decisions })),
            Call::Upto {
                policy, key, peek, ..
            } => parse_upto(policy.kind().command(), reply).map(|grant| {
                if let (Some(cache), false, 0) = (&self.layers.deny, *peek, grant.granted) {
                    cache.remember(key, 1, &grant.decision);
                }
                Outcome::Grant(grant)
            }),
            Call::Refund {
                key, amount, lease, ..
            } => {
                // The units given back may admit what the deny cache refuses.
                self.layers.forget_denial(key);
                let back = parse_refund(reply);
                if let (true, Some(leases)) = (*lease, &self.layers.leases) {
                    leases.refunded(*amount, back.as_ref().ok().copied());
                }
                back.map(Outcome::Units)
            }
            Call::Heartbeat { .. } | Call::Leave => Ok(Outcome::Units(0)),
            Call::Reset { key } => {
                self.layers.forget_denial(key);
                match reply {
                    Value::Int(n) => Ok(Outcome::Units(u64::from(*n == 1))),
                    other => Err(crate::error::Error::Reply {
                        command: "RL.RESET",
                        detail: format!("expected an integer, got {other:?}"),
                    }),
                }
            }
            Call::Settle {
                key,
                reserved,
                actual,
                ..
            } if actual < reserved => {
                self.layers.forget_denial(key);
                parse_refund(reply).map(|back| Outcome::Settled {
                    settled: Settled::Refunded(back),
                    units: back,
                })
            }
            Call::Settle {
                policy,
                reserved,
                actual,
                ..
            } => parse_single(policy.kind().command(), reply).map(|d| Outcome::Settled {
                settled: Settled::Charged(d),
                units: actual.saturating_sub(*reserved),
            }),
        };
        self.layers.breaker.on_success();
        match parsed {
            Ok(outcome) => self.outcome = Some(outcome),
            Err(e) => match self.fall_back().filter(|_| self.layers.errors_fail_over) {
                Some(outcome) => self.outcome = Some(outcome),
                None => return Err(OpError::Failed(e.to_string())),
            },
        }
        Ok(None)
    }

    /// The error the command last sent got: `outage` when the client could not reach the
    /// server (connection, timeout), else an error reply's text. Returns the next command
    /// (the twin, `EVAL`), or `None` when done: decided by the failure mode, or the error
    /// (calls without a failure mode, and errors that are the call's own).
    pub fn fail(&mut self, message: &str, outage: bool) -> Result<Option<Vec<String>>, OpError> {
        let next = match self.lease.as_ref().and_then(|p| p.current) {
            Some(take) => self.lease_failed(take, message, outage),
            None => self.fail_call(message, outage),
        };
        self.merged(next)
    }

    fn fail_call(&mut self, message: &str, outage: bool) -> Result<Option<Vec<String>>, OpError> {
        if !outage {
            if let Retry::Send(next) = self.layers.wire.retry(&self.module, message) {
                return Ok(Some(next));
            }
        }
        if let Call::Refund { key, .. } | Call::Settle { key, .. } | Call::Reset { key } =
            &self.call
        {
            // The units may have been given back before the error.
            self.layers.forget_denial(key);
        }
        if let (
            Call::Refund {
                amount,
                lease: true,
                ..
            },
            Some(leases),
        ) = (&self.call, &self.layers.leases)
        {
            // Never retried: the units stay counted, never both given back and spent.
            leases.refunded(*amount, None);
        }
        if let Call::Heartbeat { now_ms, read } = self.call {
            if outage || unavailable(message) {
                self.layers.breaker.on_failure();
            }
            // RL.STATE refused (an ACL): the count cannot be checked, so it is not believed.
            let size = self.heartbeat_ended(now_ms, read.map(|n| (n, None)));
            self.outcome = Some(Outcome::Units(size));
            return Err(OpError::Failed(message.to_string()));
        }
        let down = outage || unavailable(message);
        if down {
            self.layers.breaker.on_failure();
        }
        if down || self.layers.errors_fail_over {
            if let Some(outcome) = self.fall_back() {
                self.outcome = Some(outcome);
                return Ok(None);
            }
        }
        Err(OpError::Failed(message.to_string()))
    }

    /// The fleet size after a heartbeat at `now_ms` that read `read` members (`None`:
    /// failed) and got `state` for RL.STATE; 0 while unknown.
    fn heartbeat_ended(&self, now_ms: u64, read: Option<(NonZeroU32, Option<&Value>)>) -> u64 {
        let Some(fleet) = &self.layers.fleet else {
            return 0;
        };
        let size = match read {
            Some((n, state)) => fleet.ended(now_ms, Some(n), state),
            None => fleet.ended(now_ms, None, None),
        };
        size.map_or(0, |s| u64::from(s.get()))
    }

    /// A `check_all` with a key to serve from a lease (the layers hold leases).
    fn hot_keys(&self) -> bool {
        let (Some(_), Call::All { items, costs }) = (&self.layers.leases, &self.call) else {
            return false;
        };
        items
            .iter()
            .enumerate()
            .any(|(i, (_, p))| leasable(p, costs.get(i).copied().unwrap_or(1)))
    }

    /// Serves the hot keys from their leases: denied at once, served, or batches to take
    /// first; then the first take, or the other keys' `RL.ALL`.
    fn lease_start(&mut self) -> Result<Option<Vec<String>>, OpError> {
        let (Some(leases), Call::All { items, costs }) = (&self.layers.leases, &self.call) else {
            return self.start_call();
        };
        let members = self
            .layers
            .fleet
            .as_ref()
            .and_then(|f| f.size())
            .map_or(1, NonZeroU32::get);
        let now = Instant::now();
        let mut phase = LeasePhase {
            items: items.clone(),
            costs: costs.clone(),
            leased: vec![None; items.len()],
            reserved: Vec::new(),
            takes: VecDeque::new(),
            current: None,
            rest: Vec::new(),
        };
        for (i, (key, policy)) in items.iter().enumerate() {
            let cost = costs.get(i).copied().unwrap_or(1);
            if !leasable(policy, cost) {
                continue;
            }
            let denied = match leases.reserve(key, policy, cost, members, now) {
                Reserve::Reserved(r, d) => {
                    phase.reserved.push(r);
                    if let Some(slot) = phase.leased.get_mut(i) {
                        *slot = Some(d);
                    }
                    continue;
                }
                Reserve::Denied(d) => d,
                Reserve::Take(batch) => {
                    // A take answered by the deny cache: a grant of nothing.
                    let cached = self.layers.deny.as_ref().and_then(|c| c.get(key, 1));
                    let Some(decision) = cached else {
                        phase.takes.push_back((i, batch));
                        continue;
                    };
                    let nothing = Grant {
                        granted: 0,
                        decision,
                    };
                    match leases.granted(key, policy, batch, cost, &nothing, now) {
                        Reserve::Denied(d) => d,
                        _ => continue,
                    }
                }
                Reserve::Ordinary => continue,
            };
            for r in phase.reserved {
                leases.give_back(r);
            }
            for &(j, _) in &phase.takes {
                if let Some((k, _)) = items.get(j) {
                    leases.cancel_take(k);
                }
            }
            self.outcome = Some(Outcome::Multi(denied_at(
                items,
                |(_, p)| p.params(),
                i,
                denied,
            )));
            return Ok(None);
        }
        self.lease = Some(phase);
        self.next_take()
    }

    /// The next batch to take, or (none left) the `RL.ALL` of the keys no lease served.
    fn next_take(&mut self) -> Result<Option<Vec<String>>, OpError> {
        let Some(phase) = self.lease.as_mut() else {
            return Ok(None);
        };
        phase.current = None;
        while let Some((i, batch)) = phase.takes.pop_front() {
            let Some((key, policy)) = phase.items.get(i) else {
                continue;
            };
            if self.layers.breaker.permit() == Permit::Reject {
                if let Some(leases) = &self.layers.leases {
                    leases.take_failed(key, Instant::now());
                }
                continue;
            }
            phase.current = Some((i, batch));
            let mut w = vec![policy.kind().command().to_string(), key.clone()];
            push_params(&mut w, policy);
            w.extend(["COST".to_string(), batch.to_string(), "UPTO".to_string()]);
            self.module = w;
            return Ok(Some(self.layers.wire.encode(self.module.clone())));
        }
        phase.rest = (0..phase.items.len())
            .filter(|&i| phase.leased.get(i).is_some_and(Option::is_none))
            .collect();
        let items = phase
            .rest
            .iter()
            .filter_map(|&i| phase.items.get(i).cloned())
            .collect();
        let costs = phase
            .rest
            .iter()
            .map(|&i| phase.costs.get(i).copied().unwrap_or(1))
            .collect();
        self.call = Call::All { items, costs };
        self.start_call()
    }

    /// The reply to the take of batch `batch` of key `i`.
    fn lease_fed(
        &mut self,
        (i, batch): (usize, u64),
        reply: &Value,
    ) -> Result<Option<Vec<String>>, OpError> {
        let (Some(leases), Some(phase)) = (&self.layers.leases, self.lease.as_mut()) else {
            return Ok(None);
        };
        let (Some((key, policy)), Some(&cost)) = (phase.items.get(i), phase.costs.get(i)) else {
            return Ok(None);
        };
        let now = Instant::now();
        self.layers.breaker.on_success();
        let grant = match parse_upto(policy.kind().command(), reply) {
            Ok(grant) => grant,
            Err(_) => {
                leases.take_failed(key, now);
                return self.next_take();
            }
        };
        if let (Some(cache), 0) = (&self.layers.deny, grant.granted) {
            cache.remember(key, 1, &grant.decision);
        }
        match leases.granted(key, policy, batch, cost, &grant, now) {
            Reserve::Reserved(r, d) => {
                phase.reserved.push(r);
                if let Some(slot) = phase.leased.get_mut(i) {
                    *slot = Some(d);
                }
            }
            Reserve::Denied(d) => {
                // All or nothing: the units reserved go back, the batches not taken are not.
                for r in std::mem::take(&mut phase.reserved) {
                    leases.give_back(r);
                }
                for &(j, _) in &phase.takes {
                    if let Some((k, _)) = phase.items.get(j) {
                        leases.cancel_take(k);
                    }
                }
                let items = std::mem::take(&mut phase.items);
                self.lease = None;
                self.outcome = Some(Outcome::Multi(denied_at(&items, |(_, p)| p.params(), i, d)));
                return Ok(None);
            }
            Reserve::Take(_) | Reserve::Ordinary => {}
        }
        self.next_take()
    }

    /// The error the take of key `i` got: the twin or `EVAL` next, else the key is decided
    /// the ordinary way (in the `RL.ALL`, whose failure mode answers if Redis is down).
    fn lease_failed(
        &mut self,
        (i, _): (usize, u64),
        message: &str,
        outage: bool,
    ) -> Result<Option<Vec<String>>, OpError> {
        if !outage {
            if let Retry::Send(next) = self.layers.wire.retry(&self.module, message) {
                return Ok(Some(next));
            }
        }
        if outage || unavailable(message) {
            self.layers.breaker.on_failure();
        }
        if let (Some(leases), Some(phase)) = (&self.layers.leases, &self.lease) {
            if let Some((key, _)) = phase.items.get(i) {
                leases.take_failed(key, Instant::now());
            }
        }
        self.next_take()
    }

    /// Once done, a `check_all` with leases: the leased keys' decisions with the others';
    /// the reserved units back to their leases when the request is denied or failed.
    fn merged(
        &mut self,
        next: Result<Option<Vec<String>>, OpError>,
    ) -> Result<Option<Vec<String>>, OpError> {
        let done = matches!(next, Ok(None) | Err(_));
        if !done || self.lease.as_ref().is_some_and(|p| p.current.is_some()) {
            return next;
        }
        let Some(phase) = self.lease.take() else {
            return next;
        };
        let rest = match self.outcome.take() {
            Some(Outcome::Multi(md)) if next.is_ok() => md,
            other => {
                self.outcome = other;
                if let Some(leases) = &self.layers.leases {
                    for r in phase.reserved {
                        leases.give_back(r);
                    }
                }
                return next;
            }
        };
        if rest.denied.is_some() {
            if let Some(leases) = &self.layers.leases {
                for r in phase.reserved {
                    leases.give_back(r);
                }
            }
        }
        let mut from_rest = rest.decisions.into_iter();
        let mut decisions = Vec::with_capacity(phase.items.len());
        for ((_, p), leased) in phase.items.iter().zip(phase.leased) {
            decisions.push(match leased {
                Some(d) => d,
                None => from_rest.next().unwrap_or_else(|| unknown(p.params())),
            });
        }
        self.outcome = Some(Outcome::Multi(MultiDecision {
            denied: rest.denied.and_then(|j| phase.rest.get(j).copied()),
            decisions,
        }));
        self.call = Call::All {
            items: phase.items,
            costs: phase.costs,
        };
        next
    }

    /// The result once the op is done.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }
}
