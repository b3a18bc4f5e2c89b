//! `redis-rl` for Node.js: the client's decisions in Rust, the I/O in the application's own
//! Redis client.
//!
//! # Why sans-I/O here
//!
//! A Node service already holds a Redis client (ioredis, node-redis, iovalkey, their cluster
//! classes) with its connection pool, TLS, reconnects and cluster routing. An addon that
//! drove its own connection would resolve each decision's Promise from a Rust I/O thread: a
//! hop between threads per request costs more than the whole difference between this
//! package and a raw command sent by hand. So every call here is synchronous and does no I/O
//! (the shape of h11): an [`op::Op`] says which command to send (the module's, or the Lua
//! twin's `EVALSHA`/`EVAL`), is fed the reply or the error the application's client got,
//! and ends with a decision. What the call means lives in the Rust client, once
//! (`redis_rl_client::sansio`, which the Python package drives too): policies, reply
//! parsers, the circuit breaker, the deny cache, the failure modes and the local fallback
//! (the same core algorithms as the module). This crate converts JavaScript's values; the
//! TypeScript side only moves arguments and replies between the op and the client.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
// Under `cfg(test)` (clippy's --all-targets) napi-derive registers no exports, so the
// functions only JavaScript calls look unused.
#![cfg_attr(test, allow(dead_code))]

mod booking;
mod core;
mod decision;
mod flow;
mod op;
mod policy;
mod query;
mod reply;
mod slots;

pub use crate::core::Core;
pub use op::Op;
pub use policy::Policy;

/// The addon's own allocations (see its `Cargo.toml`): a request's few dozen small ones.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
