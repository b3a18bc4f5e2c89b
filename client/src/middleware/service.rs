//! The service: decides, then calls the inner service or refuses.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response};
use redis_rl_policy::{render, Admission, Outcome, Plan, Rendered};
use tower_service::Service;
use tracing::Instrument;

use super::config::policy_of;
use super::extract::{self, HttpHeaders, REQUEST_ID_NAME};
use super::headers::{to_response, write_headers};
use super::hold::{hold, Hold};
use super::plan::Shared;
use super::request::{RequestInfo, RequestView};
use super::settle_token::{SettleTokens, SETTLE_TOKEN};
use super::settlement::{IssueSettleToken, PendingSettle, SettleReport};
use super::trace::{TraceContext, TRACEPARENT_NAME};
use crate::backend::BoxFuture;
use crate::decision::{Decision, MultiDecision, Source};
use crate::policy::Policy;

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

/// The decision of one outcome, as the engine renders it.
fn outcome(d: &Decision) -> Outcome {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    Outcome {
        verdict: d.verdict.map(ms).into(),
        remaining: d.remaining,
        reset_after_ms: ms(d.reset_after),
        shadow: d.shadow,
        fail_open: d.source == Source::FailOpen,
        fail_closed: d.source == Source::FailClosed,
    }
}

/// What the engine decided before the inner service runs.
/// Each carries the `tier` label of the response's metrics: the tier whose limits applied,
/// `none` for a key-less request, `-` when the access lists decided.
enum Before {
    Refuse(redis_rl_policy::Response, String),
    Call(Go),
}

/// An allowed (or held) request: the headers of its answer, the tier label, how long to
/// hold it first, and the settlement of its cost after the response.
struct Go {
    headers: Vec<(&'static str, String)>,
    tier: String,
    hold: Option<Hold>,
    settle: Option<PendingSettle>,
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

/// The engine's view of a request (not kept across an await: the headers are a trait
/// object).
fn engine_request<'a>(
    view: &RequestView<'a>,
    headers: &'a HttpHeaders<'a>,
    peer: Option<std::net::IpAddr>,
    route: Option<&'a str>,
) -> redis_rl_policy::Request<'a> {
    redis_rl_policy::Request {
        method: view.method.as_str(),
        path: view.uri.path(),
        host: view.uri.host(),
        headers,
        peer,
        route,
    }
}

