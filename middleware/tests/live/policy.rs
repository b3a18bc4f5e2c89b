//! The middleware's configuration against a real server: per-tier overrides of every
//! dimension (in keys of their own), draft-11 headers that agree on a sliding window, the
//! tier lookup's snapshot and negative cache (counted with INFO commandstats), access
//! lists that cost Redis nothing, `Authorization: Bearer` keys and IPv6 networks.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use http::StatusCode;
use redis_rl_client::Limiter;
use redis_rl_middleware::{RateLimitConfig, RateLimitLayer};
use redis_rl_middleware::{RedisHashTiers, TierResolver};
use redis_rl_testkit::{query, Server};
use tower::ServiceExt;

fn limiter(server: &Server) -> Limiter {
    Limiter::builder()
        .timeout(Duration::from_secs(5))
        .standalone(&server.url())
        .unwrap()
}

fn app(limiter: &Limiter, config: &str, tiers: Arc<dyn TierResolver>) -> Router {
    let config = RateLimitConfig::from_toml(config).unwrap();
    let layer = RateLimitLayer::new(limiter.clone(), config, tiers).unwrap();
    Router::new()
        .route("/items/{id}", get(|| async { "item" }))
        .layer(layer)
}

fn hash_tiers(limiter: &Limiter) -> Arc<RedisHashTiers> {
    Arc::new(RedisHashTiers::new(
        limiter.clone(),
        "rl:tiers",
        Duration::from_secs(3_600),
        NonZeroUsize::new(1_000).unwrap(),
    ))
}

fn request(ip: &str, headers: &[(&str, &str)]) -> Request {
    let mut req = Request::builder()
        .uri("/items/1")
        .body(Body::empty())
        .unwrap();
    let ip: IpAddr = ip.parse().unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(ip, 5000)));
    for (k, v) in headers {
        let name: http::HeaderName = k.parse().unwrap();
        req.headers_mut().insert(name, v.parse().unwrap());
    }
    req
}

async fn send(app: &Router, ip: &str, headers: &[(&str, &str)]) -> Response {
    app.clone().oneshot(request(ip, headers)).await.unwrap()
}

fn header(resp: &Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

fn keys(server: &Server) -> Vec<String> {
    let mut keys: Vec<String> = query(&mut server.client(), &["KEYS", "*"]);
    keys.sort();
    keys
}

/// Commands that decide or look up a tier, whichever engine runs (a request limited on one
/// key sends that key's algorithm's own command, not RL.ALL).
fn limiter_calls(server: &Server) -> u64 {
    [
        "rl.all",
        "rl.sliding",
        "rl.tokenbucket",
        "rl.fixed",
        "rl.gcra",
        "rl.log",
        "rl.quota",
        "evalsha",
        "eval",
        "fcall",
        "hget",
    ]
    .iter()
    .map(|c| server.calls(c))
    .sum()
}

#[tokio::test]
async fn pro_keys_get_their_own_budget_on_every_dimension() {
    let server = Server::start();
    let _: () = query(
        &mut server.client(),
        &["HSET", "rl:tiers", "pro-key", "pro"],
    );
    let l = limiter(&server);
    // The configuration python/tests/test_asgi_parity.py reads too.
    let app = app(
        &l,
        include_str!("../../../testdata/flow/tier_overrides.toml"),
        hash_tiers(&l),
    );
    let ip = "192.0.2.50";
    // Key-less traffic uses up the address's budget (2)...
    for expected in [200, 200, 429] {
        assert_eq!(send(&app, ip, &[]).await.status().as_u16(), expected);
    }
    // ...a free key from it is refused by the IP dimension...
    let free = send(&app, ip, &[("x-api-key", "free-key")]).await;
    assert_eq!(free.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&free, "ratelimit").starts_with("\"ip\";r=0;"));
    // ...but a pro key has its own: 5 per endpoint (before its IP budget of 6).
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let resp = send(&app, ip, &[("x-api-key", "pro-key")]).await;
        if statuses.is_empty() {
            assert_eq!(
                header(&resp, "ratelimit-policy"),
                "\"api_key\";q=1000;w=60, \"ip\";q=6;w=3600, \"endpoint\";q=5;w=3600, \"global\";q=50000;w=60"
            );
        }
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);
    let k = keys(&server);
    assert!(k.contains(&"rl:{ip:192.0.2.50}".to_string()), "{k:?}");
    assert!(
        k.contains(&"rl:{ip:192.0.2.50}:tier:pro".to_string()),
        "{k:?}"
    );
    // Both IP budgets are sliding windows: overriding a limit keeps the algorithm.
    for key in ["rl:{ip:192.0.2.50}", "rl:{ip:192.0.2.50}:tier:pro"] {
        let state: Vec<redis::Value> = query(&mut server.client(), &["RL.STATE", key]);
        assert!(
            format!("{state:?}").contains("window_start_ms"),
            "{key}: {state:?}"
        );
    }
}

#[tokio::test]
async fn a_sliding_window_refusal_reports_one_wait_everywhere() {
    let server = Server::start();
    let l = limiter(&server);
    let app = app(
        &l,
        "dimensions = [\"ip\", \"global\"]\n[ip]\nlimit = 3\nwindow_ms = 3600000\n",
        hash_tiers(&l),
    );
    for _ in 0..3 {
        assert_eq!(send(&app, "192.0.2.60", &[]).await.status(), StatusCode::OK);
    }
    let resp = send(&app, "192.0.2.60", &[]).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = header(&resp, "retry-after").parse().unwrap();
    assert_eq!(header(&resp, "ratelimit"), format!("\"ip\";r=0;t={retry}"));
    assert_eq!(header(&resp, "x-ratelimit-reset"), retry.to_string());
    assert_eq!(
        header(&resp, "ratelimit-policy"),
        "\"ip\";q=3;w=3600, \"global\";q=100000;w=60"
    );
    // A sliding window's true wait: at most one window plus one unit's share of it.
    assert!((1..=3_600 + 1_200).contains(&retry), "{retry}");
    let (allowed, _, _, wait, _): (i64, i64, i64, i64, i64) = query(
        &mut server.client(),
        &["RL.SLIDING", "rl:{ip:192.0.2.60}", "3", "3600000", "PEEK"],
    );
    assert_eq!(allowed, 0);
    // The server's own wait, a few milliseconds later (a second boundary may pass).
    let peeked = (wait as u64).div_ceil(1_000);
    assert!(
        retry == peeked || retry == peeked + 1,
        "{retry} vs {peeked}"
    );
}

