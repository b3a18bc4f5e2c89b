//! Shadow policies ([`Policy::shadow`]): checked and reported like the others (their
//! decisions say `shadow: true`), never denying a request. In a multi-key check they are
//! decided apart from the enforced keys, at the same time, so a shadow denial neither
//! denies the request nor keeps the enforced keys from taking their units.

use futures_util::future::join_all;

use crate::layers::decider::{cost_at, unknown};
use crate::layers::stack::{layer_over, Ask, Keys, Layer};
use crate::limiter::decision::{Decision, MultiDecision};
use crate::limiter::policy::Policy;

/// The layer that splits shadow policies from enforced ones.
#[derive(Debug)]
pub(crate) struct Shadow<L> {
    inner: L,
}

impl<L: Layer> Shadow<L> {
    pub(crate) fn new(inner: L) -> Self {
        Self { inner }
    }

    /// The layer below.
    pub(crate) fn inner(&self) -> &L {
        &self.inner
    }
}

layer_over!(Shadow);

impl<L: Layer> Shadow<L> {
    async fn decide_one(&self, ask: Ask<'_>) -> Decision {
        let mut d = self.inner.decide(ask).await;
        d.shadow = ask.policy.is_shadow();
        d
    }

    async fn decide_many(&self, items: Keys<'_>, costs: &[u64]) -> MultiDecision {
        if !items.iter().any(|(_, p)| p.is_shadow()) {
            // Nothing to split (the usual request): no copies of the keys and costs.
            return self.inner.decide_all(items, costs).await;
        }
        let (shadow, enforced): (Vec<usize>, Vec<usize>) =
            (0..items.len()).partition(|&i| items.get(i).is_some_and(|(_, p)| p.is_shadow()));
        let pick = |i: &usize| items.get(*i).copied();
        let enforced_items: Vec<(&str, &Policy)> = enforced.iter().filter_map(pick).collect();
        let enforced_costs: Vec<u64> = enforced.iter().map(|&i| cost_at(costs, i)).collect();
        let shadow_checks = shadow.iter().filter_map(|&i| {
            let (key, policy) = items.get(i).copied()?;
            Some(self.decide_one(Ask {
                key,
                policy,
                cost: cost_at(costs, i),
                peek: false,
            }))
        });
        let (enforced_result, shadow_results) = tokio::join!(
            self.inner.decide_all(&enforced_items, &enforced_costs),
            join_all(shadow_checks)
        );
        let mut decisions: Vec<Decision> = items.iter().map(|(_, p)| unknown(p.params())).collect();
        let placed = enforced
            .iter()
            .zip(enforced_result.decisions)
            .chain(shadow.iter().zip(shadow_results));
        for (&i, d) in placed {
            if let Some(slot) = decisions.get_mut(i) {
                *slot = d;
            }
        }
        MultiDecision {
            denied: enforced_result
                .denied
                .and_then(|j| enforced.get(j).copied()),
            decisions,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::limiter::policy::Policy;
    use crate::testing::*;

    #[tokio::test(start_paused = true)]
    async fn a_shadow_policy_records_but_never_denies() {
        // The enforced key is a booking of one key: its algorithm's own command.
        let mock = Mock::new(false, |w| match w[1].as_str() {
            "a" => ints(&[1, 10, 5, 0, 10]),
            _ => deny(900),
        });
        let l = limiter(&mock);
        let enforced = Policy::sliding(10, 1_000).unwrap();
        let shadow = Policy::sliding(1, 1_000).unwrap().shadow(true);
        let md = l.check_all(&[("a", enforced), ("s", shadow)]).await;
        assert!(md.allows());
        assert!(md.decisions[1].shadow);
        assert!(md.decisions[1].is_denied());
        assert!(md.decisions[1].allows());
        assert_eq!(md.retry_after(), None);
        assert_eq!(md.decisions[0].remaining, 5);
        let single = l.check("s", &shadow).await;
        assert!(single.allows() && single.is_denied());
    }
}
