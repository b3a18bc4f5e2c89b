//! The Lua twin (`lua/rl.lua`): the module's commands as a function library, for servers
//! that cannot load modules (managed Redis and Valkey). Same replies, same stored bytes, so
//! the [`ServerDecider`](super::ServerDecider)'s logic is reused as is: every
//! `RL.<ALG> key args...` it builds is sent as `FCALL rl 1 key RL.<ALG> args...` (and
//! `RL.ALL n keys... rest` as `FCALL rl n keys... RL.ALL rest`), or as `EVALSHA` of the same
//! file where `FUNCTION` is refused (the wire decides which, see `wire.rs`).

use std::sync::OnceLock;

#[cfg(feature = "transport")]
use redis::Cmd;

use crate::error::{Error, Result};
use redis_rl_core::AnyParams;

/// The library's source: `FUNCTION LOAD` it as is, or run it as a script with its first line
/// replaced by `#!lua` ([`script_source`]).
pub const LIBRARY: &str = include_str!("../../../../lua/rl.lua");

/// The function the library registers.
pub const FUNCTION: &str = "rl";

/// The same file as a script (`EVAL`/`SCRIPT LOAD`): the library's shebang names it, which
/// a script may not.
pub fn script_source() -> &'static str {
    static SCRIPT: OnceLock<String> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let body = LIBRARY.split_once('\n').map_or(LIBRARY, |(_, rest)| rest);
        format!("#!lua\n{body}")
    })
}

/// Largest wait (ms) the twin replies exactly: 2^53 - 1 less two maximal durations.
const EXACT_WAIT_MS: u128 = (1 << 53) - 1 - 2 * 1_000_000_000_000;

/// The twin refuses policies whose waits it could not reply exactly (README, "Without the
/// module"); say so before calling.
pub fn check_range(params: &AnyParams) -> Result<()> {
    // The longest wait any call can get is the time to refill the whole quota (a window
    // algorithm's is at most its window, far below the bound).
    let (_, refill_ms) = params.quota();
    if u128::from(refill_ms) > EXACT_WAIT_MS {
        return Err(Error::Config(format!(
            "{} {:?}: a full refill or burst over 2^53 ms is beyond the exact range of the Lua twin; use the module",
            params.kind().command(),
            crate::transport::command::args(params)
        )));
    }
    Ok(())
}

/// Arguments as bytes.
#[cfg(feature = "transport")]
type Words = Vec<Vec<u8>>;

/// `RL.X key args...` / `RL.ALL n keys... rest` -> (keys, [RL.X, args...]).
#[cfg(feature = "transport")]
pub(super) fn split(cmd: &Cmd) -> Option<(Words, Words)> {
    let args: Vec<Vec<u8>> = cmd
        .args_iter()
        .map(|a| match a {
            redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
            redis::Arg::Cursor => None,
        })
        .collect::<Option<_>>()?;
    let (name, rest) = args.split_first()?;
    let (numkeys, rest) = if name.eq_ignore_ascii_case(b"RL.ALL") {
        let (n, after) = rest.split_first()?;
        (std::str::from_utf8(n).ok()?.parse().ok()?, after)
    } else {
        (1, rest)
    };
    let (keys, tail) = rest.split_at_checked(numkeys)?;
    let mut argv = vec![name.clone()];
    argv.extend_from_slice(tail);
    Some((keys.to_vec(), argv))
}

/// A server error's text, lower case (empty for other errors).
#[cfg(feature = "transport")]
pub(super) fn message(e: &Error) -> String {
    match e {
        Error::Redis(r) => r.to_string().to_ascii_lowercase(),
        _ => String::new(),
    }
}

#[cfg(all(test, feature = "transport"))]
mod tests {
    use super::*;
    use crate::limiter::policy::Policy;
    use crate::transport::command;

    fn words(v: &[Vec<u8>]) -> Vec<String> {
        v.iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    #[test]
    fn module_commands_become_twin_calls() {
        let p = Policy::gcra(5, 1_000, Some(3)).unwrap();
        let (keys, argv) = split(&command::single("k", p.params(), 2, true)).unwrap();
        assert_eq!(words(&keys), ["k"]);
        assert_eq!(
            words(&argv),
            ["RL.GCRA", "5", "1000", "BURST", "3", "COST", "2", "PEEK"]
        );
        let s = Policy::sliding(10, 1_000).unwrap();
        let cmd = command::all(&[("a", s.params()), ("b", s.params())], &[1, 1], None);
        let (keys, argv) = split(&cmd).unwrap();
        assert_eq!(words(&keys), ["a", "b"]);
        assert_eq!(
            words(&argv),
            ["RL.ALL", "SLIDING", "10", "1000", "SLIDING", "10", "1000"]
        );
        let (keys, argv) = split(&command::refund("k", s.params(), 3)).unwrap();
        assert_eq!(words(&keys), ["k"]);
        assert_eq!(
            words(&argv),
            ["RL.REFUND", "SLIDING", "10", "1000", "COST", "3"]
        );
    }

    #[test]
    fn the_script_is_the_library_with_a_plain_shebang() {
        assert!(LIBRARY.starts_with("#!lua name=redisrl\n"));
        assert!(script_source().starts_with("#!lua\n--"));
        assert_eq!(script_source().len() + " name=redisrl".len(), LIBRARY.len());
    }

    #[test]
    fn waits_beyond_2_pow_53_ms_are_refused_before_calling() {
        let huge = Policy::token_bucket(1_000_000_000_000_000, 1, 1_000_000_000_000).unwrap();
        assert!(check_range(huge.params()).is_err());
        let fine = Policy::token_bucket(1_000_000, 1, 1_000_000).unwrap();
        assert!(check_range(fine.params()).is_ok());
    }
}
