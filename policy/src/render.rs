//! A decision written as the response: `RateLimit-Policy` / `RateLimit` (draft-ietf-
//! httpapi-ratelimit-headers-11) with `X-RateLimit-*`, and the problem+json bodies of
//! refusals (429, 503, 403, 400).

use std::cmp::Reverse;

use crate::engine::{Plan, PlanItem};
use crate::identity::KeyError;
use crate::limit::LimitSpec;
use crate::text::{decimal, push_u64};

/// A response a front end sends as is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers (lower-case names), `content-type` and `x-request-id` included.
    pub headers: Vec<(&'static str, String)>,
    /// The problem+json body.
    pub body: String,
}

impl Response {
    /// The same response with `trace_id` (the request's W3C trace) in its problem body, next
    /// to `request_id`, so a refusal can be found in the tracing system.
    pub fn with_trace_id(mut self, trace_id: &str) -> Self {
        if let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_str(&self.body) {
            fields.insert("trace_id".to_owned(), serde_json::Value::from(trace_id));
            self.body = serde_json::Value::Object(fields).to_string();
        }
        self
    }
}

/// What a limiter answered for one plan item: the core's answer
/// ([`redis_rl_core::Outcome`]) with its wait in milliseconds, converted both ways with
/// `From`.
///
/// It stays a type of its own rather than an alias of `redis_rl_core::Outcome<u64>`: its
/// `retry_after_ms` field (the unit in the name, as every field of this crate's plans and
/// outcomes) is what every front end writes and matches on (the Rust middleware, rl-gateway's
/// services, the Python binding), a public contract an alias would rename to `retry_after`;
/// and this crate's [`Outcome`] (one plan item's rendered decision) would clash with the
/// core's name in every front end that uses both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed.
    Allowed,
    /// Denied; allowed again after `retry_after_ms`.
    Denied {
        /// The wait in milliseconds.
        retry_after_ms: u64,
    },
    /// Denied; no wait helps (the cost exceeds the quota).
    Never,
}

impl From<redis_rl_core::Outcome<u64>> for Verdict {
    fn from(o: redis_rl_core::Outcome<u64>) -> Self {
        match o {
            redis_rl_core::Outcome::Allowed => Verdict::Allowed,
            redis_rl_core::Outcome::Denied { retry_after } => Verdict::Denied {
                retry_after_ms: retry_after,
            },
            redis_rl_core::Outcome::Never => Verdict::Never,
        }
    }
}

impl From<Verdict> for redis_rl_core::Outcome<u64> {
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::Allowed => redis_rl_core::Outcome::Allowed,
            Verdict::Denied { retry_after_ms } => redis_rl_core::Outcome::Denied {
                retry_after: retry_after_ms,
            },
            Verdict::Never => redis_rl_core::Outcome::Never,
        }
    }
}

/// One plan item's decision, as the front end's limiter made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The verdict.
    pub verdict: Verdict,
    /// Units left.
    pub remaining: u64,
    /// Time until the key is idle (full again), in milliseconds.
    pub reset_after_ms: u64,
    /// Recorded in shadow mode.
    pub shadow: bool,
    /// Redis failed and the failure mode allowed it without counting.
    pub fail_open: bool,
    /// Redis failed and the failure mode refused it.
    pub fail_closed: bool,
}

/// What to write: a refusal, or the headers of the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendered {
    /// Answer with this instead of calling the application.
    Refuse(Response),
    /// Call the application and add these headers to its response.
    Headers(Vec<(&'static str, String)>),
}

/// Whole seconds, rounded up: a client that waits the advertised time is never early.
pub fn ceil_secs(ms: u64) -> u64 {
    ms.div_ceil(1_000)
}

/// `w` of a window: its quota's window in whole seconds, at least 1.
pub(crate) fn window_secs(spec: &LimitSpec) -> u64 {
    ceil_secs(spec.quota_window_ms()).max(1)
}

/// The reported policy of a response and its decision.
struct Reported<'a> {
    item: &'a PlanItem,
    outcome: Outcome,
}

