//! Picks how decisions are made on the server: the module's commands where the module is
//! loaded, the Lua twin where it is not (asked once, on first use, like RL.ALL).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use redis::Value;

use super::{Check, Decided, Decider, Items, LuaDecider, ModuleDecider};
use crate::decision::{Decision, Grant, MultiDecision};
use crate::error::Result;
use crate::transport::{is_unknown_command, Transport};
use redis_rl_core::AnyParams;

/// Which implementation decides on the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// The module where its commands exist, else the Lua twin (asked once with
    /// `COMMAND INFO RL.TOKENBUCKET`, and again if the module's commands disappear).
    #[default]
    Auto,
    /// Always the module's commands.
    Module,
    /// Always the Lua twin (`lua/rl.lua`): for servers that cannot load modules.
    Lua,
}

impl std::str::FromStr for Engine {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Engine::Auto),
            "module" => Ok(Engine::Module),
            "lua" => Ok(Engine::Lua),
            other => Err(format!("engine '{other}': expected auto, module or lua")),
        }
    }
}

const UNKNOWN: u8 = 0;
const MODULE: u8 = 1;
const LUA: u8 = 2;

/// The module's decider or the twin's, as [`Engine`] says.
#[derive(Debug)]
pub struct AutoDecider {
    transport: Arc<Transport>,
    engine: Engine,
    chosen: AtomicU8,
    module: ModuleDecider,
    lua: LuaDecider,
}

impl AutoDecider {
    /// Deciders over `transport`, chosen by `engine`.
    pub fn new(transport: Arc<Transport>, engine: Engine) -> Self {
        let chosen = match engine {
            Engine::Auto => UNKNOWN,
            Engine::Module => MODULE,
            Engine::Lua => LUA,
        };
        Self {
            module: ModuleDecider::new(transport.clone()),
            lua: LuaDecider::new(transport.clone()),
            transport,
            engine,
            chosen: AtomicU8::new(chosen),
        }
    }

    /// The engine in use: asks the server on first use (an error leaves it unknown, so the
    /// next call asks again).
    pub async fn engine(&self) -> Result<Engine> {
        match self.chosen.load(Ordering::Relaxed) {
            MODULE => return Ok(Engine::Module),
            LUA => return Ok(Engine::Lua),
            _ => {}
        }
        let mut info = redis::cmd("COMMAND");
        info.arg("INFO").arg("RL.TOKENBUCKET");
        let v = self.transport.call(&info, None).await?;
        let has_module = matches!(&v, Value::Array(items) if items.first().is_some_and(|i| !matches!(i, Value::Nil)));
        let engine = if has_module {
            Engine::Module
        } else {
            Engine::Lua
        };
        tracing::info!(
            ?engine,
            "redis-rl: deciding with the {}",
            if has_module {
                "module"
            } else {
                "Lua twin (no module on the server)"
            }
        );
        self.chosen
            .store(if has_module { MODULE } else { LUA }, Ordering::Relaxed);
        Ok(engine)
    }

    fn decider(&self, engine: Engine) -> &dyn Decider {
        match engine {
            Engine::Lua => &self.lua,
            _ => &self.module,
        }
    }

    /// In auto mode, a module that answers "unknown command" was unloaded: ask again next time.
    fn notice<T>(&self, engine: Engine, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            if self.engine == Engine::Auto && engine == Engine::Module && is_unknown_command(e) {
                self.chosen.store(UNKNOWN, Ordering::Relaxed);
            }
        }
        result
    }
}

impl Decider for AutoDecider {
    fn check<'a>(&'a self, call: Check<'a>) -> Decided<'a, Decision> {
        Box::pin(async move {
            let engine = self.engine().await?;
            let result = self.decider(engine).check(call).await;
            self.notice(engine, result)
        })
    }

    fn check_all<'a>(&'a self, items: Items<'a>, cost: u64) -> Decided<'a, MultiDecision> {
        Box::pin(async move {
            let engine = self.engine().await?;
            let result = self.decider(engine).check_all(items, cost).await;
            self.notice(engine, result)
        })
    }

    fn take_upto<'a>(&'a self, call: Check<'a>) -> Decided<'a, Grant> {
        Box::pin(async move {
            let engine = self.engine().await?;
            let result = self.decider(engine).take_upto(call).await;
            self.notice(engine, result)
        })
    }

    fn refund<'a>(
        &'a self,
        key: &'a str,
        algorithm: &'a AnyParams,
        amount: u64,
    ) -> Decided<'a, u64> {
        Box::pin(async move {
            let engine = self.engine().await?;
            let result = self.decider(engine).refund(key, algorithm, amount).await;
            self.notice(engine, result)
        })
    }
}
