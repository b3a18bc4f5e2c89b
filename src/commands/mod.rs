//! Command handlers: parse, read the key, call the core, write the key, reply.
//!
//! No arithmetic lives here; the decisions are made in `redis_rl_core`. Each command file
//! declares its [`Command`]: name, flags, key spec, documentation and handler together. The
//! table [`COMMANDS`] lists them once; registration, `COMMAND DOCS`, ACL categories and the
//! `INFO rl` counters are all generated from it.

mod all;
mod concurrency;
mod fixed_window;
mod gcra;
mod limiter;
mod quota;
mod refund;
mod reset;
mod sliding_log;
mod sliding_window;
mod spec;
mod state;
mod throttle;
mod token_bucket;

use std::ffi::CStr;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{raw, Context, RedisError, RedisString, RedisValue};

use crate::docs::{Keys, Syntax};
use crate::error::Error;
use crate::stats::{self, CommandStats};

/// What a handler did: the reply (already sent when it is `NoReply`) and, for a call that
/// decided something, whether it was allowed (counted in `INFO rl`).
pub struct Handled {
    /// The reply for the dispatcher to send.
    pub reply: RedisValue,
    /// `Some(allowed)` for a decision that counts (not for PEEK, which decides nothing).
    pub decided: Option<bool>,
}

impl Handled {
    /// A reply that decides nothing (RL.STATE, RL.RESET, a PEEK, ...).
    pub const fn reply(reply: RedisValue) -> Self {
        Handled {
            reply,
            decided: None,
        }
    }
}

impl From<RedisValue> for Handled {
    fn from(reply: RedisValue) -> Self {
        Handled::reply(reply)
    }
}

/// A command handler: the arguments as Redis passed them (command name first).
pub type Handler = fn(&Context, &[RedisString]) -> Result<Handled, Error>;

/// One RL.* command: everything the server is told about it, and its handler.
pub struct Command {
    /// The command name.
    pub name: &'static CStr,
    /// Redis command flags (`write deny-oom fast`, ...).
    pub flags: &'static CStr,
    /// ACL categories (`write fast`, ...), where the server has the API.
    pub acl: &'static CStr,
    /// Where the keys are.
    pub keys: Keys,
    /// Redis arity: the argument count with the name, negative for "at least".
    pub arity: c_int,
    /// One line for `COMMAND DOCS`.
    pub summary: &'static CStr,
    /// Time complexity for `COMMAND DOCS`.
    pub complexity: &'static CStr,
    /// The arguments for `COMMAND DOCS`.
    pub syntax: Syntax,
    /// Runs one call.
    pub handler: Handler,
}

/// Flags of a command that takes units from a limiter.
pub const WRITE: &CStr = c"write deny-oom fast";

/// Declares the table: each command's C entry point (Redis gives a callback no user data,
/// so each command needs its own) and its counters, from the list of command files.
macro_rules! table {
    ($( $file:ident ),* $(,)?) => {
        /// Every command of the module, in the order INFO shows them.
        pub static COMMANDS: &[&Command] = &[$( &$file::COMMAND, )*];

        /// Each command's counters, in the order of [`COMMANDS`].
        pub static COUNTERS: &[&CommandStats] = &[$( &counters::$file, )*];

        /// The C entry point of each command, in the order of [`COMMANDS`].
        static ENTRIES: &[EntryPoint] = &[$( entries::$file, )*];

        #[allow(non_upper_case_globals)]
        mod counters {
            use crate::stats::CommandStats;
            $( pub static $file: CommandStats = CommandStats::new(); )*
        }

        mod entries {
            use std::os::raw::c_int;
            use redis_module::raw;
            $(
                pub extern "C" fn $file(
                    ctx: *mut raw::RedisModuleCtx,
                    argv: *mut *mut raw::RedisModuleString,
                    argc: c_int,
                ) -> c_int {
                    super::dispatch(ctx, argv, argc, &super::$file::COMMAND, &super::counters::$file)
                }
            )*
        }
    };
}

table! {
    token_bucket,
    sliding_window,
    fixed_window,
    sliding_log,
    gcra,
    quota,
    throttle,
    concurrency,
    all,
    refund,
    reset,
    state,
}

