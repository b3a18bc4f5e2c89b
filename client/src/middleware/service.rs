//! The service: decides, then calls the inner service or refuses.

use std::cmp::Reverse;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response};
use tower_service::Service;
use tracing::Instrument;

use super::access::Access;
use super::extract::{self, REQUEST_ID};
use super::headers::{
    forbidden_response, refusal_response, write_rate_limit, write_request_id, QuotaPolicy, Reported,
};
use super::plan::{Planned, Shared};
use super::request::{RequestInfo, RequestView};
use super::trace::{TraceContext, TRACEPARENT};
use crate::backend::BoxFuture;
use crate::decision::{MultiDecision, Source};

/// The service made by [`RateLimitLayer`](super::RateLimitLayer): any
/// `Service<http::Request<B>>` answering `http::Response<R>`, where a refusal's
/// problem+json text becomes an `R` (`R: From<String>`: axum's and hyper's bodies,
/// `String`, `Full<Bytes>`...).
#[derive(Clone)]
pub struct RateLimitService<S> {
    inner: S,
    shared: Arc<Shared>,
    info: Arc<dyn RequestInfo>,
}

impl<S> RateLimitService<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>, info: Arc<dyn RequestInfo>) -> Self {
        Self {
            inner,
            shared,
            info,
        }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<ResBody>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The ready service handles this request; a fresh clone waits for the next one.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(handle(self.shared.clone(), self.info.clone(), req, inner))
    }
}

