//! The middleware's per-request counters, each label set's handle registered once: looking
//! a counter up by name and labels builds and hashes a key (and allocates its labels) on
//! every request, a visible share of a proxied request's CPU.
//!
//! The label sets are bounded by the configuration (tiers, dimensions) and the HTTP status
//! codes, as they are in the recorder's own registry. The gateway's tests read the counts
//! back from `/metrics`.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

use metrics::Counter;
use redis_rl_policy::Engine;

use redis_rl_client::decision::Source;

/// The outcomes of `rl_requests_total`: allowed, refused (`denied`), refused then held by
/// `delay_max_ms` and served (`delayed`), over a shadow limit (`shadow_denied`), refused by
/// a ban (`banned`).
pub(crate) const REQUEST_OUTCOMES: [&str; 5] =
    ["allowed", "denied", "delayed", "shadow_denied", "banned"];

/// The label values of `rl_access_total`.
pub(crate) const ACCESS_LISTS: [&str; 3] = ["allow", "deny", "bad_key"];

/// Registers, at 0, the series of every label set the configuration can produce (its
/// dimensions and rules, its tiers), so that a dashboard's panel or an alert reads 0, not
/// "no data", before the first such request: `rl_requests_total`, `rl_decisions_total`,
/// `rl_fallback_total`, `rl_responses_total` (status 429) and `rl_access_total`.
pub(crate) fn at_zero(engine: &Engine) {
    let config = engine.config();
    let labels = config
        .dimensions
        .iter()
        .map(|d| d.name().to_owned())
        .chain(config.rules.iter().map(|r| r.name.clone()));
    for dimension in labels {
        for outcome in REQUEST_OUTCOMES {
            metrics::counter!("rl_requests_total", "dimension" => dimension.clone(), "outcome" => outcome)
                .increment(0);
        }
        for source in Source::ALL {
            metrics::counter!("rl_decisions_total", "dimension" => dimension.clone(), "source" => source.name())
                .increment(0);
            if source.is_fallback() {
                metrics::counter!("rl_fallback_total", "dimension" => dimension.clone(), "source" => source.name())
                    .increment(0);
            }
        }
    }
    // The tier labels: each tier, `none` (no API key) and `-` (the access lists decided).
    let tiers = config.tiers.keys().map(String::as_str).chain(["none", "-"]);
    for tier in tiers {
        metrics::counter!("rl_responses_total", "status" => "429", "tier" => tier.to_owned())
            .increment(0);
    }
    for list in ACCESS_LISTS {
        metrics::counter!("rl_access_total", "list" => list).increment(0);
    }
}

type ByLabel<K> = Mutex<HashMap<String, HashMap<K, Counter>>>;

#[derive(Default)]
pub(crate) struct Counters {
    /// `rl_responses_total` by tier, then status.
    responses: ByLabel<u16>,
    /// `rl_requests_total` by dimension, then outcome.
    requests: ByLabel<&'static str>,
    /// `rl_decisions_total` by dimension, then source.
    decisions: ByLabel<&'static str>,
}

impl Counters {
    pub(crate) fn response(&self, tier: &str, status: http::StatusCode) {
        bump(
            &self.responses,
            tier,
            status.as_u16(),
            || metrics::counter!("rl_responses_total", "status" => status.as_str().to_owned(), "tier" => tier.to_owned()),
        );
    }

    pub(crate) fn request(&self, dimension: &str, outcome: &'static str) {
        bump(
            &self.requests,
            dimension,
            outcome,
            || metrics::counter!("rl_requests_total", "dimension" => dimension.to_owned(), "outcome" => outcome),
        );
    }

    pub(crate) fn decision(&self, dimension: &str, source: &'static str) {
        bump(
            &self.decisions,
            dimension,
            source,
            || metrics::counter!("rl_decisions_total", "dimension" => dimension.to_owned(), "source" => source),
        );
    }
}

fn bump<K: Hash + Eq>(
    map: &ByLabel<K>,
    first: &str,
    second: K,
    register: impl FnOnce() -> Counter,
) {
    let mut map = map
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // One lookup of `first` once it is known (every request but the first few): looking it
    // up, then up again to reach its counters, hashed the label twice.
    if let Some(by_second) = map.get_mut(first) {
        by_second
            .entry(second)
            .or_insert_with(register)
            .increment(1);
        return;
    }
    map.entry(first.to_owned())
        .or_default()
        .entry(second)
        .or_insert_with(register)
        .increment(1);
}
