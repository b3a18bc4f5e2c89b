//! `Op`: one call of the limiter as a state machine without I/O. `start()` gives the
//! command to send (or `null`: decided without Redis: the deny cache, or the breaker open);
//! `feed(reply)` or `fail(message, outage)` with what the client got gives the next command
//! (the twin instead of a missing module, `EVAL` after `NOSCRIPT`) or `null`: done; the
//! result is then read with `decision()`, `multi()`, `grant()` or `units()`.

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde_json::Value as Json;

use redis_rl_client::breaker::Permit;
use redis_rl_client::decision::{parse_all, parse_refund, parse_single, parse_upto};
use redis_rl_client::{
    Decision, FailureMode, Grant, MultiDecision, Policy as ClientPolicy, Source, Verdict,
};

use crate::core::Shared;
use crate::decision::{JsDecision, JsGrant, JsMultiDecision};
use crate::policy::{to_f64, whole, Policy};
use crate::reply;
use crate::wire::Retry;

/// The names of [`Op::fields`]'s `source` numbers, in order.
pub const SOURCES: [&str; 7] = Source::NAMES;

/// Most keys one `RL.ALL` takes (the module's `rl.max-all-keys` default).
const MAX_ALL_KEYS: usize = 16;

/// Hash slots of a Redis Cluster.
const SLOTS: u16 = 16_384;

pub(crate) enum Call {
    Check {
        key: String,
        policy: ClientPolicy,
        cost: u64,
        peek: bool,
    },
    All {
        items: Vec<(String, ClientPolicy)>,
        costs: Vec<u64>,
    },
    Upto {
        key: String,
        policy: ClientPolicy,
        n: u64,
        peek: bool,
    },
    Refund {
        key: String,
        policy: ClientPolicy,
        amount: u64,
    },
    Force {
        key: String,
        policy: ClientPolicy,
        cost: u64,
    },
}

enum Outcome {
    Decision(Decision),
    Multi(MultiDecision),
    Grant(Grant),
    Units(u64),
}

/// One call in progress.
#[napi]
pub struct Op {
    shared: Arc<Shared>,
    call: Call,
    /// The module's form of the command last sent (the twin's is derived from it).
    module: Vec<String>,
    outcome: Option<Outcome>,
}

fn error(message: impl Into<String>) -> Error {
    Error::new(Status::GenericFailure, message.into())
}

/// The parameters as the server reads them after the key or spec word.
fn push_params(words: &mut Vec<String>, policy: &ClientPolicy) {
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

/// Errors meaning "this server cannot answer now", not "bad request".
fn unavailable(message: &str) -> bool {
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

/// The cluster hash slot of `key` (its `{tag}` when it has a non-empty one).
fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = bytes.get(open + 1..)?;
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| rest.get(..close)).flatten()
    });
    crc16(tagged.unwrap_or(bytes)) % SLOTS
}

/// CRC16-CCITT (XModem), the cluster's key hash.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// One decision's seven numbers (see [`Op::fields`]).
fn decision_fields(d: &Decision, shadow: bool) -> [f64; 7] {
    let ms = |d: Duration| to_f64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let retry = match d.verdict {
        Verdict::Allowed => 0.0,
        Verdict::Denied { retry_after } => ms(retry_after),
        Verdict::Never => -1.0,
    };
    let source = d.source.index();
    let shadow = d.shadow || shadow;
    [
        f64::from(u8::from(d.allows() || shadow)),
        to_f64(d.limit),
        to_f64(d.remaining),
        retry,
        ms(d.reset_after),
        to_f64(source as u64),
        f64::from(u8::from(shadow)),
    ]
}

impl Op {
    pub(crate) fn new(shared: Arc<Shared>, call: Call) -> Self {
        Self {
            shared,
            call,
            module: Vec::new(),
            outcome: None,
        }
    }

