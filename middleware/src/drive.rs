//! The middleware's side of the request flow ([`redis_rl_flow`]): the limiter calls and
//! Redis reads its steps ask for, through the limiter's layers (shadow, leases, deny
//! cache, failure modes), and what a request leaves behind (counters, refusals queued
//! towards bans and the top offenders, units given back).

use std::time::Duration;

use redis_rl_flow::{Book, Decided, Record, Take};
use redis_rl_policy::Plan;

use super::config::policy_of;
use super::plan::Shared;
use redis_rl_client::decision::{Decision, Source};
use redis_rl_client::offenders::Refusal;
use redis_rl_client::policy::Policy;

/// Each plan item's policy (`None`: an item the engine validated but the client cannot
/// build; not reached, as both check the same ranges. Were it reached, the request passes
/// unlimited, logged, rather than being decided on items no longer aligned with the plan).
pub(crate) fn policies(shared: &Shared, plan: &Plan) -> Option<Vec<Policy>> {
    let mut out = Vec::with_capacity(plan.items.len());
    for item in &plan.items {
        match policy_of(item, shared.mode) {
            Ok(p) => out.push(p),
            Err(e) => {
                tracing::error!(error = %e, policy = %item.name, "policy skipped");
                return None;
            }
        }
    }
    Some(out)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A limiter decision as the flow takes it (every front end that drives the flow with the
/// Rust client: the middleware, rl-gateway's rate limit service).
pub fn decided(d: &Decision) -> Decided {
    Decided {
        verdict: d.verdict.map(ms).into(),
        remaining: d.remaining,
        reset_after_ms: ms(d.reset_after),
        shadow: d.shadow,
        source: d.source,
    }
}

fn pairs<'a>(takes: &'a [Take], policies: &'a [Policy]) -> (Vec<(&'a str, &'a Policy)>, Vec<u64>) {
    takes
        .iter()
        .filter_map(|t| Some(((t.key.as_str(), policies.get(t.item)?), t.units)))
        .unzip()
}

/// The limiter call and the ban reads, concurrently: one round trip of latency.
pub(crate) async fn book(
    shared: &Shared,
    book: &Book,
    policies: &[Policy],
) -> (Vec<Decided>, Option<usize>, Vec<Option<i64>>) {
    let items: Vec<(&str, Policy)> = book
        .takes
        .iter()
        .filter_map(|t| Some((t.key.as_str(), *policies.get(t.item)?)))
        .collect();
    let units: Vec<u64> = book.takes.iter().map(|t| t.units).collect();
    let reads = book.ban_reads.iter().map(|key| async move {
        match redis_rl_client::bans::pttl(&shared.limiter, key).await {
            Ok(ms) => Some(ms),
            Err(e) => {
                tracing::debug!(error = %e, "ban not read: limits only");
                None
            }
        }
    });
    let (md, bans) = futures_util::join!(
        shared.limiter.check_all_units(&items, &units),
        futures_util::future::join_all(reads)
    );
    (md.decisions.iter().map(decided).collect(), md.denied, bans)
}

/// Every take's own decision, asked of Redis (`None`: it did not answer).
pub(crate) async fn peek(
    shared: &Shared,
    takes: &[Take],
    policies: &[Policy],
) -> Option<Vec<Decided>> {
    let (pairs, units) = pairs(takes, policies);
    match shared.limiter.peek_all_units(&pairs, &units).await {
        Ok(ds) => Some(ds.iter().map(decided).collect()),
        Err(e) => {
            tracing::debug!(error = %e, "looking at a delayed request's keys failed: refused");
            None
        }
    }
}

/// Takes every take's units even over the limits: true when Redis did.
pub(crate) async fn force(shared: &Shared, takes: &[Take], policies: &[Policy]) -> bool {
    let (pairs, units) = pairs(takes, policies);
    match shared.limiter.force_all_units(&pairs, &units).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e, "booking a delayed request failed: refused instead");
            false
        }
    }
}

/// Counts and queues what a request left behind, off its path.
pub(crate) fn record(shared: &Shared, record: Record, policies: &[Policy]) {
    let span = tracing::Span::current();
    if let Some(list) = record.access {
        metrics::counter!("rl_access_total", "list" => list).increment(1);
        tracing::debug!(list, "access lists decided");
    }
    if let Some(t) = &record.tenant {
        span.record("tenant", tracing::field::display(t));
    }
    if record.tier != "none" && record.tier != "-" {
        span.record("tier", tracing::field::display(&record.tier));
    }
    if let Some(asked) = &record.unknown_tier {
        crate::tier::unknown_tier(asked);
    }
    if let Some(d) = &record.reported {
        span.record("dimension", tracing::field::display(d));
    }
    if let Some(ms) = record.banned_ms {
        tracing::debug!(remaining_ms = ms, "request refused by a ban");
    }
    if let Some(outcome) = record.delayed {
        metrics::counter!("rl_delayed_total", "outcome" => outcome).increment(1);
    }
    for c in &record.counts {
        shared.counters.request(&c.label, c.outcome);
        if let Some(source) = c.source {
            shared.counters.decision(&c.label, source);
            if Source::from_name(source).is_some_and(|s| s.is_fallback()) {
                metrics::counter!("rl_fallback_total", "dimension" => c.label.clone(), "source" => source).increment(1);
            }
        }
    }
    for r in record.refusals {
        shared.offenders.record(Refusal {
            policy: r.policy,
            subject: r.subject,
            ban: r.ban,
        });
    }
    let give_back: Vec<(String, Policy, u64)> = record
        .give_back
        .into_iter()
        .filter_map(|t| Some((t.key, *policies.get(t.item)?, t.units)))
        .collect();
    if !give_back.is_empty() {
        let limiter = shared.limiter.clone();
        tokio::spawn(async move {
            for (key, policy, units) in give_back {
                if let Err(e) = limiter.refund(&key, &policy, units).await {
                    tracing::debug!(error = %e, "a banned request's units stay taken");
                }
            }
        });
    }
}
