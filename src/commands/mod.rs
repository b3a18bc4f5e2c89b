//! Command handlers: parse, read the key, call the core, write the key, reply.
//!
//! No arithmetic lives here; the decisions are made in `redis_rl_core`.

mod all;
mod concurrency;
mod fixed_window;
mod gcra;
mod limiter;
mod refund;
mod reset;
mod sliding_log;
mod sliding_window;
mod spec;
mod state;
mod throttle;
mod token_bucket;

use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{raw, Context, RedisError, RedisResult, RedisString};

use crate::stats::{self, CommandStats};

/// A command handler: the arguments as Redis passed them (command name first).
type Handler = fn(&Context, &[RedisString]) -> RedisResult;

/// The C entry point Redis calls for one command.
type EntryPoint =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// One RL.* command as it is registered with the server.
pub struct CommandDef {
    /// The command name.
    pub name: &'static CStr,
    /// Redis command flags.
    pub flags: &'static CStr,
    /// `firstkey, lastkey, step` (0, 0, 0 when keys are declared through the getkeys API).
    pub keys: (c_int, c_int, c_int),
    entry: EntryPoint,
}

/// Declares each command's C entry point (Redis gives a callback no user data, so each
/// command needs its own) and the table [`COMMANDS`] that registers them.
macro_rules! commands {
    ($( $entry:ident: $name:literal, $flags:literal, $keys:expr, $stats:path, $handler:path; )*) => {
        $(
            extern "C" fn $entry(
                ctx: *mut raw::RedisModuleCtx,
                argv: *mut *mut raw::RedisModuleString,
                argc: c_int,
            ) -> c_int {
                dispatch(ctx, argv, argc, &$stats, $handler)
            }
        )*

        /// Every command of the module.
        pub const COMMANDS: &[CommandDef] = &[
            $( CommandDef { name: $name, flags: $flags, keys: $keys, entry: $entry }, )*
        ];
    };
}

const ONE_KEY: (c_int, c_int, c_int) = (1, 1, 1);

commands! {
    rl_tokenbucket: c"RL.TOKENBUCKET", c"write deny-oom fast", ONE_KEY, stats::TOKENBUCKET, token_bucket::run;
    rl_sliding: c"RL.SLIDING", c"write deny-oom fast", ONE_KEY, stats::SLIDING, sliding_window::run;
    rl_fixed: c"RL.FIXED", c"write deny-oom fast", ONE_KEY, stats::FIXED, fixed_window::run;
    rl_gcra: c"RL.GCRA", c"write deny-oom fast", ONE_KEY, stats::GCRA, gcra::run;
    rl_throttle: c"RL.THROTTLE", c"write deny-oom fast", ONE_KEY, stats::THROTTLE, throttle::run;
    rl_log: c"RL.LOG", c"write deny-oom fast", ONE_KEY, stats::LOG, sliding_log::run;
    rl_concurrency: c"RL.CONCURRENCY", c"write deny-oom fast", ONE_KEY, stats::CONCURRENCY, concurrency::run;
    // Movable keys: declared per call through the getkeys API.
    rl_all: c"RL.ALL", c"write deny-oom fast getkeys-api", (0, 0, 0), stats::ALL, all::run;
    rl_refund: c"RL.REFUND", c"write deny-oom fast", ONE_KEY, stats::REFUND, refund::run;
    rl_reset: c"RL.RESET", c"write fast", ONE_KEY, stats::RESET, reset::run;
    rl_state: c"RL.STATE", c"readonly fast", ONE_KEY, stats::STATE, state::run;
}

/// Registers every command; fails (and so fails loading) if the server refuses one.
pub fn register(ctx: &Context) -> Result<(), String> {
    // SAFETY: the API table is filled before init runs.
    let create = unsafe { raw::RedisModule_CreateCommand }
        .ok_or_else(|| "RedisModule_CreateCommand is missing".to_string())?;
    for command in COMMANDS {
        let (first, last, step) = command.keys;
        // SAFETY: a valid context, NUL-terminated strings and an entry point that lives
        // as long as the module.
        let status = unsafe {
            create(
                ctx.get_raw(),
                command.name.as_ptr(),
                Some(command.entry),
                command.flags.as_ptr(),
                first,
                last,
                step,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!(
                "could not register {}",
                command.name.to_string_lossy()
            ));
        }
    }
    Ok(())
}

/// Runs one call: borrows the arguments, counts the call in `INFO rl`, runs the handler so
/// that a bug can never unwind into redis-server (a panic becomes an error reply), replies.
fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    counters: &'static CommandStats,
    handler: Handler,
) -> c_int {
    let context = Context::new(ctx);
    let result = with_args(ctx, argv, argc, |args| {
        stats::count(counters, || {
            catch_unwind(AssertUnwindSafe(|| handler(&context, args))).unwrap_or(Err(
                RedisError::Str(
                    "ERR internal error in redis-rl (a bug: please report it with the command)",
                ),
            ))
        })
    });
    // The crate turns an error text into a C string and would panic (outside our guard) on
    // a NUL byte; no text of ours has one, but never let that reach the server.
    let result = result.map_err(|e| match e {
        RedisError::String(text) if text.contains('\0') => {
            RedisError::String(text.replace('\0', "\\x00"))
        }
        other => other,
    });
    context.reply(result) as c_int
}

/// Calls `f` with the call's arguments as `RedisString`s borrowed from Redis, without
/// touching their reference counts or allocating (up to 16 arguments; more, as RL.ALL may
/// take, use one allocation). Redis keeps them alive for the whole call.
fn with_args<R>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    f: impl FnOnce(&[RedisString]) -> R,
) -> R {
    const ON_STACK: usize = 16;
    let raw_args: &[*mut raw::RedisModuleString] = match usize::try_from(argc) {
        // SAFETY: Redis passes `argc` valid argument pointers in `argv`.
        Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
        _ => &[],
    };
    let borrow = |&p: &*mut raw::RedisModuleString| {
        ManuallyDrop::new(RedisString::from_redis_module_string(ctx, p))
    };
    // `ManuallyDrop<T>` has the layout of `T`, and never dropping means never freeing
    // strings we do not own.
    let as_strings = |borrowed: &[ManuallyDrop<RedisString>]| -> &[RedisString] {
        // SAFETY: same layout (repr(transparent)); the slice is only read.
        unsafe { std::slice::from_raw_parts(borrowed.as_ptr().cast(), borrowed.len()) }
    };
    if raw_args.len() <= ON_STACK {
        let mut buf: [ManuallyDrop<RedisString>; ON_STACK] = std::array::from_fn(|_| {
            ManuallyDrop::new(RedisString::from_redis_module_string(
                ctx,
                std::ptr::null_mut(),
            ))
        });
        for (slot, p) in buf.iter_mut().zip(raw_args) {
            *slot = borrow(p);
        }
        f(as_strings(buf.get(..raw_args.len()).unwrap_or(&[])))
    } else {
        let borrowed: Vec<_> = raw_args.iter().map(borrow).collect();
        f(as_strings(&borrowed))
    }
}