    fn module_command(&self) -> Result<Vec<String>> {
        Ok(match &self.call {
            Call::Check {
                key,
                policy,
                cost,
                peek,
            } => {
                let mut w = vec![policy.kind().command().to_string(), key.clone()];
                push_params(&mut w, policy);
                push_cost_peek(&mut w, *cost, *peek);
                w
            }
            Call::All { items, costs } => {
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
            Call::Upto {
                key,
                policy,
                n,
                peek,
            } => {
                if !policy.kind().upto() {
                    return Err(Error::new(
                        Status::InvalidArg,
                        format!("{} does not take UPTO", policy.kind().command()),
                    ));
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
            } => {
                let mut w = vec![
                    "RL.REFUND".to_string(),
                    key.clone(),
                    policy.kind().spec_name().to_string(),
                ];
                push_params(&mut w, policy);
                w.extend(["COST".to_string(), amount.to_string()]);
                w
            }
            Call::Force { key, policy, cost } => {
                let mut w = vec![policy.kind().command().to_string(), key.clone()];
                push_params(&mut w, policy);
                w.extend(["COST".to_string(), cost.to_string(), "FORCE".to_string()]);
                w
            }
        })
    }

    /// What the policy's failure mode answers while Redis cannot.
    fn fallback(&self, key: &str, policy: &ClientPolicy, cost: u64, peek: bool) -> Decision {
        let limit = policy.limit();
        let mut d = match policy.failure_mode() {
            FailureMode::Open => Decision {
                verdict: Verdict::Allowed,
                limit,
                remaining: limit,
                reset_after: Duration::ZERO,
                source: Source::FailOpen,
                shadow: false,
            },
            FailureMode::Closed => Decision {
                verdict: Verdict::Denied {
                    retry_after: self
                        .shared
                        .breaker
                        .remaining_open()
                        .max(Duration::from_secs(1)),
                },
                limit,
                remaining: 0,
                reset_after: Duration::ZERO,
                source: Source::FailClosed,
                shadow: false,
            },
            FailureMode::Local { instances } => {
                self.shared
                    .local
                    .check(key, policy.params(), instances, cost, peek)
            }
        };
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
                let cost = |i: usize| costs.get(i).copied().unwrap_or(1);
                let peeks: Vec<Decision> = items
                    .iter()
                    .enumerate()
                    .map(|(i, (k, p))| self.fallback(k, p, cost(i), true))
                    .collect();
                let denied = peeks.iter().position(|d| !d.allows());
                let decisions = if denied.is_some() {
                    peeks
                } else {
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, (k, p))| self.fallback(k, p, cost(i), false))
                        .collect()
                };
                Some(Outcome::Multi(MultiDecision { denied, decisions }))
            }
            _ => None,
        }
    }

    fn policy_shadow(&self) -> bool {
        match &self.call {
            Call::Check { policy, .. } => policy.is_shadow(),
            _ => false,
        }
    }
}

#[napi]
impl Op {
    /// Adds a key to a `checkAll` op, with its own cost.
    #[napi]
    pub fn add(&mut self, key: String, policy: &Policy, cost: f64) -> Result<()> {
        let cost = whole("cost", cost)?;
        let Call::All { items, costs } = &mut self.call else {
            return Err(error("add: only a checkAll op takes keys"));
        };
        if key.is_empty() {
            return Err(Error::new(Status::InvalidArg, "key must not be empty"));
        }
        if items.iter().any(|(k, _)| *k == key) {
            return Err(Error::new(
                Status::InvalidArg,
                format!("key {key:?} repeats an earlier key: each key may appear once"),
            ));
        }
        if items.len() == MAX_ALL_KEYS {
            return Err(Error::new(
                Status::InvalidArg,
                "checkAll takes at most 16 keys (rl.max-all-keys)",
            ));
        }
        items.push((key, policy.inner));
        costs.push(cost);
        Ok(())
    }

