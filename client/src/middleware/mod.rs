//! A tower [`Layer`](tower_layer::Layer) that rate-limits HTTP requests: any service over
//! `http::Request<B>` (axum glue behind the `axum` feature).
//!
//! Each request is limited on up to four dimensions at once, all or nothing
//! ([`crate::Limiter::check_all`]):
//!
//! | dimension | key | default limit |
//! |---|---|---|
//! | `api_key` | `rl:{k:<tenant>}:key` | the key's tier (free 100/min, pro 1000/min, enterprise 10000/min) |
//! | `ip` | `rl:{ip:<client ip>}` | 100/min |
//! | `endpoint` | `rl:{k:<tenant>}:ep:<route pattern>` (`rl:{ip:<ip>}:ep:...` without a key) | 100/min |
//! | `global` | `rl:{global}` | 100000/min |
//!
//! `<tenant>` is [`tenant_id`] of the `X-API-Key` header (the key itself is never logged or
//! stored in a limiter key); a request without a key is limited per IP (and per IP and
//! endpoint) and globally. The client IP is the peer address, or the nearest untrusted
//! `X-Forwarded-For` hop when the peer is a configured trusted proxy. The endpoint is the
//! route pattern (e.g. `/items/{id}`), so ids in paths do not multiply keys. A
//! [`RequestInfo`] finds the peer and the pattern: by default axum's
//! `ConnectInfo<SocketAddr>` and `MatchedPath` (feature `axum`; apply the layer with
//! `Router::layer` so the pattern is known), else the `SocketAddr` and [`RoutePattern`]
//! request extensions.
//!
//! Every response gets `X-Request-Id` (the caller's if sane, else a new UUID),
//! `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` and the
//! draft-ietf-httpapi-ratelimit-headers-11 `RateLimit-Policy` and `RateLimit` fields for
//! the most restrictive dimension (the denying one, else the one with the fewest units
//! left). A denied request gets 429 with `Retry-After` (the true wait, whole seconds
//! rounded up) and an `application/problem+json` body naming the dimension and the request
//! id; a dimension that fails closed while Redis is down gives 503 instead.
//!
//! The whole request, the inner service included, runs in a `tracing` span `rate_limit`
//! with `request_id`, `tenant`, `tier` and `dimension`. Counters (through the `metrics`
//! facade): `rl_requests_total{dimension, outcome}` (outcome `allowed`, `denied`,
//! `shadow_denied`) and `rl_fallback_total{dimension, source}`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use axum::{routing::get, Router};
//! use redis_rl_client::middleware::{RateLimitConfig, RateLimitLayer};
//! use redis_rl_client::{Limiter, RedisHashTiers};
//! # #[tokio::main] async fn main() {
//! let limiter = Limiter::standalone("redis://127.0.0.1:6379/").unwrap();
//! let tiers = RedisHashTiers::new(limiter.clone(), "rl:tiers",
//!     std::time::Duration::from_secs(30), std::num::NonZeroUsize::new(10_000).unwrap());
//! let layer = RateLimitLayer::new(limiter, RateLimitConfig::default(), Arc::new(tiers)).unwrap();
//! let app = Router::new().route("/items/{id}", get(|| async { "ok" })).layer(layer);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await.unwrap();
//! axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>())
//!     .await
//!     .unwrap();
//! # }
//! ```

mod access;
#[cfg(feature = "axum")]
mod axum;
mod config;
mod extract;
mod headers;
mod layer;
mod plan;
mod request;
mod service;

#[cfg(feature = "axum")]
pub use self::axum::{refusal, AxumRequestInfo};
pub use access::Access;
pub use config::{
    AccessConfig, Dimension, FleetSettings, LeaseSettings, RateLimitConfig, TierLimits,
};
pub use extract::{
    api_key, api_key_in, client_ip, client_network, request_id, tenant_id, API_KEY, REQUEST_ID,
};
pub use headers::{
    ceil_secs, forbidden_response, policy_field, refusal_response, write_rate_limit, QuotaPolicy,
    Reported,
};
pub use layer::RateLimitLayer;
pub use request::{Extensions, RequestInfo, RequestView, RoutePattern};
pub use service::RateLimitService;
