//! What every service of a layer shares: the limiter, the tier resolver and the policy
//! engine built from the configuration.

use std::sync::Arc;

use redis_rl_policy::Engine;

use super::bans::BanMemory;
use super::config::{RateLimitConfig, RateLimitConfigExt};
use crate::error::{Error, Result};
use crate::limiter::Limiter;
use crate::offenders::Offenders;
use crate::policy::FailureMode;
use crate::tier::TierResolver;

/// The limiter, the tier resolver and the engine.
pub(crate) struct Shared {
    pub(crate) limiter: Limiter,
    pub(crate) resolver: Arc<dyn TierResolver>,
    pub(crate) engine: Engine,
    pub(crate) mode: FailureMode,
    /// Refusals, queued towards bans and the top offenders.
    pub(crate) offenders: Offenders,
    /// Bans read from Redis a moment ago.
    pub(crate) ban_memory: BanMemory,
    /// The per-request counters' handles.
    pub(crate) counters: super::counters::Counters,
}

impl Shared {
    /// Validates `config` and builds the engine; `routes` are route templates of the
    /// endpoint dimension besides the rules' paths.
    pub(crate) fn new(
        limiter: Limiter,
        config: RateLimitConfig,
        routes: &[String],
        resolver: Arc<dyn TierResolver>,
    ) -> Result<Self> {
        config.check()?;
        let mode = config.failure_mode();
        let engine = Engine::new(config, routes)
            .map_err(|e| Error::Config(format!("{}: {}", e.field, e.message)))?;
        super::counters::at_zero(&engine);
        let offenders = Offenders::new(limiter.clone(), engine.config().key_prefix.clone());
        Ok(Shared {
            offenders,
            ban_memory: BanMemory::default(),
            counters: super::counters::Counters::default(),
            limiter,
            resolver,
            engine,
            mode,
        })
    }
}
