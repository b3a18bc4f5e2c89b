//! The middleware's integration tests against a live server with the module: one test
//! binary, one module per area, so the suite links once. The harness (servers, clusters,
//! waiting) is the `redis-rl-testkit` crate (`testkit/`), shared with the module's, the
//! client's and rl-gateway's tests.
//!
//! Adding a test file: put it next to this one as `middleware/tests/live/<area>.rs` and add
//! `mod <area>;` below. A test that needs a process of its own (a global tracing subscriber,
//! as `middleware/tests/logging.rs`) is a file directly in `middleware/tests/` instead.

mod middleware;
mod policy;
mod settle;
mod tiers;
