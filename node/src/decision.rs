//! Decisions as JavaScript objects: the fields and names of the Python package's, in
//! camelCase (`retryAfterMs` is `null` where no wait helps, the server's `-1`).

use napi::bindgen_prelude::{Either, Null};
use napi_derive::napi;

use redis_rl_client::settle::Settled;
use redis_rl_client::{Decision, Grant, MultiDecision, Verdict};

use crate::policy::to_f64;

fn ms(d: std::time::Duration) -> f64 {
    to_f64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The answer for one key.
#[napi(object)]
pub struct JsDecision {
    /// The caller may proceed.
    pub allowed: bool,
    /// The limit the caller is held to.
    pub limit: f64,
    /// Units left after this call.
    pub remaining: f64,
    /// 0 when allowed, the wait when denied, `null` when no wait helps (the cost is over
    /// the limit).
    #[napi(ts_type = "number | null")]
    pub retry_after_ms: Either<f64, Null>,
    /// Time until the limiter is idle again (full bucket, empty window).
    pub reset_after_ms: f64,
    /// Who decided: `redis`, `deny_cache`, `local`, `fail_open`, `fail_closed`, `unchecked`.
    pub source: String,
    /// The policy is in shadow mode: a denial is reported, not enforced (`allowed` is true).
    pub shadow: bool,
}

impl From<&Decision> for JsDecision {
    fn from(d: &Decision) -> Self {
        let retry_after_ms = match d.verdict {
            Verdict::Allowed => Either::A(0.0),
            Verdict::Denied { retry_after } => Either::A(ms(retry_after)),
            Verdict::Never => Either::B(Null),
        };
        Self {
            allowed: d.allows(),
            limit: to_f64(d.limit),
            remaining: to_f64(d.remaining),
            retry_after_ms,
            reset_after_ms: ms(d.reset_after),
            source: d.source.name().to_string(),
            shadow: d.shadow,
        }
    }
}

/// The answer for several keys checked together: all or nothing.
#[napi(object)]
pub struct JsMultiDecision {
    /// Every enforced key allowed: units were taken on all.
    pub allowed: bool,
    /// The index of the first enforced key that denied (`null` when allowed): the denying
    /// limit.
    #[napi(ts_type = "number | null")]
    pub denied_index: Either<u32, Null>,
    /// The longest wait among the denying keys (0 when allowed, `null` when one can never
    /// allow the call).
    #[napi(ts_type = "number | null")]
    pub retry_after_ms: Either<f64, Null>,
    /// One decision per key, in request order.
    pub decisions: Vec<JsDecision>,
}

impl From<&MultiDecision> for JsMultiDecision {
    fn from(m: &MultiDecision) -> Self {
        let mut longest = Some(0.0f64);
        for d in m.decisions.iter().filter(|d| !d.allows()) {
            longest = match (longest, d.verdict) {
                (Some(l), Verdict::Denied { retry_after }) => Some(l.max(ms(retry_after))),
                _ => None,
            };
        }
        Self {
            allowed: m.allows(),
            denied_index: m
                .denied
                .and_then(|i| u32::try_from(i).ok())
                .map_or(Either::B(Null), Either::A),
            retry_after_ms: match (m.allows(), longest) {
                (true, _) => Either::A(0.0),
                (false, Some(ms)) => Either::A(ms),
                (false, None) => Either::B(Null),
            },
            decisions: m.decisions.iter().map(JsDecision::from).collect(),
        }
    }
}

/// The answer to `takeUpto`: a batch of units, as many as were available.
#[napi(object)]
pub struct JsGrant {
    /// Units taken (0: nothing was available; `decision.retryAfterMs` is the wait for one).
    pub granted: f64,
    /// The decision (allowed when `granted > 0`).
    pub decision: JsDecision,
}

impl From<&Grant> for JsGrant {
    fn from(g: &Grant) -> Self {
        Self {
            granted: to_f64(g.granted),
            decision: JsDecision::from(&g.decision),
        }
    }
}

/// What `settle` did.
#[napi(object)]
pub struct JsSettled {
    /// `exact` (nothing sent), `refunded` or `charged`.
    #[napi(ts_type = "'exact' | 'refunded' | 'charged'")]
    pub kind: String,
    /// The units given back (refunded) or taken with `FORCE` (charged); 0 when exact.
    pub units: f64,
    /// When charged: the limiter afterwards (`remaining` 0 when in debt).
    pub decision: Option<JsDecision>,
}

impl JsSettled {
    pub fn new(settled: &Settled, units: u64) -> Self {
        let (kind, decision) = match settled {
            Settled::Exact => ("exact", None),
            Settled::Refunded(_) => ("refunded", None),
            Settled::Charged(d) => ("charged", Some(JsDecision::from(d))),
        };
        Self {
            kind: kind.to_string(),
            units: to_f64(units),
            decision,
        }
    }
}
