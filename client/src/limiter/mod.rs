//! The limiter: the facade over the layers. It builds them (`builder.rs`), hands each call
//! to the top of the stack and gathers the counters; what each layer does is in its own
//! module (see [`crate::layers::decider`] for the stack).

//!
//! Without feature `transport` only the parts with no I/O are here: [`decision`] (and its
//! reply parsers), [`policy`] and [`WindowCount`].

use redis::Value;

// The async facade's (feature `transport`).
#[cfg(feature = "transport")]
use {
    crate::error::Result,
    crate::fleet::{FleetConfig, FleetView, Membership},
    crate::layers::decider::{Check, Decider, Refund},
    crate::layers::deny_cache::DenyCached,
    crate::layers::failover::Failover,
    crate::layers::lease::{LeaseStats, Leased},
    crate::layers::shadow::Shadow,
    crate::layers::stack::{Ask, Layer},
    crate::limiter::decision::{Decision, Grant, MultiDecision},
    crate::limiter::policy::Policy,
    crate::transport::breaker::{BreakerState, BreakerStats},
    crate::transport::Transport,
    redis::Cmd,
    std::num::NonZeroU32,
    std::sync::{Arc, Mutex},
    std::time::Duration,
};

#[cfg(feature = "transport")]
pub mod booking;
#[cfg(feature = "transport")]
mod builder;
pub mod decision;
pub mod policy;
pub mod settle;

#[cfg(feature = "transport")]
pub use builder::LimiterBuilder;

/// The deny cache over the server's decider: what failure modes and leases both ask.
#[cfg(feature = "transport")]
type Cached = Arc<DenyCached<Box<dyn Decider>>>;

/// The whole stack of layers, top first.
#[cfg(feature = "transport")]
type Stack = Shadow<Leased<Failover<Cached>>>;

/// Default timeout of one call to Redis.
#[cfg(feature = "transport")]
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// Counts since start, for health endpoints and game days.
#[cfg(feature = "transport")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimiterStats {
    /// Calls sent to Redis (commands, including probes, refunds and tier lookups).
    pub redis_calls: u64,
    /// Calls that failed (error or timeout).
    pub errors: u64,
    /// Decisions answered by the deny cache.
    pub deny_cache: u64,
    /// Decisions made by the local fallback limiter.
    pub local: u64,
    /// Decisions allowed because Redis was unavailable (fail open).
    pub fail_open: u64,
    /// Decisions denied because Redis was unavailable (fail closed).
    pub fail_closed: u64,
    /// Breaker transitions.
    pub breaker: BreakerStats,
    /// The fleet size last read from Redis (0: not in a fleet, or not read yet).
    pub fleet_size: u32,
    /// Leases of hot keys.
    pub leases: LeaseStats,
}

#[cfg(feature = "transport")]
struct Inner {
    transport: Arc<Transport>,
    stack: Stack,
    fleet: Arc<FleetView>,
    membership: Mutex<Option<Membership>>,
    /// The deny cache layer, for forgetting refusals.
    cached: Cached,
    /// The fleet's channel of forgotten refusals.
    denials: crate::fleet::denials::Denials,
    /// Sends RL.RESET by the implementation in use (the module's command or the twin's).
    resets: crate::layers::decider::ServerDecider,
}

/// The client's entry point: cheap to clone, share one per process.
///
/// Every call has a timeout; failures count towards the circuit breaker; when Redis cannot
/// answer, each policy's [`FailureMode`](crate::FailureMode) decides. `check*` therefore
/// never fail: the [`Decision`]'s `source` says who decided.
#[cfg(feature = "transport")]
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

#[cfg(feature = "transport")]
impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("timeout", &self.inner.transport.timeout())
            .field("breaker", &self.inner.transport.breaker().state())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "transport")]
impl Limiter {
    /// A builder with the defaults (50 ms timeout, breaker 5 failures / 1 s, deny cache
    /// of 10000 keys, local store of 100000 keys).
    pub fn builder() -> LimiterBuilder {
        LimiterBuilder::default()
    }

    /// A limiter with the defaults on a standalone server.
    pub fn standalone(url: &str) -> Result<Limiter> {
        Self::builder().standalone(url)
    }