impl Reported<'_> {
    /// `t`: denied, the true wait; allowed, until full again (at most `w`); never: `w`.
    fn reset_secs(&self) -> u64 {
        let w = self.item.shown.window_secs;
        match self.outcome.verdict {
            Verdict::Denied { retry_after_ms } => ceil_secs(retry_after_ms),
            Verdict::Allowed => ceil_secs(self.outcome.reset_after_ms).min(w),
            Verdict::Never => w,
        }
    }

    fn remaining(&self) -> u64 {
        self.outcome.remaining.min(self.item.shown.quota)
    }
}

/// The `RateLimit-Policy` value: every enforced policy (shadow ones are not), each window
/// its own (`"api_key-1s";q=10;w=1, "api_key-1d";q=10000;w=86400`).
/// Each item's entry was written when the configuration was loaded: this joins them.
pub fn policy_field(plan: &Plan) -> String {
    let enforced = || plan.items.iter().filter(|i| !i.shadow);
    let mut out = String::with_capacity(enforced().map(|i| i.policy.len() + 2).sum());
    for item in enforced() {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&item.policy);
    }
    out
}

/// The plan item a response reports (in its headers, logs and refusal): the denying one, else
/// the enforced one with the fewest units left (ties: the longest `t`, then the plan's order).
/// `None` when nothing enforced was decided (every item failed open, or none is enforced).
pub fn reported_index(plan: &Plan, outcomes: &[Outcome], denied: Option<usize>) -> Option<usize> {
    let reported = |i: usize| {
        Some(Reported {
            item: plan.items.get(i)?,
            outcome: *outcomes.get(i)?,
        })
    };
    match denied {
        Some(i) => reported(i).map(|_| i),
        None => (0..plan.items.len())
            .filter_map(|i| reported(i).map(|r| (i, r)))
            .filter(|(_, r)| !r.outcome.shadow && !r.item.shadow && !r.outcome.fail_open)
            .min_by_key(|(_, r)| (r.remaining(), Reverse(r.reset_secs())))
            .map(|(i, _)| i),
    }
}

