//! The axum middleware against a real server: the four dimensions, tiers from the Redis
//! hash, headers and the 429 body, and local fallback while Redis is down.

#![allow(clippy::field_reassign_with_default)] // each case changes a field of the defaults

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::routing::get;
use axum::Router;
use http::StatusCode;
use redis_rl_client::{BreakerConfig, Limiter, Source};
use redis_rl_middleware::Rate;
use redis_rl_middleware::RedisHashTiers;
use redis_rl_middleware::{RateLimitConfig, RateLimitLayer};
use redis_rl_testkit::{eventually, query, Server};
use tower::ServiceExt;

fn app(server: &Server, config: RateLimitConfig) -> (Router, Limiter) {
    let limiter = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .breaker(BreakerConfig {
            failure_threshold: 2,
            open_for: Duration::from_millis(100),
        })
        .standalone(&server.url())
        .unwrap();
    let tiers = RedisHashTiers::new(
        limiter.clone(),
        "rl:tiers",
        Duration::from_secs(60),
        NonZeroUsize::new(100).unwrap(),
    );
    let layer = RateLimitLayer::new(limiter.clone(), config, Arc::new(tiers)).unwrap();
    let router = Router::new()
        .route("/items/{id}", get(|| async { "item" }))
        .route("/search", get(|| async { "search" }))
        .layer(layer);
    (router, limiter)
}

fn request(path: &str, ip: &str, key: Option<&str>) -> Request {
    let mut req = Request::builder().uri(path).body(Body::empty()).unwrap();
    let ip: IpAddr = ip.parse().unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(ip, 5000)));
    if let Some(k) = key {
        req.headers_mut().insert("x-api-key", k.parse().unwrap());
    }
    req
}

