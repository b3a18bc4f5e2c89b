//! Decisions without the module: the Lua twin (`lua/rl.lua`), the module's commands as a
//! function library, for servers that cannot load modules (managed Redis and Valkey).
//!
//! Same replies, same stored bytes, so the module's decider logic is reused as is: every
//! `RL.<ALG> key args...` it builds is sent as `FCALL rl 1 key RL.<ALG> args...` (and
//! `RL.ALL n keys... rest` as `FCALL rl n keys... RL.ALL rest`). On a server that does not
//! have the library yet (`Function not found`), it is loaded there (`FUNCTION LOAD REPLACE`)
//! and the call is retried once. Where `FUNCTION` is refused (renamed, ACL), the same file
//! runs as a script: `EVALSHA`, loaded with `SCRIPT LOAD` on `NOSCRIPT` and retried once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use redis::{Cmd, Value};

use super::module::ModuleDecider;
use super::{Check, Decided, Decider, Items};
use crate::decision::{Decision, Grant, MultiDecision};
use crate::error::{Error, Result};
use crate::transport::{is_unknown_command, Transport};
use redis_rl_core::AnyParams;

/// The library's source: `FUNCTION LOAD` it as is, or run it as a script with its first line
/// replaced by `#!lua` ([`script_source`]).
pub const LIBRARY: &str = include_str!("../../../lua/rl.lua");

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
            crate::command::args(params)
        )));
    }
    Ok(())
}

/// Sends module commands as calls of the Lua twin, loading it where it is missing.
#[derive(Debug, Default)]
pub(crate) struct Twin {
    /// FUNCTION was refused once: use the script from then on.
    script_mode: AtomicBool,
    /// The script's SHA1 once `SCRIPT LOAD` told it.
    sha: Mutex<Option<String>>,
}

/// Arguments as bytes.
type Words = Vec<Vec<u8>>;

/// `RL.X key args...` / `RL.ALL n keys... rest` -> (keys, [RL.X, args...]).
fn split(cmd: &Cmd) -> Option<(Words, Words)> {
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

fn message(e: &Error) -> String {
    match e {
        Error::Redis(r) => r.to_string().to_ascii_lowercase(),
        _ => String::new(),
    }
}

impl Twin {
    /// Runs the module command `cmd` through the twin.
    pub(crate) async fn call(
        &self,
        transport: &Transport,
        cmd: &Cmd,
        slot: Option<u16>,
    ) -> Result<Value> {
        let Some((keys, argv)) = split(cmd) else {
            return Err(Error::Reply {
                command: "FCALL",
                detail: "not a command the Lua twin runs".to_string(),
            });
        };
        if !self.script_mode.load(Ordering::Relaxed) {
            let mut fcall = redis::cmd("FCALL");
            fcall.arg(FUNCTION).arg(keys.len()).arg(&keys).arg(&argv);
            match transport.call(&fcall, slot).await {
                Err(e) if message(&e).contains("function not found") => {
                    let mut load = redis::cmd("FUNCTION");
                    load.arg("LOAD").arg("REPLACE").arg(LIBRARY);
                    match transport.call(&load, slot).await {
                        Ok(_) => {
                            tracing::info!("loaded the redis-rl Lua twin (FUNCTION LOAD)");
                            return transport.call(&fcall, slot).await;
                        }
                        Err(e) if e.is_outage() => return Err(e),
                        Err(e) => {
                            tracing::warn!(error = %e, "FUNCTION LOAD refused: running the Lua twin as a script");
                            self.script_mode.store(true, Ordering::Relaxed);
                        }
                    }
                }
                Err(e) if is_unknown_command(&e) => {
                    tracing::warn!(error = %e, "FCALL unavailable: running the Lua twin as a script");
                    self.script_mode.store(true, Ordering::Relaxed);
                }
                other => return other,
            }
        }
        self.evalsha(transport, &keys, &argv, slot).await
    }

    async fn evalsha(
        &self,
        transport: &Transport,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        slot: Option<u16>,
    ) -> Result<Value> {
        let known = self.sha.lock().ok().and_then(|s| s.clone());
        let sha = match known {
            Some(sha) => sha,
            None => self.load_script(transport, slot).await?,
        };
        let evalsha = |sha: &str| {
            let mut c = redis::cmd("EVALSHA");
            c.arg(sha).arg(keys.len()).arg(keys).arg(argv);
            c
        };
        match transport.call(&evalsha(&sha), slot).await {
            Err(Error::Redis(e)) if e.kind() == redis::ErrorKind::NoScriptError => {
                let sha = self.load_script(transport, slot).await?;
                transport.call(&evalsha(&sha), slot).await
            }
            other => other,
        }
    }

    async fn load_script(&self, transport: &Transport, slot: Option<u16>) -> Result<String> {
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(script_source());
        let sha = match transport.call(&load, slot).await? {
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            Value::SimpleString(s) => s,
            other => {
                return Err(Error::Reply {
                    command: "SCRIPT LOAD",
                    detail: format!("{other:?}"),
                })
            }
        };
        if let Ok(mut known) = self.sha.lock() {
            *known = Some(sha.clone());
        }
        Ok(sha)
    }
}

/// Decisions through the Lua twin: the [`ModuleDecider`]'s logic (RL.ALL per slot, refunds
/// across slots) with every command sent to the twin.
#[derive(Debug)]
pub struct LuaDecider {
    inner: ModuleDecider,
}

impl LuaDecider {
    /// The twin over `transport`.
    pub fn new(transport: Arc<Transport>) -> Self {
        Self {
            inner: ModuleDecider::through_twin(transport, Arc::new(Twin::default())),
        }
    }
}

impl Decider for LuaDecider {
    fn check<'a>(&'a self, call: Check<'a>) -> Decided<'a, Decision> {
        Box::pin(async move {
            check_range(call.algorithm)?;
            self.inner.check(call).await
        })
    }

    fn check_all<'a>(&'a self, items: Items<'a>, cost: u64) -> Decided<'a, MultiDecision> {
        Box::pin(async move {
            for (_, algorithm) in items {
                check_range(algorithm)?;
            }
            self.inner.check_all(items, cost).await
        })
    }

    fn take_upto<'a>(&'a self, call: Check<'a>) -> Decided<'a, Grant> {
        Box::pin(async move {
            check_range(call.algorithm)?;
            self.inner.take_upto(call).await
        })
    }

    fn refund<'a>(
        &'a self,
        key: &'a str,
        algorithm: &'a AnyParams,
        amount: u64,
    ) -> Decided<'a, u64> {
        Box::pin(async move {
            check_range(algorithm)?;
            self.inner.refund(key, algorithm, amount).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command;
    use crate::policy::Policy;

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
        let cmd = command::all(&[("a", s.params()), ("b", s.params())], 1, false);
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
