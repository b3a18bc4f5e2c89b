//! Operations endpoints: `/healthz` (200 while the gateway serves, 503 while it would
//! refuse traffic), `/metrics` (Prometheus text, every metric with HELP and TYPE, latency
//! histograms) and the admin calls of [`crate::admin`] (bans, top offenders), on the public
//! listener or on `--admin-listen`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics::{describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use redis_rl_client::BreakerState;
use redis_rl_middleware::{Dimension, FailureModeName, Rate, RateLimitConfig};

use crate::reload::Live;

/// Redis round trips: a loopback call takes ~0.1 ms, the default timeout is 50 ms.
const REDIS_BUCKETS: [f64; 13] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];
/// Upstream response heads: milliseconds to the default 30 s timeout.
const UPSTREAM_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Installs the Prometheus recorder (histograms with buckets, not summaries) and describes
/// every metric the gateway and the client record.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    let err = |e: metrics_exporter_prometheus::BuildError| format!("metrics recorder: {e}");
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("rl_redis_call_duration_seconds".to_string()),
            &REDIS_BUCKETS,
        )
        .map_err(err)?
        .set_buckets_for_metric(
            Matcher::Full("rl_upstream_duration_seconds".to_string()),
            &UPSTREAM_BUCKETS,
        )
        .map_err(err)?
        .install_recorder()
        .map_err(err)?;
    describe();
    // Without an HTTP listener of its own the exporter needs its upkeep run (it bounds the
    // memory of histograms between scrapes).
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// Registers at 0 the series of the gateway and the limiter that no configuration names:
/// a dashboard's panel or an alert then reads 0 before the first event, not "no data" (the
/// middleware registers the configuration's own label sets: dimensions, rules, tiers).
pub fn at_zero(config: &RateLimitConfig) {
    for to in ["open", "half_open", "closed"] {
        metrics::counter!("rl_breaker_transitions_total", "to" => to).increment(0);
    }
    for result in ["ok", "error"] {
        metrics::counter!("rl_config_reloads_total", "result" => result).increment(0);
    }
    for name in [
        "rl_lease_takes_total",
        "rl_lease_hits_total",
        "rl_lease_refunds_total",
        "rl_lease_units_granted_total",
        "rl_lease_units_refunded_total",
        "rl_lease_units_dropped_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    for outcome in ["ok", "error_reply", "unavailable", "timeout"] {
        // Registered, nothing observed: its buckets, count and sum at 0.
        let _ = metrics::histogram!("rl_redis_call_duration_seconds", "outcome" => outcome);
    }
    metrics::gauge!("rl_breaker_open").set(0.0);
    metrics::gauge!("rl_held_requests").set(0.0);
    // What the local fallback divides by until the fleet's first heartbeat answers.
    let alone = config.instances.map_or(1, std::num::NonZeroU32::get);
    metrics::gauge!("rl_fleet_size").set(f64::from(alone));
}