async fn problem(resp: axum::response::Response) -> serde_json::Value {
    let bytes = axum::body::to_bytes(resp.into_body(), 100_000)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Each dimension in turn is the one that refuses, and the body names it.
#[tokio::test]
async fn each_dimension_refuses_with_its_name() {
    let server = Server::start();
    let cases = [
        ("api_key", {
            let mut c = RateLimitConfig::default();
            c.tiers.insert("free".into(), Rate::per_minute(2).into());
            c
        }),
        ("ip", {
            let mut c = RateLimitConfig::default();
            c.ip = Rate::per_minute(2);
            c
        }),
        ("endpoint", {
            let mut c = RateLimitConfig::default();
            c.endpoint = Rate::per_minute(2);
            c
        }),
        ("global", {
            let mut c = RateLimitConfig::default();
            c.global = Rate::per_minute(2);
            c
        }),
    ];
    for (dimension, mut config) in cases {
        config.key_prefix = format!("t{dimension}");
        let (app, _) = app(&server, config);
        for _ in 0..2 {
            let ok = app
                .clone()
                .oneshot(request("/items/1", "192.0.2.1", Some("k")))
                .await
                .unwrap();
            assert_eq!(ok.status(), StatusCode::OK, "{dimension}");
        }
        let resp = app
            .clone()
            .oneshot(request("/items/2", "192.0.2.1", Some("k")))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{dimension}");
        let h = resp.headers().clone();
        let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(
            (1..=30).contains(&retry),
            "{dimension}: true wait, not the window: {retry}"
        );
        assert!(
            h["ratelimit-policy"]
                .to_str()
                .unwrap()
                .contains(&format!("\"{dimension}\";q=2;w=60")),
            "every enforced policy is listed"
        );
        assert_eq!(
            h["ratelimit"],
            format!("\"{dimension}\";r=0;t={retry}").as_str(),
            "t is the wait of Retry-After"
        );
        assert_eq!(h["x-ratelimit-remaining"], "0");
        let body = problem(resp).await;
        assert_eq!(body["dimension"], dimension);
        assert_eq!(body["request_id"], h["x-request-id"].to_str().unwrap());
    }
}

#[tokio::test]
async fn the_tier_is_read_from_the_redis_hash() {
    let server = Server::start();
    let _: () = query(
        &mut server.client(),
        &["HSET", "rl:tiers", "pro-key", "pro"],
    );
    let mut config = RateLimitConfig::default();
    config.dimensions = vec![redis_rl_middleware::Dimension::ApiKey];
    let (app, _) = app(&server, config);
    let pro = app
        .clone()
        .oneshot(request("/search", "192.0.2.2", Some("pro-key")))
        .await
        .unwrap();
    assert_eq!(pro.headers()["x-ratelimit-limit"], "1000");
    assert_eq!(pro.headers()["ratelimit-policy"], "\"api_key\";q=1000;w=60");
    let free = app
        .oneshot(request("/search", "192.0.2.2", Some("other")))
        .await
        .unwrap();
    assert_eq!(free.headers()["x-ratelimit-limit"], "100");
    // The raw key is not in any limiter key.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.client())
        .unwrap();
    assert!(
        keys.iter()
            .all(|k| !k.contains("pro-key") || k == "rl:tiers"),
        "{keys:?}"
    );
}

#[tokio::test]
async fn requests_keep_flowing_on_the_local_fallback_while_redis_is_down() {
    let mut server = Server::start();
    let mut config = RateLimitConfig::default();
    config.ip = Rate::per_minute(3);
    let (app, limiter) = app(&server, config);
    assert_eq!(
        app.clone()
            .oneshot(request("/search", "192.0.2.3", None))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    server.kill();
    let statuses: Vec<StatusCode> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(
                app.clone()
                    .oneshot(request("/search", "192.0.2.3", None))
                    .await
                    .unwrap()
                    .status(),
            );
        }
        v
    };
    // The local limiter starts from its own (empty) count: 3 more, then refused; no 5xx.
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    assert!(limiter.stats().local > 0);
    server.restart();
    let policy = redis_rl_client::Policy::sliding(1, 1_000).unwrap();
    eventually("back on Redis", async || {
        limiter.check("probe", &policy).await.source == Source::Redis
    })
    .await;
    let resp = app
        .oneshot(request("/search", "192.0.2.4", None))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

/// A calendar limit (`"2/month"` with `quota_tz`) next to a per-second one: the month's quota
/// refuses the third request until the next period, with its own key and policy entry.
#[tokio::test]
async fn a_monthly_quota_from_the_configuration_refuses_until_the_next_period() {
    use redis_rl_core::calendar::Period;
    use redis_rl_middleware::{RateOverride, Window};
    let server = Server::start();
    let mut config = RateLimitConfig::default();
    config.key_prefix = "cal".into();
    config.ip = RateOverride {
        limits: Some(vec![
            Window::new(100, 1_000),
            Window::calendar(2, Period::Month),
        ]),
        quota_tz: Some(-300),
        ..Default::default()
    }
    .standalone(redis_rl_client::Kind::SlidingWindow)
    .unwrap();
    let (app, _) = app(&server, config);
    for _ in 0..2 {
        let ok = app
            .clone()
            .oneshot(request("/items/1", "192.0.2.7", None))
            .await
            .unwrap();
        assert_eq!(ok.status(), StatusCode::OK);
    }
    let resp = app
        .clone()
        .oneshot(request("/items/1", "192.0.2.7", None))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = resp.headers().clone();
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=31 * 86_400).contains(&retry), "{retry}");
    let policy = h["ratelimit-policy"].to_str().unwrap();
    assert!(policy.contains("\"ip-1mo\";q=2;w=2592000"), "{policy}");
    let body = problem(resp).await;
    assert_eq!(body["dimension"], "ip");
    // The month's key holds a calendar quota.
    let keys: Vec<String> = query(&mut server.client(), &["KEYS", "cal:*1mo"]);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let state: Vec<redis::Value> = query(&mut server.client(), &["RL.STATE", &keys[0]]);
    assert_eq!(
        state[1],
        redis::Value::BulkString(b"calendar quota".to_vec())
    );
}
