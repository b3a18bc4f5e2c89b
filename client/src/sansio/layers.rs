//! [`Layers`]: what the ops of one limiter share: the wire (module or twin), the circuit
//! breaker, the deny cache, the local fallback limiter, and whether the host's client is a
//! cluster client.

use std::num::NonZeroUsize;
use std::sync::Arc;

use crate::breaker::{Breaker, BreakerConfig, BreakerState};
use crate::decider::Engine;
use crate::deny_cache::DenyCache;
use crate::fallback::LocalLimiter;
use crate::policy::Policy;

use super::op::{Call, Op};
use super::wire::{Retry, ScriptWire};

/// The settings of [`Layers`].
#[derive(Clone, Debug)]
pub struct LayersConfig {
    /// The module, the twin, or the module where loaded (default).
    pub engine: Engine,
    /// The host's client is a cluster client: the keys of one `check_all` must share a slot.
    pub cluster: bool,
    /// Keys the deny cache remembers (default 10000; `None` turns it off).
    pub deny_cache: Option<NonZeroUsize>,
    /// When the circuit breaker opens and for how long.
    pub breaker: BreakerConfig,
    /// Keys the local fallback holds at most (default 100000).
    pub local_capacity: usize,
}

impl Default for LayersConfig {
    fn default() -> Self {
        Self {
            engine: Engine::Auto,
            cluster: false,
            deny_cache: NonZeroUsize::new(10_000),
            breaker: BreakerConfig::default(),
            local_capacity: 100_000,
        }
    }
}

/// The layers of one limiter, shared by its [`Op`]s (make one per limiter, in an `Arc`).
#[derive(Debug)]
pub struct Layers {
    pub(crate) wire: ScriptWire,
    pub(crate) breaker: Breaker,
    pub(crate) deny: Option<DenyCache>,
    pub(crate) local: LocalLimiter,
    pub(crate) cluster: bool,
}

impl Layers {
    /// The layers `config` describes.
    pub fn new(config: LayersConfig) -> Self {
        Self {
            wire: ScriptWire::new(config.engine),
            breaker: Breaker::new(config.breaker),
            deny: config.deny_cache.map(DenyCache::new),
            local: LocalLimiter::new(config.local_capacity),
            cluster: config.cluster,
        }
    }

    /// Takes `cost` units of `key` (`peek`: only says what taking them would answer).
    pub fn check(self: &Arc<Self>, key: String, policy: Policy, cost: u64, peek: bool) -> Op {
        Op::new(
            self.clone(),
            Call::Check {
                key,
                policy,
                cost,
                peek,
            },
        )
    }

    /// Several keys all or nothing: add them with [`Op::add`], then start.
    pub fn check_all(self: &Arc<Self>) -> Op {
        Op::new(
            self.clone(),
            Call::All {
                items: Vec::new(),
                costs: Vec::new(),
            },
        )
    }

    /// Up to `n` units of `key` (`COST n UPTO`), as many as are available.
    pub fn take_upto(self: &Arc<Self>, key: String, policy: Policy, n: u64, peek: bool) -> Op {
        Op::new(
            self.clone(),
            Call::Upto {
                key,
                policy,
                n,
                peek,
            },
        )
    }

    /// Gives back up to `amount` units of `key` (`RL.REFUND`).
    pub fn refund(self: &Arc<Self>, key: String, policy: Policy, amount: u64) -> Op {
        Op::new(
            self.clone(),
            Call::Refund {
                key,
                policy,
                amount,
            },
        )
    }

    /// Takes `cost` units of `key` even over the limit (`COST n FORCE`).
    pub fn force(self: &Arc<Self>, key: String, policy: Policy, cost: u64) -> Op {
        Op::new(self.clone(), Call::Force { key, policy, cost })
    }

    /// `module` (a module command: `RL.STATE key`, `RL.X key args...`) as it goes out now:
    /// as it is, or as the Lua twin's `EVALSHA`. For commands no op decides on, sent by the
    /// host as they are; [`Layers::retry`] with the error they got.
    pub fn encode(&self, module: Vec<String>) -> Vec<String> {
        self.wire.encode(module)
    }

    /// After an error reply to `module` sent through [`Layers::encode`]: the command to
    /// send instead (the twin when the module is missing, `EVAL` after `NOSCRIPT`), or
    /// `None` when the error is the command's own.
    pub fn retry(&self, module: &[String], message: &str) -> Option<Vec<String>> {
        match self.wire.retry(module, message) {
            Retry::Send(next) => Some(next),
            Retry::No => None,
        }
    }

    /// Whether the next call goes to the Lua twin (else to the module's commands).
    pub fn twin(&self) -> bool {
        self.wire.twin()
    }

    /// The circuit breaker's state.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// The circuit breaker (its counters).
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Forgets a cached denial of `key` (after a reset or a refund).
    pub fn forget_denial(&self, key: &str) {
        if let Some(cache) = &self.deny {
            cache.forget(key);
        }
    }
}