/// The HELP text of every metric (the exporter writes TYPE itself). A metric recorded
/// without a line here would have no HELP: the integration test checks that each has one.
fn describe() {
    describe_counter!(
        "rl_requests_total",
        "Rate-limit decisions per dimension of each request, by outcome (allowed, denied, delayed: refused, held by delay_max_ms and served, shadow_denied; banned: refused by a ban of that dimension or rule)."
    );
    describe_counter!(
        "rl_responses_total",
        "Responses by HTTP status and tier (the tier whose limits applied; none: no API key; -: decided by the access lists)."
    );
    describe_counter!(
        "rl_fallback_total",
        "Decisions taken without Redis (the failure mode), by dimension and source (local, fail_open, fail_closed)."
    );
    describe_counter!(
        "rl_client_decisions_total",
        "Limiter decisions not answered by Redis, by source (deny_cache, local, fail_open, fail_closed)."
    );
    describe_counter!(
        "rl_breaker_transitions_total",
        "Circuit breaker transitions, by the state entered (open, half_open, closed)."
    );
    describe_gauge!(
        "rl_breaker_open",
        "Circuit breaker state when scraped: 0 closed, 0.5 half-open, 1 open."
    );
    describe_histogram!(
        "rl_redis_call_duration_seconds",
        "Duration of each Redis round trip of the limiter (bounded by --timeout-ms), by outcome (ok, error_reply, unavailable, timeout)."
    );
    describe_histogram!(
        "rl_upstream_duration_seconds",
        "Time from forwarding a request to the upstream's response head (connecting included), by outcome (1xx..5xx, error, timeout)."
    );
    describe_counter!(
        "rl_access_total",
        "Requests decided by the access lists before any limit, by list (allow: never limited; deny: 403) and, for deny, on (ip or api_key)."
    );
    describe_gauge!(
        "rl_fleet_size",
        "Live gateways in the fleet (membership leases in Redis), the divisor of the local fallback."
    );
    describe_counter!(
        "rl_decisions_total",
        "Who decided each dimension of each request (counted as rl_requests_total), by source (redis: a call named the key; lease, deny_cache, local, fail_open, fail_closed: no call)."
    );
    describe_counter!(
        "rl_lease_takes_total",
        "Batches asked for on hot keys (one COST n UPTO call each)."
    );
    describe_counter!(
        "rl_lease_hits_total",
        "Requests served from a lease in hand, without a Redis call."
    );
    describe_counter!(
        "rl_lease_refunds_total",
        "RL.REFUND calls giving back the unspent units of an ended lease."
    );
    describe_counter!(
        "rl_lease_units_granted_total",
        "Units granted to leases by Redis."
    );
    describe_counter!(
        "rl_lease_units_refunded_total",
        "Unspent lease units given back to Redis."
    );
    describe_counter!(
        "rl_lease_units_dropped_total",
        "Unspent lease units not given back (refund failed during an outage, or the limiter gave back less): they stay counted."
    );
    describe_counter!(
        "rl_redis_refusals_total",
        "Redis calls refused to the limiter's user, by reason (authentication_failed: WRONGPASS or NOAUTH; permission_denied: NOPERM)."
    );
    describe_counter!(
        "rl_unknown_tier_total",
        "Requests whose API key maps, in the tier hash, to a tier name the configuration lacks (limited as the default tier)."
    );
    describe_counter!(
        "rl_fleet_heartbeat_failures_total",
        "Fleet membership heartbeats that failed (the fleet size stays at its last value)."
    );
    describe_counter!(
        "rl_fleet_untrusted_total",
        "Fleet heartbeats whose reading was ignored: the fleet key held a lease longer than ttl_ms."
    );
    describe_counter!(
        "rl_settled_total",
        "Costs settled after the response, by settle header and outcome (refund, charge, exact; missing or invalid: the reservation stands; error: Redis did not answer; debt_hold: a charge held its subject until its debt is paid)."
    );
    describe_counter!(
        "rl_delayed_total",
        "Refused requests considered for delay_max_ms, by outcome (held; too_long, over_cap: refused)."
    );
    describe_gauge!(
        "rl_held_requests",
        "Requests held by delay_max_ms right now in the process (at most delay_max_held, across listeners and reloads)."
    );
    describe_counter!(
        "rl_connections_refused_total",
        "Connections past --max-connections, by listener (answered by the overflow pool or closed)."
    );
    describe_counter!(
        "rl_body_timeouts_total",
        "Requests whose body did not arrive within --body-timeout-ms (the connection was closed)."
    );
    describe_counter!(
        "rl_bans_total",
        "Bans started by this gateway (a key refused `after` times within `within_ms`), by policy (the rule or dimension)."
    );
    describe_counter!(
        "rl_offenders_dropped_total",
        "Refusals not counted towards bans and top offenders: the background queue was full."
    );
    describe_counter!(
        "rl_offenders_write_errors_total",
        "Top-offender count writes to Redis that failed (those counts are lost)."
    );
    describe_counter!(
        "rl_config_reloads_total",
        "Configuration reloads on SIGHUP, by result (ok, error: refused, the running configuration stays)."
    );
    describe_counter!(
        "rl_rls_config_reloads_total",
        "Rate limit service configurations loaded after the start (SIGHUP or xDS), by result (ok, error: refused, the running one stays)."
    );
    describe_counter!(
        "rl_xds_responses_total",
        "xDS responses answered, by result (ack: applied; nack: refused, the running configuration stays)."
    );
    describe_counter!(
        "rl_xds_streams_ended_total",
        "xDS streams that ended or failed (the client reconnects; the running configuration stays)."
    );
    describe_counter!(
        "ratelimit_service_global_shadow_mode",
        "Requests over a limit answered OK because of SHADOW_MODE."
    );
}

