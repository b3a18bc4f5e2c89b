//! Command metadata for `COMMAND INFO` and `COMMAND DOCS`: summary, arity, key specs and
//! arguments of every RL.* command.
//!
//! `RedisModule_SetCommandInfo` exists from Redis 7.0; it is looked up at run time, and on a
//! server without it (or if it refuses the metadata) the commands still work, only without
//! documentation. Redis copies what it is given, so the C structures here are temporary.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;

use redis_module::{raw, Context};

/// One argument as COMMAND DOCS shows it.
struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    flags: u32,
    sub: &'static [Arg],
}

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        flags: 0,
        sub: &[],
    }
}

const fn key() -> Arg {
    arg(
        c"key",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
    )
}

const fn int(name: &'static CStr) -> Arg {
    arg(
        name,
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    )
}

const fn string(name: &'static CStr) -> Arg {
    arg(
        name,
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    )
}

/// `TOKEN value`, optional.
const fn option(token: &'static CStr, name: &'static CStr) -> Arg {
    Arg {
        token: Some(token),
        flags: raw::REDISMODULE_CMD_ARG_OPTIONAL,
        ..int(name)
    }
}

/// A bare optional flag such as `PEEK`.
const fn flag(token: &'static CStr, name: &'static CStr) -> Arg {
    Arg {
        token: Some(token),
        flags: raw::REDISMODULE_CMD_ARG_OPTIONAL,
        ..arg(
            name,
            raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
        )
    }
}

const COST: Arg = option(c"COST", c"cost");
const PEEK: Arg = flag(c"PEEK", c"peek");

/// How the keys of a command are found.
#[derive(Clone, Copy)]
enum Keys {
    /// The first argument is the only key.
    First { flags: u32 },
    /// `numkeys key [key ...]`, like EVAL.
    Counted,
}

struct Command {
    name: &'static CStr,
    summary: &'static CStr,
    complexity: &'static CStr,
    arity: c_int,
    keys: Keys,
    args: &'static [Arg],
}

const LIMITER_KEY: Keys = Keys::First {
    flags: raw::REDISMODULE_CMD_KEY_RW
        | raw::REDISMODULE_CMD_KEY_ACCESS
        | raw::REDISMODULE_CMD_KEY_UPDATE,
};

const LIMIT_WINDOW: &[Arg] = &[key(), int(c"limit"), int(c"window_ms"), COST, PEEK];

const COMMANDS: &[Command] = &[
    Command {
        name: c"RL.TOKENBUCKET",
        summary: c"Takes tokens from a token bucket that refills continuously; replies allowed, limit, remaining, retry_after_ms, reset_after_ms.",
        complexity: c"O(1)",
        arity: -5,
        keys: LIMITER_KEY,
        args: &[
            key(),
            int(c"capacity"),
            int(c"refill_tokens"),
            int(c"refill_ms"),
            COST,
            PEEK,
        ],
    },
    Command {
        name: c"RL.SLIDING",
        summary: c"Counts a request in a sliding window counter (previous window weighted); replies allowed, limit, remaining, retry_after_ms, reset_after_ms.",
        complexity: c"O(1)",
        arity: -4,
        keys: LIMITER_KEY,
        args: LIMIT_WINDOW,
    },
    Command {
        name: c"RL.FIXED",
        summary: c"Counts a request in a fixed window aligned to the epoch; replies allowed, limit, remaining, retry_after_ms, reset_after_ms.",
        complexity: c"O(1)",
        arity: -4,
        keys: LIMITER_KEY,
        args: LIMIT_WINDOW,
    },
    Command {
        name: c"RL.LOG",
        summary: c"Exact sliding window log of admitted units; replies allowed, limit, remaining, retry_after_ms, reset_after_ms.",
        complexity: c"O(N) where N is the number of entries in the window (at most limit)",
        arity: -4,
        keys: LIMITER_KEY,
        args: LIMIT_WINDOW,
    },
    Command {
        name: c"RL.GCRA",
        summary: c"Generic cell rate algorithm (one stored timestamp); replies allowed, limit, remaining, retry_after_ms, reset_after_ms.",
        complexity: c"O(1)",
        arity: -4,
        keys: LIMITER_KEY,
        args: &[
            key(),
            int(c"limit"),
            int(c"period_ms"),
            option(c"BURST", c"burst"),
            COST,
            PEEK,
        ],
    },
    Command {
        name: c"RL.THROTTLE",
        summary: c"redis-cell CL.THROTTLE compatible GCRA; replies limited, limit, remaining, retry_after_s, reset_after_s.",
        complexity: c"O(1)",
        arity: -5,
        keys: LIMITER_KEY,
        args: &[
            key(),
            int(c"max_burst"),
            int(c"count"),
            int(c"period_s"),
            Arg {
                flags: raw::REDISMODULE_CMD_ARG_OPTIONAL,
                ..int(c"quantity")
            },
        ],
    },
    Command {
        name: c"RL.CONCURRENCY",
        summary: c"Acquires or releases a lease in a concurrency limiter (leases expire after lease_ms).",
        complexity: c"O(N) where N is the number of leases held (at most limit)",
        arity: -4,
        keys: LIMITER_KEY,
        args: &[
            key(),
            Arg {
                sub: &[
                    Arg {
                        sub: &[
                            int(c"limit"),
                            int(c"lease_ms"),
                            Arg {
                                token: Some(c"ACQUIRE"),
                                ..string(c"id")
                            },
                            PEEK,
                        ],
                        ..arg(c"acquire", raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK)
                    },
                    Arg {
                        token: Some(c"RELEASE"),
                        ..string(c"release-id")
                    },
                ],
                ..arg(c"operation", raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF)
            },
        ],
    },
    Command {
        name: c"RL.ALL",
        summary: c"Checks one request against several limiters, all or nothing; replies allowed, denied_index and each key's limit, remaining, retry_after_ms, reset_after_ms.",
        complexity: c"O(N) where N is the number of keys",
        arity: -4,
        keys: Keys::Counted,
        args: &[
            int(c"numkeys"),
            Arg {
                flags: raw::REDISMODULE_CMD_ARG_MULTIPLE,
                ..key()
            },
            Arg {
                flags: raw::REDISMODULE_CMD_ARG_MULTIPLE,
                ..string(c"spec")
            },
            COST,
            PEEK,
        ],
    },
    Command {
        name: c"RL.REFUND",
        summary: c"Gives back units taken earlier by the same limiter spec (best effort); replies refunded, limit, remaining, 0, reset_after_ms.",
        complexity: c"O(1), O(N) for LOG",
        arity: -5,
        keys: LIMITER_KEY,
        args: &[
            key(),
            Arg {
                flags: raw::REDISMODULE_CMD_ARG_MULTIPLE,
                ..string(c"spec")
            },
            Arg {
                token: Some(c"COST"),
                ..int(c"cost")
            },
        ],
    },
    Command {
        name: c"RL.RESET",
        summary: c"Deletes a redis-rl limiter key; refuses keys that are not limiters.",
        complexity: c"O(1)",
        arity: 2,
        keys: Keys::First {
            flags: raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
        },
        args: &[key()],
    },
    Command {
        name: c"RL.STATE",
        summary: c"Shows a limiter's algorithm, stored parameters, current count or tokens and TTL, without writing.",
        complexity: c"O(1), O(N) for LOG and CONCURRENCY",
        arity: 2,
        keys: Keys::First {
            flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        },
        args: &[key()],
    },
];

