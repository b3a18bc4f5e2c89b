use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use http::{HeaderMap, StatusCode};
use tower::ServiceExt;

use super::*;
use crate::tier::StaticTiers;
use crate::REQUEST_ID;
use crate::{Dimension, RateLimitConfig, RateLimitLayer};
use crate::{FailureModeName, Rate, RateOverride, Window};
use redis_rl_client::backend::Unreachable;
use redis_rl_client::Kind;
use redis_rl_client::Limiter;

fn app(config: RateLimitConfig) -> Router {
    // Redis is down for these tests: every decision is the local fallback's, which runs
    // the same algorithms, so the middleware's behaviour is deterministic without a server.
    let limiter = Limiter::builder().backend(Arc::new(Unreachable));
    let tiers = StaticTiers::new().with("pro-key", "pro");
    let layer = RateLimitLayer::new(limiter, config, Arc::new(tiers)).unwrap();
    Router::new()
        .route(
            "/items/{id}",
            get(|headers: HeaderMap| async move {
                tracing::info!("handler ran");
                headers
                    .get(REQUEST_ID)
                    .map(|v| v.to_str().unwrap().to_string())
                    .unwrap_or_default()
            }),
        )
        .route("/other", get(|| async { "other" }))
        .layer(layer)
}

fn request(path: &str, ip: &str, key: Option<&str>) -> Request {
    let mut req = Request::builder().uri(path).body(Body::empty()).unwrap();
    let ip: IpAddr = ip.parse().unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(ip, 4000)));
    if let Some(k) = key {
        req.headers_mut().insert("x-api-key", k.parse().unwrap());
    }
    req
}

async fn status(app: &Router, req: Request) -> StatusCode {
    app.clone().oneshot(req).await.unwrap().status()
}

