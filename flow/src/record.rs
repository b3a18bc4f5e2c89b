//! What a request leaves behind for the host to count and queue, off its path: the
//! counters' labels, refusals towards bans and the top offenders, units to give back.

use redis_rl_policy::{Ban, BanTarget, Plan};

use crate::step::{Decided, Take};

/// One refused request, towards the top offenders and maybe a ban.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The rule's or dimension's name that refused it.
    pub policy: String,
    /// The refused key without window suffix.
    pub subject: String,
    /// The policy's ban, when the refusal counts towards one (not when a ban refused it).
    pub ban: Option<Ban>,
}

/// One item's count: `rl_requests_total{dimension, outcome}` and, with a source,
/// `rl_decisions_total{dimension, source}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Count {
    /// The dimension's or rule's name.
    pub label: String,
    /// `allowed`, `denied`, `delayed` (refused, held and served), `shadow_denied` or
    /// `banned`.
    pub outcome: &'static str,
    /// Who decided (`None` for a ban).
    pub source: Option<&'static str>,
}

/// What the host counts and queues for one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The metrics' tier label: the tier whose limits applied, `none` without an API key,
    /// `-` when the access lists decided.
    pub tier: String,
    /// The access list that decided (`allow`, `deny`, `bad_key`), for `rl_access_total`.
    pub access: Option<&'static str>,
    /// The tenant id (logs; never the key).
    pub tenant: Option<String>,
    /// A tier name the resolver gave that the configuration does not know (the default
    /// tier applied: worth a warning).
    pub unknown_tier: Option<String>,
    /// The dimension or rule the response reports.
    pub reported: Option<String>,
    /// Per-item counts.
    pub counts: Vec<Count>,
    /// Refusals to queue (top offenders, strikes towards bans).
    pub refusals: Vec<Refusal>,
    /// Units a refused request took and must give back (`RL.REFUND`, in the background).
    pub give_back: Vec<Take>,
    /// The remaining milliseconds of the ban that refused the request.
    pub banned_ms: Option<u64>,
    /// Why a delay was not granted (`over_cap`, `too_long`), or `held`.
    pub delayed: Option<&'static str>,
}

/// The per-item counts of a decided request. `held`: refused, then held by `delay_max_ms`
/// and served: the refusing item counts as `delayed`, the others (booked with it) as
/// `allowed`.
pub(crate) fn counts(
    plan: &Plan,
    decided: &[Decided],
    denied: Option<usize>,
    held: bool,
) -> Vec<Count> {
    let mut out = Vec::with_capacity(plan.items.len());
    for (i, (p, d)) in plan.items.iter().zip(decided).enumerate() {
        let outcome = if denied == Some(i) {
            if held {
                "delayed"
            } else {
                "denied"
            }
        } else if d.shadow && d.is_denied() {
            "shadow_denied"
        } else if denied.is_some() && !held {
            continue; // not consumed: the request was refused by another policy
        } else {
            "allowed"
        };
        out.push(Count {
            label: p.label.clone(),
            outcome,
            source: Some(d.source.name()),
        });
    }
    out
}

/// A request refused by its limits: one refusal of the refusing policy towards the top
/// offenders, and one towards the ban of each banning policy whose key denied (a refusal
/// while Redis was unavailable is nobody's fault and counts nowhere).
pub(crate) fn refusals(
    plan: &Plan,
    decided: &[Decided],
    denied: Option<usize>,
    targets: &[BanTarget],
) -> Vec<Refusal> {
    let mut out = Vec::new();
    let Some(denied) = denied else { return out };
    let (Some(item), Some(decision)) = (plan.items.get(denied), decided.get(denied)) else {
        return out;
    };
    if decision.source.is_fallback() {
        return out; // nobody's fault: not towards a ban either
    }
    let denied_subject = |subject: &str| {
        plan.items
            .iter()
            .zip(decided)
            .any(|(i, d)| i.subject() == subject && d.is_denied() && !d.shadow)
    };
    let mut counted_refuser = false;
    for t in targets {
        // A debt's hold is checked with the bans, but no refusal counts towards it.
        let Some(ban) = t.ban else { continue };
        if !denied_subject(&t.subject) {
            continue;
        }
        counted_refuser |= t.subject == item.subject();
        out.push(Refusal {
            policy: t.policy.clone(),
            subject: t.subject.clone(),
            ban: Some(ban),
        });
    }
    if !counted_refuser {
        out.extend(refusal_of(&item.label, item.subject(), decision));
    }
    out
}

/// The refusal of `subject` by `policy` towards the top offenders (`None` for a refusal
/// while Redis was unavailable: nobody's fault). Every flow counts a refusal so, a plan's
/// and a request of counters alike.
pub(crate) fn refusal_of(policy: &str, subject: &str, decided: &Decided) -> Option<Refusal> {
    (!decided.source.is_fallback()).then(|| Refusal {
        policy: policy.to_owned(),
        subject: subject.to_owned(),
        ban: None,
    })
}
