//! The routers: the rate-limited routes (demo answers or the upstream), rebuilt on each
//! reload, and the public router that sends every request to the live one.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Json, Router};
use ipnet::IpNet;
use redis_rl_client::middleware::{RateLimitLayer, REQUEST_ID};
use tower::ServiceExt;

use crate::proxy::Upstream;
use crate::reload::Live;

const BUILT_IN: [&str; 4] = ["/healthz", "/metrics", "/bans", "/top"];

/// The limited routes. `routes` are the patterns of the endpoint dimension; every other
/// path falls under `/{*path}`. `trusted` are the peers whose `X-Forwarded-Proto/Host`
/// the proxy keeps.
pub fn limited(
    routes: &[String],
    layer: RateLimitLayer,
    upstream: Option<Upstream>,
    trusted: Vec<IpNet>,
) -> Result<Router, String> {
    for r in routes {
        if !r.starts_with('/') || BUILT_IN.contains(&r.as_str()) || r == "/" || r == "/{*path}" {
            return Err(format!(
                "--route {r:?}: must start with / and not be a built-in path"
            ));
        }
    }
    let trusted: Arc<[IpNet]> = trusted.into();
    // Shared, not cloned per request: the pooled client is a handful of reference counts.
    let upstream = upstream.map(Arc::new);
    let handler = move |req: Request| {
        let upstream = upstream.clone();
        let trusted = trusted.clone();
        async move {
            match upstream {
                Some(u) => u.forward(req, &trusted).await,
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
    Ok(limited.layer(layer))
}

/// The public listener's router: `ops` (/healthz, /metrics) when they are not on an admin
/// listener, and everything else through the live configuration's router.
pub fn public(live: Arc<Live>, ops: Option<Router>) -> Router {
    let dispatch = Router::new().fallback(dispatch).with_state(live);
    match ops {
        Some(ops) => ops.merge(dispatch),
        None => dispatch,
    }
}

/// Hands the request to the router of the configuration live when it arrived; that router
/// stays alive until the request is answered, whatever reloads happen meanwhile.
async fn dispatch(State(live): State<Arc<Live>>, mut req: Request) -> Response {
    normalize(&mut req);
    let router = live.current().router.clone();
    match router.oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

/// Puts the path in its normal form (no duplicate slashes, dot segments or trailing
/// slash; case and escapes kept) before routing, limiting and forwarding, so `/api//search/`
/// is counted and forwarded as `/api/search`. The query is kept as sent.
fn normalize(req: &mut Request) {
    let path = req.uri().path();
    let normal = redis_rl_client::middleware::normalize_path(path);
    if normal == path {
        return;
    }
    let mut parts = req.uri().clone().into_parts();
    let with_query = match req.uri().query() {
        Some(q) => format!("{normal}?{q}"),
        None => normal,
    };
    if let Ok(pq) = with_query.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
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
