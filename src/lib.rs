//! redis-rl: rate limiting inside Redis.
//!
//! This file only declares the module. Commands live in `commands/`, the decisions in the
//! `redis-rl-core` crate, the stored bytes in `encoding`, time in `clock`.

// No panics on the FFI path; tests may unwrap and index.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod args;
mod clock;
mod commands;
mod encoding;
mod reply;
mod store;

use commands::{rl_all, rl_refund, rl_sliding, rl_tokenbucket};
use commands::{rl_concurrency, rl_log};
use commands::{rl_fixed, rl_gcra, rl_reset, rl_state, rl_throttle};
use redis_module::redis_module;

// Unit tests run outside redis-server, where Redis's allocator does not exist.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;

redis_module! {
    name: "rl",
    version: 1,
    allocator: (Allocator, Allocator {}),
    data_types: [],
    commands: [
        ["RL.TOKENBUCKET", rl_tokenbucket, "write deny-oom fast", 1, 1, 1, ""],
        ["RL.SLIDING", rl_sliding, "write deny-oom fast", 1, 1, 1, ""],
        ["RL.FIXED", rl_fixed, "write deny-oom fast", 1, 1, 1, ""],
        ["RL.GCRA", rl_gcra, "write deny-oom fast", 1, 1, 1, ""],
        ["RL.THROTTLE", rl_throttle, "write deny-oom fast", 1, 1, 1, ""],
        ["RL.RESET", rl_reset, "write fast", 1, 1, 1, ""],
        ["RL.STATE", rl_state, "readonly fast", 1, 1, 1, ""],
        ["RL.LOG", rl_log, "write deny-oom fast", 1, 1, 1, ""],
        ["RL.CONCURRENCY", rl_concurrency, "write deny-oom fast", 1, 1, 1, ""],
        // Movable keys: declared per call through the getkeys API.
        ["RL.ALL", rl_all, "write deny-oom fast getkeys-api", 0, 0, 0, ""],
        ["RL.REFUND", rl_refund, "write deny-oom fast", 1, 1, 1, ""],
    ],
}