async fn body_json(resp: Response) -> serde_json::Value {
    let bytes = axum::body::to_bytes(resp.into_body(), 100_000)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn allowed_requests_carry_the_most_restrictive_dimension_and_a_request_id() {
    let app = app(RateLimitConfig::default());
    let resp = app
        .oneshot(request("/items/7", "192.0.2.1", Some("k1")))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let h = resp.headers().clone();
    // free tier 100 (token bucket: full again in 0.6 s), ip 100 and endpoint 100
    // (sliding windows: idle in 120 s, reported as at most w), global 100000: fewest
    // left, then the longest t, then the configured order.
    assert_eq!(h["x-ratelimit-limit"], "100");
    assert_eq!(h["x-ratelimit-remaining"], "99");
    assert_eq!(h["x-ratelimit-reset"], "60", "t, never more than w");
    assert_eq!(
        h["ratelimit-policy"],
        "\"api_key\";q=100;w=60, \"ip\";q=100;w=60, \"endpoint\";q=100;w=60, \"global\";q=100000;w=60",
        "every policy enforced on the request"
    );
    assert_eq!(h["ratelimit"], "\"ip\";r=99;t=60");
    let id = h[REQUEST_ID].to_str().unwrap().to_string();
    assert_eq!(id.len(), 36);
    let bytes = axum::body::to_bytes(resp.into_body(), 1_000).await.unwrap();
    assert_eq!(bytes, id.as_bytes(), "the handler saw the same request id");
}

#[tokio::test]
async fn the_ip_dimension_refuses_with_429_and_a_problem_body() {
    let mut config = RateLimitConfig::default();
    config.ip = Rate::per_minute(2);
    let app = app(config);
    for _ in 0..2 {
        let resp = app
            .clone()
            .oneshot(request("/other", "192.0.2.2", None))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let mut req = request("/other", "192.0.2.2", None);
    req.headers_mut()
        .insert(REQUEST_ID, "abc-1".parse().unwrap());
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = resp.headers().clone();
    assert_eq!(h["content-type"], "application/problem+json");
    assert_eq!(h[REQUEST_ID], "abc-1");
    // 2 tokens per minute: the next one in 30 s, not the 60 s window.
    assert_eq!(h["retry-after"], "30");
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert_eq!(h["x-ratelimit-reset"], "30");
    assert_eq!(h["ratelimit"], "\"ip\";r=0;t=30");
    assert_eq!(
        h["ratelimit-policy"],
        "\"ip\";q=2;w=60, \"endpoint\";q=100;w=60, \"global\";q=100000;w=60"
    );
    let body = body_json(resp).await;
    assert_eq!(body["dimension"], "ip");
    assert_eq!(body["request_id"], "abc-1");
    assert_eq!(body["status"], 429);
    // Another IP is not affected.
    let other = app
        .oneshot(request("/other", "192.0.2.3", None))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
}

#[tokio::test]
async fn endpoints_are_route_patterns_and_tiers_raise_the_key_limit() {
    let mut config = RateLimitConfig::default();
    config.endpoint = Rate::per_minute(2);
    config.ip = Rate::per_minute(1_000_000);
    let app = app(config);
    let a = app
        .clone()
        .oneshot(request("/items/1", "192.0.2.4", Some("pro-key")))
        .await
        .unwrap();
    let b = app
        .clone()
        .oneshot(request("/items/2", "192.0.2.4", Some("pro-key")))
        .await
        .unwrap();
    assert_eq!(a.status(), StatusCode::OK);
    assert_eq!(b.status(), StatusCode::OK);
    assert!(b.headers()["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"endpoint\";r=0;"));
    let c = app
        .clone()
        .oneshot(request("/items/3", "192.0.2.4", Some("pro-key")))
        .await
        .unwrap();
    assert_eq!(c.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body_json(c).await["dimension"], "endpoint");
    // Another route pattern of the same key still has its quota; the key is pro (1000).
    let d = app
        .clone()
        .oneshot(request("/other", "192.0.2.4", Some("pro-key")))
        .await
        .unwrap();
    assert_eq!(d.status(), StatusCode::OK);
    let mut only_key = RateLimitConfig::default();
    only_key.dimensions = vec![Dimension::ApiKey];
    let resp = self::app(only_key)
        .oneshot(request("/other", "192.0.2.5", Some("pro-key")))
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-ratelimit-limit"], "1000");
}

#[tokio::test]
async fn forwarded_for_counts_only_behind_a_trusted_proxy() {
    let mut config = RateLimitConfig::default();
    config.ip = Rate::per_minute(1);
    config.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let app = app(config);
    let via = |client: &str| {
        let mut r = request("/other", "127.0.0.1", None);
        r.headers_mut()
            .insert("x-forwarded-for", client.parse().unwrap());
        r
    };
    assert_eq!(status(&app, via("198.51.100.1")).await, StatusCode::OK);
    assert_eq!(status(&app, via("198.51.100.2")).await, StatusCode::OK);
    assert_eq!(
        status(&app, via("198.51.100.1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // An untrusted peer cannot choose its key with the header.
    let mut spoof = request("/other", "203.0.113.7", None);
    spoof
        .headers_mut()
        .insert("x-forwarded-for", "198.51.100.9".parse().unwrap());
    assert_eq!(
        app.clone().oneshot(spoof).await.unwrap().status(),
        StatusCode::OK
    );
    let mut spoof = request("/other", "203.0.113.7", None);
    spoof
        .headers_mut()
        .insert("x-forwarded-for", "198.51.100.10".parse().unwrap());
    assert_eq!(
        app.oneshot(spoof).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn failing_closed_answers_503() {
    let config = RateLimitConfig {
        failure_mode: FailureModeName::Closed,
        ..RateLimitConfig::default()
    };
    let resp = app(config)
        .oneshot(request("/other", "192.0.2.9", None))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    for name in ["ratelimit", "ratelimit-policy", "x-ratelimit-remaining"] {
        assert!(resp.headers().get(name).is_none(), "503 with {name}");
    }
    assert_eq!(body_json(resp).await["title"], "Rate limiter unavailable");
}

#[tokio::test]
async fn a_shadow_dimension_never_refuses() {
    let mut config = RateLimitConfig::default();
    config.ip = Rate::per_minute(1).shadowed(true);
    let app = app(config);
    for _ in 0..3 {
        let resp = app
            .clone()
            .oneshot(request("/other", "192.0.2.10", None))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
}

#[tokio::test]
async fn tiers_override_every_dimension_for_their_keys() {
    let mut config = RateLimitConfig::default();
    config.endpoint = Rate::of(Window::new(2, 3_600_000)).with_algorithm(Kind::SlidingWindow);
    let pro = config.tiers.remove("pro").unwrap().with_override(
        Dimension::Endpoint,
        RateOverride {
            limit: Some(5),
            ..RateOverride::default()
        },
    );
    config.tiers.insert("pro".into(), pro);
    let app = app(config);
    let run = |key: &'static str| {
        let app = app.clone();
        async move {
            let mut ok = 0;
            for _ in 0..8 {
                let resp = app
                    .clone()
                    .oneshot(request("/items/1", "192.0.2.20", Some(key)))
                    .await
                    .unwrap();
                if resp.status() == StatusCode::OK {
                    ok += 1;
                }
            }
            ok
        }
    };
    assert_eq!(run("free-key").await, 2, "free: the [endpoint] table");
    assert_eq!(run("pro-key").await, 5, "pro: [tiers.pro.endpoint]");
}

#[tokio::test]
async fn access_lists_bypass_or_refuse_before_any_limit() {
    let mut config = RateLimitConfig::default();
    config.ip = Rate::per_minute(1);
    config.access.allow_ips = vec!["198.51.100.0/24".parse().unwrap()];
    config.access.deny_ips = vec!["198.51.100.66/32".parse().unwrap()];
    config.access.deny_api_keys = vec!["stolen".into()];
    config.access.allow_api_keys = vec!["partner".into()];
    let app = app(config);
    for _ in 0..5 {
        let resp = app
            .clone()
            .oneshot(request("/other", "198.51.100.7", None))
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::OK,
            "allowed network: never limited"
        );
        assert!(resp.headers().get("ratelimit").is_none());
        let resp = app
            .clone()
            .oneshot(request("/other", "192.0.2.30", Some("partner")))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "allowed key: never limited");
    }
    let mut req = request("/other", "198.51.100.66", None);
    req.headers_mut()
        .insert(REQUEST_ID, "deny-1".parse().unwrap());
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN, "deny wins over allow");
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let body = body_json(resp).await;
    assert_eq!(body["request_id"], "deny-1");
    assert_eq!(body["denied_by"], "ip");
    let resp = app
        .clone()
        .oneshot(request("/other", "198.51.100.7", Some("stolen")))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    // Not listed: limited as usual (1 per minute per IP).
    assert_eq!(
        status(&app, request("/other", "192.0.2.31", None)).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, request("/other", "192.0.2.31", None)).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn bearer_tokens_and_ipv6_networks_identify_clients() {
    let mut config = RateLimitConfig::default();
    config.api_key_header = "Authorization".into();
    config.dimensions = vec![Dimension::ApiKey, Dimension::Ip];
    config.ip = Rate::per_minute(2);
    let app = app(config);
    let bearer = |ip: &str, token: &str| {
        let mut r = request("/other", ip, None);
        r.headers_mut()
            .insert("authorization", token.parse().unwrap());
        r
    };
    // The pro tier is found from the Bearer token, in any case of the scheme.
    let resp = app
        .clone()
        .oneshot(bearer("192.0.2.40", "bearer pro-key"))
        .await
        .unwrap();
    assert!(resp.headers()["ratelimit-policy"]
        .to_str()
        .unwrap()
        .starts_with("\"api_key\";q=1000;"));
    // Two addresses of one /64 share its budget; another /64 has its own.
    for (ip, expected) in [
        ("2001:db8:0:1::1", StatusCode::OK),
        ("2001:db8:0:1:ffff::2", StatusCode::OK),
        ("2001:db8:0:1:1234::3", StatusCode::TOO_MANY_REQUESTS),
        ("2001:db8:0:2::1", StatusCode::OK),
    ] {
        assert_eq!(
            status(&app, request("/other", ip, None)).await,
            expected,
            "{ip}"
        );
    }
}
