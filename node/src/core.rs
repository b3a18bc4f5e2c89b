//! `Core`: the client's sans-I/O [`Layers`] for JavaScript: what the ops of one limiter
//! share (the wire, module or twin; the circuit breaker, the deny cache, the local fallback
//! limiter, and whether the client is a cluster client).

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use redis_rl_client::sansio::{Layers, LayersConfig, LeaseConfig};
use redis_rl_client::{BreakerConfig, FleetConfig, ServerImpl};

use crate::op::Op;
use crate::policy::{whole, Policy};
use crate::slots::AcrossSlots;

/// `auto`, `module` or `lua` (in those words: the package's documented option).
fn server_impl(name: &str) -> Result<ServerImpl> {
    match name {
        "auto" => Ok(ServerImpl::Auto),
        "module" => Ok(ServerImpl::Module),
        "lua" => Ok(ServerImpl::Lua),
        other => Err(Error::new(
            Status::InvalidArg,
            format!("engine must be auto, module or lua, not {other:?}"),
        )),
    }
}

/// The limiter's options (every one optional).
#[napi(object)]
pub struct CoreOptions {
    /// `auto` (default: the module where loaded, else the Lua twin), `module` or `lua`.
    pub engine: Option<String>,
    /// The application's client is a cluster client: `checkAll` keys must share a slot.
    pub cluster: Option<bool>,
    /// Keys the deny cache remembers (default 10000; 0 turns it off).
    pub deny_cache: Option<u32>,
    /// Failures in a row that open the circuit breaker (default 5).
    pub breaker_failures: Option<u32>,
    /// How long the breaker stays open, in ms (default 1000).
    pub breaker_open_ms: Option<u32>,
    /// Keys the local fallback holds at most (default 100000).
    pub local_capacity: Option<u32>,
    /// Fleet membership (an `RL.CONCURRENCY` lease renewed by `pending`); none by default.
    pub fleet: Option<FleetOptions>,
    /// Leases for `checkAll` keys whose policy is hot (`[leases]`); none by default.
    pub leases: Option<LeaseOptions>,
}

/// Leases: a hot key's requests are served from a batch of units taken ahead.
#[napi(object)]
pub struct LeaseOptions {
    /// How long a lease lives, in ms (default 250): its unspent units go back then.
    pub lifetime_ms: Option<u32>,
    /// How much of the recent demand a lease covers, in ms (default 200).
    pub demand_ms: Option<u32>,
    /// What the fleet's leases of one key hold together, in percent of the limit (default 10).
    pub max_percent: Option<u32>,
}

/// The client's leases from `LeaseOptions`; numbers it cannot work with are refused.
fn lease_config(o: LeaseOptions) -> Result<LeaseConfig> {
    let defaults = LeaseConfig::default();
    if o.lifetime_ms == Some(0)
        || o.demand_ms == Some(0)
        || o.max_percent.is_some_and(|p| p == 0 || p > 100)
    {
        return Err(Error::new(
            Status::InvalidArg,
            "leases: lifetimeMs and demandMs must be at least 1, maxPercent between 1 and 100",
        ));
    }
    let ms = |v: Option<u32>, d: Duration| v.map_or(d, |ms| Duration::from_millis(u64::from(ms)));
    Ok(LeaseConfig {
        lifetime: ms(o.lifetime_ms, defaults.lifetime),
        demand: ms(o.demand_ms, defaults.demand),
        max_percent: o.max_percent.map_or(defaults.max_percent, u64::from),
        ..defaults
    })
}

/// Fleet membership: limiters naming one `key` count each other.
#[napi(object)]
pub struct FleetOptions {
    /// The fleet's key (the middleware's: `<key_prefix>:{fleet}`, as rl-gateway's).
    pub key: String,
    /// Time between renewals, in ms (default 1000).
    pub heartbeat_ms: Option<u32>,
    /// How long a silent member is still counted, in ms (default 3000).
    pub ttl_ms: Option<u32>,
    /// The local fallback divides each limit by the live fleet size once known (default
    /// true; false when a static `instances` is configured).
    pub divides: Option<bool>,
}

/// The client's membership from `FleetOptions`; numbers it cannot work with are refused.
fn fleet_config(o: FleetOptions) -> Result<(FleetConfig, bool)> {
    let defaults = FleetConfig::new(o.key);
    let config = FleetConfig {
        heartbeat: o.heartbeat_ms.map_or(defaults.heartbeat, |ms| {
            Duration::from_millis(u64::from(ms))
        }),
        ttl: o
            .ttl_ms
            .map_or(defaults.ttl, |ms| Duration::from_millis(u64::from(ms))),
        ..defaults
    };
    config
        .validate()
        .map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
    Ok((config, o.divides.unwrap_or(true)))
}

/// The sans-I/O limiter: makes an [`Op`] per call.
#[napi]
pub struct Core {
    pub(crate) layers: Arc<Layers>,
}

#[napi]
impl Core {
    #[napi(constructor)]
    pub fn new(options: Option<CoreOptions>) -> Result<Self> {
        let o = options.unwrap_or(CoreOptions {
            engine: None,
            cluster: None,
            deny_cache: None,
            breaker_failures: None,
            breaker_open_ms: None,
            local_capacity: None,
            fleet: None,
            leases: None,
        });
        let defaults = BreakerConfig::default();
        let breaker = BreakerConfig {
            failure_threshold: o
                .breaker_failures
                .unwrap_or(defaults.failure_threshold)
                .max(1),
            open_for: o
                .breaker_open_ms
                .map_or(defaults.open_for, |ms| Duration::from_millis(u64::from(ms))),
        };
        let (fleet, fleet_divides) = match o.fleet.map(fleet_config).transpose()? {
            Some((config, divides)) => (Some(config), divides),
            None => (None, false),
        };
        let config = LayersConfig {
            server_impl: server_impl(o.engine.as_deref().unwrap_or("auto"))?,
            cluster: o.cluster.unwrap_or(false),
            deny_cache: NonZeroUsize::new(o.deny_cache.map_or(10_000, |n| n as usize)),
            breaker,
            local_capacity: o.local_capacity.map_or(100_000, |n| n as usize),
            fleet,
            fleet_divides,
            leases: o.leases.map(lease_config).transpose()?,
            ..LayersConfig::default()
        };
        Ok(Self {
            layers: Arc::new(Layers::new(config)),
        })
    }

