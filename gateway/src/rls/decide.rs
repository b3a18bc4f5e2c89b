//! One decision per request: every counted descriptor of a `ShouldRateLimit` call is taken
//! together or not at all. Descriptors of one cost go in one `RL.ALL` (atomic on the
//! server); the rare request whose descriptors cost differently (per-descriptor
//! `hits_addend`) makes one call per cost, in order, and gives back what the earlier calls
//! took when a later one denies. A request over one descriptor's limit so consumes nothing
//! of the others (envoyproxy/ratelimit increments every counter, the over-limit request
//! included).

use std::time::Duration;

use redis_rl_client::{Decision, Limiter, Policy, Source, Verdict};

use super::plan::{Limited, Planned};

/// The most keys of one `RL.ALL` (the module's default `rl.max-all-keys`).
const MAX_KEYS_PER_CALL: usize = 16;

/// One counter of the request: descriptors that name the same counter are counted once,
/// their costs added.
struct Counter<'a> {
    key: &'a str,
    policy: Policy,
    cost: u64,
    members: Vec<usize>,
}

/// The decision of each descriptor (`None`: not counted, no limit), and whether the request
/// is refused (an enforced descriptor denied it).
pub async fn decide(limiter: &Limiter, planned: &[Planned]) -> (Vec<Option<Decision>>, bool) {
    let mut out: Vec<Option<Decision>> = vec![None; planned.len()];
    let mut counters: Vec<Counter<'_>> = Vec::new();
    let mut refused = false;
    for (i, p) in planned.iter().enumerate() {
        let Planned::Limited(l) = p else { continue };
        let Some(policy) = l.policy else {
            // 0 requests per unit: no counter to ask, every hit is over the limit.
            let d = zero_limit(l);
            refused |= d.is_denied() && !l.shadow;
            if let Some(slot) = out.get_mut(i) {
                *slot = Some(d);
            }
            continue;
        };
        if l.refund {
            let _ = limiter.refund(&l.key, &policy, l.cost).await;
            let d = limiter.peek(&l.key, &policy, 0).await;
            if let Some(slot) = out.get_mut(i) {
                *slot = Some(d);
            }
            continue;
        }
        match counters.iter_mut().find(|c| c.key == l.key) {
            Some(c) => {
                c.cost = c.cost.saturating_add(l.cost);
                c.members.push(i);
            }
            None => counters.push(Counter {
                key: &l.key,
                policy,
                cost: l.cost,
                members: vec![i],
            }),
        }
    }

    // Calls: by cost (in order of first appearance), at most MAX_KEYS_PER_CALL keys each.
    let mut calls: Vec<(u64, Vec<usize>)> = Vec::new();
    for (ci, c) in counters.iter().enumerate() {
        match calls
            .iter_mut()
            .find(|(cost, members)| *cost == c.cost && members.len() < MAX_KEYS_PER_CALL)
        {
            Some((_, members)) => members.push(ci),
            None => calls.push((c.cost, vec![ci])),
        }
    }
    let mut taken: Vec<(usize, u64)> = Vec::new();
    for (cost, members) in &calls {
        // Once refused, the rest is only looked at (cost 0 takes nothing).
        let cost = if refused { 0 } else { *cost };
        let items: Vec<(&str, Policy)> = members
            .iter()
            .filter_map(|&ci| counters.get(ci).map(|c| (c.key, c.policy)))
            .collect();
        let md = limiter.check_all_n(&items, cost).await;
        if md.denied.is_some() {
            refused = true;
            for &(ci, units) in &taken {
                if let Some(c) = counters.get(ci) {
                    let _ = limiter.refund(c.key, &c.policy, units).await;
                }
            }
            taken.clear();
        } else if cost > 0 {
            taken.extend(
                members
                    .iter()
                    .filter(|&&ci| counters.get(ci).is_some_and(|c| !c.policy.is_shadow()))
                    .map(|&ci| (ci, cost)),
            );
        }
        for (&ci, d) in members.iter().zip(md.decisions) {
            for &i in counters.get(ci).map_or(&[][..], |c| &c.members[..]) {
                if let Some(slot) = out.get_mut(i) {
                    *slot = Some(d);
                }
            }
        }
    }
    (out, refused)
}

/// The decision for a rule of 0 requests per unit: every hit is over; a cost of 0 is not.
fn zero_limit(l: &Limited) -> Decision {
    let window = Duration::from_secs(l.unit.seconds());
    Decision {
        verdict: if l.cost == 0 {
            Verdict::Allowed
        } else {
            Verdict::Never
        },
        limit: 0,
        remaining: 0,
        reset_after: window,
        source: Source::Redis,
        shadow: l.shadow,
    }
}
