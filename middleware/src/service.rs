//! The service: decides, then calls the inner service or refuses.

use std::sync::Arc;
use std::task::{Context, Poll};

use std::time::Duration;

use http::{HeaderValue, Request, Response};
use redis_rl_flow::{HttpRequest, RequestFlow, Step};
use tower_service::Service;
use tracing::Instrument;

use super::drive;
use super::extract::{self, REQUEST_ID_NAME};
use super::headers::{to_response, write_headers};
use super::plan::Shared;
use super::request::{RequestInfo, RequestView};
use super::settle_token::{SettleTokens, SETTLE_TOKEN};
use super::settlement::{IssueSettleToken, PendingSettle, SettleReport};
use super::trace::{TraceContext, TRACEPARENT_NAME};
use redis_rl_client::backend::BoxFuture;
use redis_rl_client::policy::Policy;

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

/// What the flow decided before the inner service runs.
/// Each carries the `tier` label of the response's metrics: the tier whose limits applied,
/// `none` for a key-less request, `-` when the access lists decided.
enum Before {
    Refuse(redis_rl_policy::Response, String),
    Call(Go),
}

/// An allowed (or held) request: the headers of its answer, the tier label, how long to
/// hold it first (its flow kept until then: its place under the cap of held requests),
/// and the settlement of its cost after the response.
struct Go {
    headers: Vec<(&'static str, String)>,
    tier: String,
    hold: Option<(Duration, Box<RequestFlow>)>,
    settle: Option<PendingSettle>,
}

/// The request as the flow takes it: plain owned data.
fn flow_request(
    view: &RequestView<'_>,
    peer: Option<std::net::IpAddr>,
    route: Option<String>,
    request_id: &str,
    trace_id: &str,
) -> HttpRequest {
    HttpRequest {
        method: view.method.as_str().to_owned(),
        path: view.uri.path().to_owned(),
        host: view.uri.host().map(str::to_owned),
        headers: view
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect(),
        peer,
        route,
        request_id: request_id.to_owned(),
        trace_id: Some(trace_id.to_owned()),
        settle_report: view.extensions.get::<SettleReport>().is_some(),
    }
}

/// Runs the request's flow: each step's limiter call, tier lookup or Redis read here, every
/// decision in the flow.
async fn decide(
    shared: &Shared,
    info: &dyn RequestInfo,
    view: RequestView<'_>,
    request_id: &str,
    trace_id: &str,
) -> Before {
    let req = flow_request(
        &view,
        info.peer_ip(&view),
        info.route(&view),
        request_id,
        trace_id,
    );
    let (mut flow, mut step) = shared.flow.start(req, shared.now_ms());
    // Built at the limiter call, kept for a hold and the settlement.
    let mut policies: Vec<Policy> = Vec::new();
    let mut booking_lock = None;
    loop {
        step = match step {
            Step::Tier { api_key } => {
                let tier = shared.resolver.tier(&api_key).await;
                flow.tier(tier)
            }
            Step::Book(book) => {
                policies = match drive::policies(shared, flow.plan()) {
                    Some(p) => p,
                    None => return Before::Call(Go::plain(&flow_tier(&flow))),
                };
                let (decided, denied, bans) = drive::book(shared, &book, &policies).await;
                flow.booked(decided, denied, bans, shared.now_ms())
            }
            Step::Peek(takes) => {
                booking_lock = Some(super::plan::BOOKING.lock().await);
                flow.peeked(drive::peek(shared, &takes, &policies).await)
            }
            Step::Force(takes) => {
                let ok = drive::force(shared, &takes, &policies).await;
                booking_lock = None;
                flow.forced(ok)
            }
            Step::Respond(reply) => {
                drop(booking_lock);
                let tier = reply.record.tier.clone();
                let before_limits = reply.record.access.is_some();
                drive::record(shared, reply.record, &policies);
                let status = reply.response.status;
                if before_limits {
                    tracing::debug!(status, "request refused before any limit");
                } else if status != 204 {
                    tracing::debug!(status, "request refused");
                }
                let report = view.extensions.get::<SettleReport>();
                if let (Some(settle), Some(SettleReport(tokens))) = (reply.settle, report) {
                    // A report of a response's cost: the reservation its token names,
                    // settled from the report's own headers.
                    let Some(policies) = drive::policies(shared, flow.plan()) else {
                        return Before::Refuse(reply.response, tier);
                    };
                    let r = settle_report(shared, settle, policies, &view, tokens, request_id);
                    return Before::Refuse(r.await, tier);
                }
                return Before::Refuse(reply.response, tier);
            }
            Step::Forward(forward) => {
                drop(booking_lock);
                let tier = forward.record.tier.clone();
                if forward.hold_ms.is_some() {
                    metrics::gauge!("rl_held_requests").set(shared.flow.held() as f64);
                }
                drive::record(shared, forward.record, &policies);
                let settle = forward
                    .settle
                    .map(|s| PendingSettle::new(shared.limiter.clone(), s, policies));
                let hold = forward.hold_ms.map(|ms| {
                    tracing::debug!(wait_ms = ms, "request held for its slot");
                    (Duration::from_millis(ms), Box::new(flow))
                });
                return Before::Call(Go {
                    headers: forward.headers,
                    tier,
                    hold,
                    settle,
                });
            }
        };
    }
}

/// A report of a response's actual cost ([`SettleReport`]): the reservation its
/// `rl-settle-token` names, on the keys of the described request the token names, settled
/// from the report's own headers, nothing taken, 204. Refused (nothing settled) without a
/// valid token (403), with one spent before (409), or when Redis cannot record the spending
/// (503).
async fn settle_report(
    shared: &Shared,
    settle: redis_rl_flow::Settle,
    policies: Vec<Policy>,
    view: &RequestView<'_>,
    tokens: &SettleTokens,
    request_id: &str,
) -> redis_rl_policy::Response {
    let now_ms = redis_rl_client::transport::wall_ms();
    let token = view.headers.get(SETTLE_TOKEN).and_then(|v| v.to_str().ok());
    let reservation = match tokens.verify(token, now_ms) {
        Ok(r) => r,
        Err(e) => return settle_refused(403, e.detail(), request_id),
    };
    // A report settles its own reservation and no more.
    let Some(bound) = settle.bound_to(&reservation.items) else {
        return settle_refused(
            403,
            "the rl-settle-token names none of the described request's keys",
            request_id,
        );
    };
    let prefix = &shared.flow.engine().config().key_prefix;
    match super::settle_token::spend(&shared.limiter, prefix, &reservation, now_ms).await {
        Ok(true) => {}
        Ok(false) => {
            return settle_refused(409, "the rl-settle-token was spent already", request_id)
        }
        Err(e) => {
            tracing::warn!(error = %e, "a settlement report could not be recorded: refused");
            return settle_refused(503, "redis unavailable: the reservation stands", request_id);
        }
    }
    PendingSettle::new(shared.limiter.clone(), bound, policies)
        .settle(view.headers)
        .await;
    redis_rl_policy::Response {
        status: 204,
        headers: vec![("x-request-id", request_id.to_owned())],
        body: String::new(),
    }
}

/// A refused settlement report: a problem body saying why.
fn settle_refused(status: u16, detail: &str, request_id: &str) -> redis_rl_policy::Response {
    let title = match status {
        409 => "Conflict",
        503 => "Service Unavailable",
        _ => "Forbidden",
    };
    let body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "request_id": request_id,
    });
    redis_rl_policy::Response {
        status,
        headers: vec![
            ("content-type", "application/problem+json".to_owned()),
            ("x-request-id", request_id.to_owned()),
        ],
        body: body.to_string(),
    }
}