    /// The first command to send, or `null` when decided without Redis.
    #[napi]
    pub fn start(&mut self) -> Result<Option<Vec<String>>> {
        match &self.call {
            Call::Check { key, .. }
            | Call::Upto { key, .. }
            | Call::Refund { key, .. }
            | Call::Force { key, .. }
                if key.is_empty() =>
            {
                return Err(Error::new(Status::InvalidArg, "key must not be empty"));
            }
            Call::All { items, .. } => {
                if items.is_empty() {
                    self.outcome = Some(Outcome::Multi(MultiDecision {
                        denied: None,
                        decisions: Vec::new(),
                    }));
                    return Ok(None);
                }
                if self.shared.cluster {
                    let first = items.first().map(|(k, _)| slot(k));
                    if items.iter().any(|(k, _)| Some(slot(k)) != first) {
                        return Err(Error::new(
                            Status::InvalidArg,
                            "checkAll on a cluster: every key must be in one hash slot (give them a common {tag})",
                        ));
                    }
                }
            }
            _ => {}
        }
        if let (
            Call::Check {
                key,
                cost,
                policy,
                peek: false,
            },
            Some(cache),
        ) = (&self.call, &self.shared.deny)
        {
            if let Some(mut d) = cache.get(key, *cost) {
                d.shadow = policy.is_shadow();
                self.outcome = Some(Outcome::Decision(d));
                return Ok(None);
            }
        }
        if self.shared.breaker.permit() == Permit::Reject {
            if let Some(outcome) = self.fall_back() {
                self.outcome = Some(outcome);
                return Ok(None);
            }
            return Err(error("the circuit breaker is open: Redis was not called"));
        }
        self.module = self.module_command()?;
        Ok(Some(self.shared.wire.encode(self.module.clone())))
    }

    /// The key a cluster client routes the command by (the first key).
    #[napi(getter)]
    pub fn routing_key(&self) -> String {
        match &self.call {
            Call::Check { key, .. }
            | Call::Upto { key, .. }
            | Call::Refund { key, .. }
            | Call::Force { key, .. } => key.clone(),
            Call::All { items, .. } => items.first().map(|(k, _)| k.clone()).unwrap_or_default(),
        }
    }

    /// The reply to the command last sent: `null` (done).
    #[napi(ts_args_type = "reply: unknown")]
    pub fn feed(&mut self, reply: Json) -> Result<Option<Vec<String>>> {
        let value = reply::value(&reply);
        let parsed = match &self.call {
            Call::Check {
                policy,
                key,
                cost,
                peek,
            } => parse_single(policy.kind().command(), &value).map(|mut d| {
                if !*peek {
                    if let Some(cache) = &self.shared.deny {
                        cache.remember(key, *cost, &d);
                    }
                }
                d.shadow = policy.is_shadow();
                Outcome::Decision(d)
            }),
            Call::All { items, .. } => parse_all(&value, items.len())
                .map(|(denied, decisions)| Outcome::Multi(MultiDecision { denied, decisions })),
            Call::Upto { policy, .. } => {
                parse_upto(policy.kind().command(), &value).map(Outcome::Grant)
            }
            Call::Refund { .. } => parse_refund(&value).map(Outcome::Units),
            Call::Force { policy, .. } => {
                parse_single(policy.kind().command(), &value).map(Outcome::Decision)
            }
        };
        self.shared.breaker.on_success();
        self.outcome = Some(parsed.map_err(|e| error(e.to_string()))?);
        Ok(None)
    }

    /// The error the command last sent got: `outage` when the client could not reach the
    /// server (connection, timeout), else an error reply's text. Returns the next command
    /// (the twin, `EVAL`), or `null` when done: decided by the failure mode, or throws the
    /// error (calls without a failure mode, and errors that are the call's own).
    #[napi]
    pub fn fail(&mut self, message: String, outage: bool) -> Result<Option<Vec<String>>> {
        if !outage {
            if let Retry::Send(next) = self.shared.wire.retry(&self.module, &message) {
                return Ok(Some(next));
            }
        }
        if outage || unavailable(&message) {
            self.shared.breaker.on_failure();
            if let Some(outcome) = self.fall_back() {
                self.outcome = Some(outcome);
                return Ok(None);
            }
        }
        Err(error(message))
    }

