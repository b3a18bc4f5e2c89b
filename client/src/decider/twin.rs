//! The wire to the Lua twin (`lua/rl.lua`): the module's commands sent as `FCALL` of its
//! function library, or as `EVALSHA` of the same file as a script where `FUNCTION` is refused,
//! loading it where it is missing. Its own file so that the module decider (which sends
//! through it when it runs on the twin) and the Lua decider (which builds one) both depend on
//! it, and not on each other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use redis::{Cmd, Value};

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