    /// Takes one unit for `key`.
    pub async fn check(&self, key: &str, policy: &Policy) -> Decision {
        self.check_n(key, policy, 1).await
    }

    /// Takes `cost` units for `key` (0: look without taking). A hot policy's units come
    /// from this instance's lease of the key ([`crate::layers::lease`]).
    pub async fn check_n(&self, key: &str, policy: &Policy, cost: u64) -> Decision {
        self.decide(key, policy, cost, false).await
    }

    /// Says what taking `cost` units would answer, taking nothing (`PEEK`).
    pub async fn peek(&self, key: &str, policy: &Policy, cost: u64) -> Decision {
        self.decide(key, policy, cost, true).await
    }

    async fn decide(&self, key: &str, policy: &Policy, cost: u64, peek: bool) -> Decision {
        let ask = Ask {
            key,
            policy,
            cost,
            peek,
        };
        self.inner.stack.decide(ask).await
    }

    /// Takes one unit on every key, all or nothing; see [`Limiter::check_all_n`].
    pub async fn check_all<K: AsRef<str>>(&self, items: &[(K, Policy)]) -> MultiDecision {
        self.check_all_n(items, 1).await
    }

    /// Takes `cost` units on every key if every enforced key allows it, else nothing.
    ///
    /// One key is one call of its algorithm's own command (`RL.<ALG> key ... COST n`, the
    /// module's or the Lua twin's), read as `RL.ALL` of that key would be (`denied` is
    /// `Some(0)` when it denies); so is a hash slot's one key in a request across slots.
    /// Several keys, with `RL.ALL` on the server: one call per hash slot (one in all on a
    /// standalone server, atomic). Across slots, every slot at once (one round trip of
    /// latency), refunding (`RL.REFUND`) the slots that took when another one denies or
    /// fails; between the take and the refund another client can see the lower count (best
    /// effort). Without `RL.ALL`: every key is peeked first (nothing taken if one denies),
    /// then taken; if a key denies in between (a race), the others are refunded when the
    /// server has `RL.REFUND`.
    ///
    /// Shadow policies are checked independently and never deny the request.
    pub async fn check_all_n<K: AsRef<str>>(
        &self,
        items: &[(K, Policy)],
        cost: u64,
    ) -> MultiDecision {
        self.check_all_costs(items, &vec![cost; items.len()]).await
    }

    /// `costs[i]` units on `items[i]` (a missing cost is 1), all or nothing: one decision
    /// through the layers, one `RL.ALL ... COSTS` per hash slot. The public form is
    /// [`Limiter::check_all_units`].
    pub(crate) async fn check_all_costs<K: AsRef<str>>(
        &self,
        items: &[(K, Policy)],
        costs: &[u64],
    ) -> MultiDecision {
        let items: Vec<(&str, &Policy)> = items.iter().map(|(k, p)| (k.as_ref(), p)).collect();
        self.inner.stack.decide_all(&items, costs).await
    }

    /// Takes a batch: up to `n` units of `policy` on `key` in one call (`COST n UPTO`), as
    /// many as are available now. The primitive of leases: take a batch, spend it in
    /// process, give back what was not spent with [`Limiter::refund`].
    ///
    /// - `Ok(grant)` with `grant.granted` in `1..=n`: that many units were taken;
    ///   `grant.decision` is allowed and its `remaining` is what the limiter has left.
    /// - `Ok(grant)` with `granted == 0` (for `n > 0`): nothing was available, nothing was
    ///   taken; `grant.decision.retry_after()` is the wait until one unit is. The denial
    ///   goes to the deny cache (for one unit), so until then further `take_upto` and
    ///   `check` calls on `key` are denied without a round trip (`source: DenyCache`).
    /// - `Err(e)`: Redis did not answer (timeout, breaker open, connection: see
    ///   [`Error::is_outage`](crate::Error::is_outage)) or refused the call (a server whose
    ///   module predates `UPTO`, or a [`Policy::log`], which takes no `UPTO`). Unlike
    ///   `check`, no failure mode decides here: the caller picks its fallback. A call that
    ///   timed out may still have been taken on the server.
    ///
    /// Works with both engines (the module and the Lua twin) and on a cluster (the key's
    /// slot). The policy's shadow flag is not applied.
    ///
    /// ```no_run
    /// use redis_rl_client::{Limiter, Policy};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = Limiter::standalone("redis://127.0.0.1:6379/").unwrap();
    /// let global = Policy::sliding(10_000, 60_000).unwrap();
    /// let grant = limiter.take_upto("rl:{global}", &global, 50).await.unwrap();
    /// let mut lease = grant.granted;
    /// // ... spend the lease in process, one unit per admitted request ...
    /// lease = lease.saturating_sub(3);
    /// // When the lease ends, give back what is left (best effort: see RL.REFUND).
    /// limiter.refund("rl:{global}", &global, lease).await.unwrap();
    /// # }
    /// ```
    pub async fn take_upto(&self, key: &str, policy: &Policy, n: u64) -> Result<Grant> {
        self.upto(key, policy, n, false).await
    }

