//! The limiter's layer of leases: a hot key's units come from this instance's lease of it;
//! every other key, a peek, or a hot key whose lease cannot be had (Redis unavailable, the
//! table full) goes to the layer below.

use super::table::{leasable, Leases, Reserve};
use crate::backend::BoxFuture;
use crate::decider::{denied_at, Decider};
use crate::decision::{Decision, MultiDecision};
use crate::policy::Policy;
use crate::stack::{Keys, Layer};

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

impl<L: Layer> Layer for Leased<L> {
    fn decide<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u64,
        peek: bool,
    ) -> BoxFuture<'a, Decision> {
        Box::pin(self.decide_one(key, policy, cost, peek))
    }

    fn decide_all<'a>(&'a self, items: Keys<'a>, cost: u64) -> BoxFuture<'a, MultiDecision> {
        Box::pin(self.decide_many(items, cost))
    }

    fn decider(&self) -> &dyn Decider {
        self.inner.decider()
    }
}

impl<L: Layer> Leased<L> {
    async fn decide_one(&self, key: &str, policy: &Policy, cost: u64, peek: bool) -> Decision {
        if !peek && leasable(policy, cost) {
            match self.leases.reserve(key, policy, cost).await {
                Reserve::Reserved(_, d) | Reserve::Denied(d) => return d,
                Reserve::Ordinary => {}
            }
        }
        self.inner.decide(key, policy, cost, peek).await
    }

    /// All or nothing: hot keys' units reserved from their leases first, then the other
    /// keys through the layer below in one go; the reserved units go back to their leases
    /// when another key denies (a lease unit is spent only if every other key allowed the
    /// request).
    async fn decide_many(&self, items: Keys<'_>, cost: u64) -> MultiDecision {
        let mut leased: Vec<Option<Decision>> = vec![None; items.len()];
        let mut reserved = Vec::new();
        for (i, (key, policy)) in items.iter().enumerate() {
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
        let rest: Vec<usize> = (0..items.len())
            .filter(|&i| leased.get(i).is_some_and(Option::is_none))
            .collect();
        let rest_items: Vec<(&str, &Policy)> =
            rest.iter().filter_map(|&i| items.get(i).copied()).collect();
        let md = self.inner.decide_all(&rest_items, cost).await;
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
                .map(|((_, p), d)| d.unwrap_or_else(|| crate::decider::unknown(p.params())))
                .collect(),
        }
    }
}
