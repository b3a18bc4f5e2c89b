//! envoyproxy/ratelimit's HTTP endpoints on `HOST:PORT`, when rl-gateway runs with that
//! service's environment: `GET /healthcheck` (`OK`, or 500 while unhealthy) and `POST /json`
//! (a `RateLimitRequest` in protobuf's JSON mapping, answered with the `RateLimitResponse`
//! in the same mapping: 200 when OK, 429 when over the limit); and the Prometheus endpoint
//! of USE_PROMETHEUS on `PROMETHEUS_ADDR` at `PROMETHEUS_PATH`.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use redis_rl_client::Limiter;
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use rl_gateway_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use crate::rls::Checker;

/// What `/healthcheck` looks at.
#[derive(Clone)]
pub struct Health {
    pub checker: Checker,
    pub limiter: Limiter,
    /// A configuration was accepted (at start for files; the first push for xDS).
    pub loaded: watch::Receiver<bool>,
    /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: no domain, unhealthy.
    pub needs_domain: bool,
    /// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: Redis not answering, unhealthy.
    pub needs_redis: bool,
}

/// `/healthcheck` and `/json`.
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .route("/json", post(json_check))
        .with_state(health)
}

/// PROMETHEUS_PATH on its own listener.
pub fn prometheus(path: &str, handle: PrometheusHandle) -> Router {
    Router::new().route(
        path,
        get(move || {
            let handle = handle.clone();
            async move {
                (
                    [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
                    handle.render(),
                )
            }
        }),
    )
}

async fn healthcheck(State(h): State<Health>) -> Response {
    let mut why = Vec::new();
    if !*h.loaded.borrow() {
        why.push("no rate limit configuration received yet");
    }
    if h.needs_domain && h.checker.domains() == 0 {
        why.push("no domain loaded (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)");
    }
    if h.needs_redis && h.limiter.ping_result().await.is_err() {
        why.push("redis unavailable (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION)");
    }
    if why.is_empty() {
        (StatusCode::OK, "OK").into_response()
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, why.join("; ")).into_response()
    }
}

async fn json_check(State(h): State<Health>, body: Bytes) -> Response {
    let request = match serde_json::from_slice::<Value>(&body)
        .map_err(|e| e.to_string())
        .and_then(|v| request_from_json(&v))
    {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("Bad Request: {e}\n")).into_response(),
    };
    match h.checker.check(request).await {
        Ok(response) => {
            let status = match response.overall_code {
                1 => StatusCode::OK,
                2 => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (
                status,
                [(CONTENT_TYPE, "application/json")],
                response_to_json(&response).to_string(),
            )
                .into_response()
        }
        Err(s) => (
            StatusCode::BAD_REQUEST,
            format!("Bad Request: {}\n", s.message()),
        )
            .into_response(),
    }
}

/// A field of a JSON object under its JSON name or its proto name.
fn field<'a>(o: &'a Map<String, Value>, json_name: &str, proto_name: &str) -> Option<&'a Value> {
    o.get(json_name).or_else(|| o.get(proto_name))
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what}: expected an object"))
}

/// Refuses a field not in `known` (protobuf's JSON mapping does).
fn only_known(o: &Map<String, Value>, known: &[&str], what: &str) -> Result<(), String> {
    match o.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("{what}: unknown field \"{k}\"")),
        None => Ok(()),
    }
}

/// A number as the JSON mapping writes integers: a number or a decimal string.
fn integer(v: &Value, what: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("{what}: expected a non-negative integer"))
}

fn text(v: &Value, what: &str) -> Result<String, String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{what}: expected a string"))
}

/// A `RateLimitRequest` from protobuf's JSON mapping.
fn request_from_json(v: &Value) -> Result<RateLimitRequest, String> {
    let o = object(v, "request")?;
    only_known(
        o,
        &["domain", "descriptors", "hitsAddend", "hits_addend"],
        "request",
    )?;
    let mut request = RateLimitRequest {
        domain: match o.get("domain") {
            Some(d) => text(d, "domain")?,
            None => String::new(),
        },
        ..Default::default()
    };
    if let Some(h) = field(o, "hitsAddend", "hits_addend") {
        request.hits_addend = u32::try_from(integer(h, "hitsAddend")?)
            .map_err(|_| "hitsAddend: above 4294967295".to_string())?;
    }
    let descriptors = match o.get("descriptors") {
        None => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err("descriptors: expected a list".to_string()),
    };
    for (i, d) in descriptors.iter().enumerate() {
        request.descriptors.push(descriptor_from_json(d, i)?);
    }
    Ok(request)
}

