//! Response headers (`X-RateLimit-*`, IETF `RateLimit-Policy` / `RateLimit`) and the
//! problem+json bodies of refused requests.

use std::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use super::config::Dimension;
use super::extract::REQUEST_ID;
use crate::decision::{Decision, Verdict};
use crate::policy::Policy;

/// Whole seconds, rounded up: a client that waits the advertised time is never early.
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// One enforced policy as `RateLimit-Policy` lists it: `"<dimension>";q=<quota>;w=<window s>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaPolicy {
    /// The dimension: the policy's stable name.
    pub dimension: Dimension,
    /// The quota `q`: the units a client may use at once (a token bucket's capacity).
    pub quota: u64,
    /// The window `w` over which `q` applies (a token bucket's time to refill from empty).
    pub window: Duration,
}

impl QuotaPolicy {
    /// The quota and window of `policy` on `dimension`.
    pub fn of(dimension: Dimension, policy: &Policy) -> Self {
        let a = policy.algorithm();
        Self {
            dimension,
            quota: a.limit(),
            window: a.window(),
        }
    }

    /// `w` in whole seconds (rounded up, at least 1).
    pub fn window_secs(&self) -> u64 {
        ceil_secs(self.window).max(1)
    }
}

/// The limit a response reports (the most restrictive policy) and its decision.
#[derive(Clone, Copy, Debug)]
pub struct Reported {
    /// The most restrictive (or the denying) policy.
    pub policy: QuotaPolicy,
    /// Its decision.
    pub decision: Decision,
}

impl Reported {
    /// `t` of the `RateLimit` field, in seconds: how long until the policy's quota allows
    /// the request again. Denied: the true wait (as `Retry-After`); allowed: the time until
    /// the quota is fully restored, at most `w`; never (the cost exceeds the quota): `w`.
    pub fn reset_secs(&self) -> u64 {
        let w = self.policy.window_secs();
        match self.decision.verdict {
            Verdict::Denied { retry_after } => ceil_secs(retry_after),
            Verdict::Allowed => ceil_secs(self.decision.reset_after).min(w),
            Verdict::Never => w,
        }
    }

    /// `r` of the `RateLimit` field: units left (never more than `q`).
    pub fn remaining(&self) -> u64 {
        self.decision.remaining.min(self.policy.quota)
    }
}

fn put(headers: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

/// The `RateLimit-Policy` field value: every policy, as a structured-field list
/// (`"ip";q=100;w=60, "global";q=100000;w=60`).
pub fn policy_field(policies: &[QuotaPolicy]) -> String {
    policies
        .iter()
        .map(|p| format!("\"{}\";q={};w={}", p.dimension, p.quota, p.window_secs()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes draft-ietf-httpapi-ratelimit-headers-11's `RateLimit-Policy` (every policy in
/// `policies`) and, for the reported policy, `RateLimit: "<dimension>";r=<remaining>;t=<s>`
/// with `X-RateLimit-Limit` (= `q`), `X-RateLimit-Remaining` (= `r`) and
/// `X-RateLimit-Reset` (= `t`, see [`Reported::reset_secs`]).
pub fn write_rate_limit(headers: &mut HeaderMap, r: Option<&Reported>, policies: &[QuotaPolicy]) {
    if !policies.is_empty() {
        put(headers, "ratelimit-policy", policy_field(policies));
    }
    let Some(r) = r else { return };
    let t = r.reset_secs();
    let remaining = r.remaining();
    put(headers, "x-ratelimit-limit", r.policy.quota.to_string());
    put(headers, "x-ratelimit-remaining", remaining.to_string());
    put(headers, "x-ratelimit-reset", t.to_string());
    put(
        headers,
        "ratelimit",
        format!("\"{}\";r={remaining};t={t}", r.policy.dimension),
    );
}

/// The request id header on a response.
pub fn write_request_id(headers: &mut HeaderMap, request_id: &str) {
    put(headers, REQUEST_ID, request_id.to_string());
}

fn problem<B: From<String>>(
    status: StatusCode,
    body: serde_json::Value,
    request_id: &str,
) -> Response<B> {
    let mut response = Response::new(B::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    write_request_id(response.headers_mut(), request_id);
    response
}

/// `body` with the request's trace id (from its `traceparent`, or the trace the middleware
/// started), when there is one.
fn traced(mut body: serde_json::Value, trace_id: Option<&str>) -> serde_json::Value {
    if let (Some(id), Some(fields)) = (trace_id, body.as_object_mut()) {
        fields.insert("trace_id".to_owned(), serde_json::Value::from(id));
    }
    body
}

/// 429 with `Retry-After` (the true wait in whole seconds rounded up, equal to `t` of
/// `RateLimit`; absent when no wait helps), the quota fields, and an
/// `application/problem+json` body naming the dimension and the request id; or, when the
/// limiter failed closed (`unavailable`), 503 with `Retry-After` and no quota fields (no
/// quota was checked). The body carries `trace_id` when given. Any body type made from text.
pub fn refusal_response<B: From<String>>(
    r: &Reported,
    policies: &[QuotaPolicy],
    request_id: &str,
    unavailable: bool,
    trace_id: Option<&str>,
) -> Response<B> {
    let dimension = r.policy.dimension;
    if unavailable {
        let retry_after = r.decision.retry_after().map(ceil_secs);
        let body = serde_json::json!({
            "type": "about:blank",
            "title": "Rate limiter unavailable",
            "status": 503,
            "detail": format!(
                "the rate limiter for dimension '{dimension}' is unavailable and fails closed"
            ),
            "dimension": dimension.name(),
            "request_id": request_id,
            "retry_after": retry_after,
        });
        let body = traced(body, trace_id);
        let mut response = problem(StatusCode::SERVICE_UNAVAILABLE, body, request_id);
        if let Some(s) = retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(s));
        }
        return response;
    }
    let retry_after = r.decision.retry_after().map(|_| r.reset_secs());
    let detail = match retry_after {
        Some(s) => format!(
            "rate limit exceeded on dimension '{dimension}' ({} per {} s); retry after {s} s",
            r.policy.quota,
            r.policy.window_secs()
        ),
        None => {
            format!("request exceeds the limit of dimension '{dimension}' and can never be allowed")
        }
    };
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": detail,
        "dimension": dimension.name(),
        "request_id": request_id,
        "limit": r.policy.quota,
        "retry_after": retry_after,
    });
    let body = traced(body, trace_id);
    let mut response = problem(StatusCode::TOO_MANY_REQUESTS, body, request_id);
    let headers = response.headers_mut();
    if let Some(s) = retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(s));
    }
    write_rate_limit(headers, Some(r), policies);
    response
}