    /// What [`Limiter::take_upto`] would grant now (`COST n UPTO PEEK`), taking nothing.
    pub async fn peek_upto(&self, key: &str, policy: &Policy, n: u64) -> Result<Grant> {
        self.upto(key, policy, n, true).await
    }

    async fn upto(&self, key: &str, policy: &Policy, n: u64, peek: bool) -> Result<Grant> {
        let call = Check {
            key,
            algorithm: policy.params(),
            cost: n,
            peek,
        };
        self.inner.stack.decider().take_upto(call).await
    }

    /// Gives back up to `amount` units of `policy` on `key` taken earlier (`RL.REFUND`,
    /// e.g. the unspent rest of a lease); returns the units given back. Best effort, as
    /// the README's RL.REFUND says: a token bucket caps at its capacity, the window
    /// counters give back only units of the current window. An amount of 0 sends nothing.
    /// `Err` when Redis did not answer: the units then stay taken until the limiter
    /// recovers them (nothing is ever given back twice).
    pub async fn refund(&self, key: &str, policy: &Policy, amount: u64) -> Result<u64> {
        if amount == 0 {
            return Ok(0);
        }
        let units = Refund {
            key,
            algorithm: policy.params(),
            amount,
        };
        let given = self.inner.stack.decider().refund(units).await;
        // The units may admit what the fleet's deny caches refuse.
        self.announce(&[key]);
        given
    }

    /// Deletes `key`'s limiter state (`RL.RESET`, the module's or the twin's): true when it
    /// held some. Its cached refusal goes too, in this process and, with
    /// [`share_denials`](Self::share_denials), in every limiter of the fleet.
    pub async fn reset(&self, key: &str) -> Result<bool> {
        let deleted = self.inner.resets.reset(key).await;
        self.inner.cached.forget(key);
        self.announce(&[key]);
        deleted
    }

    /// The units a fixed window or calendar quota on `key` counts now and the milliseconds
    /// until its key expires (`RL.STATE`, the module's or the twin's); `None` for a missing
    /// key or another algorithm.
    pub async fn window_count(&self, key: &str) -> Result<Option<WindowCount>> {
        let v = self.inner.resets.state(key).await?;
        Ok(WindowCount::parse(&v))
    }

    /// Shares forgotten refusals with every limiter listening on `channel` (gateways of one
    /// fleet use `<key_prefix>:denials`): this limiter publishes there the keys its refunds,
    /// settlements and resets give units back to, and drops from its deny cache the keys
    /// others publish. Needs `PUBLISH` and `SUBSCRIBE` on the channel for the limiter's user,
    /// and a limiter built on a URL (its own connection listens). Without it, a refusal
    /// cached by another process holds until its retry time.
    pub fn share_denials(&self, channel: impl Into<String>) -> Result<()> {
        self.inner
            .denials
            .share(channel.into(), self.inner.cached.clone())
    }

    /// Forgets the cached refusals of `keys` here, and tells the fleet.
    pub(crate) fn announce(&self, keys: &[&str]) {
        for key in keys {
            self.inner.cached.forget(key);
        }
        self.inner.denials.announce(&self.inner.transport, keys);
    }

