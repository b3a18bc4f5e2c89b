//! Bans: a key refused `after` times within `within_ms` is refused for `for_ms` whatever
//! its limits say, each further ban `escalate` times longer (at most `max_for_ms`); and the
//! Redis keys that bans and the top-offender counts live in. Only names and numbers here:
//! the front end reads and writes the keys.
//!
//! Keys of one banned subject (the limited key without its window suffix, e.g.
//! `rl:{ip:192.0.2.1}:r:login`), all in the subject's hash slot:
//!
//! | key | type | life |
//! |---|---|---|
//! | `<subject>:ban` | string: the ban's level (1, 2, ...) | the ban's length |
//! | `<subject>:ban:strikes` | string: refusals counted since the first | `within_ms` from the first refusal |
//! | `<subject>:ban:level` | string: bans so far | the ban's length plus `forget_ms` |
//!
//! Fleet-wide indexes, each in one slot: `<prefix>:{bans}` (a sorted set of the bans, scored
//! by their end in server milliseconds, at most [`BAN_INDEX_MAX`] entries) and
//! `<prefix>:{top}:<policy>:<minute>` (refusals per subject in one minute, at most
//! [`TOP_ENTRIES`] entries, kept [`TOP_MINUTES`] minutes and one more).

use std::fmt;

use serde::{Deserialize, Deserializer};

use redis_rl_core::limits::MAX_DURATION_MS;

use crate::engine::PlanItem;
use crate::render::{render, Outcome, Rendered, Response, Verdict};
use crate::Plan;

/// Default `max_for_ms`: a day (or `for_ms` when that is longer).
pub const DEFAULT_MAX_FOR_MS: u64 = 86_400_000;
/// Default `forget_ms`: the level of a key's bans is remembered a day after its last ban.
pub const DEFAULT_FORGET_MS: u64 = 86_400_000;
/// The most `escalate` may be: beyond it the second ban already hits any sane cap.
pub const MAX_ESCALATE: u64 = 1_000;
/// The most `after` may be.
pub const MAX_AFTER: u64 = 1_000_000;
/// Entries kept in the ban index (`GET /bans` lists at most these; enforcement never
/// depends on the index).
pub const BAN_INDEX_MAX: u64 = 10_000;
/// Entries kept per policy and minute in the top-offender counts.
pub const TOP_ENTRIES: u64 = 256;
/// Minutes `GET /top` sums over (the current one included).
pub const TOP_MINUTES: u64 = 5;

/// A rule's or dimension's `ban = { after, within_ms, for_ms, escalate, max_for_ms,
/// forget_ms }`, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ban {
    /// Refusals that start a ban (1: the first refusal bans).
    pub after: u64,
    /// The refusals are counted within this many milliseconds of the first one.
    pub within_ms: u64,
    /// The first ban's length in milliseconds.
    pub for_ms: u64,
    /// Each further ban is this many times longer than the one before (1: all the same).
    pub escalate: u64,
    /// No ban is longer than this (default a day, or `for_ms` if longer).
    pub max_for_ms: u64,
    /// The count of bans (the escalation) is forgotten this long after the last ban ends.
    pub forget_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBan {
    after: u64,
    within_ms: u64,
    for_ms: u64,
    #[serde(default = "one")]
    escalate: u64,
    max_for_ms: Option<u64>,
    forget_ms: Option<u64>,
}

fn one() -> u64 {
    1
}

impl Ban {
    /// A ban after `after` refusals within `within_ms`, for `for_ms`, not escalating; the
    /// defaults for the rest.
    pub fn new(after: u64, within_ms: u64, for_ms: u64) -> Result<Ban, String> {
        Self::from_raw(RawBan {
            after,
            within_ms,
            for_ms,
            escalate: 1,
            max_for_ms: None,
            forget_ms: None,
        })
    }

    /// The same ban, each further one `escalate` times longer, at most `max_for_ms`.
    pub fn escalating(self, escalate: u64, max_for_ms: u64) -> Result<Ban, String> {
        Self::from_raw(RawBan {
            after: self.after,
            within_ms: self.within_ms,
            for_ms: self.for_ms,
            escalate,
            max_for_ms: Some(max_for_ms),
            forget_ms: Some(self.forget_ms),
        })
    }

