//! redis-rl: rate limiting inside Redis.
//!
//! This file only declares the module and its configs. Commands live in `commands/` (with
//! the table that registers them), the decisions in the `redis-rl-core` crate, the stored
//! bytes in `encoding`, time in `clock`.

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
    commands: [],
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

/// Registers the commands (with our own C entry points, see `commands`), then attaches
/// command metadata, ACL categories and the INFO section, each only where the server has
/// the API, so the module loads on Redis 7.0 as on newer servers.
fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // Only real writes signal a key as modified (store.rs does it), not reads or denials.
    // SAFETY: the API table is filled before init runs.
    if let Some(set_options) = unsafe { raw::RedisModule_SetModuleOptions } {
        let option = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as std::os::raw::c_int;
        unsafe { set_options(ctx.get_raw(), option) };
    }
    if let Err(e) = commands::register(ctx) {
        ctx.log_warning(&format!("redis-rl: {e}"));
        return Status::Err;
    }
    docs::describe_commands(ctx);
    docs::set_acl_categories(ctx);
    // SAFETY: the API table is filled before init runs; `stats::info` lives forever.
    if let Some(register) = unsafe { raw::RedisModule_RegisterInfoFunc } {
        unsafe { register(ctx.get_raw(), Some(stats::info)) };
    }
    Status::Ok
}
