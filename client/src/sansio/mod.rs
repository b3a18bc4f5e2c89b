//! The limiter's calls without I/O, for hosts that own the connection (the Node.js and
//! Python packages: the application's ioredis, node-redis or redis-py client, on its own
//! event loop).
//!
//! # Why sans-I/O
//!
//! A host that already holds a Redis client (its pool, TLS, reconnects, cluster routing)
//! and an event loop would pay a thread hop per decision if the limiter drove its own
//! connection from Rust. So an [`Op`] is synchronous and does no I/O (the shape of h11): it
//! says which command to send (the module's, or the Lua twin's `EVALSHA`/`EVAL`), is fed
//! the reply (as the `redis` crate's [`redis::Value`]) or the error the host's client got,
//! and ends with an [`Outcome`]. The layers are the async [`crate::Limiter`]'s own parts:
//! policies, reply parsers, the circuit breaker, the deny cache, the failure modes
//! ([`crate::failover::failure_decision`]) and the local fallback. A binding converts
//! arguments and results, nothing more.

mod across;
#[cfg(test)]
mod across_tests;
mod fleet;
mod layers;
#[cfg(test)]
mod lease_tests;
mod leases;
mod op;
#[cfg(test)]
mod tests;
mod wire;

pub use crate::layers::lease::{LeaseConfig, LeaseStats};
pub use across::{AcrossSlots, Schedule};
pub use layers::{Layers, LayersConfig};
pub use op::{unavailable, Op, OpError, Outcome, MAX_ALL_KEYS};
