//! How an op's commands reach the server when the host sends them: as the module's
//! commands where it is loaded, else to the Lua twin (`lua/rl.lua`: same replies, same
//! stored bytes) as a script. The module's command goes first; its first `unknown command
//! 'RL.…'` switches to the twin (`EVALSHA`), and a `NOSCRIPT` answer resends the call as
//! `EVAL` of the whole script, which runs it and leaves it cached on that server. `EVAL`
//! rather than `SCRIPT LOAD`: it carries its keys, so a cluster client sends it to the
//! node that holds them (a keyless `SCRIPT LOAD` goes to any node). Not `FCALL` (which the
//! async client prefers): a host's client may route a keyless `FUNCTION LOAD` anywhere.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::layers::decider::{lua, ServerImpl};

const MODULE: u8 = 0;
const TWIN: u8 = 1;

/// The twin as a script and its SHA1.
fn script() -> &'static (String, String) {
    static SCRIPT: OnceLock<(String, String)> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let source = lua::script_source().to_string();
        let sha = sha1_smol::Sha1::from(source.as_bytes())
            .digest()
            .to_string();
        (source, sha)
    })
}

/// The route in use, shared by every op of one limiter.
#[derive(Debug)]
pub(crate) struct ScriptWire {
    server_impl: ServerImpl,
    route: AtomicU8,
}

/// What to do after an error reply.
pub(crate) enum Retry {
    /// Send this instead.
    Send(Vec<String>),
    /// The error is the call's own.
    No,
}

impl ScriptWire {
    pub(crate) fn new(server_impl: ServerImpl) -> Self {
        let route = if server_impl == ServerImpl::Lua {
            TWIN
        } else {
            MODULE
        };
        Self {
            server_impl,
            route: AtomicU8::new(route),
        }
    }

    pub(crate) fn twin(&self) -> bool {
        self.route.load(Ordering::Relaxed) == TWIN
    }

    /// `module` (`RL.X key args...` or `RL.ALL n keys... rest`) as it goes out now.
    pub(crate) fn encode(&self, module: Vec<String>) -> Vec<String> {
        if self.twin() {
            twin_call("EVALSHA", &script().1, module)
        } else {
            module
        }
    }

    /// Whether an error reply to `module` (sent by [`ScriptWire::encode`]) asks for
    /// another call.
    pub(crate) fn retry(&self, module: &[String], message: &str) -> Retry {
        let lower = message.to_ascii_lowercase();
        let is_module_command = module.first().is_some_and(|name| {
            name.len() > 3 && name.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("RL."))
        });
        // The server has no module: the twin from now on. Also when the route is the twin
        // already: calls sent concurrently before the first answer went out as the module's
        // command, and each gets this answer (the twin's own errors never read so).
        if self.server_impl == ServerImpl::Auto
            && is_module_command
            && lower.contains("unknown command")
        {
            self.route.store(TWIN, Ordering::Relaxed);
            return Retry::Send(self.encode(module.to_vec()));
        }
        if self.twin() && message.starts_with("NOSCRIPT") {
            return Retry::Send(twin_call("EVAL", &script().0, module.to_vec()));
        }
        Retry::No
    }
}

/// `RL.X key args...` as `<call> <script|sha> 1 key RL.X args...`; `RL.ALL n keys... rest`
/// as `<call> <script|sha> n keys... RL.ALL rest`.
fn twin_call(call: &str, script: &str, module: Vec<String>) -> Vec<String> {
    let mut words = module.into_iter();
    let Some(name) = words.next() else {
        return Vec::new();
    };
    let rest: Vec<String> = words.collect();
    let numkeys = if name.eq_ignore_ascii_case("RL.ALL") {
        rest.first()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    } else {
        1
    };
    let skip = usize::from(name.eq_ignore_ascii_case("RL.ALL"));
    let keys = rest.iter().skip(skip).take(numkeys);
    let argv = rest.iter().skip(skip + numkeys);
    let mut out = Vec::with_capacity(rest.len() + 4);
    out.push(call.to_string());
    out.push(script.to_string());
    out.push(numkeys.to_string());
    out.extend(keys.cloned());
    out.push(name);
    out.extend(argv.cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn the_twin_call_puts_keys_before_the_command_name() {
        let one = twin_call("EVALSHA", "sha", words("RL.GCRA k 1 2 COST 3"));
        assert_eq!(one, words("EVALSHA sha 1 k RL.GCRA 1 2 COST 3"));
        let all = twin_call("EVAL", "src", words("RL.ALL 2 a b gcra 1 2 gcra 3 4"));
        assert_eq!(all, words("EVAL src 2 a b RL.ALL gcra 1 2 gcra 3 4"));
    }

    #[test]
    fn unknown_command_switches_auto_to_the_twin_and_noscript_sends_the_script() {
        let wire = ScriptWire::new(ServerImpl::Auto);
        let module = words("RL.GCRA k 1 2");
        assert!(!wire.twin());
        let Retry::Send(next) = wire.retry(&module, "ERR unknown command 'RL.GCRA'") else {
            panic!("no retry");
        };
        assert!(wire.twin());
        assert_eq!(next.first().map(String::as_str), Some("EVALSHA"));
        let Retry::Send(eval) = wire.retry(&module, "NOSCRIPT No matching script") else {
            panic!("no retry");
        };
        assert_eq!(eval.first().map(String::as_str), Some("EVAL"));
        assert!(matches!(
            wire.retry(&module, "ERR cost out of range"),
            Retry::No
        ));
        // Module only: an unknown command is the call's own error.
        let fixed = ScriptWire::new(ServerImpl::Module);
        assert!(matches!(
            fixed.retry(&module, "ERR unknown command 'RL.GCRA'"),
            Retry::No
        ));
    }
}
