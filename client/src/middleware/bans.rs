//! Bans and refusals around a request's decision: the ban check sent with the request's
//! limiter call (one `PTTL` per banning policy, concurrently on the same connection: one
//! round trip of latency; a ban found is believed for [`BAN_RECHECK`] without asking
//! again), and what a refusal leaves behind (a count towards a ban and towards the top
//! offenders, queued off the request's path).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis_rl_policy::{render_ban, BanTarget, Plan, Response};

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

/// A banned request's limiter call: gives back what it took (in the background; a banned
/// request consumes nothing, as any refused one).
pub(crate) fn give_back(
    shared: &Shared,
    items: &[(&str, Policy)],
    units: &[u64],
    md: &MultiDecision,
) {
    if md.denied.is_some() {
        return;
    }
    let taken: Vec<(String, Policy, u64)> = items
        .iter()
        .zip(&md.decisions)
        .zip(units.iter().copied().chain(std::iter::repeat(1)))
        .filter(|(((_, p), d), _)| !p.is_shadow() && d.source == Source::Redis)
        .map(|(((k, p), _), n)| ((*k).to_owned(), *p, n))
        .collect();
    if taken.is_empty() {
        return;
    }
    let limiter = shared.limiter.clone();
    tokio::spawn(async move {
        for (key, policy, units) in taken {
            if let Err(e) = limiter.refund(&key, &policy, units).await {
                tracing::debug!(error = %e, "a banned request's units stay taken");
            }
        }
    });
}

/// The 429 of a ban of `remaining_ms` on the plan item `index`, counted as a refusal of the
/// banning policy (not towards another ban).
pub(crate) fn refusal(
    shared: &Shared,
    plan: &Plan,
    index: usize,
    remaining_ms: u64,
    request_id: &str,
) -> Response {
    if let Some(item) = plan.items.get(index) {
        metrics::counter!("rl_requests_total", "dimension" => item.label.clone(), "outcome" => "banned")
            .increment(1);
        shared.offenders.record(Refusal {
            policy: item.label.clone(),
            subject: item.subject().to_owned(),
            ban: None,
        });
        tracing::Span::current().record("dimension", tracing::field::display(&item.label));
    }
    tracing::debug!(remaining_ms, "request refused by a ban");
    render_ban(plan, index, remaining_ms, request_id)
}

/// How long a ban read from Redis is believed without reading it again: a flood of banned
/// requests costs Redis one read per subject and second per gateway, and a lifted ban is
/// lifted everywhere within this.
pub const BAN_RECHECK: Duration = Duration::from_secs(1);
/// Bans remembered in process at most (past it, the ended ones are dropped, else the new
/// one is not remembered: it is read from Redis again).
pub const BAN_MEMORY: usize = 10_000;

/// Bans recently read from Redis: subject -> (read again after, ends at).
#[derive(Default)]
pub(crate) struct BanMemory {
    bans: Mutex<HashMap<String, (Instant, Instant)>>,
}

impl BanMemory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Instant)>> {
        self.bans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first of `targets` banned as last read less than [`BAN_RECHECK`] ago: its plan
    /// item and the ban's remaining milliseconds.
    pub(crate) fn recall(&self, targets: &[BanTarget]) -> Option<(usize, u64)> {
        if targets.is_empty() {
            return None;
        }
        let now = Instant::now();
        let bans = self.lock();
        targets.iter().find_map(|t| {
            let (recheck, ends) = bans.get(&t.subject)?;
            (now < *recheck && now < *ends).then(|| {
                let left = ends.saturating_duration_since(now).as_millis();
                (t.index, u64::try_from(left).unwrap_or(u64::MAX).max(1))
            })
        })
    }

    /// Remembers the ban of `targets`' item `index` with `remaining_ms` left.
    pub(crate) fn remember(&self, targets: &[BanTarget], index: usize, remaining_ms: u64) {
        let Some(t) = targets.iter().find(|t| t.index == index) else {
            return;
        };
        let now = Instant::now();
        let ends = now + Duration::from_millis(remaining_ms);
        let mut bans = self.lock();
        if bans.len() >= BAN_MEMORY && !bans.contains_key(&t.subject) {
            bans.retain(|_, (recheck, ends)| now < *recheck && now < *ends);
            if bans.len() >= BAN_MEMORY {
                return;
            }
        }
        bans.insert(t.subject.clone(), (ends.min(now + BAN_RECHECK), ends));
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

#[cfg(test)]
mod tests {
    use super::*;
    use redis_rl_policy::Ban;

    fn target(index: usize, subject: &str) -> BanTarget {
        BanTarget {
            index,
            policy: "login".into(),
            subject: subject.into(),
            ban: Ban::new(1, 1_000, 1_000).unwrap(),
        }
    }

    #[test]
    fn a_ban_read_is_recalled_with_its_remaining_time_and_bounded() {
        let memory = BanMemory::default();
        let targets = [target(0, "a"), target(3, "b")];
        assert_eq!(memory.recall(&targets), None);
        memory.remember(&targets, 3, 600_000);
        let (index, left) = memory.recall(&targets).unwrap();
        assert_eq!(index, 3);
        assert!((1..=600_000).contains(&left), "{left}");
        // Believed for at most BAN_RECHECK, however long the ban.
        let (recheck, ends) = memory.lock()["b"];
        assert!(recheck < ends && recheck <= Instant::now() + BAN_RECHECK);
        // An ended ban is not recalled.
        memory.remember(&targets, 0, 0);
        assert_eq!(memory.recall(&targets[..1]), None);
        // Full: ended entries make room; live ones are kept and the new one is not stored.
        {
            let mut bans = memory.lock();
            let far = Instant::now() + Duration::from_secs(60);
            for i in 0..BAN_MEMORY {
                bans.insert(format!("k{i}"), (far, far));
            }
        }
        memory.remember(&[target(0, "new")], 0, 60_000);
        assert_eq!(memory.recall(&[target(0, "new")]), None);
        assert!(memory.lock().len() <= BAN_MEMORY + 2);
    }
}
