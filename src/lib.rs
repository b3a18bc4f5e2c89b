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
mod error;
mod replication;
mod reply;
mod stats;
mod store;

use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
use std::os::raw::c_int;

use redis_module::{raw, redis_module, Context, RedisString, Status};

// Unit tests run outside redis-server, where Redis's allocator does not exist.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;

/// The release as `MODULE LIST` shows a module's version, Redis's convention for modules:
/// major * 10000 + minor * 100 + patch (0.1.0 is 100).
const MODULE_VERSION: i32 = decimal(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
    + decimal(env!("CARGO_PKG_VERSION_MINOR")) * 100
    + decimal(env!("CARGO_PKG_VERSION_PATCH"));

/// A version component's digits as a number, at compile time.
const fn decimal(digits: &str) -> i32 {
    let mut rest = digits.as_bytes();
    let mut value = 0;
    while let [digit, tail @ ..] = rest {
        value = value * 10 + (*digit - b'0') as i32;
        rest = tail;
    }
    value
}

redis_module! {
    name: "rl",
    version: MODULE_VERSION,
    allocator: (Allocator, Allocator {}),
    data_types: [],
    init: init,
    commands: [],
}

/// Valkey's `VALKEYMODULE_OPTIONS_SKIP_COMMAND_VALIDATION` (Valkey 8.1+); the bit has
/// another meaning or none on Redis.
const VALKEY_SKIP_COMMAND_VALIDATION: c_int = 1 << 4;
/// Valkey's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (Valkey 9.0+); the bit has
/// another meaning or none on Redis.
const VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// The server this module runs in, from `INFO server`.
struct Server {
    /// `server_name:valkey` (Redis 7.0 has no such field).
    valkey: bool,
    /// `valkey_version` as (major, minor), on Valkey.
    valkey_version: Option<(u32, u32)>,
}

/// The module's options:
/// - only real writes signal a key as modified (store.rs does it), not reads or denials;
/// - safe under `repl-diskless-load swapdb` (async loading): the module keeps no state tied
///   to the keyspace, so commands served from the old dataset while the new one loads
///   read and write plain keys like any other command;
/// - on Valkey, safe under atomic slot migration (`CLUSTER MIGRATESLOTS`, refused while a
///   loaded module does not declare it): a limiter is a plain string key, moved by the
///   slot snapshot like any other, and every write is propagated as a plain command
///   (`SET ... PXAT`, `DEL`), which the server forwards to the target while the slot is
///   exported (a slot export also switches the replication mode to effects, see
///   `replication.rs`);
/// - on Valkey 8.1 and later, no command validation for the commands the module replicates
///   (`SET`, `SETRANGE`, `PEXPIREAT`, `DEL`: always valid; saves a command lookup by name
///   per replicated write).
fn module_options(server: &Server) -> c_int {
    let mut options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int
        | raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD as c_int;
    if server.valkey {
        options |= VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION;
        if server.valkey_version.is_some_and(|v| v >= (8, 1)) {
            options |= VALKEY_SKIP_COMMAND_VALIDATION;
        }
    }
    options
}

/// Reads [`Server`] from `INFO server`.
fn server(ctx: &Context) -> Server {
    let name = server_field(ctx, c"server_name");
    let version = server_field(ctx, c"valkey_version").and_then(|v| {
        let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
        Some((parts.next()??, parts.next()??))
    });
    Server {
        valkey: name.as_deref() == Some("valkey"),
        valkey_version: version,
    }
}

/// A field of `INFO server`, if the server has it.
fn server_field(ctx: &Context, name: &std::ffi::CStr) -> Option<String> {
    // SAFETY: the API table is filled before init runs.
    let (get, field, free) = unsafe {
        (
            raw::RedisModule_GetServerInfo?,
            raw::RedisModule_ServerInfoGetFieldC?,
            raw::RedisModule_FreeServerInfo?,
        )
    };
    // SAFETY: a valid context and NUL-terminated names; the field's text is copied before
    // the info object is freed.
    unsafe {
        let info = get(ctx.get_raw(), c"server".as_ptr());
        if info.is_null() {
            return None;
        }
        let value = field(info, name.as_ptr());
        let text = (!value.is_null()).then(|| {
            std::ffi::CStr::from_ptr(value)
                .to_string_lossy()
                .into_owned()
        });
        free(ctx.get_raw(), info);
        text
    }
}

/// Registers the commands (with our own C entry points, see `commands`), then attaches
/// command metadata, ACL categories and the INFO section, each only where the server has
/// the API, so the module loads on Redis 7.0 as on newer servers.
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    if register_configs(ctx, args) == Status::Err {
        return Status::Err;
    }
    let server = server(ctx);
    // SAFETY: the API table is filled before init runs.
    if let Some(set_options) = unsafe { raw::RedisModule_SetModuleOptions } {
        unsafe { set_options(ctx.get_raw(), module_options(&server)) };
    }
    replication::init(ctx, server.valkey);
    let redis_major = server_field(ctx, c"redis_version")
        .and_then(|v| v.split('.').next().and_then(|m| m.parse::<u32>().ok()));
    store::set_server(
        server.valkey_version.filter(|_| server.valkey),
        redis_major.filter(|_| !server.valkey),
    );
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

/// Checks the load arguments (a bad one stops the load with a log line naming it and its
/// range), then registers the configs with the values they give as defaults, so that
/// `rl.<name>` lines of the server's configuration file still override them, as they would
/// any default.
fn register_configs(ctx: &Context, args: &[RedisString]) -> Status {
    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    let values = match config::load_arguments(&bytes) {
        Ok(values) => values,
        Err(e) => {
            ctx.log_warning(&format!("redis-rl: {e}"));
            return Status::Err;
        }
    };
    for (setting, value) in config::SETTINGS.iter().zip(values) {
        register_i64_configuration(
            ctx,
            setting.name,
            setting.value,
            value.unwrap_or(setting.default),
            setting.min,
            setting.max,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    // SAFETY: the API table is filled before init runs; the configs are registered above.
    if let Some(load_configs) = unsafe { raw::RedisModule_LoadConfigs } {
        if unsafe { load_configs(ctx.get_raw()) } == raw::Status::Err as c_int {
            ctx.log_warning("redis-rl: the server refused an rl.* line of its configuration file");
            return Status::Err;
        }
    }
    Status::Ok
}
