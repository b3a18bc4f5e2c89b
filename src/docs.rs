//! Command metadata for `COMMAND INFO` and `COMMAND DOCS` (summary, arity, key specs and
//! arguments) and ACL categories, attached to every command of the table in `commands`.
//!
//! `RedisModule_SetCommandInfo` exists from Redis 7.0; it is looked up at run time, and on a
//! server without it (or if it refuses the metadata) the commands still work, only without
//! documentation. Redis copies what it is given, so the C structures here are temporary.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::ptr;

use redis_module::{raw, Context};
use redis_rl_core::algorithm::Opt;
use redis_rl_core::limits::Range;

use crate::commands::{Command, COMMANDS};

/// One argument as COMMAND DOCS shows it.
pub struct Arg {
    name: &'static str,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static str>,
    flags: u32,
    sub: &'static [Arg],
}

const fn arg(name: &'static str, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        flags: 0,
        sub: &[],
    }
}

/// The key.
pub const fn key() -> Arg {
    arg(
        "key",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
    )
}

/// An integer.
pub const fn int(name: &'static str) -> Arg {
    arg(
        name,
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    )
}

/// A string.
pub const fn string(name: &'static str) -> Arg {
    arg(
        name,
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    )
}

/// A block of arguments (`ONEOF` or `BLOCK`).
pub const fn group(
    name: &'static str,
    kind: raw::RedisModuleCommandArgType,
    sub: &'static [Arg],
) -> Arg {
    Arg {
        sub,
        ..arg(name, kind)
    }
}

impl Arg {
    /// The same argument, optional.
    pub const fn optional(self) -> Arg {
        Arg {
            flags: self.flags | raw::REDISMODULE_CMD_ARG_OPTIONAL,
            ..self
        }
    }

    /// The same argument, repeated.
    pub const fn multiple(self) -> Arg {
        Arg {
            flags: self.flags | raw::REDISMODULE_CMD_ARG_MULTIPLE,
            ..self
        }
    }

    /// The same argument after the word `token`.
    pub const fn after(self, token: &'static str) -> Arg {
        Arg {
            token: Some(token),
            ..self
        }
    }
}

/// `TOKEN value`, optional.
const fn option(token: &'static str, name: &'static str) -> Arg {
    int(name).after(token).optional()
}

/// `COST n`, optional.
pub const COST: Arg = option("COST", "cost");
/// `COSTS n [n ...]` (RL.ALL: one cost per key), optional.
pub const COSTS: Arg = int("costs").after("COSTS").multiple().optional();
/// `UPTO`, optional.
pub const UPTO: Arg = arg(
    "upto",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
)
.after("UPTO")
.optional();
/// `FORCE`, optional.
pub const FORCE: Arg = arg(
    "force",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
)
.after("FORCE")
.optional();
/// `PEEK`, optional.
pub const PEEK: Arg = arg(
    "peek",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
)
.after("PEEK")
.optional();

/// How the keys of a command are found.
#[derive(Clone, Copy)]
pub enum Keys {
    /// The first argument is the only key, with these key-spec flags.
    First {
        /// `REDISMODULE_CMD_KEY_*` flags.
        flags: u32,
    },
    /// `numkeys key [key ...]`, like EVAL (declared per call through the getkeys API).
    Counted,
}

/// A limiter key that the command reads and may update.
pub const LIMITER_KEY: Keys = Keys::First {
    flags: raw::REDISMODULE_CMD_KEY_RW
        | raw::REDISMODULE_CMD_KEY_ACCESS
        | raw::REDISMODULE_CMD_KEY_UPDATE,
};

impl Keys {
    /// `firstkey, lastkey, step` for `RedisModule_CreateCommand` (0, 0, 0 when keys are
    /// declared through the getkeys API).
    pub const fn positions(self) -> (c_int, c_int, c_int) {
        match self {
            Keys::First { .. } => (1, 1, 1),
            Keys::Counted => (0, 0, 0),
        }
    }
}

/// A command's arguments for COMMAND DOCS.
pub enum Syntax {
    /// As listed.
    Args(&'static [Arg]),
    /// `key`, an algorithm's parameters and options (names from the core registry), then
    /// `[COST n] [UPTO] [FORCE] [PEEK]` (`UPTO` where the algorithm takes it).
    Limiter {
        /// The positional parameters.
        params: &'static [Range],
        /// The options.
        options: &'static [Opt],
        /// Whether `UPTO` is accepted.
        upto: bool,
    },
}

/// Holds the C strings and arrays for one command until Redis has copied them.
#[derive(Default)]
struct Arena {
    strings: Vec<CString>,
    lists: Vec<Vec<raw::RedisModuleCommandArg>>,
}

impl Arena {
    /// A C string for `s` (a name or token of ours: never a NUL byte in it).
    fn c_str(&mut self, s: &str) -> *const std::os::raw::c_char {
        let c = CString::new(s).unwrap_or_default();
        let ptr = c.as_ptr();
        // Moving the CString does not move its heap buffer, so `ptr` stays valid.
        self.strings.push(c);
        ptr
    }

