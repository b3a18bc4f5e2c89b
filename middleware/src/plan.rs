//! What every service of a layer shares: the limiter, the tier resolver and the request
//! flow of the configuration.

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use redis_rl_flow::{Flow, Holds};
use redis_rl_policy::Engine;

use super::config::{RateLimitConfig, RateLimitConfigExt};
use crate::tier::TierResolver;
use redis_rl_client::error::{Error, Result};
use redis_rl_client::limiter::Limiter;
use redis_rl_client::offenders::Offenders;
use redis_rl_client::policy::FailureMode;

/// Requests held by `delay_max_ms` right now in the process, whatever layer holds them: a
/// gateway serves several listeners and, after a reload, requests of two configuration
/// generations at once, and `delay_max_held` bounds the memory and connections of the whole
/// process (`rl_held_requests`).
static HOLDS: LazyLock<Holds> = LazyLock::new(Holds::new);

/// Held requests are booked one at a time in the process (look, then take with `FORCE`):
/// two of its requests never get the same slot, whichever listener they came through.
pub(crate) static BOOKING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The limiter, the tier resolver and the flow.
pub(crate) struct Shared {
    pub(crate) limiter: Limiter,
    pub(crate) resolver: Arc<dyn TierResolver>,
    /// The request flow (the policy engine, bans read a moment ago, held requests).
    pub(crate) flow: Flow,
    pub(crate) mode: FailureMode,
    /// The origin of the flow's monotonic milliseconds.
    started: Instant,
    /// Refusals, queued towards bans and the top offenders.
    pub(crate) offenders: Offenders,
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
        if !engine.key_digest_is_keyed() {
            tracing::warn!(
                "API-key digests in key names are unkeyed SHA-256: a guessable API key can be \
                 recognised by whoever reads them; set api_key_digest_secret_file (rl-gateway: \
                 --secret-file) to key them (key names change once)"
            );
        }
        let offenders = Offenders::new(limiter.clone(), engine.config().key_prefix.clone());
        Ok(Shared {
            offenders,
            counters: super::counters::Counters::default(),
            limiter,
            resolver,
            flow: Flow::sharing(engine, HOLDS.clone()),
            mode,
            started: Instant::now(),
        })
    }

    /// The flow's clock: milliseconds since the layer was built.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
