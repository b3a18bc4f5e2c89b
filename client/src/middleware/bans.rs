//! Bans and refusals around a request's decision: the ban check sent with the request's
//! limiter call (one `PTTL` per banning policy, concurrently on the same connection: one
//! round trip of latency), and what a refusal leaves behind (a count towards a ban and
//! towards the top offenders, queued off the request's path).

use futures_util::future::join_all;
use redis_rl_policy::{BanTarget, Plan};

use super::plan::Shared;
use crate::decision::{MultiDecision, Source};
use crate::limiter::Limiter;
use crate::offenders::Refusal;
use crate::policy::Policy;

/// The first of `targets` that is banned: its plan item and the ban's remaining
/// milliseconds. A failed read is no ban (the limits still apply).
pub(crate) async fn first_active(limiter: &Limiter, targets: &[BanTarget]) -> Option<(usize, u64)> {
    if targets.is_empty() {
        return None;
    }
    let reads = targets
        .iter()
        .map(|t| crate::bans::remaining_ms(limiter, &t.subject));
    let found = join_all(reads).await;
    targets.iter().zip(found).find_map(|(t, r)| match r {
        Ok(Some(ms)) => Some((t.index, ms)),
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(error = %e, policy = %t.policy, "ban not read: limits only");
            None
        }
    })
}

/// A banned request: gives back what its limiter call took (in the background; a banned
/// request consumes nothing, as any refused one) and counts it as a refusal of the
/// banning policy (not towards another ban).
pub(crate) fn banned(
    shared: &Shared,
    plan: &Plan,
    items: &[(&str, Policy)],
    md: &MultiDecision,
    index: usize,
) {
    if md.denied.is_none() {
        let taken: Vec<(String, Policy)> = items
            .iter()
            .zip(&md.decisions)
            .filter(|((_, p), d)| !p.is_shadow() && d.source == Source::Redis)
            .map(|((k, p), _)| ((*k).to_owned(), *p))
            .collect();
        if !taken.is_empty() {
            let limiter = shared.limiter.clone();
            tokio::spawn(async move {
                for (key, policy) in taken {
                    if let Err(e) = limiter.refund(&key, &policy, 1).await {
                        tracing::debug!(error = %e, "a banned request's units stay taken");
                    }
                }
            });
        }
    }
    if let Some(item) = plan.items.get(index) {
        metrics::counter!("rl_requests_total", "dimension" => item.label.clone(), "outcome" => "banned")
            .increment(1);
        shared.offenders.record(Refusal {
            policy: item.label.clone(),
            subject: item.subject().to_owned(),
            ban: None,
        });
    }
}

/// A request refused by its limits: one refusal of the refusing policy towards the top
/// offenders, and one towards the ban of each banning policy whose key denied (a refusal
/// while Redis was unavailable is nobody's fault and counts nowhere).
pub(crate) fn refused(shared: &Shared, plan: &Plan, md: &MultiDecision, targets: &[BanTarget]) {
    let Some(denied) = md.denied else { return };
    let (Some(item), Some(decision)) = (plan.items.get(denied), md.decisions.get(denied)) else {
        return;
    };
    if decision.source.is_fallback() {
        return;
    }
    let denied_subject = |subject: &str| {
        plan.items
            .iter()
            .zip(&md.decisions)
            .any(|(i, d)| i.subject() == subject && d.is_denied() && !d.shadow)
    };
    let mut counted_refuser = false;
    for t in targets {
        if !denied_subject(&t.subject) {
            continue;
        }
        let refuser = t.subject == item.subject();
        counted_refuser |= refuser;
        shared.offenders.record(Refusal {
            policy: t.policy.clone(),
            subject: t.subject.clone(),
            ban: Some(t.ban),
        });
    }
    if !counted_refuser {
        shared.offenders.record(Refusal {
            policy: item.label.clone(),
            subject: item.subject().to_owned(),
            ban: None,
        });
    }
}
