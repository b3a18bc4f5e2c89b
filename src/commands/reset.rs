//! `RL.RESET key`: deletes a limiter, whatever its algorithm.

use redis_module::{raw, Context, RedisString, RedisValue};

use super::{Command, Handled};
use crate::docs::{key, Keys, Syntax, WRITE_ACL};
use crate::encoding::{self, DecodeError};
use crate::error::Error;
use crate::store;

pub const COMMAND: Command = Command {
    name: c"RL.RESET",
    // Only deletes, so it stays usable when memory is full (like DEL).
    flags: c"write fast",
    acl: WRITE_ACL,
    keys: Keys::First {
        flags: raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
    },
    arity: 2,
    summary: c"Deletes a redis-rl limiter key; refuses keys that are not limiters.",
    complexity: c"O(1)",
    syntax: Syntax::Args(&[key()]),
    handler: run,
};

fn run(ctx: &Context, args: &[RedisString]) -> Result<Handled, Error> {
    let [_, key] = args else {
        return Err(Error::WrongArity);
    };
    // Only the header is looked at (the value may be huge), without changing anything.
    let Some(value) = store::peek(ctx, key, false)? else {
        return Ok(RedisValue::Integer(0).into());
    };
    // Any value with our header goes, even a corrupt or newer-format one: resetting is the
    // way out of a key this module cannot read. Anything else is left untouched.
    if !encoding::is_limiter(&value.bytes) {
        return Err(DecodeError::NotOurs.into());
    }
    store::delete(ctx, key)?;
    Ok(RedisValue::Integer(1).into())
}