    /// [`Op::feed`] and, when that ends the op with a decision, its numbers (see
    /// [`Op::fields`]) in the same call: the hot path of `check` crosses into the addon three
    /// times (make the op, start it, feed it), and JavaScript builds the object.
    #[napi(ts_args_type = "reply: unknown")]
    pub fn feed_fields(&mut self, reply: Json) -> Result<Option<Vec<f64>>> {
        self.feed(reply)?;
        self.fields().map(Some)
    }

    /// The decision of a `checkAll` as numbers (see [`Op::fields`]): `[allowed, deniedIndex
    /// (-1: none), retryAfterMs (-1: never)]`, then each key's seven numbers in order.
    #[napi]
    pub fn multi_fields(&self) -> Result<Vec<f64>> {
        let Some(Outcome::Multi(m)) = &self.outcome else {
            return Err(error("multiFields: the op has no decision"));
        };
        let js = JsMultiDecision::from(m);
        let mut out = Vec::with_capacity(3 + 7 * m.decisions.len());
        out.push(f64::from(u8::from(js.allowed)));
        out.push(m.denied.map_or(-1.0, |i| to_f64(i as u64)));
        out.push(match js.retry_after_ms {
            napi::Either::A(ms) => ms,
            napi::Either::B(_) => -1.0,
        });
        for d in &m.decisions {
            out.extend(decision_fields(d, false));
        }
        Ok(out)
    }

    /// [`Op::feed`] and [`Op::multi_fields`] in one call.
    #[napi(ts_args_type = "reply: unknown")]
    pub fn feed_multi_fields(&mut self, reply: Json) -> Result<Vec<f64>> {
        self.feed(reply)?;
        self.multi_fields()
    }

    /// The decision of a `check` as numbers, cheaper to hand over than an object:
    /// `[allowed, limit, remaining, retryAfterMs (-1: never), resetAfterMs, source, shadow]`,
    /// `source` the index in `SOURCES`, booleans 0 or 1.
    #[napi]
    pub fn fields(&self) -> Result<Vec<f64>> {
        let Some(Outcome::Decision(d)) = &self.outcome else {
            return Err(error("fields: the op has no decision"));
        };
        let retry = match d.verdict {
            Verdict::Allowed => 0.0,
            Verdict::Denied { retry_after } => {
                to_f64(u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX))
            }
            Verdict::Never => -1.0,
        };
        let source = d.source.index();
        let shadow = d.shadow || self.policy_shadow();
        Ok(vec![
            f64::from(u8::from(d.allows() || shadow)),
            to_f64(d.limit),
            to_f64(d.remaining),
            retry,
            to_f64(u64::try_from(d.reset_after.as_millis()).unwrap_or(u64::MAX)),
            to_f64(source as u64),
            f64::from(u8::from(shadow)),
        ])
    }

    /// The decision of a `check` (or a `force`).
    #[napi]
    pub fn decision(&self) -> Result<JsDecision> {
        match &self.outcome {
            Some(Outcome::Decision(d)) => {
                let mut js = JsDecision::from(d);
                js.shadow = js.shadow || self.policy_shadow();
                Ok(js)
            }
            _ => Err(error("decision: the op has no decision")),
        }
    }

    /// The decision of a `checkAll`.
    #[napi]
    pub fn multi(&self) -> Result<JsMultiDecision> {
        match &self.outcome {
            Some(Outcome::Multi(m)) => Ok(JsMultiDecision::from(m)),
            _ => Err(error("multi: the op has no decision")),
        }
    }

    /// The grant of a `takeUpto`.
    #[napi]
    pub fn grant(&self) -> Result<JsGrant> {
        match &self.outcome {
            Some(Outcome::Grant(g)) => Ok(JsGrant::from(g)),
            _ => Err(error("grant: the op has no grant")),
        }
    }

    /// The units a `refund` gave back.
    #[napi]
    pub fn units(&self) -> Result<f64> {
        match &self.outcome {
            Some(Outcome::Units(u)) => Ok(crate::policy::to_f64(*u)),
            _ => Err(error("units: the op has no count")),
        }
    }
}