    /// Joins a fleet: registers this limiter (one per gateway process) on `config.key` and
    /// keeps its membership and the live fleet size with a heartbeat task on the current
    /// tokio runtime (see [`crate::fleet`]). Until [`Limiter::shutdown`] or the last clone
    /// is dropped; joining again replaces the membership. Errors: settings the server would
    /// refuse, or no tokio runtime. Needs the module (the Lua twin has no RL.CONCURRENCY:
    /// the size then stays unknown and the fallback divides by `instances`).
    ///
    /// ```no_run
    /// use redis_rl_client::{FleetConfig, Limiter};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = Limiter::standalone("redis://127.0.0.1:6379/").unwrap();
    /// limiter.join_fleet(FleetConfig::new("rl:{fleet}")).unwrap();
    /// // ... serve; within a heartbeat limiter.fleet_size() is the number of gateways ...
    /// limiter.shutdown().await; // leaves the fleet at once
    /// # }
    /// ```
    pub fn join_fleet(&self, config: FleetConfig) -> Result<()> {
        let membership = Membership::start(
            config,
            self.inner.transport.clone(),
            self.inner.fleet.clone(),
        )?;
        *self.lock_membership() = Some(membership);
        Ok(())
    }

    /// The fleet size last read from Redis (`None` before the first heartbeat answered, or
    /// without [`Limiter::join_fleet`]). Kept through an outage: it is what the local
    /// fallback divides by.
    pub fn fleet_size(&self) -> Option<NonZeroU32> {
        self.inner.fleet.size()
    }

    /// For a clean stop: gives back the unspent units of every lease (`RL.REFUND`) and
    /// leaves the fleet (its lease released at once, so the others count one member less at
    /// their next heartbeat). Best effort within the call timeout.
    pub async fn shutdown(&self) {
        self.inner.stack.inner().leases().release_all().await;
        let membership = self.lock_membership().take();
        if let Some(m) = membership {
            m.leave().await;
        }
    }

    fn lock_membership(&self) -> std::sync::MutexGuard<'_, Option<Membership>> {
        self.inner
            .membership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Runs any command through the breaker and timeout (tier lookups use this).
    pub async fn query(&self, cmd: &Cmd, slot: Option<u16>) -> Result<Value> {
        self.inner.transport.call(cmd, slot).await
    }

    /// The decider under the layers (calls that pick no failure mode of their own).
    pub(crate) fn decider(&self) -> &dyn Decider {
        self.inner.stack.decider()
    }

    /// The cluster slot of `key` (`None` on a standalone server), for [`Limiter::query`].
    pub fn slot_of(&self, key: &str) -> Option<u16> {
        self.inner.transport.slot_of(key)
    }

    /// Pings Redis directly (bypassing the breaker, within the timeout): for health checks.
    pub async fn ping(&self) -> bool {
        self.inner.transport.ping().await
    }

    /// [`ping`](Self::ping) with the reason of a failure.
    pub async fn ping_result(&self) -> Result<()> {
        self.inner.transport.ping_result().await
    }

    /// Commands Redis refuses to the limiter's user, and why (see
    /// [`Transport::refusals`]).
    pub fn refusals(&self) -> Vec<(String, crate::error::Refusal)> {
        self.inner.transport.refusals()
    }

    /// The circuit breaker's state.
    pub fn breaker_state(&self) -> BreakerState {
        self.inner.transport.breaker().state()
    }

    /// Counts since start.
    pub fn stats(&self) -> LimiterStats {
        let (redis_calls, errors) = self.inner.transport.counts();
        let leased = self.inner.stack.inner();
        let failover = leased.inner();
        let fallbacks = failover.counts();
        LimiterStats {
            redis_calls,
            errors,
            deny_cache: failover.inner().hits(),
            local: fallbacks.local,
            fail_open: fallbacks.fail_open,
            fail_closed: fallbacks.fail_closed,
            breaker: self.inner.transport.breaker().stats(),
            fleet_size: self.inner.fleet.size().map_or(0, NonZeroU32::get),
            leases: leased.leases().stats(),
        }
    }
}

#[cfg(all(test, feature = "transport"))]
mod tests {
    use redis::Value;