    /// Takes `cost` units of `key` (`peek`: only says what taking them would answer).
    #[napi]
    pub fn check(&self, key: String, policy: &Policy, cost: f64, peek: bool) -> Result<Op> {
        let cost = whole("cost", cost)?;
        Ok(Op::new(self.layers.check(key, policy.inner, cost, peek)))
    }

    /// Several keys all or nothing: add them with [`Op::add`], then start.
    #[napi]
    pub fn check_all(&self) -> Op {
        Op::new(self.layers.check_all())
    }

    /// Several keys all or nothing across hash slots (one `RL.ALL` per slot), shadow keys
    /// on their own: add them with `AcrossSlots.add`, then run its rounds.
    #[napi]
    pub fn check_all_across(&self) -> AcrossSlots {
        AcrossSlots::new(self.layers.check_all_across(AcrossSlots::SCHEDULE))
    }

    /// Every key's own decision for its cost, from Redis itself (not the deny cache; no
    /// failure mode): one `RL.ALL ... PEEK` (nothing taken) or `... FORCE` (taken even over
    /// the limits) per hash slot, the op the Python package and the Rust client run too. Add
    /// the keys with `AcrossSlots.add`, then run its rounds; `decisions()` gives every key's.
    #[napi]
    pub fn each(&self, force: bool) -> AcrossSlots {
        AcrossSlots::new(self.layers.each_across(force, AcrossSlots::SCHEDULE))
    }

    /// Up to `n` units of `key` (`COST n UPTO`), as many as are available.
    #[napi]
    pub fn take_upto(&self, key: String, policy: &Policy, n: f64, peek: bool) -> Result<Op> {
        let n = whole("n", n)?;
        Ok(Op::new(self.layers.take_upto(key, policy.inner, n, peek)))
    }

    /// Gives back up to `amount` units of `key` (`RL.REFUND`).
    #[napi]
    pub fn refund(&self, key: String, policy: &Policy, amount: f64) -> Result<Op> {
        let amount = whole("amount", amount)?;
        Ok(Op::new(self.layers.refund(key, policy.inner, amount)))
    }

    /// Settles a reservation of `reserved` units of `key` against the `actual` cost:
    /// refunds the difference, takes the rest with `FORCE`, or sends nothing.
    #[napi]
    pub fn settle(&self, key: String, policy: &Policy, reserved: f64, actual: f64) -> Result<Op> {
        let reserved = whole("reserved", reserved)?;
        let actual = whole("actual", actual)?;
        Ok(Op::new(self.layers.settle(
            key,
            policy.inner,
            reserved,
            actual,
        )))
    }

    /// The next background op due at `now_ms` (wall-clock ms since the Unix epoch), else
    /// `null`: the fleet heartbeat (its `units()` is the fleet size, 0 while unknown), then
    /// the `RL.REFUND` of each lease that ended. Run from a timer, again until `null`.
    #[napi]
    pub fn pending(&self, now_ms: f64) -> Result<Option<Op>> {
        let now_ms = whole("nowMs", now_ms)?;
        Ok(self.layers.pending(now_ms).map(Op::new))
    }

    /// The `RL.REFUND` ops of every lease's unspent units, at shutdown.
    #[napi]
    pub fn release_leases(&self) -> Vec<Op> {
        self.layers
            .release_leases()
            .into_iter()
            .map(Op::new)
            .collect()
    }

    /// `[takes, granted, hits, refunds, refunded, dropped]` of the leases since start.
    #[napi(getter)]
    pub fn lease_stats(&self) -> Vec<f64> {
        let s = self.layers.lease_stats();
        [s.takes, s.granted, s.hits, s.refunds, s.refunded, s.dropped]
            .into_iter()
            .map(crate::policy::to_f64)
            .collect()
    }

    /// Leaving the fleet at shutdown (`null` without membership).
    #[napi]
    pub fn leave(&self) -> Option<Op> {
        self.layers.leave().map(Op::new)
    }

    /// The live fleet size once a heartbeat read it (`null` before, or without membership).
    #[napi(getter)]
    pub fn fleet_size(&self) -> Option<u32> {
        self.layers.fleet_size()
    }

    /// `module` or `lua`: the route the next call takes.
    #[napi(getter)]
    pub fn route(&self) -> String {
        if self.layers.twin() { "lua" } else { "module" }.to_string()
    }

    /// `closed`, `open` or `half_open`.
    #[napi(getter)]
    pub fn breaker_state(&self) -> String {
        self.layers.breaker_state().name().to_string()
    }
}

/// The core's registry as JSON: algorithms, parameters, ranges, options (the policy
/// constructors are generated from it).
#[napi]
pub fn registry_json() -> String {
    redis_rl_core::export::json()
}

/// The names of the `source` numbers of `Op.fields()`, in order.
#[napi]
pub fn decision_sources() -> Vec<String> {
    crate::op::SOURCES
        .iter()
        .map(|s| (*s).to_string())
        .collect()
}
