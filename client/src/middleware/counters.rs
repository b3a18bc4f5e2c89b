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