/// The C entry point Redis calls for one command.
type EntryPoint =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Registers every command; fails (and so fails loading) if the server refuses one.
pub fn register(ctx: &Context) -> Result<(), String> {
    // SAFETY: the API table is filled before init runs.
    let create = unsafe { raw::RedisModule_CreateCommand }
        .ok_or_else(|| "RedisModule_CreateCommand is missing".to_string())?;
    for (command, entry) in COMMANDS.iter().zip(ENTRIES) {
        let (first, last, step) = command.keys.positions();
        // SAFETY: a valid context, NUL-terminated strings and an entry point that lives
        // as long as the module.
        let status = unsafe {
            create(
                ctx.get_raw(),
                command.name.as_ptr(),
                Some(*entry),
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

/// Runs one call: borrows the arguments, runs the handler so that a bug can never unwind
/// into redis-server (a panic becomes an error reply), counts the call and its outcome in
/// `INFO rl`, replies.
///
/// Inlined into each command's entry point, so the handler is a direct call.
#[inline(always)]
fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    command: &Command,
    counters: &CommandStats,
) -> c_int {
    let context = Context::new(ctx);
    crate::replication::begin_call();
    let result = with_args(ctx, argv, argc, |args| {
        catch_unwind(AssertUnwindSafe(|| (command.handler)(&context, args))).unwrap_or(Err(
            Error::Fixed("internal error in redis-rl (a bug: please report it with the command)"),
        ))
    });
    stats::count(counters, result.as_ref().map(|h| h.decided));
    let reply = match result {
        Ok(handled) => handled.reply,
        Err(error) => return context.reply(Err(RedisError::from(error))) as c_int,
    };
    if matches!(reply, RedisValue::NoReply) {
        // The handler replied itself (every limiting command does): nothing left to send,
        // and nothing to drop (`forget` spares the generic drop of a `RedisValue`).
        std::mem::forget(reply);
        return raw::REDISMODULE_OK as c_int;
    }
    context.reply(Ok(reply)) as c_int
}

/// Calls `f` with the call's arguments as `RedisString`s borrowed from Redis, without
/// touching their reference counts or allocating (up to 128 arguments, enough for an RL.ALL
/// of `rl.max-all-keys`' default 16 keys with any specs; more, as a larger RL.ALL may take,
/// use one allocation). Redis keeps them alive for the whole call.
#[inline(always)]
fn with_args<R>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    f: impl FnOnce(&[RedisString]) -> R,
) -> R {
    const ON_STACK: usize = 128;
    let raw_args: &[*mut raw::RedisModuleString] = match usize::try_from(argc) {
        // SAFETY: Redis passes `argc` valid argument pointers in `argv`.
        Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
        _ => &[],
    };
    let borrow = |&p: &*mut raw::RedisModuleString| {
        ManuallyDrop::new(RedisString::from_redis_module_string(ctx, p))
    };
    if raw_args.len() <= ON_STACK {
        // Uninitialised room (nothing to fill for the slots a call does not use).
        let mut buf = [const { MaybeUninit::<ManuallyDrop<RedisString>>::uninit() }; ON_STACK];
        for (slot, p) in buf.iter_mut().zip(raw_args) {
            slot.write(borrow(p));
        }
        // SAFETY: the first `raw_args.len()` slots were written above; `MaybeUninit<T>` and
        // `ManuallyDrop<T>` have the layout of `T` (repr(transparent)), and never dropping
        // means never freeing strings we do not own. The slice is only read.
        f(unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), raw_args.len()) })
    } else {
        let borrowed: Vec<_> = raw_args.iter().map(borrow).collect();
        // SAFETY: same layout (repr(transparent)); the slice is only read.
        f(unsafe { std::slice::from_raw_parts(borrowed.as_ptr().cast(), borrowed.len()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_each_command_once_with_its_entry_point_and_counters() {
        assert_eq!(COMMANDS.len(), ENTRIES.len());
        assert_eq!(COMMANDS.len(), COUNTERS.len());
        for (i, c) in COMMANDS.iter().enumerate() {
            let name = c.name.to_str().unwrap();
            assert!(name.starts_with("RL."), "{name}");
            assert!(COMMANDS[..i].iter().all(|other| other.name != c.name));
        }
    }
}
