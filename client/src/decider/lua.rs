//! Decisions without the module: the Lua twin (`lua/rl.lua`), the module's commands as a
//! function library, for servers that cannot load modules (managed Redis and Valkey).
//!
//! Same replies, same stored bytes, so the module's decider logic is reused as is: every
//! `RL.<ALG> key args...` it builds is sent as `FCALL rl 1 key RL.<ALG> args...` (and
//! `RL.ALL n keys... rest` as `FCALL rl n keys... RL.ALL rest`). On a server that does not
//! have the library yet (`Function not found`), it is loaded there (`FUNCTION LOAD REPLACE`)
//! and the call is retried once. Where `FUNCTION` is refused (renamed, ACL), the same file
//! runs as a script: `EVALSHA`, loaded with `SCRIPT LOAD` on `NOSCRIPT` and retried once.

use std::sync::Arc;

use super::module::ModuleDecider;
use super::twin::Twin;
pub use super::twin::{check_range, script_source, FUNCTION, LIBRARY};
use super::{Check, Decided, Decider, Items};
use crate::decision::{Decision, Grant, MultiDecision};
use crate::transport::Transport;
use redis_rl_core::AnyParams;

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
    use super::super::twin::split;
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