    fn from_raw(raw: RawBan) -> Result<Ban, String> {
        let duration = |name: &str, v: u64| {
            if (1..=MAX_DURATION_MS).contains(&v) {
                Ok(v)
            } else {
                Err(format!(
                    "ban: {name} must be an integer between 1 and {MAX_DURATION_MS}"
                ))
            }
        };
        if !(1..=MAX_AFTER).contains(&raw.after) {
            return Err(format!(
                "ban: after must be an integer between 1 and {MAX_AFTER}"
            ));
        }
        let within_ms = duration("within_ms", raw.within_ms)?;
        let for_ms = duration("for_ms", raw.for_ms)?;
        if !(1..=MAX_ESCALATE).contains(&raw.escalate) {
            return Err(format!(
                "ban: escalate must be an integer between 1 and {MAX_ESCALATE}"
            ));
        }
        let max_for_ms = duration(
            "max_for_ms",
            raw.max_for_ms.unwrap_or(DEFAULT_MAX_FOR_MS.max(for_ms)),
        )?;
        if max_for_ms < for_ms {
            return Err(format!(
                "ban: max_for_ms ({max_for_ms}) is shorter than for_ms ({for_ms})"
            ));
        }
        let forget_ms = duration("forget_ms", raw.forget_ms.unwrap_or(DEFAULT_FORGET_MS))?;
        Ok(Ban {
            after: raw.after,
            within_ms,
            for_ms,
            escalate: raw.escalate,
            max_for_ms,
            forget_ms,
        })
    }

    /// The length of the `level`-th ban (1: the first): `for_ms * escalate^(level-1)`, at
    /// most `max_for_ms`.
    pub fn length_ms(&self, level: u64) -> u64 {
        if self.escalate == 1 {
            return self.for_ms;
        }
        let mut ms = self.for_ms;
        for _ in 1..level {
            ms = ms.saturating_mul(self.escalate);
            if ms >= self.max_for_ms {
                break;
            }
        }
        ms.min(self.max_for_ms)
    }
}

impl<'de> Deserialize<'de> for Ban {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ban::from_raw(RawBan::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Ban {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "after {} refusals within {} ms, for {} ms (x{} per ban, at most {} ms)",
            self.after, self.within_ms, self.for_ms, self.escalate, self.max_for_ms
        )
    }
}

/// The Redis keys of one subject's ban.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BanKeys {
    /// The ban itself: exists while the subject is banned (its value: the ban's level).
    pub ban: String,
    /// Refusals counted towards the next ban.
    pub strikes: String,
    /// Bans so far (the escalation).
    pub level: String,
}

impl BanKeys {
    /// The keys of `subject` (a limited key without its window suffix).
    pub fn of(subject: &str) -> BanKeys {
        BanKeys {
            ban: format!("{subject}:ban"),
            strikes: format!("{subject}:ban:strikes"),
            level: format!("{subject}:ban:level"),
        }
    }
}

/// The fleet's index of bans (`GET /bans`): `<prefix>:{bans}`.
pub fn ban_index_key(prefix: &str) -> String {
    format!("{prefix}:{{bans}}")
}

/// A member of the ban index: the policy's name and the subject, a line feed between (a
/// policy name has none).
pub fn ban_index_member(policy: &str, subject: &str) -> String {
    format!("{policy}\n{subject}")
}

/// The policy and subject of a ban index member.
pub fn parse_ban_index_member(member: &str) -> Option<(&str, &str)> {
    member.split_once('\n')
}

/// The refusals of `policy` in the unix minute `minute`: `<prefix>:{top}:<policy>:<minute>`.
pub fn top_key(prefix: &str, policy: &str, minute: u64) -> String {
    format!("{prefix}:{{top}}:{policy}:{minute}")
}

