//! The HTTP part of redis-rl's client: a tower [`Layer`](tower_layer::Layer) that
//! rate-limits HTTP requests, any service over `http::Request<B>` (axum glue behind the
//! `axum` feature), and the tiers of API keys ([`TierResolver`]).
//!
//! The limiter it drives is `redis_rl_client`'s, which has no HTTP in its dependencies:
//! an application that only calls [`Limiter`](redis_rl_client::Limiter) compiles no
//! tower, axum or http.
//!
//! What a request is limited on, under which keys, and how the decision is written, is
//! the policy engine's ([`redis_rl_policy`]): the same TOML gives the same keys, headers and
//! problem bodies in rl-gateway, this middleware and the Python ASGI middleware. Each
//! request is limited on up to four dimensions and every matching `[[rules]]` entry, each
//! window of a rate its own key, all or nothing ([`redis_rl_client::Limiter::check_all`]):
//!
//! | dimension | key | default limit |
//! |---|---|---|
//! | `api_key` | `rl:{k:<tenant>}:key` | the key's tier (free 100/min, pro 1000/min, enterprise 10000/min) |
//! | `ip` | `rl:{ip:<client>}` | 100/min |
//! | `endpoint` | `rl:{k:<tenant>}:ep:<route pattern>` (`rl:{ip:<client>}:ep:...` without a key) | 100/min |
//! | `global` | `rl:{global}` | 100000/min |
//!
//! A tier may override any dimension for its keys ([`TierLimits`]); an overridden `ip` or
//! `global` budget is the tier's own, in the key above plus `:tier:<tier>`.
//!
//! `<tenant>` is the engine's digest of the API key ([`Engine::tenant_id`]: keyed with the
//! configuration's `api_key_digest_secret_file`, else the unkeyed [`tenant_id`]) (the
//! `api_key_header`, default `X-API-Key`;
//! `Authorization: Bearer <key>` works too), never logged or stored in a limiter key; a
//! request without a key is limited per IP (and per IP and endpoint) and globally. Two key
//! headers, or a key with whitespace or control characters inside, get 400.
//! `<client>` is the client IP ([`client_network`]: an IPv6 address as its /64, or
//! `ipv6_prefix`): the peer address, or the nearest untrusted `X-Forwarded-For` hop when
//! the peer is a configured trusted proxy. The endpoint is the route pattern (e.g.
//! `/items/{id}`: a rule's path, else the router's), matched on the path's normal form
//! (no duplicate slashes, dot segments or trailing slash), so ids in paths do not multiply
//! keys. A [`RequestInfo`] finds the peer
//! and the pattern: by default axum's `ConnectInfo<SocketAddr>` and `MatchedPath` (feature
//! `axum`; apply the layer with `Router::layer` so the pattern is known), else the
//! `SocketAddr` and [`RoutePattern`] request extensions.
//!
//! The `[access]` lists come first: a denied client IP or key gets 403 with a problem body
//! (deny wins), an allowed one passes without any limit or Redis call.
//!
//! Every response gets `X-Request-Id` (the caller's if sane, else a new UUID). A limited
//! one gets draft-ietf-httpapi-ratelimit-headers-11's `RateLimit-Policy` (every enforced
//! policy) and `RateLimit` (the most restrictive: the denying one, else the fewest units
//! left), with `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` equal to
//! its `q`, `r` and `t` (the policy engine's `render`). A denied request gets 429 with
//! `Retry-After` (the true wait, whole seconds rounded up: the same as `t`) and an
//! `application/problem+json` body naming the dimension and the request id; a dimension
//! that fails closed while Redis is down gives 503 instead, without quota fields.
//!
//! The whole request, the inner service included, runs in a `tracing` span `rate_limit`
//! with `request_id`, `tenant`, `tier` and `dimension`. Counters (through the `metrics`
//! facade): `rl_requests_total{dimension, outcome}` (outcome `allowed`, `denied`,
//! `shadow_denied`), `rl_decisions_total{dimension, source}` (who decided: `redis`,
//! `lease`, `deny_cache`, `local`, `fail_open`, `fail_closed`),
//! `rl_fallback_total{dimension, source}` and `rl_access_total{list}` (`allow`, `deny`).
//! The dimensions listed in [`RateLimitConfig::hot`] (default `global`) are served from
//! leases ([`redis_rl_client::lease`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use axum::{routing::get, Router};
//! use redis_rl_middleware::{RateLimitConfig, RateLimitLayer, RedisHashTiers};
//! use redis_rl_client::Limiter;
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

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]
#![warn(missing_docs)]

// Without feature `service` (default) only the W3C trace context is here: the Node.js
// addon's, which drives the client's sans-I/O op and has no async stack in its build.
#[cfg(feature = "axum")]
mod axum;
#[cfg(feature = "service")]
mod config;
#[cfg(feature = "service")]
mod counters;
#[cfg(feature = "service")]
mod drive;
#[cfg(feature = "service")]
mod extract;
#[cfg(feature = "service")]
mod headers;
#[cfg(feature = "service")]
mod layer;
#[cfg(feature = "service")]
mod plan;
#[cfg(feature = "service")]
mod request;
#[cfg(feature = "service")]
mod service;
#[cfg(feature = "service")]
mod settle_token;
#[cfg(feature = "service")]
mod settlement;
#[cfg(feature = "service")]
pub mod tier;
#[cfg(feature = "service")]
mod toml_file;
mod trace;

#[cfg(feature = "axum")]
pub use self::axum::{refusal, AxumRequestInfo};
#[cfg(feature = "service")]
pub use config::{
    mode, params_of, policy_of, AccessConfig, Dimension, FailureModeName, FleetSettings,
    LeaseSettings, LimitSpec, Rate, RateLimitConfig, RateLimitConfigExt, RateOverride, Rule,
    TierLimits, Window,
};
#[cfg(feature = "service")]
pub use drive::decided;
#[cfg(feature = "service")]
pub use extract::{client_network, request_id, tenant_id, API_KEY, REQUEST_ID};
#[cfg(feature = "service")]
pub use headers::{to_response, write_headers};
#[cfg(feature = "service")]
pub use layer::RateLimitLayer;
#[cfg(feature = "service")]
pub use redis_rl_policy::{
    escape_key_part, normalize_path, Access, Engine, KeyError, TOP_ENTRIES, TOP_MINUTES,
};
#[cfg(feature = "service")]
pub use request::{Extensions, RequestInfo, RequestView, RoutePattern};
#[cfg(feature = "service")]
pub use service::RateLimitService;
#[cfg(feature = "service")]
pub use settle_token::{SettleTokens, TokenError, DEFAULT_TOKEN_TTL, SETTLE_TOKEN};
#[cfg(feature = "service")]
pub use settlement::{IssueSettleToken, PendingSettle, SettleReport};
#[cfg(feature = "service")]
pub use tier::{RedisHashTiers, StaticTiers, TierResolver};
pub use trace::{TraceContext, TRACEPARENT};
