//! Client for the redis-rl module, and a rate-limit middleware for tower/axum gateways.
//!
//! The module makes each decision atomically inside Redis; this crate does everything
//! around it that a gateway needs:
//!
//! - [`Limiter`]: typed policies ([`Policy`]: token bucket, sliding window, fixed window,
//!   GCRA, log) and typed [`Decision`]s; `check`, `check_n`, and `check_all` (several
//!   dimensions all-or-nothing: one `RL.ALL` per hash slot, refunds across slots;
//!   `check_all_units` gives each key its own cost in the same call);
//!   `take_upto` and `refund` (take a batch of units, as many as are available, and give
//!   back what was not used: the primitive of leases).
//! - Failure handling: a timeout on every call (default 50 ms), a circuit [`Breaker`], a
//!   per-policy [`FailureMode`] (open, closed, or local: the same core algorithms in
//!   process, the limit divided by the live fleet size or the expected number of
//!   instances), and a hot-key [`DenyCache`] so a blocked key's flood costs Redis nothing.
//! - Fleets ([`fleet`], [`lease`]): membership with a heartbeat and the live fleet size;
//!   leases for hot keys (batches taken with `UPTO`, spent in process, the rest refunded).
//! - Tiers as configuration ([`TierConfig`], TOML; free 100/min, pro 1000/min, enterprise
//!   10000/min by default) and [`TierResolver`]s (in memory, or a Redis hash cached locally).
//! - `middleware::RateLimitLayer` (feature `middleware`): a tower layer over
//!   `http::Request<B>` that limits per API key, client IP, endpoint and globally, and
//!   writes the standard headers, 429 problem responses and correlated `tracing` spans;
//!   axum glue (route patterns, peers) with the feature `axum`.
//!
//! The layers inside, each wrapping the next: see [`decider`]. Default features:
//! `middleware`, `axum`, `toml` (TOML tiers); without them the crate compiles no axum,
//! toml, sha2, uuid or ipnet.
//!
//! ```no_run
//! use redis_rl_client::{Limiter, Policy};
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let limiter = Limiter::standalone("redis://127.0.0.1:6379/").unwrap();
//! let free = Policy::token_bucket(100, 100, 60_000).unwrap();
//! let d = limiter.check("api:alice", &free).await;
//! if d.allows() {
//!     println!("{} left", d.remaining);
//! } else {
//!     println!("retry in {:?}", d.retry_after());
//! }
//! # }
//! ```
//!
//! Dependencies, and why: `redis` (the maintained Rust client: async on tokio, connection
//! manager with reconnects, cluster routing), `tokio` (runtime, timeouts, paused time in
//! tests), `http`/`tower-layer`/`tower-service` (the middleware contract of any tower stack;
//! `axum` for its glue), `serde` + `toml`
//! (tier configuration), `thiserror` (the error enum), `tracing` (spans with request id and
//! tenant), `metrics` (counter facade; the application picks the exporter), `lru` (the
//! bounded deny cache), `uuid` (request ids), `sha2` (tenant ids that do not reveal the API
//! key), `ipnet` (trusted proxy CIDRs), `futures-util` (joining concurrent calls),
//! `serde_json` (problem bodies).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]
#![warn(missing_docs)]

pub mod backend;
pub mod bans;
pub mod booking;
pub mod breaker;
mod command;
pub mod decider;
pub mod decision;
mod denials;
pub mod deny_cache;
pub mod error;
pub mod failover;
pub mod fallback;
pub mod fleet;
pub mod lease;
pub mod limiter;
#[cfg(feature = "middleware")]
pub mod middleware;
pub mod offenders;
mod pipelined;
pub mod policy;
mod resp;
pub mod sansio;
pub mod settle;
mod shadow;
mod stack;
#[cfg(test)]
mod testing;
pub mod tier;
#[cfg(feature = "toml")]
mod toml_file;
pub mod transport;

pub use backend::{Backend, Cluster, Standalone, TlsFiles, Unreachable};
pub use breaker::{Breaker, BreakerConfig, BreakerState, BreakerStats};
pub use decider::Engine;
pub use decision::{Decision, Grant, MultiDecision, Source, Verdict};
pub use deny_cache::DenyCache;
pub use error::{Error, Refusal, Result};
pub use fallback::LocalLimiter;
pub use fleet::FleetConfig;
pub use lease::{LeaseConfig, LeaseStats};
pub use limiter::{Limiter, LimiterBuilder, LimiterStats, WindowCount, DEFAULT_TIMEOUT};
pub use policy::{FailureMode, Period, Policy};
pub use redis_rl_core::{AnyParams, Kind};
pub use tier::{Rate, RateOverride, RedisHashTiers, StaticTiers, TierConfig, TierResolver};