async fn decide(
    shared: &Shared,
    info: &dyn RequestInfo,
    view: RequestView<'_>,
    request_id: &str,
) -> Before {
    let front_route = info.route(&view);
    let peer = info.peer_ip(&view);
    let headers = HttpHeaders(view.headers);
    let admission = shared.engine.admit(
        &engine_request(&view, &headers, peer, front_route.as_deref()),
        request_id,
    );
    let id = match admission {
        Admission::Refuse(r) => {
            let on = if r.status == 400 { "bad_key" } else { "deny" };
            metrics::counter!("rl_access_total", "list" => on).increment(1);
            tracing::debug!(status = r.status, "request refused before any limit");
            return Before::Refuse(r, "-".to_owned());
        }
        Admission::Pass(_) => {
            metrics::counter!("rl_access_total", "list" => "allow").increment(1);
            return Before::Call(Go::plain("-"));
        }
        Admission::Limit(id) => id,
    };
    if let Some(t) = &id.tenant {
        tracing::Span::current().record("tenant", tracing::field::display(t));
    }
    let tier = match &id.api_key {
        Some(key) => shared.resolver.tier(key).await,
        None => None,
    };
    let plan = shared.engine.plan(
        &engine_request(&view, &headers, peer, front_route.as_deref()),
        &id,
        tier.as_deref(),
    );
    if let Some(t) = &plan.tier {
        tracing::Span::current().record("tier", tracing::field::display(t));
    }
    // The engine falls back to the default tier for a name it does not know: a typo in the
    // tier hash must not pass silently.
    if let Some(asked) = tier.as_deref() {
        if plan.tier.as_deref() != Some(asked) {
            crate::tier::unknown_tier(asked);
        }
    }
    let tier_label = plan.tier.clone().unwrap_or_else(|| "none".to_owned());
    // The units of each item: 1, or a rule's `cost` header (a bad one: 400, nothing taken).
    let booking = match shared.engine.booking(
        &engine_request(&view, &headers, peer, front_route.as_deref()),
        &plan,
        request_id,
    ) {
        Ok(b) => b,
        Err(r) => return Before::Refuse(r, tier_label),
    };
    if let Some(SettleReport(tokens)) = view.extensions.get::<SettleReport>() {
        return Before::Refuse(
            report(shared, &plan, booking, &view, tokens, request_id).await,
            tier_label,
        );
    }
    let mut items: Vec<(&str, Policy)> = Vec::with_capacity(plan.items.len());
    for item in &plan.items {
        match policy_of(item, shared.mode) {
            Ok(p) => items.push((item.key.as_str(), p)),
            // The engine validated every window with the same ranges: not reached. Were it
            // reached, the request passes unlimited (logged) rather than being decided on
            // items no longer aligned with the plan's units and headers.
            Err(e) => {
                tracing::error!(error = %e, policy = %item.name, "policy skipped");
                return Before::Call(Go::plain(&tier_label));
            }
        }
    }
    // The ban check goes with the limiter call: one round trip of latency (none for a ban
    // read a moment ago).
    let targets = plan.ban_targets();
    if let Some((index, remaining_ms)) = shared.ban_memory.recall(&targets) {
        let refusal = super::bans::refusal(shared, &plan, index, remaining_ms, request_id);
        return Before::Refuse(refusal, tier_label);
    }
    let (md, ban) = futures_util::join!(
        shared.limiter.check_all_units(&items, &booking.units),
        super::bans::first_active(&shared.limiter, &targets)
    );
    if let Some((index, remaining_ms)) = ban {
        shared.ban_memory.remember(&targets, index, remaining_ms);
        super::bans::give_back(shared, &items, &booking.units, &md);
        let refusal = super::bans::refusal(shared, &plan, index, remaining_ms, request_id);
        return Before::Refuse(refusal, tier_label);
    }
    let outcomes: Vec<Outcome> = md.decisions.iter().map(outcome).collect();
    // The span names the policy the response reports, allowed or refused.
    if let Some(item) =
        redis_rl_policy::reported_index(&plan, &outcomes, md.denied).and_then(|i| plan.items.get(i))
    {
        tracing::Span::current().record("dimension", tracing::field::display(&item.label));
    }
    let settle = booking.settles().then(|| {
        let owned = items
            .iter()
            .zip(&md.decisions)
            .map(|((k, p), d)| {
                (
                    (*k).to_owned(),
                    *p,
                    d.source == Source::Redis && !d.is_denied(),
                )
            })
            .collect();
        PendingSettle::new(shared.limiter.clone(), owned, booking.clone())
    });
    match render(&plan, &outcomes, md.denied, request_id) {
        Rendered::Refuse(r) => {
            if r.status == 429 {
                let held = hold(shared, &plan, &items, &booking.units, &outcomes, request_id);
                if let Some(h) = held.await {
                    // Served after its wait: not a refusal (neither in the counters nor
                    // towards bans and the top offenders).
                    count(shared, &plan, &md, true);
                    tracing::debug!(wait_ms = ?h.wait, "request held for its slot");
                    return Before::Call(Go {
                        headers: h.headers.clone(),
                        tier: tier_label,
                        hold: Some(h),
                        settle: settle.map(PendingSettle::all_in_redis),
                    });
                }
            }
            count(shared, &plan, &md, false);
            super::bans::refused(shared, &plan, &md, &targets);
            tracing::debug!(status = r.status, "request refused");
            Before::Refuse(r, tier_label)
        }
        // The span's dimension is recorded above, from the item these headers report: a
        // second record would repeat the field in every log line (`dimension=ip dimension=ip`).
        Rendered::Headers(h) => {
            count(shared, &plan, &md, false);
            super::bans::refused(shared, &plan, &md, &targets);
            Before::Call(Go {
                headers: h,
                tier: tier_label,
                hold: None,
                settle,
            })
        }
    }
}

