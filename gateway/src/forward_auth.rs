//! Forward auth on `--auth-listen`: a proxy in front (nginx `auth_request`, Traefik
//! ForwardAuth, Caddy `forward_auth`) asks before forwarding each request, describing it in
//! headers. The request it describes goes through the same rate-limit layer and route
//! patterns as the gateway's own proxy (the live configuration, reloaded with it), with a
//! handler that only answers 200: so the answer is the proxy's own decision, 200 with the
//! RateLimit headers, 429 with `Retry-After` and the headers, 403 for the access lists,
//! 503 when a dimension fails closed.
//!
//! The original request: method from `X-Forwarded-Method` (Traefik, Caddy) or
//! `X-Original-Method` (nginx configs), path and query from `X-Forwarded-Uri` or
//! `X-Original-URI`, host from `X-Forwarded-Host`; each falls back to the check request's
//! own. The client is the last `X-Forwarded-For` hop (the one the calling proxy added),
//! else `X-Real-IP`, else the caller; earlier hops are believed only through
//! `trusted_proxies`, as on the proxy. The listener must therefore be reachable by the
//! proxies only.
//!
//! A check reserves a rule's `cost` header like the proxy does, but the calling proxy never
//! shows the gateway the upstream's response: a rule's `settle` is done by a report,
//! `POST /.rl/settle` describing the same request (the same headers as its check, so the
//! same keys) plus the `settle` header with the actual units and the `rl-settle-token` the
//! check answered, sent by the upstream or the proxy once the response is known. The token
//! (signed with the gateway's secret, spent once, expiring) names the reservation, so a
//! report settles that reservation and nothing else: it answers 204 and takes nothing, or
//! 403/409 with a problem body when the token is missing, forged, expired or spent.

use std::net::{IpAddr, SocketAddr};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::any;
use axum::Router;
use redis_rl_middleware::{IssueSettleToken, RateLimitLayer, SettleReport, SettleTokens};
use tower::ServiceExt;

use crate::reload::Live;

/// Headers that describe the original request; they are not part of it.
const DESCRIBING: [&str; 5] = [
    "x-forwarded-method",
    "x-original-method",
    "x-forwarded-uri",
    "x-original-uri",
    "x-forwarded-host",
];

/// Where a proxy or upstream reports a response's actual cost (`POST`): the request it
/// describes is planned as its check was, and its reservation settled from the report's
/// `settle` header.
pub const SETTLE_PATH: &str = "/.rl/settle";

/// The forward-auth service: the gateway's live configuration and the checking router of
/// its current generation.
pub struct ForwardAuth {
    live: Arc<Live>,
    built: Mutex<Option<(u64, Router)>>,
    /// Signs the checks' settlement tokens and checks the reports'.
    tokens: SettleTokens,
}

impl ForwardAuth {
    pub fn new(live: Arc<Live>, tokens: SettleTokens) -> Result<Arc<Self>, String> {
        let auth = Arc::new(Self {
            live,
            built: Mutex::new(None),
            tokens,
        });
        let _checked = auth.router()?; // a configuration this cannot use is a start-up error
        Ok(auth)
    }

    /// The router deciding with the live configuration (rebuilt when a reload swapped it).
    fn router(&self) -> Result<Router, String> {
        let current = self.live.current();
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((generation, router)) = built.as_ref() {
            if *generation == current.generation {
                return Ok(router.clone());
            }
        }
        let parts = self.live.parts();
        let layer = RateLimitLayer::new(
            parts.limiter.clone(),
            current.config.clone(),
            parts.tiers.clone(),
        )
        .map_err(|e| e.to_string())?;
        let router = checking_router(&parts.args.routes, layer)?;
        *built = Some((current.generation, router.clone()));
        Ok(router)
    }

    /// The router of the listener: every path is a check.
    pub fn app(self: Arc<Self>) -> Router {
        Router::new().fallback(check).with_state(self)
    }
}

/// The route patterns of the proxy, each answering 200 behind the rate-limit layer.
fn checking_router(routes: &[String], layer: RateLimitLayer) -> Result<Router, String> {
    let allowed = || async { StatusCode::OK };
    // axum refuses a malformed or duplicate pattern by panicking (the proxy already
    // validated these patterns; this only keeps a panic from escaping).
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut r = Router::new();
        for pattern in routes {
            r = r.route(pattern, any(allowed));
        }
        r.route("/", any(allowed)).route("/{*path}", any(allowed))
    }))
    .map(|r| r.layer(layer))
    .map_err(|_| format!("--route: invalid or duplicate pattern in {routes:?}"))
}

async fn check(
    State(auth): State<Arc<ForwardAuth>>,
    ConnectInfo(caller): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let router = match auth.router() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "forward auth: configuration unusable");
            return status_only(StatusCode::INTERNAL_SERVER_ERROR);
        }
    };
    // A report of the response's actual cost, from the upstream or the proxy after the
    // response: settled, not checked.
    let report = req.method() == Method::POST && req.uri().path() == SETTLE_PATH;
    let Some(mut original) = original_request(req, caller.ip()) else {
        return status_only(StatusCode::BAD_REQUEST);
    };
    if report {
        original
            .extensions_mut()
            .insert(SettleReport(auth.tokens.clone()));
    } else {
        original
            .extensions_mut()
            .insert(IssueSettleToken(auth.tokens.clone()));
    }
    let response = match router.oneshot(original).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    metrics::counter!("rl_forward_auth_total", "status" => status_class(response.status()))
        .increment(1);
    response
}