impl PlanItem {
    /// The key bans and top-offender counts name: the limited key without the window
    /// suffix a rate of several windows adds (`rl:{ip:192.0.2.1}:r:login`).
    pub fn subject(&self) -> &str {
        if self.name == self.label {
            return &self.key;
        }
        self.key
            .strip_suffix(&self.spec.label())
            .and_then(|k| k.strip_suffix(':'))
            .unwrap_or(&self.key)
    }
}

/// One subject of a plan that a ban may refuse: the first item of its policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BanTarget {
    /// The index of the policy's first item in the plan.
    pub index: usize,
    /// The policy's name (`label` of the plan item: a rule's name or a dimension's).
    pub policy: String,
    /// The banned key without window suffix.
    pub subject: String,
    /// The ban's settings (`None`: only a settled debt holds this subject, never a ban).
    pub ban: Option<Ban>,
}

impl Plan {
    /// The subjects of the plan whose policy bans, once each (shadow items never ban).
    pub fn ban_targets(&self) -> Vec<BanTarget> {
        let mut out: Vec<BanTarget> = Vec::new();
        for (index, item) in self.items.iter().enumerate() {
            let Some(ban) = item.ban.filter(|_| !item.shadow) else {
                continue;
            };
            let subject = item.subject();
            if out.iter().any(|t| t.subject == subject) {
                continue;
            }
            out.push(BanTarget {
                index,
                policy: item.label.clone(),
                subject: subject.to_string(),
                ban: Some(ban),
            });
        }
        out
    }
}

/// The 429 of a request refused by a ban of `remaining_ms` on the plan item `index`: the
/// headers of a refusal by that item with `r=0` and `t` the ban's remaining time
/// (`Retry-After` the same), and a problem body saying it is a ban (or a settled debt's
/// hold, on an item whose policy does not ban).
pub fn render_ban(plan: &Plan, index: usize, remaining_ms: u64, request_id: &str) -> Response {
    let outcomes: Vec<Outcome> = (0..plan.items.len())
        .map(|i| Outcome {
            verdict: if i == index {
                Verdict::Denied {
                    retry_after_ms: remaining_ms.max(1),
                }
            } else {
                Verdict::Allowed
            },
            remaining: 0,
            reset_after_ms: 0,
            shadow: false,
            fail_open: false,
            fail_closed: false,
        })
        .collect();
    let mut response = match render(plan, &outcomes, Some(index), request_id) {
        Rendered::Refuse(r) => r,
        // A denial always renders a refusal.
        Rendered::Headers(headers) => Response {
            status: 429,
            headers,
            body: String::new(),
        },
    };
    if let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_str(&response.body) {
        let item = plan.items.get(index);
        let what = match item.map(|i| i.dimension.is_some()) {
            Some(true) => "dimension",
            _ => "rule",
        };
        let retry = fields.get("retry_after").cloned().unwrap_or_default();
        let label = item.map_or("", |i| i.label.as_str());
        // A policy without a ban refuses this way only for a settled debt's hold.
        let detail = if item.is_some_and(|i| i.ban.is_none()) {
            format!(
                "held by {what} '{label}' until a settled overage is paid; retry after {retry} s"
            )
        } else {
            format!("banned by {what} '{label}' after repeated refusals; retry after {retry} s")
        };
        fields.insert("detail".to_owned(), serde_json::Value::from(detail));
        fields.insert("banned".to_owned(), serde_json::Value::Bool(true));
        response.body = serde_json::Value::Object(fields).to_string();
    }
    response
}

impl crate::Config {
    /// A ban on the global dimension would refuse every client: refused.
    pub(crate) fn check_bans(&self) -> Result<(), crate::FieldError> {
        let global = |field: String| {
            crate::FieldError::new(
                field,
                "ban: the global dimension is shared by every client; ban on `ip`, `endpoint`, a tier or a rule",
            )
        };
        if self.global.ban.is_some() {
            return Err(global("global.ban".to_string()));
        }
        for (name, tier) in &self.tiers {
            if tier.global.as_ref().is_some_and(|o| o.ban.is_some()) {
                return Err(global(format!("tiers.{name}.global.ban")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "ban_tests.rs"]
mod tests;
