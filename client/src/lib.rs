//! Client for the redis-rl module: the limiter and its layers, the transport, and the
//! fleet features. No HTTP: the tower/axum middleware is the `redis-rl-middleware` crate.
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
//! - Bans and top offenders ([`bans`], [`offenders`]), the steps of the request flow that
//!   write to Redis.
//!
//! The layers inside, each wrapping the next: see [`decider`]. The HTTP middleware (tower
//! layer, axum glue, tiers of API keys, TOML files) is the `redis-rl-middleware` crate,
//! built on this one.
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
//! tests), `thiserror` (the error enum), `tracing` (spans), `metrics` (counter facade; the
//! application picks the exporter), `lru` (the bounded deny cache), `hashbrown` (the local
//! fallback's table), `futures-util` (joining concurrent calls).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]
#![warn(missing_docs)]

pub mod error;
pub mod fleet;
pub mod layers;
pub mod limiter;
pub mod sansio;
// Test doubles, built for the tests of crates on this one too (feature `testing`): they
// may unwrap.
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
#[allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]
pub mod testing;
pub mod transport;

// The modules' paths from before they were grouped by layer, kept for users (the Node
// addon's `breaker::Permit` and `decision::parse_*`, among others).
pub use fleet::{bans, offenders};
pub use layers::{decider, deny_cache, failover, fallback, lease};
pub use limiter::{booking, decision, policy, settle};
pub use transport::{backend, breaker};

pub use backend::{Backend, Cluster, Standalone, TlsFiles, Unreachable};
pub use breaker::{Breaker, BreakerConfig, BreakerState, BreakerStats};
pub use decider::ServerImpl;
pub use decision::{Decision, Grant, MultiDecision, Source, Verdict};
pub use deny_cache::DenyCache;
pub use error::{Error, Refusal, Result};
pub use fallback::LocalLimiter;
pub use fleet::FleetConfig;
pub use lease::{LeaseConfig, LeaseStats};
pub use limiter::{Limiter, LimiterBuilder, LimiterStats, WindowCount, DEFAULT_TIMEOUT};
pub use policy::{FailureMode, Period, Policy};
pub use redis_rl_core::{AnyParams, Kind};