    use std::time::Duration;

    use crate::limiter::decision::Source;
    use crate::limiter::policy::Policy;
    use crate::testing::*;

    #[tokio::test(start_paused = true)]
    async fn take_upto_sends_upto_and_a_grant_of_nothing_is_cached() {
        let mock = Mock::new(false, |w| {
            match (w[0].as_str(), w.get(5).map(String::as_str)) {
                ("RL.SLIDING", Some("50")) => ints(&[1, 100, 0, 0, 60_000, 40]),
                ("RL.SLIDING", _) => ints(&[0, 100, 0, 250, 60_000, 0]),
                ("RL.REFUND", _) => ints(&[15, 100, 15, 0, 60_000]),
                _ => Value::Nil,
            }
        });
        let l = limiter(&mock);
        let p = Policy::sliding(100, 60_000).unwrap();
        let g = l.take_upto("g", &p, 50).await.unwrap();
        assert_eq!(g.granted, 40);
        assert!(g.decision.allows());
        assert_eq!(l.refund("g", &p, 15).await.unwrap(), 15);
        assert_eq!(l.refund("g", &p, 0).await.unwrap(), 0, "nothing sent");
        let g = l.take_upto("g", &p, 60).await.unwrap();
        assert_eq!(g.granted, 0);
        assert_eq!(g.decision.retry_after(), Some(Duration::from_millis(250)));
        // The denial is cached for one unit: no round trip for the next take or check.
        let g = l.take_upto("g", &p, 60).await.unwrap();
        assert_eq!((g.granted, g.decision.source), (0, Source::DenyCache));
        assert_eq!(l.check("g", &p).await.source, Source::DenyCache);
        // A peek always asks.
        let g = l.peek_upto("g", &p, 60).await.unwrap();
        assert_eq!(g.decision.source, Source::Redis);
        assert_eq!(
            mock.commands(),
            [
                vec!["RL.SLIDING", "g", "100", "60000", "COST", "50", "UPTO"],
                vec!["RL.REFUND", "g", "SLIDING", "100", "60000", "COST", "15"],
                vec!["RL.SLIDING", "g", "100", "60000", "COST", "60", "UPTO"],
                vec![
                    "RL.SLIDING",
                    "g",
                    "100",
                    "60000",
                    "COST",
                    "60",
                    "UPTO",
                    "PEEK"
                ],
            ]
        );
        // The log takes no UPTO: refused before any call.
        let log = Policy::log(10, 1_000).unwrap();
        assert!(l.take_upto("l", &log, 5).await.is_err());
        assert_eq!(mock.commands().len(), 4);
    }
}

/// What [`Limiter::window_count`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowCount {
    /// Units counted in the current window or period.
    pub count: u64,
    /// Milliseconds until the key expires (the window's end, at most a moment later).
    pub left_ms: u64,
}

impl WindowCount {
    /// From an `RL.STATE` reply (the module's or the twin's, a flat list of names and values
    /// or a map): `None` for a missing key or another algorithm. The Node.js addon reads the
    /// reply its host's client got with it.
    pub fn parse(v: &Value) -> Option<Self> {
        let pairs: Vec<(&Value, &Value)> = match v {
            Value::Array(items) => items
                .chunks(2)
                .filter_map(|c| Some((c.first()?, c.get(1)?)))
                .collect(),
            Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
            _ => return None,
        };
        let field = |name: &[u8]| {
            pairs.iter().find_map(|(k, v)| {
                let k = match k {
                    Value::BulkString(b) => b.as_slice(),
                    Value::SimpleString(s) => s.as_bytes(),
                    _ => return None,
                };
                (k == name).then_some(*v)
            })
        };
        let algorithm = match field(b"algorithm")? {
            Value::BulkString(b) => b.as_slice(),
            Value::SimpleString(s) => s.as_bytes(),
            _ => return None,
        };
        if algorithm != b"fixed window" && algorithm != b"calendar quota" {
            return None;
        }
        let int = |name: &[u8]| match field(name)? {
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        Some(Self {
            count: int(b"count")?,
            left_ms: int(b"ttl_ms")?,
        })
    }
}
