//! One request's units on several keys, each key its own count: taking them all or none,
//! booking them over the limit for a later slot (`FORCE`), looking without taking, and
//! settling them after the response ([`Limiter::settle_all`]). What the rate-limit
//! middleware does with the policy engine's [`redis_rl_policy::Booking`].

use futures_util::future::join_all;

use crate::error::Result;
use crate::layers::decider::{AllMode, EveryKey};
use crate::limiter::decision::{Decision, MultiDecision};
use crate::limiter::policy::Policy;
use crate::limiter::Limiter;

pub use redis_rl_policy::Adjust;

impl Limiter {
    /// Takes `units[i]` on `items[i]` (a missing one is 1), all or nothing, equal units or
    /// not: one decision, one `RL.ALL ... COSTS` per hash slot (atomic on a standalone
    /// server and within a slot; across slots as [`Limiter::check_all_n`] says), with the
    /// Lua twin too. A hot key's units come from its lease, the local fallback takes each
    /// key's own units.
    pub async fn check_all_units<K: AsRef<str>>(
        &self,
        items: &[(K, Policy)],
        units: &[u64],
    ) -> MultiDecision {
        self.check_all_costs(items, units).await
    }

    /// What taking `units[i]` on each of `items[i]` would answer, taking nothing: one
    /// `RL.ALL ... COSTS ... PEEK` per hash slot (the module's command or the Lua twin, as
    /// for [`Limiter::check_all`]), asked of Redis itself (not the deny cache, whose waits
    /// would be stale), every key's own wait. `Err` when Redis did not answer.
    pub async fn peek_all_units(
        &self,
        items: &[(&str, &Policy)],
        units: &[u64],
    ) -> Result<Vec<Decision>> {
        self.every_key(items, units, AllMode::Peek).await
    }

    /// Takes `units[i]` on each of `items[i]` even over the limits (`RL.ALL ... COSTS ...
    /// FORCE`, one call per hash slot, by the module or the Lua twin): what went past a
    /// limit is a debt the next callers wait for.
    pub async fn force_all_units(
        &self,
        items: &[(&str, &Policy)],
        units: &[u64],
    ) -> Result<Vec<Decision>> {
        self.every_key(items, units, AllMode::Force).await
    }

    pub(crate) async fn every_key(
        &self,
        items: &[(&str, &Policy)],
        units: &[u64],
        mode: AllMode,
    ) -> Result<Vec<Decision>> {
        let params: Vec<(&str, &redis_rl_core::AnyParams)> =
            items.iter().map(|(k, p)| (*k, p.params())).collect();
        self.decider()
            .every_key(EveryKey {
                items: &params,
                costs: units,
                mode,
            })
            .await
    }

    /// Settles a request's reservations once its actual cost is known: each
    /// [`Adjust::Refund`] given back (`RL.REFUND`, one per key, all at once), each
    /// [`Adjust::Charge`] taken with `FORCE` (one `RL.ALL` per hash slot and amount, so
    /// the keys of one slot are charged together). Returns the units given back; `Err` when
    /// Redis did not answer a call (the others still ran; nothing is retried).
    ///
    /// ```no_run
    /// use redis_rl_client::booking::Adjust;
    /// use redis_rl_client::{Limiter, Policy};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = Limiter::standalone("redis://127.0.0.1:6379/").unwrap();
    /// let minute = Policy::gcra(100_000, 60_000, None).unwrap();
    /// let day = Policy::fixed(2_000_000, 86_400_000).unwrap();
    /// let items = [("t:{acme}:1m", minute), ("t:{acme}:1d", day)];
    /// // Reserve max_tokens on both, then settle with the reported usage.
    /// if limiter.check_all_n(&items, 4_096).await.denied.is_none() {
    ///     let used = 812;
    ///     let refund = Adjust::Refund(4_096 - used);
    ///     let settle: Vec<_> = items.iter().map(|(k, p)| (*k, p, refund)).collect();
    ///     limiter.settle_all(&settle).await.unwrap();
    /// }
    /// # }
    /// ```
    pub async fn settle_all(&self, items: &[(&str, &Policy, Adjust)]) -> Result<u64> {
        let refunds = items.iter().filter_map(|(k, p, a)| match a {
            Adjust::Refund(n) => Some(self.refund(k, p, *n)),
            _ => None,
        });
        let charged: Vec<(&str, &Policy)> = items
            .iter()
            .filter(|(_, _, a)| matches!(a, Adjust::Charge(_)))
            .map(|(k, p, _)| (*k, *p))
            .collect();
        let charge_units: Vec<u64> = items
            .iter()
            .filter_map(|(_, _, a)| match a {
                Adjust::Charge(n) => Some(*n),
                _ => None,
            })
            .collect();
        let charge = async {
            if charged.is_empty() {
                Ok(Vec::new())
            } else {
                self.force_all_units(&charged, &charge_units).await
            }
        };
        let (refunded, charged) = tokio::join!(join_all(refunds), charge);
        let mut total = 0u64;
        for r in refunded {
            total = total.saturating_add(r?);
        }
        charged?;
        Ok(total)
    }
}
