//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`: plan the request's
//! descriptors, decide them at once through the request flow (`decide`), answer one status
//! per descriptor (and, with `--rls-response-headers`, the RateLimit headers), count the
//! metrics and queue the refusals towards the top offenders.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use prost_types::Duration as ProtoDuration;
use redis_rl_client::{Limiter, Source};
use redis_rl_flow::{Decided, Verdict};
use redis_rl_middleware::RateLimitConfigExt;
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use rl_gateway_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use super::config::RlsConfig;
use super::headers;
use super::offenders::TopOffenders;
use super::plan::{self, Planned};
use crate::envoy_env::HeaderNames;
use crate::reload::Live;

/// The share of a limit past which a hit is also counted as near the limit
/// (envoyproxy/ratelimit's default `NEAR_LIMIT_RATIO`).
const NEAR_LIMIT_PERCENT: u64 = 80;

/// The metric label of a domain the configuration does not define (requests that carry
/// their own `limit` can name any): labels come only from the configuration.
const UNCONFIGURED_DOMAIN: &str = "<other>";

/// How much one `ShouldRateLimit` call may ask for (`--rls-max-descriptors`,
/// `--rls-max-entries`): a call past either is refused before any work.
#[derive(Clone, Copy, Debug)]
pub struct RequestBounds {
    pub max_descriptors: usize,
    /// Entries of one descriptor.
    pub max_entries: usize,
}

impl RequestBounds {
    /// Refuses a request past a bound, naming the bound and its flag.
    fn check(&self, req: &RateLimitRequest) -> Result<(), Status> {
        let n = req.descriptors.len();
        if n > self.max_descriptors {
            return Err(Status::invalid_argument(format!(
                "rate limit request has {n} descriptors, more than --rls-max-descriptors {}",
                self.max_descriptors
            )));
        }
        if let Some((i, d)) = req
            .descriptors
            .iter()
            .enumerate()
            .find(|(_, d)| d.entries.len() > self.max_entries)
        {
            return Err(Status::invalid_argument(format!(
                "rate limit descriptor {i} has {} entries, more than --rls-max-entries {}",
                d.entries.len(),
                self.max_entries
            )));
        }
        Ok(())
    }
}

/// The service: the live RLS configuration, the gateway's limiter and failure mode.
#[derive(Clone)]
pub struct Rls {
    pub config: Arc<ArcSwap<RlsConfig>>,
    pub limiter: Limiter,
    /// Refusals towards the top offenders.
    pub offenders: Arc<TopOffenders>,
    /// The gateway's live configuration: its failure mode applies here too.
    pub gateway: Arc<Live>,
    pub response_headers: bool,
    /// Rules of at least this many requests per second are served from leases (0: none).
    pub hot_per_second: u64,
    pub bounds: RequestBounds,
    /// envoyproxy/ratelimit's headers (LIMIT_*_HEADER) instead of the gateway's.
    pub header_names: Option<HeaderNames>,
    /// SHADOW_MODE: the overall code is always OK.
    pub shadow_mode: bool,
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let req = request.into_inner();
        if let Err(refusal) = self.bounds.check(&req) {
            metrics::counter!("rl_rls_requests_refused_total", "reason" => "too_large")
                .increment(1);
            return Err(refusal);
        }
        let gateway = self.gateway.current();
        let failure = gateway.config.failure_mode();
        let config = self.config.load();
        let planned = plan::plan(
            &config,
            &gateway.config.key_prefix,
            &req.domain,
            &req.descriptors,
            req.hits_addend,
            failure,
            self.hot_per_second,
        )
        .map_err(|e| Status::invalid_argument(e.0))?;
        let outcome = super::decide::decide(&self.limiter, &req.domain, &planned).await;
        self.offenders
            .record(&gateway.config.key_prefix, outcome.refusals);
        let (decisions, refused) = (outcome.decided, outcome.refused);
        let domain_label = if config.domains.contains_key(&req.domain) {
            req.domain.as_str()
        } else {
            UNCONFIGURED_DOMAIN
        };
        let mut statuses = Vec::with_capacity(planned.len());
        for (p, d) in planned.iter().zip(&decisions) {
            statuses.push(status(p, d.as_ref()));
            if let (Planned::Limited(l), Some(d)) = (p, d) {
                count(domain_label, l, d, refused);
            }
        }
        let response_headers_to_add = match (&self.header_names, self.response_headers) {
            (Some(names), true) => headers::envoy_headers(&statuses, names),
            (None, true) => headers::response_headers(&planned, &decisions, refused),
            (_, false) => Vec::new(),
        };
        let overall = if refused && !self.shadow_mode {
            Code::OverLimit
        } else {
            if refused {
                metrics::counter!("ratelimit_service_global_shadow_mode").increment(1);
            }
            Code::Ok
        };
        Ok(Response::new(RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add,
            ..Default::default()
        }))
    }
}

