//! Client for the redis-rl module: the limiter and its layers, the transport, and the
//! fleet features. No HTTP: the tower/axum middleware is the `redis-rl-middleware` crate.
//!
//! The module makes each decision atomically inside Redis; this crate does everything
//! around it that a gateway needs:
//!
//! - [`Limiter`]: typed policies ([`Policy`]: token bucket, sliding window, fixed window,
//!   GCRA, log) and typed [`Decision`]s; `check`, `check_n`, and `check_all` (several
//!   dimensions all-or-nothing: one `RL.ALL` per hash slot, refunds across slots; one key
//!   is its algorithm's own command, as from the Node.js and Python packages;
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
//! # Feature `transport` (default)
//!
//! Everything that does I/O: the async [`Limiter`] and its layers, the transport
//! (connections, timeouts, TLS), fleet membership's heartbeat task, [`bans`] and
//! [`offenders`]. Without it (`default-features = false`) the crate is the sans-I/O op,
//! [`sansio`], and the parts it drives with no I/O: policies, decisions and their reply
//! parsers, the deny cache, the circuit breaker, the failure modes, the local fallback and
//! the lease sizing. It then builds with no tokio, no TLS stack and no async Redis client
//! (`redis` only for its `Value` and the hash slot of a key): the Node.js addon and the
//! Python extension build it so, their host's own Redis client doing the I/O.
//!
//! Dependencies, and why: `redis` (the maintained Rust client: async on tokio, connection
//! manager with reconnects, cluster routing; `Value` and the key slot only without
//! `transport`), `tokio` (runtime, timeouts, paused time in tests; `transport` only),
//! `thiserror` (the error enum), `tracing` (spans), `metrics` (counter facade; the
//! application picks the exporter), `lru` (the bounded deny cache), `hashbrown` (the local
//! fallback's table), `futures-util` (joining concurrent calls; `transport` only).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]
#![warn(missing_docs)]

mod clock;
pub mod error;
pub mod fleet;
pub mod layers;
pub mod limiter;
pub mod sansio;
// Test doubles, built for the tests of crates on this one too (feature `testing`): they
// may unwrap.
#[cfg(all(feature = "transport", any(test, feature = "testing")))]
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
#[cfg(feature = "transport")]
pub use fleet::{bans, offenders};
pub use layers::{decider, deny_cache, failover, fallback, lease};
#[cfg(feature = "transport")]
pub use limiter::booking;
pub use limiter::{decision, policy, settle};
#[cfg(feature = "transport")]
pub use transport::backend;
pub use transport::breaker;

#[cfg(feature = "transport")]
pub use backend::{Backend, Cluster, Standalone, TlsFiles, Unreachable};
pub use breaker::{Breaker, BreakerConfig, BreakerState, BreakerStats};
pub use decider::ServerImpl;
pub use decision::{Decision, Grant, MultiDecision, Source, Verdict};
pub use deny_cache::DenyCache;
pub use error::{Error, Refusal, Result};
pub use fallback::LocalLimiter;
pub use fleet::FleetConfig;
pub use lease::{LeaseConfig, LeaseStats};
pub use limiter::WindowCount;
#[cfg(feature = "transport")]
pub use limiter::{Limiter, LimiterBuilder, LimiterStats, DEFAULT_TIMEOUT};
pub use policy::{FailureMode, Period, Policy};
pub use redis_rl_core::{AnyParams, Kind};