/// The decision of `plan` written out. `outcomes` are in the plan's order; `denied` is
/// the item that refused the request (all or nothing: none was counted then).
pub fn render(
    plan: &Plan,
    outcomes: &[Outcome],
    denied: Option<usize>,
    request_id: &str,
) -> Rendered {
    let most_restrictive = reported_index(plan, outcomes, denied).and_then(|i| {
        Some(Reported {
            item: plan.items.get(i)?,
            outcome: *outcomes.get(i)?,
        })
    });
    let policies = policy_field(plan);
    if let (Some(_), Some(r)) = (denied, &most_restrictive) {
        return Rendered::Refuse(refusal(r, &policies, request_id, plan.legacy_headers));
    }
    // `ratelimit-policy` and the (up to) four of quota_headers.
    let mut headers: Vec<(&'static str, String)> = Vec::with_capacity(5);
    if !policies.is_empty() {
        headers.push(("ratelimit-policy", policies));
    }
    if let Some(r) = &most_restrictive {
        quota_headers(&mut headers, r, plan.legacy_headers);
    }
    Rendered::Headers(headers)
}

/// `RateLimit` of the reported item, after the three `X-RateLimit-*` when `legacy`.
fn quota_headers(headers: &mut Vec<(&'static str, String)>, r: &Reported<'_>, legacy: bool) {
    let t = r.reset_secs();
    let remaining = r.remaining();
    if legacy {
        headers.push(("x-ratelimit-limit", decimal(r.item.shown.quota)));
        headers.push(("x-ratelimit-remaining", decimal(remaining)));
        headers.push(("x-ratelimit-reset", decimal(t)));
    }
    // `"name";r=<remaining>;t=<t>`, sized for the widest integers.
    let name = &r.item.name;
    let mut ratelimit = String::with_capacity(name.len() + 2 + 3 + 20 + 3 + 20);
    ratelimit.push('"');
    ratelimit.push_str(name);
    ratelimit.push_str("\";r=");
    push_u64(&mut ratelimit, remaining);
    ratelimit.push_str(";t=");
    push_u64(&mut ratelimit, t);
    headers.push(("ratelimit", ratelimit));
}

pub(crate) fn problem(status: u16, body: serde_json::Value, request_id: &str) -> Response {
    Response {
        status,
        headers: vec![
            ("content-type", "application/problem+json".to_string()),
            ("x-request-id", request_id.to_string()),
        ],
        body: body.to_string(),
    }
}

fn what(item: &PlanItem) -> String {
    match item.dimension {
        Some(_) => format!("dimension '{}'", item.label),
        None => format!("rule '{}'", item.label),
    }
}

/// 429 with `Retry-After` (= `t`; absent when no wait helps), the quota headers and a
/// problem body naming the dimension or rule and the policy; or, when the limiter failed
/// closed, 503 with `Retry-After` and no quota fields.
fn refusal(r: &Reported<'_>, policies: &str, request_id: &str, legacy: bool) -> Response {
    let item = r.item;
    if r.outcome.fail_closed {
        let retry_after = match r.outcome.verdict {
            Verdict::Denied { retry_after_ms } => Some(ceil_secs(retry_after_ms)),
            _ => None,
        };
        let body = serde_json::json!({
            "type": "about:blank",
            "title": "Rate limiter unavailable",
            "status": 503,
            "detail": format!("the rate limiter for {} is unavailable and fails closed", what(item)),
            "dimension": item.label,
            "policy": item.name,
            "request_id": request_id,
            "retry_after": retry_after,
        });
        let mut response = problem(503, body, request_id);
        if let Some(s) = retry_after {
            response.headers.push(("retry-after", s.to_string()));
        }
        return response;
    }
    let retry_after = match r.outcome.verdict {
        Verdict::Denied { .. } => Some(r.reset_secs()),
        _ => None,
    };
    let detail = match retry_after {
        Some(s) => format!(
            "rate limit exceeded on {} ({} per {} s); retry after {s} s",
            what(item),
            item.shown.quota,
            item.shown.window_secs
        ),
        None => format!(
            "request exceeds the limit of {} and can never be allowed",
            what(item)
        ),
    };
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": detail,
        "dimension": item.label,
        "policy": item.name,
        "request_id": request_id,
        "limit": item.shown.quota,
        "retry_after": retry_after,
    });
    let mut response = problem(429, body, request_id);
    if let Some(s) = retry_after {
        response.headers.push(("retry-after", s.to_string()));
    }
    if !policies.is_empty() {
        response
            .headers
            .push(("ratelimit-policy", policies.to_string()));
    }
    quota_headers(&mut response.headers, r, legacy);
    response
}

/// 403: the client IP (`on = "ip"`) or the API key (`"api_key"`) is on a deny list.
pub fn forbidden(on: &str, request_id: &str) -> Response {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Forbidden",
        "status": 403,
        "detail": format!("the request's {on} is on the gateway's deny list"),
        "denied_by": on,
        "request_id": request_id,
    });
    problem(403, body, request_id)
}

/// 400: the request's API key cannot be read as one key.
pub fn bad_request(e: KeyError, request_id: &str) -> Response {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Bad Request",
        "status": 400,
        "detail": e.detail(),
        "request_id": request_id,
    });
    problem(400, body, request_id)
}

#[cfg(test)]
mod tests {
    use super::Verdict;
    use redis_rl_core::Outcome;

    /// The core's answer and the front ends' verdict say the same thing, the wait in ms.
    #[test]
    fn verdicts_convert_to_and_from_the_cores_outcome() {
        let pairs = [
            (Outcome::Allowed, Verdict::Allowed),
            (
                Outcome::Denied { retry_after: 1_500 },
                Verdict::Denied {
                    retry_after_ms: 1_500,
                },
            ),
            (Outcome::Never, Verdict::Never),
        ];
        for (core, verdict) in pairs {
            assert_eq!(Verdict::from(core), verdict);
            assert_eq!(Outcome::<u64>::from(verdict), core);
        }
    }
}
