//! The router: limited routes (demo answers or the upstream), plus /healthz and /metrics.

use std::panic::AssertUnwindSafe;

use axum::extract::{MatchedPath, Request};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use redis_rl_client::middleware::{RateLimitLayer, REQUEST_ID};
use redis_rl_client::{BreakerState, Limiter};

use crate::proxy::Upstream;

const BUILT_IN: [&str; 2] = ["/healthz", "/metrics"];

/// Builds the gateway. `routes` are the patterns of the endpoint dimension; every other
/// path falls under `/{*path}`.
pub fn router(
    routes: &[String],
    layer: RateLimitLayer,
    limiter: Limiter,
    prometheus: PrometheusHandle,
    upstream: Option<Upstream>,
) -> Result<Router, String> {
    for r in routes {
        if !r.starts_with('/') || BUILT_IN.contains(&r.as_str()) || r == "/" || r == "/{*path}" {
            return Err(format!(
                "--route {r:?}: must start with / and not be a built-in path"
            ));
        }
    }
    let handler = move |req: Request| {
        let upstream = upstream.clone();
        async move {
            match upstream {
                Some(u) => u.forward(req).await,
                None => demo(req),
            }
        }
    };
    // axum refuses a malformed or duplicate pattern by panicking: report it as a flag error.
    let limited = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut r = Router::new();
        for pattern in routes {
            r = r.route(pattern, any(handler.clone()));
        }
        r.route("/", any(handler.clone()))
            .route("/{*path}", any(handler))
    }))
    .map_err(|_| format!("--route: invalid or duplicate pattern in {routes:?}"))?;
    let health = limiter.clone();
    let open = Router::new()
        .route("/healthz", get(move || healthz(health.clone())))
        .route(
            "/metrics",
            get(move || render_metrics(limiter.clone(), prometheus.clone())),
        );
    Ok(open.merge(limited.layer(layer)))
}

/// The answer of the demo upstream: what was asked, and under which route pattern.
fn demo(req: Request) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string());
    let request_id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Json(serde_json::json!({
        "ok": true,
        "method": req.method().as_str(),
        "path": req.uri().path(),
        "route": route,
        "request_id": request_id,
    }))
    .into_response()
}

/// Always 200 while the gateway runs; says whether Redis answers PING and the breaker
/// state, with the limiter's counters.
async fn healthz(limiter: Limiter) -> Response {
    let redis_up = limiter.ping().await;
    let s = limiter.stats();
    Json(serde_json::json!({
        "status": "ok",
        "redis": if redis_up { "up" } else { "down" },
        "breaker": limiter.breaker_state().name(),
        "stats": {
            "redis_calls": s.redis_calls,
            "redis_errors": s.errors,
            "deny_cache": s.deny_cache,
            "local": s.local,
            "fail_open": s.fail_open,
            "fail_closed": s.fail_closed,
            "breaker_opened": s.breaker.opened,
            "breaker_closed": s.breaker.closed,
            "fleet_size": s.fleet_size,
        },
    }))
    .into_response()
}

/// Prometheus text format: the middleware's and limiter's counters, plus the breaker state.
async fn render_metrics(limiter: Limiter, prometheus: PrometheusHandle) -> Response {
    let open = match limiter.breaker_state() {
        BreakerState::Closed => 0.0,
        BreakerState::HalfOpen => 0.5,
        BreakerState::Open => 1.0,
    };
    metrics::gauge!("rl_breaker_open").set(open);
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4")],
        prometheus.render(),
    )
        .into_response()
}
