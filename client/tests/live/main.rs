//! The client's integration tests against a live server with the module: one test binary,
//! one module per area, so the suite links once. The harness (servers, clusters, waiting) is
//! the `redis-rl-testkit` crate (`testkit/`), shared with the module's and rl-gateway's tests.
//!
//! Adding a test file: put it next to this one as `client/tests/live/<area>.rs` and add
//! `mod <area>;` below. A test that needs a process of its own (a global tracing subscriber,
//! as `middleware/tests/logging.rs`) is a file directly in `tests/` instead. The
//! middleware's tests are `middleware/tests/live`.

mod bans;
mod cluster;
mod connection;
mod costs;
mod denials;
mod fleet;
mod lease;
mod limiter;
mod lua_twin;
mod one_key;
mod quota;
mod tls;
mod upto;