#[tokio::test]
async fn unknown_keys_cost_no_tier_lookup() {
    let server = Server::start();
    let _: () = query(
        &mut server.client(),
        &["HSET", "rl:tiers", "pro-key", "pro"],
    );
    let l = limiter(&server);
    let tiers = hash_tiers(&l);
    assert_eq!(tiers.refresh().await.unwrap(), 1);
    let app = app(&l, "dimensions = [\"api_key\"]\n", tiers.clone());
    for i in 0..200 {
        let key = format!("random-{i}");
        let resp = send(&app, "192.0.2.70", &[("x-api-key", &key)]).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(header(&resp, "ratelimit-policy").starts_with("\"api_key\";q=100;"));
    }
    assert_eq!(server.calls("hget"), 0, "200 random keys, no tier lookup");
    for _ in 0..20 {
        let resp = send(&app, "192.0.2.70", &[("x-api-key", "pro-key")]).await;
        assert!(header(&resp, "ratelimit-policy").starts_with("\"api_key\";q=1000;"));
    }
    assert_eq!(server.calls("hget"), 1, "a paying key: once per TTL");
    assert!(server.calls("hscan") >= 1);

    // Without the snapshot, an unknown key costs one lookup, then is cached negatively.
    let negative = Arc::new(
        RedisHashTiers::new(
            l.clone(),
            "rl:tiers",
            Duration::from_secs(3_600),
            NonZeroUsize::new(100).unwrap(),
        )
        .snapshot_max_keys(0),
    );
    let app = self::app(&l, "dimensions = [\"api_key\"]\n", negative.clone());
    for _ in 0..10 {
        for k in 0..10 {
            send(&app, "192.0.2.71", &[("x-api-key", &format!("again-{k}"))]).await;
        }
    }
    assert_eq!(server.calls("hget"), 1 + 10, "one lookup per unknown key");
    assert_eq!(negative.stats().unknown_local, 90);
}

#[tokio::test]
async fn access_lists_refuse_or_pass_without_touching_redis() {
    let server = Server::start();
    let l = limiter(&server);
    // The configuration python/tests/test_asgi_parity.py reads too.
    let app = app(
        &l,
        include_str!("../../../testdata/flow/access_lists.toml"),
        hash_tiers(&l),
    );
    // Warm up (engine detection), then count.
    assert_eq!(send(&app, "192.0.2.80", &[]).await.status(), StatusCode::OK);
    let before = limiter_calls(&server);
    for _ in 0..20 {
        let resp = send(&app, "198.51.100.7", &[]).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            header(&resp, "ratelimit"),
            "",
            "not limited: no quota fields"
        );
        let resp = send(
            &app,
            "192.0.2.81",
            &[("authorization", "Bearer partner-key")],
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let resp = send(&app, "198.51.100.13", &[("x-request-id", "deny-7")]).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(header(&resp, "content-type"), "application/problem+json");
    assert_eq!(header(&resp, "x-request-id"), "deny-7");
    let bytes = axum::body::to_bytes(resp.into_body(), 10_000)
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        (body["status"].as_u64(), body["request_id"].as_str()),
        (Some(403), Some("deny-7"))
    );
    // Deny wins: an allowed network with a revoked key.
    let resp = send(
        &app,
        "198.51.100.7",
        &[("authorization", "bearer revoked-key")],
    )
    .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        limiter_calls(&server),
        before,
        "allowed and denied: no Redis call"
    );
    assert!(!keys(&server).iter().any(|k| k.contains("198.51.100")));
}

#[tokio::test]
async fn ipv6_clients_share_their_network_and_bearer_tokens_are_keys() {
    let server = Server::start();
    let _: () = query(
        &mut server.client(),
        &["HSET", "rl:tiers", "tok-pro", "pro"],
    );
    let l = limiter(&server);
    let app = app(
        &l,
        "api_key_header = \"Authorization\"\ndimensions = [\"api_key\", \"ip\"]\n[ip]\nlimit = 2\n",
        hash_tiers(&l),
    );
    let mut statuses = Vec::new();
    for ip in [
        "2001:db8:5:6::1",
        "2001:db8:5:6:a::2",
        "2001:db8:5:6:b::3",
        "2001:db8:5:7::1",
    ] {
        statuses.push(send(&app, ip, &[]).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 200], "one budget per /64");
    let resp = send(&app, "192.0.2.90", &[("authorization", "Bearer tok-pro")]).await;
    assert!(header(&resp, "ratelimit-policy").starts_with("\"api_key\";q=1000;"));
    let k = keys(&server);
    assert!(
        k.contains(&"rl:{ip:2001:db8:5:6::/64}".to_string()),
        "{k:?}"
    );
    assert!(
        k.contains(&"rl:{ip:2001:db8:5:7::/64}".to_string()),
        "{k:?}"
    );
    assert!(
        !k.iter().any(|k| k.contains("tok-pro") && k != "rl:tiers"),
        "{k:?}"
    );
}
