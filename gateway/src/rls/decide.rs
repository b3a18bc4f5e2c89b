//! One decision per request: every counted descriptor of a `ShouldRateLimit` call is taken
//! together or not at all, in one `RL.ALL` (atomic on the server) whatever the descriptors'
//! costs (per-descriptor `hits_addend`: `COSTS`, each its own). A request over one
//! descriptor's limit so consumes nothing of the others (envoyproxy/ratelimit increments
//! every counter, the over-limit request included). Only a request of more counters than one
//! `RL.ALL` takes makes several calls, in order, giving back what the earlier ones took when
//! a later one denies.

use std::collections::HashMap;
use std::time::Duration;

use redis_rl_client::{Decision, Limiter, Policy, Source, Verdict};

use super::plan::{Limited, Planned, MAX_HITS};

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
///
/// A counter asked for more than [`MAX_HITS`] in one request (one descriptor's
/// `hits_addend`, or several descriptors of one counter added up) can never be admitted:
/// it is answered over the limit here, without asking Redis, which would refuse the cost as
/// an error, and an error is decided by the failure mode (`open` would admit it).
pub async fn decide(limiter: &Limiter, planned: &[Planned]) -> (Vec<Option<Decision>>, bool) {
    let mut out: Vec<Option<Decision>> = vec![None; planned.len()];
    let mut counters: Vec<Counter<'_>> = Vec::new();
    // Each counter's place in `counters`: one lookup per descriptor, linear in the request.
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut refused = false;
    for (i, p) in planned.iter().enumerate() {
        let Planned::Limited(l) = p else { continue };
        let Some(policy) = l.policy else {
            // 0 requests per unit: no counter to ask, every hit is over the limit.
            let d = never(l, l.cost);
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
        match index
            .get(l.key.as_str())
            .and_then(|&ci| counters.get_mut(ci))
        {
            Some(c) => {
                c.cost = c.cost.saturating_add(l.cost);
                c.members.push(i);
            }
            None => {
                index.insert(&l.key, counters.len());
                counters.push(Counter {
                    key: &l.key,
                    policy,
                    cost: l.cost,
                    members: vec![i],
                });
            }
        }
    }
    // Counters that can never admit this request: answered now, not sent.
    counters.retain(|c| {
        if c.cost <= MAX_HITS {
            return true;
        }
        refused |= !c.policy.is_shadow();
        for &i in &c.members {
            if let (Some(slot), Some(Planned::Limited(l))) = (out.get_mut(i), planned.get(i)) {
                *slot = Some(never(l, c.cost));
            }
        }
        false
    });

    // Calls: the counters in order, at most MAX_KEYS_PER_CALL each (one call for any
    // request of up to that many counters), each counter its own cost.
    let mut taken: Vec<usize> = Vec::new();
    for (first, chunk) in (0..)
        .step_by(MAX_KEYS_PER_CALL)
        .zip(counters.chunks(MAX_KEYS_PER_CALL))
    {
        let items: Vec<(&str, Policy)> = chunk.iter().map(|c| (c.key, c.policy)).collect();
        // Once refused, the rest is only looked at (cost 0 takes nothing).
        let costs: Vec<u64> = chunk
            .iter()
            .map(|c| if refused { 0 } else { c.cost })
            .collect();
        let md = limiter.check_all_units(&items, &costs).await;
        if md.denied.is_some() {
            refused = true;
            for &ci in &taken {
                if let Some(c) = counters.get(ci) {
                    let _ = limiter.refund(c.key, &c.policy, c.cost).await;
                }
            }
            taken.clear();
        } else if !refused {
            taken.extend(
                (first..)
                    .zip(chunk)
                    .filter(|(_, c)| !c.policy.is_shadow())
                    .map(|(ci, _)| ci),
            );
        }
        for (c, d) in chunk.iter().zip(md.decisions) {
            for &i in &c.members {
                if let Some(slot) = out.get_mut(i) {
                    *slot = Some(d);
                }
            }
        }
    }
    exact_counters(limiter, planned, &mut out).await;
    (out, refused)
}

/// Each descriptor reports its own counter, as envoyproxy/ratelimit does: a descriptor the
/// limiter did not ask Redis about because a layer refused the request locally (the deny
/// cache, a lease) would read as a fresh counter (its whole limit left, reset 0). Those are
/// looked at (`PEEK` with no cost: nothing taken), one call per hash slot, only on such a
/// refusal; a failed look leaves them as they were.
async fn exact_counters(limiter: &Limiter, planned: &[Planned], out: &mut [Option<Decision>]) {
    let unchecked: Vec<(usize, &str, Policy)> = planned
        .iter()
        .zip(out.iter())
        .enumerate()
        .filter_map(|(i, (p, d))| match (p, d) {
            (Planned::Limited(l), Some(d)) if d.source == Source::Unchecked => {
                Some((i, l.key.as_str(), l.policy?))
            }
            _ => None,
        })
        .collect();
    if unchecked.is_empty() {
        return;
    }
    // One look per counter, however many descriptors name it.
    let mut keys: Vec<(&str, Policy)> = Vec::new();
    for (_, key, policy) in &unchecked {
        if !keys.iter().any(|(k, _)| k == key) {
            keys.push((key, *policy));
        }
    }
    let items: Vec<(&str, &Policy)> = keys.iter().map(|(k, p)| (*k, p)).collect();
    let looked = match limiter.peek_all_units(&items, &vec![0; items.len()]).await {
        Ok(looked) => looked,
        Err(e) => {
            tracing::debug!(error = %e, "descriptors not asked: their statuses stay unknown");
            return;
        }
    };
    for (i, key, policy) in unchecked {
        let found = keys.iter().zip(&looked).find(|((k, _), _)| *k == key);
        if let (Some((_, d)), Some(slot)) = (found, out.get_mut(i)) {
            *slot = Some(Decision {
                shadow: policy.is_shadow(),
                ..*d
            });
        }
    }
}

/// The decision for a cost no counter of `l`'s rule can ever admit (a rule of 0 requests
/// per unit, or a cost over [`MAX_HITS`]): every hit is over; a cost of 0 is not.
fn never(l: &Limited, cost: u64) -> Decision {
    let window = Duration::from_secs(l.unit.seconds());
    Decision {
        verdict: if cost == 0 {
            Verdict::Allowed
        } else {
            Verdict::Never
        },
        limit: u64::from(l.requests_per_unit),
        remaining: 0,
        reset_after: window,
        source: Source::Redis,
        shadow: l.shadow,
    }
}