fn descriptor_from_json(v: &Value, i: usize) -> Result<RateLimitDescriptor, String> {
    let what = format!("descriptors[{i}]");
    let o = object(v, &what)?;
    only_known(o, &["entries", "limit", "hitsAddend", "hits_addend"], &what)?;
    let mut d = RateLimitDescriptor::default();
    if let Some(entries) = o.get("entries") {
        let Value::Array(entries) = entries else {
            return Err(format!("{what}.entries: expected a list"));
        };
        for (j, e) in entries.iter().enumerate() {
            let at = format!("{what}.entries[{j}]");
            let e = object(e, &at)?;
            only_known(e, &["key", "value"], &at)?;
            d.entries.push(Entry {
                key: e
                    .get("key")
                    .map(|k| text(k, &at))
                    .transpose()?
                    .unwrap_or_default(),
                value: e
                    .get("value")
                    .map(|k| text(k, &at))
                    .transpose()?
                    .unwrap_or_default(),
            });
        }
    }
    if let Some(h) = field(o, "hitsAddend", "hits_addend") {
        d.hits_addend = Some(integer(h, &format!("{what}.hitsAddend"))?);
    }
    if let Some(l) = o.get("limit") {
        let at = format!("{what}.limit");
        let l = object(l, &at)?;
        only_known(l, &["requestsPerUnit", "requests_per_unit", "unit"], &at)?;
        let n = match field(l, "requestsPerUnit", "requests_per_unit") {
            Some(n) => u32::try_from(integer(n, &at)?)
                .map_err(|_| format!("{at}: requestsPerUnit above 4294967295"))?,
            None => 0,
        };
        let unit = match l.get("unit") {
            None => 0,
            Some(Value::Number(n)) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| format!("{at}.unit: not a unit"))?,
            Some(Value::String(s)) => UNITS
                .iter()
                .position(|u| u == s)
                .and_then(|p| i32::try_from(p).ok())
                .ok_or_else(|| format!("{at}.unit: unknown unit \"{s}\""))?,
            Some(_) => return Err(format!("{at}.unit: not a unit")),
        };
        d.limit = Some(RateLimitOverride {
            requests_per_unit: n,
            unit,
        });
    }
    Ok(d)
}

/// The protocol's units by number.
const UNITS: [&str; 8] = [
    "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK",
];
const CODES: [&str; 3] = ["UNKNOWN", "OK", "OVER_LIMIT"];

fn enum_name(names: &[&str], n: i32) -> Value {
    usize::try_from(n)
        .ok()
        .and_then(|i| names.get(i))
        .map_or_else(|| json!(n), |s| json!(s))
}

/// A `RateLimitResponse` in protobuf's JSON mapping (fields at their default left out).
fn response_to_json(r: &RateLimitResponse) -> Value {
    let mut o = Map::new();
    if r.overall_code != 0 {
        o.insert("overallCode".into(), enum_name(&CODES, r.overall_code));
    }
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut m = Map::new();
            if s.code != 0 {
                m.insert("code".into(), enum_name(&CODES, s.code));
            }
            if let Some(l) = &s.current_limit {
                let mut lm = Map::new();
                if !l.name.is_empty() {
                    lm.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    lm.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                if l.unit != 0 {
                    lm.insert("unit".into(), enum_name(&UNITS, l.unit));
                }
                m.insert("currentLimit".into(), Value::Object(lm));
            }
            if s.limit_remaining != 0 {
                m.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                m.insert(
                    "durationUntilReset".into(),
                    json!(duration(d.seconds, d.nanos)),
                );
            }
            Value::Object(m)
        })
        .collect();
    if !statuses.is_empty() {
        o.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = r
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        o.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(o)
}

/// A protobuf Duration as its JSON mapping writes it: `42s`, `0.250s`, `1.000001s`.
fn duration(seconds: i64, nanos: i32) -> String {
    if nanos == 0 {
        return format!("{seconds}s");
    }
    let frac = format!("{nanos:09}");
    let frac = if frac.ends_with("000000") {
        &frac[..3]
    } else if frac.ends_with("000") {
        &frac[..6]
    } else {
        &frac[..]
    };
    format!("{seconds}.{frac}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_both_field_names() {
        let r = request_from_json(&json!({
            "domain": "d",
            "hits_addend": 2,
            "descriptors": [
                {"entries": [{"key": "k", "value": "v"}, {"key": "only"}], "hitsAddend": "3"},
                {"entries": [], "limit": {"requestsPerUnit": 5, "unit": "MINUTE"}}
            ]
        }))
        .unwrap();
        assert_eq!(r.domain, "d");
        assert_eq!(r.hits_addend, 2);
        assert_eq!(r.descriptors[0].entries[1].key, "only");
        assert_eq!(r.descriptors[0].hits_addend, Some(3));
        let l = r.descriptors[1].limit.as_ref().unwrap();
        assert_eq!((l.requests_per_unit, l.unit), (5, 2));
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let err = request_from_json(&json!({"domain": "d", "descriptor": []})).unwrap_err();
        assert_eq!(err, "request: unknown field \"descriptor\"");
        let err =
            request_from_json(&json!({"descriptors": [{"entries": [{"k": 1}]}]})).unwrap_err();
        assert_eq!(err, "descriptors[0].entries[0]: unknown field \"k\"");
    }

    #[test]
    fn durations_as_the_json_mapping_writes_them() {
        assert_eq!(duration(42, 0), "42s");
        assert_eq!(duration(0, 250_000_000), "0.250s");
        assert_eq!(duration(1, 1_000), "1.000001s");
        assert_eq!(duration(1, 1), "1.000000001s");
    }
}
