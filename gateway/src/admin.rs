//! Admin endpoints on the operations router (the admin listener, or the public one without
//! `--admin-listen`): `GET /bans` lists the fleet's bans, `DELETE /bans/<policy>?key=<key>`
//! lifts one, `GET /top` shows the most refused keys per rule and dimension over the last
//! minutes (fleet-wide: every gateway writes its refusals to Redis), `DELETE /limits?key=<key>`
//! resets a key (its count and every gateway's cached refusal of it).
//!
//! They show other clients' addresses and tenants and change limits, so they answer only on
//! the admin listener; without one, only a loopback peer that is not a proxy (the request
//! carries no forwarding header: a proxy on the same host would otherwise lend its address
//! to any client) gets an answer, anyone else 403.

use std::collections::HashMap;
use std::sync::Arc;

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use redis_rl_client::{bans, offenders};
use serde_json::json;

use crate::ops::Ops;

/// Most bans `GET /bans` lists (`?limit=` up to this).
const MAX_LISTED: u64 = 1_000;
/// Keys per policy `GET /top` shows by default (`?n=` up to [`MAX_TOP`]).
const DEFAULT_TOP: usize = 20;
const MAX_TOP: usize = redis_rl_middleware::TOP_ENTRIES as usize;

/// `/bans`, `/bans/{policy}` and `/top`.
pub fn router(ops: Arc<Ops>) -> Router {
    Router::new()
        .route("/bans", get(list))
        .route("/bans/{policy}", axum::routing::delete(lift))
        .route("/top", get(top))
        .route("/limits", axum::routing::delete(reset))
        .with_state(ops)
}

/// Headers by which a proxy says whom it forwards for.
const FORWARDING: [&str; 3] = ["x-forwarded-for", "x-real-ip", "forwarded"];

/// `None` when the caller may use the admin calls: on the admin listener anyone who can
/// reach it; on the public listener a loopback peer that forwards for nobody.
fn refused(ops: &Ops, peer: SocketAddr, headers: &HeaderMap) -> Option<Response> {
    if ops.admin {
        return None;
    }
    let local = peer.ip().to_canonical().is_loopback();
    let forwarded = FORWARDING.iter().any(|h| headers.contains_key(*h));
    if local && !forwarded {
        return None;
    }
    Some(
        (
            StatusCode::FORBIDDEN,
            Json(json!({ "error": "admin calls answer on --admin-listen (or to this machine, not through a proxy)" })),
        )
            .into_response(),
    )
}

fn unavailable(e: &redis_rl_client::Error) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "error": format!("redis: {e}") })),
    )
        .into_response()
}

fn bad(message: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": message }))).into_response()
}

fn number<T: std::str::FromStr>(
    q: &HashMap<String, String>,
    name: &str,
    default: T,
) -> Result<T, String> {
    match q.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("{name} must be a whole number")),
    }
}

/// `GET /bans[?limit=n]`: `{"bans": [{policy, key, level, remaining_ms}]}`, longest first.
async fn list(
    State(ops): State<Arc<Ops>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = refused(&ops, peer, &headers) {
        return r;
    }
    let limit = match number(&q, "limit", MAX_LISTED) {
        Ok(n) => n.clamp(1, MAX_LISTED),
        Err(e) => return bad(e),
    };
    let prefix = ops.live.current().config.key_prefix.clone();
    match bans::list(&ops.live.parts().limiter, &prefix, limit).await {
        Ok(list) => Json(json!({
            "bans": list.iter().map(|b| json!({
                "policy": b.policy,
                "key": b.subject,
                "level": b.level,
                "remaining_ms": b.remaining_ms,
            })).collect::<Vec<_>>()
        }))
        .into_response(),
        Err(e) => unavailable(&e),
    }
}

