//! The rate limit service's side of the request flow ([`redis_rl_flow::counters`]): a
//! request's counted descriptors go through the flow's book and record steps (one decision
//! per request, all or nothing across descriptors, each descriptor its own cost; counters
//! that can admit nothing answered without Redis; each descriptor its own count when a
//! layer refused locally; refusals towards the top offenders), and this runs what each
//! step asks with the gateway's limiter and its layers (shadow, leases, deny cache,
//! breaker, failure modes). A request over one descriptor's limit so consumes nothing of
//! the others (envoyproxy/ratelimit increments every counter, the over-limit request
//! included).

use redis_rl_client::{Limiter, Policy};
use redis_rl_flow::counters::{Counter, CounterFlow, CounterStep};
use redis_rl_flow::{Decided, Refusal, Take};
use redis_rl_middleware::decided;

use super::plan::Planned;

/// The name a domain's refusals are counted under among the top offenders (`GET /top`):
/// `rls:<domain>`, apart from the gateway's dimensions and rules.
pub fn top_policy(domain: &str) -> String {
    format!("rls:{domain}")
}

/// What a request's descriptors got.
pub struct Outcome {
    /// Each descriptor's decision (`None`: not counted, no limit).
    pub decided: Vec<Option<Decided>>,
    /// An enforced descriptor denied the request.
    pub refused: bool,
    /// Refusals to queue towards the top offenders.
    pub refusals: Vec<Refusal>,
}

/// Decides the descriptors of a request in `domain`.
pub async fn decide(limiter: &Limiter, domain: &str, planned: &[Planned]) -> Outcome {
    // Each counter's descriptor, and its policy (`None`: a rule of 0 requests per unit).
    let mut at: Vec<(usize, Option<Policy>)> = Vec::new();
    let mut counters: Vec<Counter> = Vec::new();
    for (i, p) in planned.iter().enumerate() {
        let Planned::Limited(l) = p else { continue };
        at.push((i, l.policy));
        counters.push(Counter {
            key: l.key.clone(),
            units: l.cost,
            shadow: l.shadow,
            admits: l.policy.is_some(),
            give_back: l.refund,
            window_ms: l.unit.seconds().saturating_mul(1_000),
            subject_len: l.subject_len,
        });
    }
    let policy_of = |t: &Take| at.get(t.item).and_then(|(_, p)| *p);
    let (mut flow, mut step) = CounterFlow::start(counters, top_policy(domain));
    let counted = loop {
        step = match step {
            CounterStep::Return(takes) => {
                let mut out = Vec::with_capacity(takes.len());
                for t in &takes {
                    let Some(p) = policy_of(t) else { continue };
                    let _ = limiter.refund(&t.key, &p, t.units).await;
                    out.push(decided(&limiter.peek(&t.key, &p, 0).await));
                }
                flow.returned(out)
            }
            CounterStep::Book(book) => {
                let items: Vec<(&str, Policy)> = book
                    .takes
                    .iter()
                    .filter_map(|t| Some((t.key.as_str(), policy_of(t)?)))
                    .collect();
                let units: Vec<u64> = book.takes.iter().map(|t| t.units).collect();
                let md = limiter.check_all_units(&items, &units).await;
                flow.booked(md.decisions.iter().map(decided).collect(), md.denied)
            }
            CounterStep::Look(takes) => {
                let policies: Vec<(&str, Policy)> = takes
                    .iter()
                    .filter_map(|t| Some((t.key.as_str(), policy_of(t)?)))
                    .collect();
                let items: Vec<(&str, &Policy)> = policies.iter().map(|(k, p)| (*k, p)).collect();
                let looked = match limiter.peek_all_units(&items, &vec![0; items.len()]).await {
                    Ok(ds) => Some(ds.iter().map(decided).collect()),
                    Err(e) => {
                        tracing::debug!(error = %e, "descriptors not asked: their statuses stay unknown");
                        None
                    }
                };
                flow.looked(looked)
            }
            CounterStep::Done(counted) => break counted,
        };
    };
    // Before answering: the refused request consumes nothing.
    for t in &counted.record.give_back {
        if let Some(p) = policy_of(t) {
            let _ = limiter.refund(&t.key, &p, t.units).await;
        }
    }
    let mut out: Vec<Option<Decided>> = vec![None; planned.len()];
    for ((i, _), d) in at.iter().zip(counted.decided) {
        if let Some(slot) = out.get_mut(*i) {
            *slot = d;
        }
    }
    Outcome {
        decided: out,
        refused: counted.refused,
        refusals: counted.record.refusals,
    }
}