/// Holds the C arrays for one command until Redis has copied them.
#[derive(Default)]
struct Arena {
    lists: Vec<Vec<raw::RedisModuleCommandArg>>,
}

impl Arena {
    /// A zero-terminated C array for `args` (and, recursively, their sub-arguments).
    fn args(&mut self, args: &[Arg]) -> *mut raw::RedisModuleCommandArg {
        let mut list: Vec<raw::RedisModuleCommandArg> = args
            .iter()
            .map(|a| raw::RedisModuleCommandArg {
                name: a.name.as_ptr(),
                type_: a.kind,
                key_spec_index: if a.kind == raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY
                {
                    0
                } else {
                    -1
                },
                token: a.token.map_or(ptr::null(), CStr::as_ptr),
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
            })
            .collect();
        // SAFETY: an all-zero RedisModuleCommandArg (null pointers, zero ints) is the
        // terminator the API expects.
        list.push(unsafe { std::mem::zeroed() });
        let ptr = list.as_mut_ptr();
        // Moving the Vec into `lists` does not move its heap buffer, so `ptr` stays valid.
        self.lists.push(list);
        ptr
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

/// Attaches the metadata to every registered RL.* command. Never fails loading: a server
/// without `RedisModule_SetCommandInfo`, or one that refuses the metadata, only logs.
pub fn describe_commands(ctx: &Context) {
    // SAFETY: the API table is filled at module load, before init runs.
    let (Some(get_command), Some(set_info)) =
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
    for command in COMMANDS {
        // SAFETY: a valid context and a NUL-terminated name; null if not registered.
        let handle = unsafe { get_command(ctx.get_raw(), command.name.as_ptr()) };
        if handle.is_null() {
            continue;
        }
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
            args: arena.args(command.args),
        };
        // SAFETY: every pointer in `info` is valid until the call returns; Redis copies.
        if unsafe { set_info(handle, &info) } != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!(
                "redis-rl: the server refused the documentation of {}",
                command.name.to_string_lossy()
            ));
        }
    }
}

/// Puts every RL.* command in the standard ACL categories (`@write @fast`, RL.STATE in
/// `@read @fast`), so rules such as `-@write` cover them. The API exists from Redis 7.2 and
/// on Valkey; on Redis 7.0 ACL rules must name the commands.
pub fn set_acl_categories(ctx: &Context) {
    // SAFETY: the API table is filled at module load, before init runs.
    let (Some(get_command), Some(set_categories)) = (unsafe {
        (
            raw::RedisModule_GetCommand,
            raw::RedisModule_SetCommandACLCategories,
        )
    }) else {
        return;
    };
    for command in COMMANDS {
        let read_only = matches!(command.keys, Keys::First { flags } if flags & raw::REDISMODULE_CMD_KEY_RO != 0);
        let categories = if read_only {
            c"read fast"
        } else {
            c"write fast"
        };
        // SAFETY: a valid context and NUL-terminated strings; null if not registered.
        let handle = unsafe { get_command(ctx.get_raw(), command.name.as_ptr()) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: a registered command handle and a NUL-terminated category list.
        if unsafe { set_categories(handle, categories.as_ptr()) } != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!(
                "redis-rl: the server refused ACL categories for {}",
                command.name.to_string_lossy()
            ));
        }
    }
}
