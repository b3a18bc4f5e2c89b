//! Response headers (`X-RateLimit-*`, IETF `RateLimit-Policy` / `RateLimit`) and the
//! problem+json bodies of refused requests.

use std::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use super::config::Dimension;
use super::extract::REQUEST_ID;
use crate::decision::Decision;

/// Whole seconds, rounded up: a client that waits the advertised time is never early.
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The limit a response reports: the dimension, its window, and its decision.
#[derive(Clone, Copy, Debug)]
pub struct Reported {
    /// The most restrictive (or the denying) dimension.
    pub dimension: Dimension,
    /// The policy's window (`w`).
    pub window: Duration,
    /// Its decision.
    pub decision: Decision,
}

fn put(headers: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

/// Writes `X-RateLimit-Limit/Remaining/Reset` (reset: seconds from now until the limiter
/// is back to its full quota) and draft-ietf-httpapi-ratelimit-headers-11's
/// `RateLimit-Policy: "<dimension>";q=<limit>;w=<window s>` and
/// `RateLimit: "<dimension>";r=<remaining>;t=<reset s>`.
pub fn write_rate_limit(headers: &mut HeaderMap, r: &Reported) {
    let d = &r.decision;
    let reset = ceil_secs(d.reset_after);
    let name = r.dimension.name();
    put(headers, "x-ratelimit-limit", d.limit.to_string());
    put(headers, "x-ratelimit-remaining", d.remaining.to_string());
    put(headers, "x-ratelimit-reset", reset.to_string());
    put(
        headers,
        "ratelimit-policy",
        format!("\"{name}\";q={};w={}", d.limit, ceil_secs(r.window).max(1)),
    );
    put(
        headers,
        "ratelimit",
        format!("\"{name}\";r={};t={reset}", d.remaining),
    );
}

/// The request id header on a response.
pub fn write_request_id(headers: &mut HeaderMap, request_id: &str) {
    put(headers, REQUEST_ID, request_id.to_string());
}

/// 429 (or 503 when the limiter failed closed) with `Retry-After` (the true wait in whole
/// seconds rounded up; absent when no wait helps) and an `application/problem+json`
/// body naming the dimension and the request id, in any body type made from text.
pub fn refusal_response<B: From<String>>(
    r: &Reported,
    request_id: &str,
    unavailable: bool,
) -> Response<B> {
    let retry_after = r.decision.retry_after().map(ceil_secs);
    let (status, title, detail) = if unavailable {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "Rate limiter unavailable",
            format!(
                "the rate limiter for dimension '{}' is unavailable and fails closed",
                r.dimension
            ),
        )
    } else {
        (
            StatusCode::TOO_MANY_REQUESTS,
            "Too Many Requests",
            match retry_after {
                Some(s) => format!(
                    "rate limit exceeded on dimension '{}' ({} per {} s); retry after {s} s",
                    r.dimension,
                    r.decision.limit,
                    ceil_secs(r.window).max(1)
                ),
                None => format!(
                    "request exceeds the limit of dimension '{}' and can never be allowed",
                    r.dimension
                ),
            },
        )
    };
    let body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
        "dimension": r.dimension.name(),
        "request_id": request_id,
        "limit": r.decision.limit,
        "retry_after": retry_after,
    });
    let mut response = Response::new(B::from(body.to_string()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Some(s) = retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(s));
    }
    write_rate_limit(headers, r);
    write_request_id(headers, request_id);
    response
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::decision::{Source, Verdict};

    pub(crate) fn reported(verdict: Verdict) -> Reported {
        Reported {
            dimension: Dimension::Ip,
            window: Duration::from_secs(60),
            decision: Decision {
                verdict,
                limit: 100,
                remaining: 0,
                reset_after: Duration::from_millis(59_001),
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
        write_rate_limit(&mut h, &r);
        assert_eq!(h["x-ratelimit-limit"], "100");
        assert_eq!(h["x-ratelimit-remaining"], "42");
        assert_eq!(h["x-ratelimit-reset"], "60");
        assert_eq!(h["ratelimit-policy"], "\"ip\";q=100;w=60");
        assert_eq!(h["ratelimit"], "\"ip\";r=42;t=60");
    }
}