fn flow_tier(flow: &RequestFlow) -> String {
    flow.plan()
        .tier
        .clone()
        .unwrap_or_else(|| "none".to_owned())
}

impl Go {
    fn plain(tier: &str) -> Self {
        Self {
            headers: Vec::new(),
            tier: tier.to_owned(),
            hold: None,
            settle: None,
        }
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
    // At ERROR level so that the span is enabled whatever the log level: every line logged
    // for the request (warnings of a failed upstream call included) carries its ids.
    let span = tracing::error_span!(
        "rate_limit",
        request_id = %request_id,
        trace_id = %trace_id,
        tenant = tracing::field::Empty,
        tier = tracing::field::Empty,
        dimension = tracing::field::Empty,
    );
    async move {
        let go = match decide(
            &shared,
            info.as_ref(),
            RequestView::of(&req),
            &request_id,
            &trace_id,
        )
        .await
        {
            Before::Refuse(r, tier) => return Ok(counted(&shared, to_response(r), &tier)),
            Before::Call(go) => go,
        };
        let Go {
            headers: added,
            tier: tier_label,
            hold,
            settle,
        } = go;
        if let Some((wait, flow)) = hold {
            tokio::time::sleep(wait).await;
            drop(flow); // its place under the cap of held requests
            metrics::gauge!("rl_held_requests").set(shared.flow.held() as f64);
        }
        let mut token = None;
        if let Some(s) = &settle {
            // A check answered for a proxy (forward auth): the reservation is settled by a
            // report presenting this token, not from this answer.
            if let Some(IssueSettleToken(tokens)) = req.extensions().get::<IssueSettleToken>() {
                token = HeaderValue::try_from(s.token(tokens)).ok();
                s.claim();
            }
            req.extensions_mut().insert(s.clone());
        }
        if let Ok(v) = HeaderValue::try_from(request_id.as_str()) {
            req.headers_mut().insert(REQUEST_ID_NAME, v);
        }
        if let Ok(v) = HeaderValue::try_from(trace.traceparent()) {
            req.headers_mut().insert(TRACEPARENT_NAME, v);
        }
        let mut response = inner.call(req).await?;
        if let Some(s) = settle.filter(|s| !s.claimed()) {
            s.settle(response.headers()).await;
        }
        let headers = response.headers_mut();
        write_headers(headers, &added);
        if let Some(t) = token {
            headers.insert(http::HeaderName::from_static(SETTLE_TOKEN), t);
        }
        if let Ok(v) = HeaderValue::try_from(request_id.as_str()) {
            headers.insert(REQUEST_ID_NAME, v);
        }
        if response.status().is_server_error() {
            tracing::warn!(status = response.status().as_u16(), "upstream error");
        }
        Ok(counted(&shared, response, &tier_label))
    }
    .instrument(span)
    .await
}

/// Counts a response in `rl_responses_total` by status and tier (the tier whose limits applied;
/// `none` without an API key, `-` when the access lists decided), then returns it.
fn counted<B>(shared: &Shared, response: Response<B>, tier: &str) -> Response<B> {
    shared.counters.response(tier, response.status());
    response
}

#[cfg(all(test, feature = "axum"))]
#[allow(clippy::field_reassign_with_default)] // each test changes one field of the defaults
#[path = "service_tests.rs"]
mod tests;
