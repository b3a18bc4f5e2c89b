//! The module's integration tests, against a real server (`$RL_SERVER`, default
//! `redis-server`) with the release build of the module loaded: one test binary, one module
//! per area (ripgrep's layout), so the suite links once instead of once per file. The harness
//! (servers, clusters, command helpers) is the `redis-rl-testkit` crate (`testkit/`), shared
//! with the client's and rl-gateway's tests.
//!
//! Adding a test file: put it next to this one as `tests/it/<area>.rs`, start it with
//! `use redis_rl_testkit::*;` (and `use redis_rl_testkit::ops::*;` for the random mix of
//! calls), and add `mod <area>;` below, in order. `make test` runs it on both servers; by
//! hand: `cargo build --release && cargo test --test it <area>::`. A test that needs a
//! process of its own (a global subscriber, a signal handler) is a file directly in `tests/`
//! instead, with its own binary.

mod all;
mod bad_input;
mod cluster;
mod compact_state;
mod concurrency_leases;
mod config_info;
mod conformance;
mod create_path;
mod fixed_window;
mod force;
mod foreign_data;
mod gcra;
mod golden;
mod hardening;
mod harness;
mod hostile_input;
mod hostile_sizes;
mod hostile_values;
mod luatwin;
mod luatwin_acl;
mod luatwin_commands;
mod luatwin_errors;
mod luatwin_model;
mod operations_memory;
mod operations_module;
mod operations_persistence;
mod operations_replication;
mod quota;
mod replication;
mod replication_mode;
mod reset_state;
mod sliding_log;
mod sliding_window;
mod soak;
mod steady_state;
mod store_paths;
mod throttle;
mod token_bucket;
mod upto;
mod watch;
