//! Correlation: every log line of a request, in the handler and on the refusal path,
//! carries the request id, the tenant (never the raw API key) and the dimension.
//!
//! Its own test binary: the subscriber is global, and tracing caches per call site whether
//! anyone listens, which a thread-local subscriber in a shared binary would race with.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::routing::get;
use axum::Router;
use http::StatusCode;
use redis_rl_client::backend::Unreachable;
use redis_rl_client::Limiter;
use redis_rl_middleware::Rate;
use redis_rl_middleware::StaticTiers;
use redis_rl_middleware::{tenant_id, RateLimitConfig, RateLimitLayer};
use tower::ServiceExt;

#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn request(id: &str) -> Request {
    let mut req = Request::builder()
        .uri("/items/5")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([192, 0, 2, 11], 4000))));
    req.headers_mut()
        .insert("x-api-key", "secret-key".parse().unwrap());
    req.headers_mut()
        .insert("x-request-id", id.parse().unwrap());
    req
}

#[tokio::test]
async fn every_log_line_carries_request_id_tenant_and_dimension() {
    let logs = Logs::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .init();

    let mut config = RateLimitConfig::default();
    config
        .tiers
        .insert("free".into(), Rate::per_minute(1).into());
    // Redis down: decisions come from the local fallback, so no server is needed.
    let limiter = Limiter::builder().backend(Arc::new(Unreachable));
    let layer = RateLimitLayer::new(limiter, config, Arc::new(StaticTiers::new())).unwrap();
    let app = Router::new()
        .route(
            "/items/{id}",
            get(|| async {
                tracing::info!("handler ran");
                "ok"
            }),
        )
        .layer(layer);
    app.clone().oneshot(request("req-ok")).await.unwrap();
    let refused = app.oneshot(request("req-no")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let tenant = tenant_id("secret-key");
    let handler = text
        .lines()
        .find(|l| l.contains("handler ran"))
        .expect(&text);
    assert!(handler.contains("request_id=req-ok"), "{handler}");
    assert!(handler.contains(&format!("tenant={tenant}")), "{handler}");
    assert!(handler.contains("dimension=api_key"), "{handler}");
    assert_eq!(handler.matches("dimension=").count(), 1, "{handler}");
    let refusal = text
        .lines()
        .find(|l| l.contains("request refused"))
        .expect(&text);
    assert!(refusal.contains("request_id=req-no"), "{refusal}");
    assert!(refusal.contains(&format!("tenant={tenant}")), "{refusal}");
    assert!(refusal.contains("dimension=api_key"), "{refusal}");
    // The limiter's own line about the outage sits inside the same span (before the
    // decision, so without a dimension yet).
    let failed = text
        .lines()
        .find(|l| l.contains("redis unavailable"))
        .expect(&text);
    assert!(failed.contains("request_id=req-ok"), "{failed}");
    assert!(!text.contains("secret-key"), "the raw key is never logged");
}
