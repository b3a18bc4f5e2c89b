//! The monotonic clock of the layers' timers (breaker, deny cache, local fallback, leases).
//!
//! With feature `transport`, tokio's `Instant`: the same reading as std's, except under a
//! runtime whose time is paused, which the async layers' tests use to step time without
//! sleeping. Without it (the sans-I/O build of the Node.js addon and the Python extension),
//! std's: no tokio in the build.

#[cfg(not(feature = "transport"))]
pub(crate) use std::time::Instant;
#[cfg(feature = "transport")]
pub(crate) use tokio::time::Instant;
