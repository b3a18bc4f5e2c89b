//! The tower/axum middleware settling a cost after the response and holding a request for
//! its slot, against a real server: a rule's reservation from a request header, refunded
//! or charged from the handler's response header, across both windows of the rule (and
//! not on the dimensions, which count requests); a refused request held, then served.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::Router;
use redis_rl_client::Limiter;
use redis_rl_middleware::StaticTiers;
use redis_rl_middleware::{RateLimitConfig, RateLimitLayer};
use redis_rl_testkit::configs::rules_preamble;
use redis_rl_testkit::{query, Server};
use tower::ServiceExt;

/// A rule of tokens reserved from a request header and settled from the response's, over
/// two windows; a rule of one request per 500 ms that holds a refused request.
fn config() -> String {
    rules_preamble("mw")
        + r#"
[[rules]]
name = "tokens"
paths = ["/chat"]
key = ["ip"]
limits = ["10000/hour", "50000/day"]
algorithm = "fixed"
cost = "header:X-Max-Tokens"
settle = "response-header:X-Tokens-Used"

[[rules]]
name = "paced"
paths = ["/paced"]
key = ["global"]
limits = [{ limit = 1, window_ms = 500 }]
algorithm = "gcra"
delay_max_ms = 2000
"#
}

fn app(server: &Server) -> Router {
    let limiter = Limiter::standalone(&server.url()).unwrap();
    let config = RateLimitConfig::from_toml(&config()).unwrap();
    let layer = RateLimitLayer::new(limiter, config, Arc::new(StaticTiers::new())).unwrap();
    Router::new()
        .route(
            "/chat",
            // The handler reports what the work cost, as an LLM API's usage field would.
            get(|h: HeaderMap| async move {
                let used = h["x-used"].to_str().unwrap().to_owned();
                ([("x-tokens-used", used)], "done")
            }),
        )
        .route("/paced", get(|| async { "paced" }))
        .layer(layer)
}

fn request(path: &str, headers: &[(&'static str, &str)]) -> Request {
    let mut req = Request::builder().uri(path).body(Body::empty()).unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([192, 0, 2, 7], 4000))));
    for (k, v) in headers {
        req.headers_mut().insert(*k, v.parse().unwrap());
    }
    req
}

fn left(server: &Server, window: &str, limit: &str, window_ms: &str) -> i64 {
    let key = format!("mw:{{ip:192.0.2.7}}:r:tokens:{window}");
    let reply: Vec<i64> = query(
        &mut server.client(),
        &["RL.FIXED", &key, limit, window_ms, "COST", "0"],
    );
    reply[2]
}

#[tokio::test]
async fn the_middleware_settles_a_rules_reservation_from_the_response_header() {
    let server = Server::start();
    let app = app(&server);
    let hour = || left(&server, "1h", "10000", "3600000");
    let day = || left(&server, "1d", "50000", "86400000");
    let call = |reserve: &'static str, used: &'static str| {
        app.clone().oneshot(request(
            "/chat",
            &[("x-max-tokens", reserve), ("x-used", used)],
        ))
    };
    let resp = call("4096", "812").await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!((hour(), day()), (10_000 - 812, 50_000 - 812));
    let resp = call("100", "350").await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!((hour(), day()), (10_000 - 1_162, 50_000 - 1_162));
    // The ip dimension counted two requests, not tokens.
    let ip: Vec<i64> = query(
        &mut server.client(),
        &[
            "RL.SLIDING",
            "mw:{ip:192.0.2.7}",
            "1000",
            "60000",
            "COST",
            "0",
        ],
    );
    assert_eq!(ip[2], 998);
    // A reservation larger than what is left is refused with nothing taken.
    let resp = call("9000", "1").await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(hour(), 10_000 - 1_162);
    let resp = call("0", "1").await.unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test]
async fn the_middleware_holds_a_refused_request_for_its_slot() {
    let server = Server::start();
    let app = app(&server);
    assert_eq!(
        app.clone()
            .oneshot(request("/paced", &[]))
            .await
            .unwrap()
            .status(),
        200
    );
    let started = Instant::now();
    let resp = app.clone().oneshot(request("/paced", &[])).await.unwrap();
    assert_eq!(resp.status(), 200, "held, then served");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(resp.headers()["ratelimit"], "\"paced\";r=0;t=1");
}