async fn handle<S, ReqBody, ResBody>(
    shared: Arc<Shared>,
    info: Arc<dyn RequestInfo>,
    mut req: Request<ReqBody>,
    mut inner: S,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<String>,
{
    let request_id = extract::request_id(req.headers());
    // The caller's trace (or a new one): in every log line of the request (the span's
    // field), in its problem bodies, and forwarded with this hop as the parent.
    let trace = TraceContext::of(req.headers());
    let trace_id = trace.trace_id();
    let api_key = extract::api_key_in(req.headers(), &shared.api_key_header).map(str::to_owned);
    let tenant = api_key.as_deref().map(extract::tenant_id);
    // At ERROR level so that the span is enabled whatever the log level: every line logged
    // for the request (warnings of a failed upstream call included) carries its ids.
    let span = tracing::error_span!(
        "rate_limit",
        request_id = %request_id,
        trace_id = %trace_id,
        tenant = %tenant.as_deref().unwrap_or("-"),
        tier = tracing::field::Empty,
        dimension = tracing::field::Empty,
    );
    async move {
        let view = RequestView::of(&req);
        let peer = info.peer_ip(&view);
        let ip = extract::client_ip(peer, req.headers(), &shared.config.trusted_proxies)
            .map(|ip| ip.to_canonical());
        let mut limited = true;
        if !shared.access.is_empty() {
            match shared.access.check(ip, api_key.as_deref()) {
                Access::Denied(on) => {
                    metrics::counter!("rl_access_total", "list" => "deny", "on" => on).increment(1);
                    tracing::debug!(denied_by = on, "request refused by the deny list");
                    let forbidden = forbidden_response(on, &request_id, Some(&trace_id));
                    return Ok(counted(forbidden, "-".to_owned()));
                }
                Access::Allowed => {
                    metrics::counter!("rl_access_total", "list" => "allow").increment(1);
                    limited = false;
                }
                Access::Limited => {}
            }
        }

        // Requests the access lists decide are never limited: no tier is looked up.
        let mut tier_label = "-".to_owned();
        let (reported, policies) = if limited {
            let endpoint = info
                .route(&view)
                .unwrap_or_else(|| "<unmatched>".to_owned());
            let tier = match &api_key {
                Some(key) => shared.resolver.tier(key).await,
                None => None,
            };
            if let Some(t) = &tier {
                tracing::Span::current().record("tier", tracing::field::display(t));
            }
            let client = ip.map_or_else(
                || "unknown".to_string(),
                |ip| extract::client_network(ip, shared.config.ipv6_prefix),
            );
            tier_label = shared.tier_label(tenant.as_deref(), tier.as_deref());
            let plan = shared.plan(tenant.as_deref(), tier.as_deref(), &client, &endpoint);
            let items: Vec<(&str, crate::Policy)> =
                plan.iter().map(|p| (p.key.as_str(), p.policy)).collect();
            let md = shared.limiter.check_all(&items).await;
            count(&plan, &md);
            let policies: Vec<QuotaPolicy> = plan
                .iter()
                .filter(|p| !p.policy.is_shadow())
                .map(|p| QuotaPolicy::of(p.dimension, &p.policy))
                .collect();
            let reported = most_restrictive(&plan, &md);
            if let Some(r) = &reported {
                tracing::Span::current()
                    .record("dimension", tracing::field::display(r.policy.dimension));
            }
            if let (Some(_), Some(r)) = (md.denied, &reported) {
                let unavailable = r.decision.source == Source::FailClosed;
                tracing::debug!(
                    retry_after_ms = r
                        .decision
                        .retry_after()
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                    source = r.decision.source.name(),
                    "request refused"
                );
                let refusal =
                    refusal_response(r, &policies, &request_id, unavailable, Some(&trace_id));
                return Ok(counted(refusal, tier_label));
            }
            (reported, policies)
        } else {
            (None, Vec::new())
        };

        if let Ok(v) = HeaderValue::try_from(request_id.as_str()) {
            req.headers_mut().insert(REQUEST_ID, v);
        }
        if let Ok(v) = HeaderValue::try_from(trace.traceparent()) {
            req.headers_mut().insert(TRACEPARENT, v);
        }
        let mut response = inner.call(req).await?;
        let headers = response.headers_mut();
        write_rate_limit(headers, reported.as_ref(), &policies);
        write_request_id(headers, &request_id);
        if response.status().is_server_error() {
            tracing::warn!(status = response.status().as_u16(), "upstream error");
        }
        Ok(counted(response, tier_label))
    }
    .instrument(span)
    .await
}

/// Counts a response in `rl_responses_total` by status and tier (the tier whose limits applied;
/// `none` without an API key, `-` when the access lists decided), then returns it.
fn counted<B>(response: Response<B>, tier: String) -> Response<B> {
    let status = response.status().as_str().to_owned();
    metrics::counter!("rl_responses_total", "status" => status, "tier" => tier).increment(1);
    response
}

/// The policy to report: the denying one, else among the enforced ones that Redis (or the
/// local fallback) decided, the one with the fewest units left (ties: the longest `t`).
/// `None` when nothing was decided (every dimension failed open, or none is enforced).
fn most_restrictive(plan: &[Planned], md: &MultiDecision) -> Option<Reported> {
    let reported = |i: usize| {
        let p = plan.get(i)?;
        let d = md.decisions.get(i)?;
        Some(Reported {
            policy: QuotaPolicy::of(p.dimension, &p.policy),
            decision: *d,
        })
    };
    if let Some(i) = md.denied {
        return reported(i);
    }
    (0..plan.len())
        .filter_map(reported)
        .filter(|r| !r.decision.shadow && r.decision.source != Source::FailOpen)
        .min_by_key(|r| (r.remaining(), Reverse(r.reset_secs())))
}

fn count(plan: &[Planned], md: &MultiDecision) {
    for (i, (p, d)) in plan.iter().zip(&md.decisions).enumerate() {
        let dimension = p.dimension.name();
        let outcome = if md.denied == Some(i) {
            "denied"
        } else if d.shadow && d.is_denied() {
            "shadow_denied"
        } else if md.denied.is_some() {
            continue; // not consumed: the request was refused by another dimension
        } else {
            "allowed"
        };
        metrics::counter!("rl_requests_total", "dimension" => dimension, "outcome" => outcome)
            .increment(1);
        metrics::counter!("rl_decisions_total", "dimension" => dimension, "source" => d.source.name())
            .increment(1);
        if d.source.is_fallback() {
            metrics::counter!("rl_fallback_total", "dimension" => dimension, "source" => d.source.name()).increment(1);
        }
    }
}

#[cfg(all(test, feature = "axum"))]
#[allow(clippy::field_reassign_with_default)] // each test changes one field of the defaults
mod tests {
    use std::net::{IpAddr, SocketAddr};

    use axum::body::Body;
    use axum::extract::{ConnectInfo, Request};
    use axum::response::Response;
    use axum::routing::get;
    use axum::Router;
    use http::{HeaderMap, StatusCode};
    use tower::ServiceExt;

    use super::*;
    use crate::backend::Backend;
    use crate::middleware::{Dimension, RateLimitConfig, RateLimitLayer};
    use crate::tier::{FailureModeName, Rate, RateOverride, StaticTiers};
    use crate::Limiter;

    /// Redis is down for these tests: every decision is the local fallback's, which runs
    /// the same algorithms, so the middleware's behaviour is deterministic without a server.
    struct Down;

    impl Backend for Down {
        fn query<'a>(
            &'a self,
            _: &'a redis::Cmd,
            _: Option<u16>,
        ) -> BoxFuture<'a, redis::RedisResult<redis::Value>> {
            Box::pin(async {
                Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "down").into())
            })
        }
    }

    fn app(config: RateLimitConfig) -> Router {
        let limiter = Limiter::builder().backend(Arc::new(Down));
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
        config.ip = Rate {
            shadow: true,
            ..Rate::per_minute(1)
        };
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
        config.endpoint = Rate {
            window_ms: 3_600_000,
            ..Rate::per_minute(2)
        }
        .with_algorithm(crate::tier::AlgorithmKind::Sliding);
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
}