/// 403 with an `application/problem+json` body and the request id: the client IP or API
/// key (`on`: `"ip"` or `"api_key"`) is on a deny list. The body carries `trace_id` when given.
pub fn forbidden_response<B: From<String>>(
    on: &str,
    request_id: &str,
    trace_id: Option<&str>,
) -> Response<B> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Forbidden",
        "status": 403,
        "detail": format!("the request's {on} is on the gateway's deny list"),
        "denied_by": on,
        "request_id": request_id,
    });
    problem(StatusCode::FORBIDDEN, traced(body, trace_id), request_id)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::decision::Source;

    pub(crate) fn ip_policy() -> QuotaPolicy {
        QuotaPolicy {
            dimension: Dimension::Ip,
            quota: 100,
            window: Duration::from_secs(60),
        }
    }

    pub(crate) fn reported(verdict: Verdict) -> Reported {
        Reported {
            policy: ip_policy(),
            decision: Decision {
                verdict,
                limit: 100,
                remaining: 0,
                reset_after: Duration::from_millis(119_001),
                source: Source::Redis,
                shadow: false,
            },
        }
    }

    #[test]
    fn rounding_is_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1_000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1_001)), 2);
    }

    #[test]
    fn headers_follow_the_draft() {
        let mut h = HeaderMap::new();
        let mut r = reported(Verdict::Allowed);
        r.decision.remaining = 42;
        let global = QuotaPolicy {
            dimension: Dimension::Global,
            quota: 100_000,
            window: Duration::from_millis(60_000),
        };
        write_rate_limit(&mut h, Some(&r), &[ip_policy(), global]);
        assert_eq!(h["x-ratelimit-limit"], "100");
        assert_eq!(h["x-ratelimit-remaining"], "42");
        // Idle only in 120 s (a sliding window's count weighs on the next window), but `t`
        // never exceeds `w`.
        assert_eq!(h["x-ratelimit-reset"], "60");
        assert_eq!(
            h["ratelimit-policy"],
            "\"ip\";q=100;w=60, \"global\";q=100000;w=60"
        );
        assert_eq!(h["ratelimit"], "\"ip\";r=42;t=60");
    }

    #[test]
    fn t_is_the_true_wait_when_denied() {
        let r = reported(Verdict::Denied {
            retry_after: Duration::from_millis(31_200),
        });
        assert_eq!(r.reset_secs(), 32);
        let resp: Response<String> = refusal_response(&r, &[ip_policy()], "id", false, None);
        let h = resp.headers();
        assert_eq!(h[RETRY_AFTER], "32");
        assert_eq!(h["ratelimit"], "\"ip\";r=0;t=32");
        assert_eq!(h["x-ratelimit-reset"], "32");
        let never = reported(Verdict::Never);
        assert_eq!(never.reset_secs(), 60);
    }

    #[test]
    fn unavailable_and_forbidden_carry_no_quota_fields() {
        let r = reported(Verdict::Denied {
            retry_after: Duration::from_secs(1),
        });
        let closed: Response<String> = refusal_response(&r, &[ip_policy()], "id", true, None);
        let forbidden: Response<String> = forbidden_response("ip", "id", None);
        for (resp, status) in [(closed, 503), (forbidden, 403)] {
            assert_eq!(resp.status().as_u16(), status);
            for name in [
                "ratelimit",
                "ratelimit-policy",
                "x-ratelimit-limit",
                "x-ratelimit-remaining",
                "x-ratelimit-reset",
            ] {
                assert!(resp.headers().get(name).is_none(), "{status} has {name}");
            }
            assert_eq!(resp.headers()[REQUEST_ID], "id");
            let body: serde_json::Value = serde_json::from_str(resp.body()).unwrap();
            assert_eq!(body["request_id"], "id");
            assert!(body.get("limit").is_none());
            assert!(body.get("trace_id").is_none());
        }
    }

    #[test]
    fn problem_bodies_carry_the_trace_id() {
        let r = reported(Verdict::Denied {
            retry_after: Duration::from_secs(1),
        });
        let trace = Some("4bf92f3577b34da6a3ce929d0e0e4736");
        for resp in [
            refusal_response::<String>(&r, &[ip_policy()], "id", false, trace),
            refusal_response(&r, &[ip_policy()], "id", true, trace),
            forbidden_response("ip", "id", trace),
        ] {
            let body: serde_json::Value = serde_json::from_str(resp.body()).unwrap();
            assert_eq!(body["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_eq!(body["request_id"], "id");
        }
    }
}