/// One descriptor's status. Over the limit: an enforced rule that denied (a shadow rule
/// answers OK). The wait: until the counter allows again when over, else until the window
/// (or bucket) is back to idle.
fn status(p: &Planned, d: Option<&Decided>) -> DescriptorStatus {
    let l = match p {
        Planned::NoLimit => {
            return DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            }
        }
        Planned::Unlimited => {
            return DescriptorStatus {
                code: Code::Ok as i32,
                limit_remaining: u32::MAX,
                ..Default::default()
            }
        }
        Planned::Limited(l) => l,
    };
    let over = d.is_some_and(|d| d.is_denied() && !d.shadow);
    let wait = d.map_or(Duration::ZERO, |d| match d.verdict {
        Verdict::Denied { retry_after_ms } if over => Duration::from_millis(retry_after_ms),
        _ => Duration::from_millis(d.reset_after_ms),
    });
    DescriptorStatus {
        code: if over { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(RateLimit {
            name: l.name.clone(),
            requests_per_unit: l.requests_per_unit,
            unit: l.unit as i32,
        }),
        limit_remaining: d.map_or(0, |d| {
            if over {
                0
            } else {
                u32::try_from(d.remaining).unwrap_or(u32::MAX)
            }
        }),
        duration_until_reset: Some(proto_duration(wait)),
        ..Default::default()
    }
}

fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// envoyproxy/ratelimit's per-rule counters, by domain and metric key (the rule's place in
/// the tree; values only where the file asks; a configured domain, else one label, and
/// one key for every descriptor with its own limit): hits, over the limit, near it (past 80%),
/// within it, and shadow-mode passes (over the limit, answered OK). Each counts the hits
/// (`hits_addend`), as there.
fn count(domain: &str, l: &plan::Limited, d: &Decided, refused: bool) {
    let labels = [("domain", domain.to_string()), ("key", l.metric.clone())];
    let hits = l.cost;
    metrics::counter!("ratelimit_service_rate_limit_total_hits", &labels).increment(hits);
    if d.source != Source::Redis && d.source != Source::Lease && d.source != Source::DenyCache {
        metrics::counter!("ratelimit_service_rate_limit_fallback", &labels).increment(hits);
    }
    if d.is_denied() {
        if d.shadow {
            metrics::counter!("ratelimit_service_rate_limit_shadow_mode", &labels).increment(hits);
        } else {
            metrics::counter!("ratelimit_service_rate_limit_over_limit", &labels).increment(hits);
        }
        return;
    }
    if refused {
        return; // nothing was taken on this counter: another descriptor refused the request
    }
    metrics::counter!("ratelimit_service_rate_limit_within_limit", &labels).increment(hits);
    let limit = u64::from(l.requests_per_unit);
    let used = limit.saturating_sub(d.remaining);
    if used.saturating_mul(100) > limit.saturating_mul(NEAR_LIMIT_PERCENT) {
        metrics::counter!("ratelimit_service_rate_limit_near_limit", &labels).increment(hits);
    }
}