fn status_class(s: StatusCode) -> &'static str {
    match s.as_u16() {
        200 => "200",
        204 => "204",
        403 => "403",
        429 => "429",
        503 => "503",
        _ => "other",
    }
}

fn status_only(status: StatusCode) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}

fn header<'a>(h: &'a HeaderMap, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| h.get(*n).and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The request a check describes (`None` when the description is malformed), with the
/// client as its peer address.
fn original_request(req: Request, caller: IpAddr) -> Option<Request> {
    let (parts, _) = req.into_parts();
    let h = &parts.headers;
    let method = match header(h, &["x-forwarded-method", "x-original-method"]) {
        Some(m) => Method::from_bytes(m.as_bytes()).ok()?,
        None => parts.method.clone(),
    };
    let uri: Uri = match header(h, &["x-forwarded-uri", "x-original-uri"]) {
        Some(u) => u.parse().ok()?,
        None => parts.uri.clone(),
    };
    // Only the path and query: a proxy's absolute form would name the auth service.
    let uri: Uri = uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .ok()?;
    let host = header(h, &["x-forwarded-host"]).map(str::to_owned);
    let (client, rest_of_chain) = client_of(h, caller);
    let mut headers = HeaderMap::with_capacity(h.len());
    for (name, value) in h {
        if DESCRIBING.contains(&name.as_str()) || name == "x-forwarded-for" {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    if let Some(chain) = rest_of_chain.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(HeaderName::from_static("x-forwarded-for"), chain);
    }
    if let Some(host) = host.and_then(|v| HeaderValue::from_str(&v).ok()) {
        headers.insert(axum::http::header::HOST, host);
    }
    let mut original = Request::new(Body::empty());
    *original.method_mut() = method;
    *original.uri_mut() = uri;
    *original.headers_mut() = headers;
    original
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(client, 0)));
    Some(original)
}

/// The client: the last `X-Forwarded-For` hop (added by the proxy asking), else
/// `X-Real-IP`, else the caller; and the hops before it, for the trusted-proxy walk.
fn client_of(h: &HeaderMap, caller: IpAddr) -> (IpAddr, Option<String>) {
    let hops: Vec<&str> = h
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    if let Some((last, before)) = hops.split_last() {
        if let Ok(ip) = last.parse::<IpAddr>() {
            let rest = (!before.is_empty()).then(|| before.join(", "));
            return (ip.to_canonical(), rest);
        }
        return (caller, None);
    }
    match header(h, &["x-real-ip"]).and_then(|v| v.parse::<IpAddr>().ok()) {
        Some(ip) => (ip.to_canonical(), None),
        None => (caller, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request {
        let mut r = Request::new(Body::empty());
        *r.uri_mut() = "/_rate_limit".parse().unwrap();
        for (k, v) in headers {
            r.headers_mut().append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        r
    }

    fn peer(r: &Request) -> IpAddr {
        r.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .unwrap()
            .0
            .ip()
    }

    #[test]
    fn traefik_and_caddy_headers_describe_the_request() {
        let caller: IpAddr = "10.0.0.2".parse().unwrap();
        let r = original_request(
            request(&[
                ("x-forwarded-method", "POST"),
                ("x-forwarded-uri", "/api/items/7?x=1"),
                ("x-forwarded-host", "api.example.com"),
                ("x-forwarded-for", "6.6.6.6, 203.0.113.9"),
                ("x-api-key", "k1"),
            ]),
            caller,
        )
        .unwrap();
        assert_eq!(r.method(), Method::POST);
        assert_eq!(r.uri(), "/api/items/7?x=1");
        assert_eq!(r.headers()["host"], "api.example.com");
        assert_eq!(r.headers()["x-api-key"], "k1");
        assert_eq!(r.headers()["x-forwarded-for"], "6.6.6.6");
        assert!(!r.headers().contains_key("x-forwarded-uri"));
        assert_eq!(peer(&r), "203.0.113.9".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn nginx_headers_and_fallbacks() {
        let caller: IpAddr = "127.0.0.1".parse().unwrap();
        let r = original_request(
            request(&[
                ("x-original-method", "DELETE"),
                ("x-original-uri", "/api/users/3"),
                ("x-real-ip", "198.51.100.4"),
            ]),
            caller,
        )
        .unwrap();
        assert_eq!(
            (r.method(), r.uri().path()),
            (&Method::DELETE, "/api/users/3")
        );
        assert_eq!(peer(&r), "198.51.100.4".parse::<IpAddr>().unwrap());
        let r = original_request(request(&[]), caller).unwrap();
        assert_eq!((r.method(), r.uri().path()), (&Method::GET, "/_rate_limit"));
        assert_eq!(peer(&r), caller);
        assert!(original_request(request(&[("x-forwarded-method", "B AD")]), caller).is_none());
        let r = original_request(request(&[("x-forwarded-for", "bogus")]), caller).unwrap();
        assert_eq!(peer(&r), caller, "an unreadable hop: the caller");
    }
}