/// A report of a response's actual cost ([`SettleReport`]): the reservation its
/// `rl-settle-token` names, on the keys of the described request the token names, settled
/// from the report's own headers, nothing taken, 204. Refused (nothing settled) without a
/// valid token (403), with one spent before (409), or when Redis cannot record the spending
/// (503).
async fn report(
    shared: &Shared,
    plan: &Plan,
    booking: redis_rl_policy::Booking,
    view: &RequestView<'_>,
    tokens: &SettleTokens,
    request_id: &str,
) -> redis_rl_policy::Response {
    let now_ms = crate::transport::wall_ms();
    let token = view.headers.get(SETTLE_TOKEN).and_then(|v| v.to_str().ok());
    let reservation = match tokens.verify(token, now_ms) {
        Ok(r) => r,
        Err(e) => return settle_refused(403, e.detail(), request_id),
    };
    // Each item of the described request that the token names (each token item once),
    // with the units reserved there: a report settles its own reservation and no more.
    let mut named = reservation.items.clone();
    let mut items = Vec::new();
    let mut bound = redis_rl_policy::Booking {
        units: Vec::new(),
        settle: Vec::new(),
    };
    for (item, header) in plan.items.iter().zip(&booking.settle) {
        let Ok(p) = policy_of(item, shared.mode) else {
            continue;
        };
        let Some(at) = named.iter().position(|(k, _)| *k == item.key) else {
            continue;
        };
        let (key, reserved) = named.swap_remove(at);
        items.push((key, p, reserved > 0));
        bound.units.push(reserved);
        bound.settle.push(header.clone());
    }
    if items.is_empty() {
        return settle_refused(
            403,
            "the rl-settle-token names none of the described request's keys",
            request_id,
        );
    }
    let prefix = &shared.engine.config().key_prefix;
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
    PendingSettle::new(shared.limiter.clone(), items, bound)
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
        let go = match decide(&shared, info.as_ref(), RequestView::of(&req), &request_id).await {
            Before::Refuse(r, tier) => {
                return Ok(counted(
                    &shared,
                    to_response(r.with_trace_id(&trace_id)),
                    &tier,
                ))
            }
            Before::Call(go) => go,
        };
        let Go {
            headers: added,
            tier: tier_label,
            hold,
            settle,
        } = go;
        if let Some(h) = hold {
            tokio::time::sleep(h.wait).await;
            drop(h.held);
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

/// Counts a decided request in `rl_requests_total` by dimension and outcome (the
/// [`REQUEST_OUTCOMES`] but `banned`) and `rl_decisions_total`. `held`: refused, then held
/// by `delay_max_ms` and served: the refusing item counts as `delayed`, the others (booked
/// with it) as `allowed`.
fn count(shared: &Shared, plan: &Plan, md: &MultiDecision, held: bool) {
    for (i, (p, d)) in plan.items.iter().zip(&md.decisions).enumerate() {
        let dimension = &p.label;
        let outcome = if md.denied == Some(i) {
            if held {
                "delayed"
            } else {
                "denied"
            }
        } else if d.shadow && d.is_denied() {
            "shadow_denied"
        } else if md.denied.is_some() && !held {
            continue; // not consumed: the request was refused by another policy
        } else {
            "allowed"
        };
        shared.counters.request(dimension, outcome);
        shared.counters.decision(dimension, d.source.name());
        if d.source.is_fallback() {
            metrics::counter!("rl_fallback_total", "dimension" => dimension.clone(), "source" => d.source.name()).increment(1);
        }
    }
}

#[cfg(all(test, feature = "axum"))]
#[allow(clippy::field_reassign_with_default)] // each test changes one field of the defaults
#[path = "service_tests.rs"]
mod tests;
