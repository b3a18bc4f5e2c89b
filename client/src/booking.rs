//! One request's units on several keys, each key its own count: taking them all or none,
//! booking them over the limit for a later slot (`FORCE`), looking without taking, and
//! settling them after the response ([`Limiter::settle_all`]). What the rate-limit
//! middleware does with the policy engine's [`redis_rl_policy::Booking`].

use std::collections::BTreeMap;

use futures_util::future::join_all;

use crate::command;
use crate::decider::unknown;
use crate::decision::{parse_all, Decision, MultiDecision};
use crate::error::Result;
use crate::limiter::Limiter;
use crate::policy::Policy;

pub use redis_rl_policy::Adjust;

/// Indices of `units` grouped by their value, in order of first appearance.
fn by_units(units: &[u64]) -> Vec<(u64, Vec<usize>)> {
    let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
    for (i, &u) in units.iter().enumerate() {
        match groups.iter_mut().find(|(v, _)| *v == u) {
            Some((_, members)) => members.push(i),
            None => groups.push((u, vec![i])),
        }
    }
    groups
}

impl Limiter {
    /// Takes `units[i]` on `items[i]`, all or nothing. Equal units: one
    /// [`Limiter::check_all_n`] (atomic per hash slot). Different units: one call per
    /// distinct number of units, in order; when one denies, the units the earlier calls took
    /// are given back (`RL.REFUND`, best effort as across hash slots).
    pub async fn check_all_units<K: AsRef<str>>(
        &self,
        items: &[(K, Policy)],
        units: &[u64],
    ) -> MultiDecision {
        let groups = by_units(units);
        if groups.len() <= 1 {
            let n = groups.first().map_or(1, |(n, _)| *n);
            return self.check_all_n(items, n).await;
        }
        let mut decisions: Vec<Decision> = items.iter().map(|(_, p)| unknown(p.params())).collect();
        let mut taken: Vec<(u64, Vec<usize>)> = Vec::new();
        for (n, members) in groups {
            let group: Vec<(&str, Policy)> = members
                .iter()
                .filter_map(|&i| items.get(i).map(|(k, p)| (k.as_ref(), *p)))
                .collect();
            let md = self.check_all_n(&group, n).await;
            for (&i, d) in members.iter().zip(md.decisions) {
                if let Some(slot) = decisions.get_mut(i) {
                    *slot = d;
                }
            }
            if let Some(j) = md.denied {
                let refunds = taken.iter().flat_map(|(n, members)| {
                    members.iter().filter_map(move |&i| {
                        let (k, p) = items.get(i)?;
                        (!p.is_shadow()).then(|| self.refund(k.as_ref(), p, *n))
                    })
                });
                for r in join_all(refunds).await {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "refund after a denial failed");
                    }
                }
                return MultiDecision {
                    denied: members.get(j).copied(),
                    decisions,
                };
            }
            taken.push((n, members));
        }
        MultiDecision {
            denied: None,
            decisions,
        }
    }

    /// What taking `units[i]` on each of `items[i]` would answer, taking nothing: one
    /// `RL.ALL ... PEEK` per hash slot and number of units, asked of Redis itself (not the
    /// deny cache, whose waits would be stale), every key's own wait. `Err` when Redis did
    /// not answer.
    pub async fn peek_all_units(
        &self,
        items: &[(&str, &Policy)],
        units: &[u64],
    ) -> Result<Vec<Decision>> {
        self.per_slot(items, units, true).await
    }

    /// Takes `units[i]` on each of `items[i]` even over the limits (`RL.ALL ... FORCE`, one
    /// call per hash slot and number of units): what went past a limit is a debt the next
    /// callers wait for. Needs the module (the Lua twin refuses `FORCE`).
    pub async fn force_all_units(
        &self,
        items: &[(&str, &Policy)],
        units: &[u64],
    ) -> Result<Vec<Decision>> {
        self.per_slot(items, units, false).await
    }

    async fn per_slot(
        &self,
        items: &[(&str, &Policy)],
        units: &[u64],
        peek: bool,
    ) -> Result<Vec<Decision>> {
        // (slot, units) -> the items' indices: one RL.ALL each.
        let mut groups: BTreeMap<(Option<u16>, u64), Vec<usize>> = BTreeMap::new();
        for (i, ((key, _), n)) in items.iter().zip(units).enumerate() {
            groups.entry((self.slot_of(key), *n)).or_default().push(i);
        }
        let calls = groups.iter().map(|(&(slot, n), members)| async move {
            let keys: Vec<(&str, &redis_rl_core::AnyParams)> = members
                .iter()
                .filter_map(|&i| items.get(i).map(|(k, p)| (*k, p.params())))
                .collect();
            let mut cmd = command::all(&keys, n, peek);
            if !peek {
                cmd.arg("FORCE");
            }
            let reply = self.query(&cmd, slot).await?;
            parse_all(&reply, keys.len()).map(|(_, d)| d)
        });
        let mut decisions: Vec<Decision> = items.iter().map(|(_, p)| unknown(p.params())).collect();
        for (members, result) in groups.values().zip(join_all(calls).await) {
            for (&i, d) in members.iter().zip(result?) {
                if let Some(slot) = decisions.get_mut(i) {
                    *slot = d;
                }
            }
        }
        Ok(decisions)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_group_in_order_of_first_appearance() {
        assert_eq!(
            by_units(&[1, 50, 1, 50, 7]),
            [(1, vec![0, 2]), (50, vec![1, 3]), (7, vec![4])]
        );
        assert!(by_units(&[]).is_empty());
    }
}
