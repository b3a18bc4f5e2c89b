//! Pure rate-limiting algorithms for redis-rl.
//!
//! Every limiter here is a function `(state, now, params, cost) -> (decision, new state)`:
//! no Redis types, no I/O and no clock reads, so the Redis module and the client's local
//! fallback make the same decisions from the same inputs, and tests can drive time by hand.
//!
//! All arithmetic is integer (`u64`/`u128`): fractions of a token accrue exactly and nothing
//! drifts however many calls are made.

// No panics on the FFI path; tests may unwrap and index.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod algorithm;
pub mod calendar;
pub mod concurrency;
pub mod decision;
pub mod export;
pub mod fixed_window;
pub mod gcra;
pub mod limits;
#[cfg(test)]
mod promises;
pub mod quota;
pub mod rate;
pub mod registry;
#[cfg(test)]
mod scenario;
pub mod sliding_log;
pub mod sliding_window;
pub mod source;
pub mod throttle;
pub mod time;
pub mod token_bucket;
pub mod window;

pub use algorithm::{Algorithm, RateLimiter};
pub use decision::{Decision, Outcome};
pub use limits::ParamError;
pub use rate::{ConfigRate, Numbers, RateField, Share};
pub use registry::{AnyParams, AnyState, Kind};
pub use source::Source;
pub use time::{Micros, Millis};
