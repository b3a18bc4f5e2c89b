//! `/healthz`: whether decisions are made where the configuration says, and why not.
//!
//! `status` is `ok` only while Redis answers, with the configured engine, to the limiter's
//! user, behind a closed breaker. Otherwise `degraded` (decided by the failure mode, which
//! serves) or `unavailable` (503: a dimension fails closed, so the gateway refuses that
//! traffic and a load balancer should send it elsewhere), with `reasons` saying why. The
//! configured failure mode is `failure_mode`; `deciding` says who decides now.
//!
//! On the public listener the body never shows configuration contents, paths or the
//! upstream: a refused reload's error quotes the file, and a file can hold API keys. Those
//! details are on `--admin-listen` only.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use redis::Value;
use redis_rl_client::{BreakerState, Limiter, Refusal, ServerImpl};
use serde_json::json;

use crate::ops::Ops;

/// What the probes found.
struct Probe {
    redis_up: bool,
    /// ServerImpl in use: `module` or `lua` (None: not known, Redis did not answer).
    engine: Option<&'static str>,
    reasons: Vec<String>,
}

async fn probe(limiter: &Limiter, configured: ServerImpl) -> Probe {
    let mut reasons = Vec::new();
    let ping = limiter.ping_result().await;
    let redis_up = ping.is_ok();
    match ping.as_ref().err().map(|e| (e.refusal(), e)) {
        None => {}
        Some((Some(r), _)) => reasons.push(refusal_reason(r, "PING")),
        Some((None, _)) => reasons.push("redis unavailable".to_string()),
    }
    // A breaker whose open time is up waits for a request to probe Redis; a drained
    // instance gets none, so the health check probes (else a 503 would keep it drained).
    if redis_up && limiter.breaker_state() == BreakerState::HalfOpen {
        let _ = limiter.query(&redis::cmd("PING"), None).await;
    }
    let mut engine = None;
    if redis_up {
        let mut info = redis::cmd("COMMAND");
        info.arg("INFO").arg("RL.TOKENBUCKET");
        if let Ok(v) = limiter.query(&info, None).await {
            let module = matches!(&v, Value::Array(items) if items.first().is_some_and(|i| !matches!(i, Value::Nil)));
            engine = Some(match (configured, module) {
                (ServerImpl::Lua, _) => "lua",
                (_, true) => "module",
                (ServerImpl::Auto, false) => "lua",
                (ServerImpl::Module, false) => {
                    reasons.push(
                        "module missing: --engine module but the server has no RL commands"
                            .to_string(),
                    );
                    "none"
                }
            });
        }
    }
    for (command, r) in limiter.refusals() {
        let reason = refusal_reason(r, &command);
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
    }
    match limiter.breaker_state() {
        BreakerState::Closed => {}
        BreakerState::Open => reasons.push("breaker open".to_string()),
        BreakerState::HalfOpen => reasons.push("breaker half-open".to_string()),
    }
    Probe {
        redis_up,
        engine,
        reasons,
    }
}

fn refusal_reason(r: Refusal, command: &str) -> String {
    match r {
        Refusal::AuthenticationFailed => {
            "authentication failed: redis refused the user or password".to_string()
        }
        Refusal::PermissionDenied => format!("permission denied: the user's ACL refuses {command}"),
    }
}

pub async fn healthz(State(ops): State<Arc<Ops>>) -> Response {
    let parts = ops.live.parts();
    let limiter = &parts.limiter;
    let p = probe(limiter, parts.args.engine).await;
    let breaker = limiter.breaker_state();
    let current = ops.live.current();
    let closed = crate::ops::fail_closed(&current.config);
    let in_redis = p.reasons.is_empty();
    let (status, word) = if !in_redis && !closed.is_empty() {
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    } else if !in_redis {
        (StatusCode::OK, "degraded")
    } else {
        (StatusCode::OK, "ok")
    };
    let s = limiter.stats();
    let config = ops.live.status();
    let mut body = json!({
        "status": word,
        "reasons": p.reasons,
        "deciding": if in_redis { "redis" } else { "failure_mode" },
        "failure_mode": current.config.failure_mode.name(),
        "engine": {
            "configured": engine_name(parts.args.engine),
            "in_use": p.engine,
        },
        "fail_closed": closed.iter().map(|d| d.name()).collect::<Vec<_>>(),
        "redis": if p.redis_up { "up" } else { "down" },
        "breaker": breaker.name(),
        "config": {
            "generation": config.generation,
            "reloads_refused": config.reloads_refused,
        },
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
            "lease_takes": s.leases.takes,
            "lease_hits": s.leases.hits,
            "lease_refunds": s.leases.refunds,
        },
    });
    if ops.admin {
        body["upstream"] = json!(parts.args.upstream);
        body["config"]["path"] = json!(config.path);
        body["config"]["last_reload_error"] = json!(config.last_error);
    }
    (status, Json(body)).into_response()
}

fn engine_name(engine: ServerImpl) -> &'static str {
    match engine {
        ServerImpl::Auto => "auto",
        ServerImpl::Module => "module",
        ServerImpl::Lua => "lua",
    }
}
