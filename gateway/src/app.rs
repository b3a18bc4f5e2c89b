//! The routers: the rate-limited routes (demo answers or the upstream), rebuilt on each
//! reload, and the public router that sends every request to the live one.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{MatchedPath, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::routing::future::RouteFuture;
use axum::{Json, Router};
use ipnet::IpNet;
use redis_rl_middleware::{RateLimitLayer, REQUEST_ID};
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

/// The public listener's service: `ops` (/healthz, /metrics...) when they are not on an
/// admin listener, and everything else through the live configuration's router.
pub fn public(live: Arc<Live>, ops: Option<Router>) -> Public {
    match ops {
        Some(ops) => Public::WithOps(ops.merge(Router::new().fallback(dispatch).with_state(live))),
        None => Public::Live(live),
    }
}

/// What the public listener serves.
#[derive(Clone)]
pub enum Public {
    /// An axum router: the ops endpoints, and [`dispatch`] for every other path.
    WithOps(Router),
    /// The live configuration's router alone, with no router in front: an axum router
    /// with a fallback handler only (matching, the handler's extractors, a boxed future)
    /// was a few percent of a proxied request's instructions.
    Live(Arc<Live>),
}

impl tower::Service<Request> for Public {
    type Response = Response;
    type Error = Infallible;
    type Future = RouteFuture<Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both are always ready: an axum router is, and a live router is taken per call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        match self {
            Self::WithOps(router) => router.call(req),
            Self::Live(live) => {
                normalize(&mut req);
                // The future holds the matched route's service (the rate-limit layer of the
                // configuration live when the request arrived) until the request is answered,
                // whatever reloads happen meanwhile.
                let mut router = live.current().router.clone();
                router.call(req)
            }
        }
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
    let normal = redis_rl_middleware::normalize_path(path);
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
