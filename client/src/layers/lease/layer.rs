//! The limiter's layer of leases: a hot key's units come from this instance's lease of it;
//! every other key, a peek, or a hot key whose lease cannot be had (Redis unavailable, the
//! table full) goes to the layer below.

use super::leasable;
use super::table::{Leases, Reserve};
use crate::layers::decider::{cost_at, denied_at};
use crate::layers::stack::{layer_over, Ask, Keys, Layer};
use crate::limiter::decision::{Decision, MultiDecision};
use crate::limiter::policy::Policy;

/// Hot keys served from leases over the layer `inner`.
#[derive(Debug)]
pub(crate) struct Leased<L> {
    inner: L,
    leases: Leases,
}

impl<L: Layer> Leased<L> {
    pub(crate) fn new(inner: L, leases: Leases) -> Self {
        Self { inner, leases }
    }

    /// The layer below.
    pub(crate) fn inner(&self) -> &L {
        &self.inner
    }

    /// The lease table.
    pub(crate) fn leases(&self) -> &Leases {
        &self.leases
    }
}

layer_over!(Leased);

impl<L: Layer> Leased<L> {
    async fn decide_one(&self, ask: Ask<'_>) -> Decision {
        if !ask.peek && leasable(ask.policy, ask.cost) {
            match self.leases.reserve(ask.key, ask.policy, ask.cost).await {
                Reserve::Reserved(_, d) | Reserve::Denied(d) => return d,
                Reserve::Ordinary => {}
            }
        }
        self.inner.decide(ask).await
    }

    /// All or nothing: hot keys' units reserved from their leases first, then the other
    /// keys through the layer below in one go; the reserved units go back to their leases
    /// when another key denies (a lease unit is spent only if every other key allowed the
    /// request).
    async fn decide_many(&self, items: Keys<'_>, costs: &[u64]) -> MultiDecision {
        let mut leased: Vec<Option<Decision>> = vec![None; items.len()];
        let mut reserved = Vec::new();
        for (i, (key, policy)) in items.iter().enumerate() {
            // Each key its own cost: a leased key spends its cost from its lease.
            let cost = cost_at(costs, i);
            if !leasable(policy, cost) {
                continue;
            }
            match self.leases.reserve(key, policy, cost).await {
                Reserve::Reserved(r, d) => {
                    reserved.push(r);
                    if let Some(slot) = leased.get_mut(i) {
                        *slot = Some(d);
                    }
                }
                Reserve::Denied(d) => {
                    for r in reserved {
                        self.leases.give_back(r);
                    }
                    return denied_at(items, |(_, p)| p.params(), i, d);
                }
                Reserve::Ordinary => {}
            }
        }
        if reserved.is_empty() {
            // No key served from a lease: every one goes to Redis, as asked.
            return self.inner.decide_all(items, costs).await;
        }
        let rest: Vec<usize> = (0..items.len())
            .filter(|&i| leased.get(i).is_some_and(Option::is_none))
            .collect();
        let rest_items: Vec<(&str, &Policy)> =
            rest.iter().filter_map(|&i| items.get(i).copied()).collect();
        let rest_costs: Vec<u64> = rest.iter().map(|&i| cost_at(costs, i)).collect();
        let md = self.inner.decide_all(&rest_items, &rest_costs).await;
        if md.denied.is_some() {
            for r in reserved {
                self.leases.give_back(r);
            }
        }
        for (&i, d) in rest.iter().zip(md.decisions) {
            if let Some(slot) = leased.get_mut(i) {
                *slot = Some(d);
            }
        }
        MultiDecision {
            denied: md.denied.and_then(|j| rest.get(j).copied()),
            decisions: items
                .iter()
                .zip(leased)
                .map(|((_, p), d)| d.unwrap_or_else(|| crate::layers::decider::unknown(p.params())))
                .collect(),
        }
    }
}