/// What the ops endpoints read.
pub struct Ops {
    pub live: Arc<Live>,
    pub prometheus: PrometheusHandle,
    /// Served on `--admin-listen`: /healthz shows the details (configuration path, last
    /// reload error, upstream), which the public listener never shows.
    pub admin: bool,
    /// The rate limit service, when it runs: `GET /top` lists its domains too.
    pub rls: Option<crate::rls::Checker>,
}

/// `/healthz` and `/metrics`.
pub fn router(ops: Arc<Ops>) -> Router {
    Router::new()
        .route("/healthz", get(crate::health::healthz))
        .route("/metrics", get(render_metrics))
        .with_state(ops.clone())
        .merge(crate::admin::router(ops))
}

/// The enforced dimensions with a limit that fails closed (its own `failure_mode`, else the
/// configuration's), a tier's override of the dimension included: while Redis is
/// unavailable, requests counted on them get 503.
pub(crate) fn fail_closed(config: &RateLimitConfig) -> Vec<Dimension> {
    let closed = |r: &Rate| {
        !r.shadow && r.failure_mode.unwrap_or(config.failure_mode) == FailureModeName::Closed
    };
    config
        .dimensions
        .iter()
        .copied()
        .filter(|&d| {
            let base = match d {
                Dimension::ApiKey => None,
                Dimension::Ip => Some(&config.ip),
                Dimension::Endpoint => Some(&config.endpoint),
                Dimension::Global => Some(&config.global),
            };
            base.is_some_and(&closed)
                || config.tiers.values().any(|t| match base {
                    None => closed(&t.rate),
                    Some(b) => t
                        .override_of(d)
                        .is_some_and(|o| o.apply(b).is_ok_and(|r| closed(&r))),
                })
        })
        .collect()
}

/// Prometheus text format: the middleware's, limiter's and gateway's metrics.
async fn render_metrics(State(ops): State<Arc<Ops>>) -> Response {
    let open = match ops.live.parts().limiter.breaker_state() {
        BreakerState::Closed => 0.0,
        BreakerState::HalfOpen => 0.5,
        BreakerState::Open => 1.0,
    };
    metrics::gauge!("rl_breaker_open").set(open);
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4")],
        ops.prometheus.render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_closed_dimensions_follow_the_mode_and_the_per_limit_overrides() {
        let mut c = RateLimitConfig::default();
        assert!(fail_closed(&c).is_empty(), "local by default");
        c.failure_mode = FailureModeName::Closed;
        assert_eq!(fail_closed(&c).len(), 4);
        c.global.shadow = true;
        c.ip.failure_mode = Some(FailureModeName::Open);
        assert_eq!(
            fail_closed(&c),
            [Dimension::ApiKey, Dimension::Endpoint],
            "a shadow limit never refuses; an override wins"
        );
        c.dimensions = vec![Dimension::Ip];
        assert!(fail_closed(&c).is_empty(), "only enforced dimensions count");
        let pro = c.tiers.get_mut("pro").unwrap();
        pro.ip = Some(redis_rl_middleware::RateOverride {
            failure_mode: Some(FailureModeName::Closed),
            ..Default::default()
        });
        assert_eq!(fail_closed(&c), [Dimension::Ip], "a tier's override counts");
    }
}
