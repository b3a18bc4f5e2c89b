//! The wire: how the module's commands reach the server. As commands where the module is
//! loaded; where it is not (managed Redis and Valkey), to the Lua twin (`lua/rl.lua`, same
//! replies, same stored bytes) as a call of its function library (`FCALL`), or, where
//! `FUNCTION` is refused (renamed, ACL), as a script (`EVALSHA`). The choice is made once, on
//! first use, like RL.ALL's, and made again when the module's commands disappear.

// Without feature `transport` only [`ServerImpl`] is here (the sans-I/O op's choice).
#[cfg(feature = "transport")]
use {
    super::lua::{self, LIBRARY},
    crate::error::{Error, Result},
    crate::transport::{is_unknown_command, Transport},
    redis::{Cmd, Value},
    std::sync::atomic::{AtomicU8, Ordering},
    std::sync::Mutex,
};

/// Which implementation decides on the server: the module's commands or the Lua twin.
///
/// (Not the policy engine, `redis_rl_policy::Engine`, which decides what a request is
/// limited on; rl-gateway's `--engine` flag keeps its name.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServerImpl {
    /// The module where its commands exist, else the Lua twin (asked once with
    /// `COMMAND INFO RL.TOKENBUCKET`, and again if the module's commands disappear).
    #[default]
    Auto,
    /// Always the module's commands.
    Module,
    /// Always the Lua twin (`lua/rl.lua`): for servers that cannot load modules.
    Lua,
}

impl std::str::FromStr for ServerImpl {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(ServerImpl::Auto),
            "module" => Ok(ServerImpl::Module),
            "lua" => Ok(ServerImpl::Lua),
            other => Err(format!("engine '{other}': expected auto, module or lua")),
        }
    }
}

/// The way a command is sent.
#[cfg(feature = "transport")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The module's command as is.
    Command,
    /// `FCALL` of the twin's function library.
    Function,
    /// `EVALSHA` of the twin as a script.
    Script,
}

#[cfg(feature = "transport")]
const UNKNOWN: u8 = 0;
#[cfg(feature = "transport")]
const COMMAND: u8 = 1;
#[cfg(feature = "transport")]
const FUNCTION: u8 = 2;
#[cfg(feature = "transport")]
const SCRIPT: u8 = 3;

/// The wire in use, chosen by [`ServerImpl`] and by what the server accepts.
#[cfg(feature = "transport")]
#[derive(Debug)]
pub(crate) struct Wire {
    server_impl: ServerImpl,
    chosen: AtomicU8,
    /// The script's SHA1 once `SCRIPT LOAD` told it.
    sha: Mutex<Option<String>>,
}

#[cfg(feature = "transport")]
impl Wire {
    pub(crate) fn new(server_impl: ServerImpl) -> Self {
        let chosen = match server_impl {
            ServerImpl::Auto => UNKNOWN,
            ServerImpl::Module => COMMAND,
            ServerImpl::Lua => FUNCTION,
        };
        Self {
            server_impl,
            chosen: AtomicU8::new(chosen),
            sha: Mutex::new(None),
        }
    }

    /// The route to use: asks the server on first use (an error leaves it unknown, so the
    /// next call asks again).
    pub(crate) async fn route(&self, transport: &Transport) -> Result<Route> {
        match self.chosen.load(Ordering::Relaxed) {
            COMMAND => return Ok(Route::Command),
            FUNCTION => return Ok(Route::Function),
            SCRIPT => return Ok(Route::Script),
            _ => {}
        }
        let mut info = redis::cmd("COMMAND");
        info.arg("INFO").arg("RL.TOKENBUCKET");
        let v = transport.call(&info, None).await?;
        let has_module = matches!(&v, Value::Array(items) if items.first().is_some_and(|i| !matches!(i, Value::Nil)));
        tracing::info!(
            "redis-rl: deciding with the {}",
            if has_module {
                "module"
            } else {
                "Lua twin (no module on the server)"
            }
        );
        let (chosen, route) = if has_module {
            (COMMAND, Route::Command)
        } else {
            (FUNCTION, Route::Function)
        };
        self.chosen.store(chosen, Ordering::Relaxed);
        Ok(route)
    }

