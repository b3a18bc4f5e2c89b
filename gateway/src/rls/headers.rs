//! `response_headers_to_add` (with `--rls-response-headers`): the same fields the gateway
//! writes, for Envoy to add to the client's response: draft-ietf-httpapi-ratelimit-headers-11's
//! `RateLimit-Policy` (every enforced rule of the request) and `RateLimit` (the denying
//! rule, else the one with the fewest requests left), and `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining`, `X-RateLimit-Reset` equal to its `q`, `r` and `t`.

use rl_gateway_proto::envoy::config::core::v3::HeaderValue;
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};

use crate::envoy_env::HeaderNames;

use redis_rl_flow::{Decided, Verdict};

use super::plan::{Limited, Planned};

/// envoyproxy/ratelimit's three headers (LIMIT_RESPONSE_HEADERS_ENABLED), under its names:
/// the limit, what is left and the seconds until the window resets, of the descriptor
/// over its limit (the last one), else the one with the fewest requests left.
pub fn envoy_headers(statuses: &[DescriptorStatus], names: &HeaderNames) -> Vec<HeaderValue> {
    let mut chosen: Option<&DescriptorStatus> = None;
    for s in statuses.iter().filter(|s| s.current_limit.is_some()) {
        let over = s.code == Code::OverLimit as i32;
        if over
            || chosen.is_none_or(|c| {
                c.code != Code::OverLimit as i32 && s.limit_remaining < c.limit_remaining
            })
        {
            chosen = Some(s);
        }
    }
    let Some(s) = chosen else {
        return Vec::new();
    };
    let limit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
    let reset = s.duration_until_reset.as_ref().map_or(0, |d| {
        d.seconds.saturating_add(i64::from(d.nanos > 0)).max(0)
    });
    [
        (&names.limit, limit.to_string()),
        (&names.remaining, s.limit_remaining.to_string()),
        (&names.reset, reset.to_string()),
    ]
    .into_iter()
    .map(|(key, value)| HeaderValue {
        key: key.clone(),
        value,
        ..Default::default()
    })
    .collect()
}

/// The headers for a decided request (none when no enforced rule was counted).
pub fn response_headers(
    planned: &[Planned],
    decisions: &[Option<Decided>],
    refused: bool,
) -> Vec<HeaderValue> {
    let enforced: Vec<(&Limited, &Decided)> = planned
        .iter()
        .zip(decisions)
        .filter_map(|(p, d)| match (p, d) {
            (Planned::Limited(l), Some(d)) if !l.shadow => Some((l, d)),
            _ => None,
        })
        .collect();
    let reported = if refused {
        enforced.iter().find(|(_, d)| d.is_denied())
    } else {
        enforced.iter().min_by_key(|(l, d)| {
            (
                d.remaining.min(u64::from(l.requests_per_unit)),
                std::cmp::Reverse(reset_secs(l, d)),
            )
        })
    };
    let Some((l, d)) = reported else {
        return Vec::new();
    };
    let policy = enforced
        .iter()
        .map(|(l, _)| {
            format!(
                "\"{}\";q={};w={}",
                name(l),
                l.requests_per_unit,
                l.unit.seconds()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let q = l.requests_per_unit;
    let r = if d.is_denied() {
        0
    } else {
        d.remaining.min(u64::from(q))
    };
    let t = reset_secs(l, d);
    [
        ("RateLimit-Policy", policy),
        ("RateLimit", format!("\"{}\";r={r};t={t}", name(l))),
        ("X-RateLimit-Limit", q.to_string()),
        ("X-RateLimit-Remaining", r.to_string()),
        ("X-RateLimit-Reset", t.to_string()),
    ]
    .into_iter()
    .map(|(key, value)| HeaderValue {
        key: key.to_string(),
        value,
        ..Default::default()
    })
    .collect()
}

/// `t`: the true wait when denied, else the time until the counter is idle again, at most
/// the unit; never (0 requests per unit): the unit.
fn reset_secs(l: &Limited, d: &Decided) -> u64 {
    let w = l.unit.seconds();
    match d.verdict {
        Verdict::Denied { retry_after_ms } => ceil_secs(retry_after_ms),
        Verdict::Allowed => ceil_secs(d.reset_after_ms).min(w),
        Verdict::Never => w,
    }
}

/// Whole seconds, rounded up: a client that waits the advertised time is never early.
fn ceil_secs(ms: u64) -> u64 {
    ms.div_ceil(1_000)
}

/// The rule's name in the fields: its `name`, else its metric key, as the text of a
/// structured-field string: every character a header value or such a string cannot hold
/// (`"`, `\`, control characters such as CR and LF, anything outside printable ASCII) is
/// `_`, so nothing from a file or a request can end the string or the header.
fn name(l: &Limited) -> String {
    let n = if l.name.is_empty() {
        &l.metric
    } else {
        &l.name
    };
    n.chars()
        .map(|c| {
            if c == ' ' || (c.is_ascii_graphic() && c != '"' && c != '\\') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rls::config::Unit;

    #[test]
    fn names_cannot_end_the_string_or_the_header() {
        let l = Limited {
            requests_per_unit: 1,
            unit: Unit::Second,
            name: "a\"b\\c\r\nX-Evil: 1\u{e9}".into(),
            shadow: false,
            key: String::new(),
            subject_len: 0,
            metric: String::new(),
            policy: None,
            cost: 1,
            refund: false,
        };
        assert_eq!(name(&l), "a_b_c__X-Evil: 1_");
    }
}