/// The `key` parameter of an admin call that deletes, with the gateway's key prefix; else
/// the 400 message: `usage` when it is missing, the prefix when the key is not under it (an
/// admin call cannot delete other data).
fn prefixed_key<'q>(
    ops: &Ops,
    q: &'q HashMap<String, String>,
    usage: &str,
) -> Result<(String, &'q str), String> {
    let Some(key) = q.get("key").filter(|k| !k.is_empty()) else {
        return Err(usage.to_string());
    };
    let prefix = ops.live.current().config.key_prefix.clone();
    if !key.starts_with(&format!("{prefix}:")) {
        return Err(format!("key must start with {prefix}:"));
    }
    Ok((prefix, key))
}

/// `DELETE /bans/<policy>?key=<key>`: lifts the ban and forgets the key's refusals and
/// escalation; 200 `{"lifted": true}`, or 404 when the key was not banned (its counts are
/// forgotten all the same).
async fn lift(
    State(ops): State<Arc<Ops>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(policy): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    // A banned client must not lift its own ban, not even through a proxy on this host.
    if let Some(r) = refused(&ops, peer, &headers) {
        return r;
    }
    let (prefix, key) = match prefixed_key(
        &ops,
        &q,
        "give the banned key: DELETE /bans/<policy>?key=<key>",
    ) {
        Ok(found) => found,
        Err(message) => return bad(message),
    };
    match bans::lift(&ops.live.parts().limiter, &prefix, &policy, key).await {
        Ok(true) => Json(json!({ "lifted": true })).into_response(),
        Ok(false) => (StatusCode::NOT_FOUND, Json(json!({ "lifted": false }))).into_response(),
        Err(e) => unavailable(&e),
    }
}

/// `GET /top[?minutes=m&n=k]`: `{"minutes": m, "top": {"<policy>": [{key, refused}]}}`,
/// every dimension and rule of the configuration and every domain of the rate limit
/// service's (`rls:<domain>`), most refused first.
async fn top(
    State(ops): State<Arc<Ops>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = refused(&ops, peer, &headers) {
        return r;
    }
    let window = redis_rl_middleware::TOP_MINUTES;
    let minutes = match number(&q, "minutes", window) {
        Ok(m) if (1..=window).contains(&m) => m,
        Ok(_) => return bad(format!("minutes must be between 1 and {window}")),
        Err(e) => return bad(e),
    };
    let n = match number(&q, "n", DEFAULT_TOP) {
        Ok(n) => n.clamp(1, MAX_TOP),
        Err(e) => return bad(e),
    };
    let current = ops.live.current();
    let config = &current.config;
    let mut policies: Vec<String> = config
        .dimensions
        .iter()
        .map(|d| d.name().to_string())
        .collect();
    policies.extend(config.rules.iter().map(|r| r.name.clone()));
    if let Some(rls) = &ops.rls {
        policies.extend(rls.top_policies());
    }
    let limiter = &ops.live.parts().limiter;
    match offenders::top(limiter, &config.key_prefix, &policies, minutes, n).await {
        Ok(top) => {
            let top: serde_json::Map<String, serde_json::Value> = top
                .into_iter()
                .map(|(policy, keys)| {
                    let keys = keys
                        .into_iter()
                        .map(|(key, refused)| json!({ "key": key, "refused": refused }))
                        .collect();
                    (policy, serde_json::Value::Array(keys))
                })
                .collect();
            Json(json!({ "minutes": minutes, "top": top })).into_response()
        }
        Err(e) => unavailable(&e),
    }
}

/// `DELETE /limits?key=<key>`: resets the key (`RL.RESET`) and drops its cached refusal in
/// every gateway of the fleet: 200 `{"reset": true}`, or 404 `{"reset": false}` when Redis
/// held nothing for it (cached refusals are dropped all the same).
async fn reset(
    State(ops): State<Arc<Ops>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = refused(&ops, peer, &headers) {
        return r;
    }
    let (_, key) = match prefixed_key(&ops, &q, "give the key: DELETE /limits?key=<key>") {
        Ok(found) => found,
        Err(message) => return bad(message),
    };
    match ops.live.parts().limiter.reset(key).await {
        Ok(true) => Json(json!({ "reset": true })).into_response(),
        Ok(false) => (StatusCode::NOT_FOUND, Json(json!({ "reset": false }))).into_response(),
        Err(e) => unavailable(&e),
    }
}