    /// Sends the module command `cmd` by `route`.
    pub(crate) async fn send(
        &self,
        transport: &Transport,
        route: Route,
        cmd: &Cmd,
        slot: Option<u16>,
    ) -> Result<Value> {
        if route == Route::Command {
            let sent = transport.call(cmd, slot).await;
            if let Err(e) = &sent {
                // In auto mode, a module that answers "unknown command" was unloaded: ask
                // again next time.
                if self.server_impl == ServerImpl::Auto && is_unknown_command(e) {
                    self.chosen.store(UNKNOWN, Ordering::Relaxed);
                }
            }
            return sent;
        }
        let Some((keys, argv)) = lua::split(cmd) else {
            return Err(Error::Reply {
                command: "FCALL",
                detail: "not a command the Lua twin runs".to_string(),
            });
        };
        if route == Route::Function && self.chosen.load(Ordering::Relaxed) != SCRIPT {
            if let Some(answer) = self.fcall(transport, &keys, &argv, slot).await {
                return answer;
            }
        }
        self.evalsha(transport, &keys, &argv, slot).await
    }

    /// `FCALL`, loading the library where it is missing. `None`: `FUNCTION` is refused here,
    /// use the script (from now on).
    async fn fcall(
        &self,
        transport: &Transport,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        slot: Option<u16>,
    ) -> Option<Result<Value>> {
        let mut fcall = redis::cmd("FCALL");
        fcall.arg(lua::FUNCTION).arg(keys.len()).arg(keys).arg(argv);
        match transport.call(&fcall, slot).await {
            Err(e) if lua::message(&e).contains("function not found") => {
                let mut load = redis::cmd("FUNCTION");
                load.arg("LOAD").arg("REPLACE").arg(LIBRARY);
                match transport.call(&load, slot).await {
                    Ok(_) => {
                        tracing::info!("loaded the redis-rl Lua twin (FUNCTION LOAD)");
                        return Some(transport.call(&fcall, slot).await);
                    }
                    Err(e) if e.is_outage() => return Some(Err(e)),
                    Err(e) => {
                        tracing::warn!(error = %e, "FUNCTION LOAD refused: running the Lua twin as a script");
                    }
                }
            }
            Err(e) if is_unknown_command(&e) => {
                tracing::warn!(error = %e, "FCALL unavailable: running the Lua twin as a script");
            }
            other => return Some(other),
        }
        self.chosen.store(SCRIPT, Ordering::Relaxed);
        None
    }

    /// `EVALSHA`, loading the script where the server does not have it (`NOSCRIPT`).
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
        load.arg("LOAD").arg(lua::script_source());
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

#[cfg(all(test, feature = "transport"))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use redis::Value;

    use super::ServerImpl;
    use crate::limiter::decision::Source;
    use crate::limiter::policy::Policy;
    use crate::testing::*;
    use crate::Limiter;

    fn auto(mock: &Arc<Mock>) -> Limiter {
        Limiter::builder()
            .server_impl(ServerImpl::Auto)
            .backend(mock.clone())
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_module_the_twin_runs_as_a_function_else_as_a_script() {
        let mock = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => Value::Array(vec![Value::Nil]),
            "FCALL" => Value::SimpleString("-ERR unknown command 'FCALL'".into()),
            "SCRIPT" => Value::BulkString(b"0123abcd".to_vec()),
            "EVALSHA" => allow(),
            _ => Value::Nil,
        });
        let l = auto(&mock);
        let p = Policy::sliding(10, 1_000).unwrap();
        let d = l.check("k", &p).await;
        assert_eq!((d.allows(), d.source), (true, Source::Redis));
        assert_eq!(mock.names(), ["COMMAND", "FCALL", "SCRIPT", "EVALSHA"]);
        assert_eq!(
            mock.commands()[3],
            ["EVALSHA", "0123abcd", "1", "k", "RL.SLIDING", "10", "1000"]
        );
        mock.clear();
        l.check("k", &p).await;
        assert_eq!(mock.names(), ["EVALSHA"], "the wire is chosen once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_module_that_disappears_is_looked_for_again() {
        let loaded = Arc::new(AtomicBool::new(true));
        let on = loaded.clone();
        let mock = Mock::new(false, move |w| {
            let module = on.load(Ordering::SeqCst);
            match w[0].as_str() {
                "COMMAND" if module => Value::Array(vec![Value::Array(vec![])]),
                "COMMAND" => Value::Array(vec![Value::Nil]),
                "RL.SLIDING" if module => allow(),
                "RL.SLIDING" => Value::SimpleString("-ERR unknown command 'RL.SLIDING'".into()),
                "FCALL" => deny(300),
                _ => Value::Nil,
            }
        });
        let l = auto(&mock);
        let p = Policy::sliding(10, 1_000).unwrap();
        assert!(l.check("k", &p).await.allows());
        loaded.store(false, Ordering::SeqCst);
        l.check("k", &p).await; // refused: decided by the failure mode, the wire forgotten
        let d = l.check("k", &p).await;
        assert_eq!((d.is_denied(), d.source), (true, Source::Redis));
        assert_eq!(
            mock.names(),
            ["COMMAND", "RL.SLIDING", "RL.SLIDING", "COMMAND", "FCALL"]
        );
    }
}