    /// A zero-terminated C array for `args` (and, recursively, their sub-arguments).
    fn args<'a>(
        &mut self,
        args: impl IntoIterator<Item = &'a Arg>,
    ) -> *mut raw::RedisModuleCommandArg {
        let mut list = Vec::new();
        for a in args {
            let entry = raw::RedisModuleCommandArg {
                name: self.c_str(a.name),
                type_: a.kind,
                key_spec_index: if a.kind == raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY
                {
                    0
                } else {
                    -1
                },
                token: a.token.map_or(ptr::null(), |t| self.c_str(t)),
                summary: ptr::null(),
                since: ptr::null(),
                flags: c_int::try_from(a.flags).unwrap_or(0),
                deprecated_since: ptr::null(),
                subargs: if a.sub.is_empty() {
                    ptr::null_mut()
                } else {
                    self.args(a.sub)
                },
                display_text: ptr::null(),
            };
            list.push(entry);
        }
        // SAFETY: an all-zero RedisModuleCommandArg (null pointers, zero ints) is the
        // terminator the API expects.
        list.push(unsafe { std::mem::zeroed() });
        let ptr = list.as_mut_ptr();
        // Moving the Vec into `lists` does not move its heap buffer, so `ptr` stays valid.
        self.lists.push(list);
        ptr
    }

    /// The C array of a command's arguments.
    fn syntax(&mut self, syntax: &Syntax) -> *mut raw::RedisModuleCommandArg {
        match syntax {
            Syntax::Args(args) => self.args(*args),
            Syntax::Limiter {
                params,
                options,
                upto,
            } => {
                let args: Vec<Arg> = std::iter::once(key())
                    .chain(params.iter().map(|r| match r.spelling {
                        // A word (RL.QUOTA's period) is a string to COMMAND DOCS.
                        redis_rl_core::limits::Spelling::Words(_) => string(r.name),
                        _ => int(r.name),
                    }))
                    .chain(options.iter().map(|o| option(o.token, o.range.name)))
                    .chain(std::iter::once(COST))
                    .chain(upto.then_some(UPTO))
                    .chain([FORCE, PEEK])
                    .collect();
                self.args(&args)
            }
        }
    }
}

fn key_specs(keys: Keys) -> [raw::RedisModuleCommandKeySpec; 2] {
    // SAFETY: all-zero is a valid value for this plain C struct (and the terminator).
    let mut spec: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = 1;
    match keys {
        Keys::First { flags } => {
            spec.flags = u64::from(flags);
            spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
            spec.fk.range.lastkey = 0;
            spec.fk.range.keystep = 1;
            spec.fk.range.limit = 0;
        }
        Keys::Counted => {
            spec.flags = u64::from(
                raw::REDISMODULE_CMD_KEY_RW
                    | raw::REDISMODULE_CMD_KEY_ACCESS
                    | raw::REDISMODULE_CMD_KEY_UPDATE,
            );
            spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
            spec.fk.keynum.keynumidx = 0;
            spec.fk.keynum.firstkey = 1;
            spec.fk.keynum.keystep = 1;
        }
    }
    // SAFETY: as above; the zeroed second entry terminates the array.
    [spec, unsafe { std::mem::zeroed() }]
}

/// Calls `attach` with the server's handle of each registered command (a command the
/// server does not know is skipped), and logs a warning naming `what` for each it refuses.
fn for_each_registered(
    ctx: &Context,
    what: &str,
    mut attach: impl FnMut(*mut raw::RedisModuleCommand, &Command) -> c_int,
) {
    // SAFETY: the API table is filled at module load, before init runs.
    let Some(get_command) = (unsafe { raw::RedisModule_GetCommand }) else {
        return;
    };
    for command in COMMANDS {
        // SAFETY: a valid context and a NUL-terminated name; null if not registered.
        let handle = unsafe { get_command(ctx.get_raw(), command.name.as_ptr()) };
        if handle.is_null() {
            continue;
        }
        if attach(handle, command) != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!(
                "redis-rl: the server refused {what} {}",
                command.name.to_string_lossy()
            ));
        }
    }
}

/// Attaches the metadata to every registered RL.* command. Never fails loading: a server
/// without `RedisModule_SetCommandInfo`, or one that refuses the metadata, only logs.
pub fn describe_commands(ctx: &Context) {
    // SAFETY: the API table is filled at module load, before init runs.
    let (Some(_), Some(set_info)) =
        (unsafe { (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) })
    else {
        ctx.log_notice("redis-rl: this server has no SetCommandInfo; COMMAND DOCS will be empty");
        return;
    };
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    for_each_registered(ctx, "the documentation of", |handle, command| {
        let mut arena = Arena::default();
        let mut specs = key_specs(command.keys);
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: command.summary.as_ptr(),
            complexity: command.complexity.as_ptr(),
            since: c"0.1.0".as_ptr(),
            history: ptr::null_mut(),
            tips: ptr::null(),
            arity: command.arity,
            key_specs: specs.as_mut_ptr(),
            args: arena.syntax(&command.syntax),
        };
        // SAFETY: every pointer in `info` is valid until the call returns; Redis copies.
        unsafe { set_info(handle, &info) }
    });
}

/// Puts every RL.* command in its ACL categories (`@write @fast`, RL.STATE in `@read
/// @fast`), so rules such as `-@write` cover them. The API exists from Redis 7.2 and on
/// Valkey; on Redis 7.0 ACL rules must name the commands.
pub fn set_acl_categories(ctx: &Context) {
    // SAFETY: the API table is filled at module load, before init runs.
    let Some(set_categories) = (unsafe { raw::RedisModule_SetCommandACLCategories }) else {
        return;
    };
    for_each_registered(ctx, "ACL categories for", |handle, command| {
        // SAFETY: a registered command handle and a NUL-terminated category list.
        unsafe { set_categories(handle, command.acl.as_ptr()) }
    });
}

/// The categories of a command that writes.
pub const WRITE_ACL: &CStr = c"write fast";
