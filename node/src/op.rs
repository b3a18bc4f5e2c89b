//! `Op`: the client's sans-I/O op (`redis_rl_client::sansio`) for JavaScript. `start()` gives
//! the command to send (or `null`: decided without Redis: the deny cache, or the breaker
//! open); `feed(reply)` or `fail(message, outage)` with what the client got gives the next
//! command (the twin instead of a missing module, `EVAL` after `NOSCRIPT`) or `null`: done;
//! the result is then read with `decision()`, `multi()`, `grant()` or `units()`. Only the
//! conversions live here: numbers, replies of any client library, decisions as objects.

use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use redis_rl_client::sansio::{self, OpError, Outcome};
use redis_rl_client::{Decision, Source, Verdict};

use crate::decision::{JsDecision, JsGrant, JsMultiDecision, JsSettled};
use crate::policy::{to_f64, whole, Policy};
use crate::reply::Reply;

/// The names of [`Op::fields`]'s `source` numbers, in order.
pub const SOURCES: [&str; 7] = Source::NAMES;

/// One call in progress (the client's sans-I/O op, with JavaScript's types).
#[napi]
pub struct Op {
    inner: sansio::Op,
    /// The command `feed_multi_fields` got back instead of a decision.
    next: Option<Vec<String>>,
}

fn error(message: impl Into<String>) -> Error {
    Error::new(Status::GenericFailure, message.into())
}

pub(crate) fn js_error(e: OpError) -> Error {
    match e {
        OpError::Invalid(m) => Error::new(Status::InvalidArg, m),
        OpError::Failed(m) => error(m),
    }
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
    pub(crate) fn new(inner: sansio::Op) -> Self {
        Self { inner, next: None }
    }

    fn outcome(&self) -> Option<&Outcome> {
        self.inner.outcome()
    }

    pub(crate) fn inner(&self) -> &sansio::Op {
        &self.inner
    }
}

#[napi]
impl Op {
    /// Adds a key to a `checkAll` op, with its own cost.
    #[napi]
    pub fn add(&mut self, key: String, policy: &Policy, cost: f64) -> Result<()> {
        let cost = whole("cost", cost)?;
        self.inner.add(key, policy.inner, cost).map_err(js_error)
    }

    /// The first command to send, or `null` when decided without Redis.
    #[napi]
    pub fn start(&mut self) -> Result<Option<Vec<String>>> {
        self.inner.start().map_err(js_error)
    }

    /// The key a cluster client routes the command by (the first key).
    #[napi(getter)]
    pub fn routing_key(&self) -> String {
        self.inner.routing_key().to_string()
    }

    /// The reply to the command last sent: `null` (done).
    #[napi(ts_args_type = "reply: unknown")]
    pub fn feed(&mut self, reply: Reply) -> Result<Option<Vec<String>>> {
        self.inner.feed(&reply.0).map_err(js_error)
    }

    /// The error the command last sent got: `outage` when the client could not reach the
    /// server (connection, timeout), else an error reply's text. Returns the next command
    /// (the twin, `EVAL`), or `null` when done: decided by the failure mode, or throws the
    /// error (calls without a failure mode, and errors that are the call's own).
    #[napi]
    pub fn fail(&mut self, message: String, outage: bool) -> Result<Option<Vec<String>>> {
        self.inner.fail(&message, outage).map_err(js_error)
    }

    /// [`Op::feed`] and, when that ends the op with a decision, its numbers (see
    /// [`Op::fields`]) in the same call: the hot path of `check` crosses into the addon three
    /// times (make the op, start it, feed it), and JavaScript builds the object.
    #[napi(ts_args_type = "reply: unknown")]
    pub fn feed_fields(&mut self, reply: Reply) -> Result<Option<Vec<f64>>> {
        self.feed(reply)?;
        self.fields().map(Some)
    }

    /// The decision of a `checkAll` as numbers (see [`Op::fields`]): `[allowed, deniedIndex
    /// (-1: none), retryAfterMs (-1: never)]`, then each key's seven numbers in order.
    #[napi]
    pub fn multi_fields(&self) -> Result<Vec<f64>> {
        let Some(Outcome::Multi(m)) = self.outcome() else {
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
    /// Empty when the op sends another command first (a hot key's lease taken): it is
    /// `takeNext()`'s.
    pub fn feed_multi_fields(&mut self, reply: Reply) -> Result<Vec<f64>> {
        if let Some(next) = self.feed(reply)? {
            self.next = Some(next);
            return Ok(Vec::new());
        }
        self.multi_fields()
    }

    /// The command `feedMultiFields` left to send (`null`: none).
    #[napi]
    pub fn take_next(&mut self) -> Option<Vec<String>> {
        self.next.take()
    }

    /// The decision of a `check` as numbers, cheaper to hand over than an object:
    /// `[allowed, limit, remaining, retryAfterMs (-1: never), resetAfterMs, source, shadow]`,
    /// `source` the index in `SOURCES`, booleans 0 or 1.
    #[napi]
    pub fn fields(&self) -> Result<Vec<f64>> {
        let Some(Outcome::Decision(d)) = self.outcome() else {
            return Err(error("fields: the op has no decision"));
        };
        Ok(decision_fields(d, self.inner.policy_shadow()).to_vec())
    }

    /// The decision of a `check`.
    #[napi]
    pub fn decision(&self) -> Result<JsDecision> {
        match self.outcome() {
            Some(Outcome::Decision(d)) => {
                let mut js = JsDecision::from(d);
                js.shadow = js.shadow || self.inner.policy_shadow();
                Ok(js)
            }
            _ => Err(error("decision: the op has no decision")),
        }
    }

    /// The decision of a `checkAll`.
    #[napi]
    pub fn multi(&self) -> Result<JsMultiDecision> {
        match self.outcome() {
            Some(Outcome::Multi(m)) => Ok(JsMultiDecision::from(m)),
            _ => Err(error("multi: the op has no decision")),
        }
    }

    /// The grant of a `takeUpto`.
    #[napi]
    pub fn grant(&self) -> Result<JsGrant> {
        match self.outcome() {
            Some(Outcome::Grant(g)) => Ok(JsGrant::from(g)),
            _ => Err(error("grant: the op has no grant")),
        }
    }

    /// What a `settle` did.
    #[napi]
    pub fn settled(&self) -> Result<JsSettled> {
        match self.outcome() {
            Some(Outcome::Settled { settled, units }) => Ok(JsSettled::new(settled, *units)),
            _ => Err(error("settled: the op has not settled")),
        }
    }

    /// The units a `refund` gave back.
    #[napi]
    pub fn units(&self) -> Result<f64> {
        match self.outcome() {
            Some(Outcome::Units(u)) => Ok(crate::policy::to_f64(*u)),
            _ => Err(error("units: the op has no count")),
        }
    }
}
