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
mod config;
mod docs;
mod encoding;
mod reply;
mod stats;
mod store;

use commands::{rl_all, rl_refund, rl_sliding, rl_tokenbucket};
use commands::{rl_concurrency, rl_log};
use commands::{rl_fixed, rl_gcra, rl_reset, rl_state, rl_throttle};
use redis_module::configuration::ConfigurationFlags;
use redis_module::{raw, redis_module, Context, RedisString, Status};

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
    init: init,
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
    configurations: [
        i64: [
            ["max-cost", &config::MAX_COST, config::MAX_COST_CEILING, 0, config::MAX_COST_CEILING, ConfigurationFlags::DEFAULT, None],
            ["max-all-keys", &config::MAX_ALL_KEYS, 16, 1, config::MAX_ALL_KEYS_CEILING, ConfigurationFlags::DEFAULT, None],
            ["max-log-entries", &config::MAX_LOG_ENTRIES, config::MAX_LOG_ENTRIES_CEILING, 1, config::MAX_LOG_ENTRIES_CEILING, ConfigurationFlags::DEFAULT, None],
            ["ttl-slack-ms", &config::TTL_SLACK_MS, 1_000, 0, config::TTL_SLACK_CEILING, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: true,
    ]
}

/// Command metadata, ACL categories and the INFO section: each attached only where the
/// server has the API, so the module loads on Redis 7.0 as on newer servers.
fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    docs::describe_commands(ctx);
    docs::set_acl_categories(ctx);
    // SAFETY: the API table is filled before init runs; `stats::info` lives forever.
    if let Some(register) = unsafe { raw::RedisModule_RegisterInfoFunc } {
        unsafe { register(ctx.get_raw(), Some(stats::info)) };
    }
    Status::Ok
}
