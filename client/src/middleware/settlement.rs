//! Settling a request's cost after the response: the rules with `settle =
//! "response-header:<name>"` read the actual units from the response's header, and what was
//! reserved is given back or taken to match ([`crate::Limiter::settle_all`]).
//!
//! The middleware puts a [`PendingSettle`] in the request's extensions. When the response
//! head carries the header, the middleware settles once the inner service has answered. A
//! handler whose upstream may send the actual cost as a trailer (after the body) claims the
//! settlement ([`PendingSettle::claim`]) and settles it when the body ends
//! ([`PendingSettle::settle_later`]): rl-gateway's proxy does. Without the header (nor a
//! trailer), or with one that is not an integer, the reservation stands as taken, counted
//! in `rl_settled_total{outcome="missing"|"invalid"}`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::HeaderMap;
use redis_rl_policy::{Adjust, Booking};

use super::extract::HttpHeaders;
use super::settle_token::SettleTokens;
use crate::limiter::Limiter;
use crate::policy::Policy;

/// A request extension saying "this request reports a response, it is not one to check":
/// the middleware plans it as usual (the same keys as the check of the request it
/// describes) and settles, from the request's own headers (the `settle` header carrying
/// the actual units), the reservation its `rl-settle-token` names, taking nothing, and
/// answers 204. A report without a valid, unspent token of these [`SettleTokens`] is
/// refused (403, or 409 when the token was spent already). Set only by trusted code
/// (rl-gateway's forward-auth listener for `POST /.rl/settle`), never from a header a
/// client could send.
#[derive(Clone, Debug)]
pub struct SettleReport(pub SettleTokens);

/// A request extension asking for an `rl-settle-token` on the answer of a check that
/// reserves units to be settled later by a report ([`SettleReport`]): rl-gateway's
/// forward-auth listener sets it. The check's own settlement is then left to the report.
#[derive(Clone, Debug)]
pub struct IssueSettleToken(pub SettleTokens);

/// A reservation to settle once the response is known; clones share it, and it is settled
/// at most once.
#[derive(Clone)]
pub struct PendingSettle(Arc<Inner>);

struct Inner {
    limiter: Limiter,
    /// The plan's items: key, policy, and whether Redis took the units (a decision of the
    /// local fallback or of a failure mode, or a shadow policy's denial, took nothing there
    /// to settle).
    items: Vec<(String, Policy, bool)>,
    booking: Booking,
    claimed: AtomicBool,
    done: AtomicBool,
}

impl PendingSettle {
    pub(crate) fn new(
        limiter: Limiter,
        items: Vec<(String, Policy, bool)>,
        booking: Booking,
    ) -> Self {
        Self(Arc::new(Inner {
            limiter,
            items,
            booking,
            claimed: AtomicBool::new(false),
            done: AtomicBool::new(false),
        }))
    }

    /// The same settlement with every item's units in Redis (a held request's were booked
    /// there with `FORCE`, whatever the refused check's sources were).
    pub(crate) fn all_in_redis(self) -> Self {
        let inner = &self.0;
        let items = inner
            .items
            .iter()
            .map(|(k, p, _)| (k.clone(), *p, true))
            .collect();
        Self::new(inner.limiter.clone(), items, inner.booking.clone())
    }

    /// A token naming this reservation: each key and the units Redis took on it (0 where it
    /// took nothing), for a report to settle later.
    pub(crate) fn token(&self, tokens: &SettleTokens) -> String {
        let items = self
            .0
            .items
            .iter()
            .zip(&self.0.booking.units)
            .map(|((k, _, in_redis), units)| (k.clone(), if *in_redis { *units } else { 0 }))
            .collect();
        tokens.issue(items, crate::transport::wall_ms())
    }

    /// The response headers (or trailers) the actual cost is read from, in lower case.
    pub fn headers(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.0.booking.settle.iter().flatten() {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
    }

    /// True when `headers` carry every header the settlement reads.
    pub fn found_in(&self, headers: &HeaderMap) -> bool {
        self.headers().iter().all(|h| headers.contains_key(*h))
    }

    /// The handler takes the settlement over (it will call [`PendingSettle::settle_later`]
    /// with the trailers, or with nothing when the body ends without them): the middleware
    /// then does not settle from the response head.
    pub fn claim(&self) {
        self.0.claimed.store(true, Ordering::Release);
    }

    pub(crate) fn claimed(&self) -> bool {
        self.0.claimed.load(Ordering::Acquire)
    }

    /// Settles from `headers` (the response's headers or trailers) on a task of its own:
    /// for a body's end, where nothing can be awaited.
    pub fn settle_later(&self, headers: HeaderMap) {
        let this = self.clone();
        tokio::spawn(async move { this.settle(&headers).await });
    }

    /// Settles from `headers`, once: a second call does nothing.
    pub async fn settle(&self, headers: &HeaderMap) {
        if self.0.done.swap(true, Ordering::AcqRel) {
            return;
        }
        // Read the headers before any await (the engine's view of them is not `Send`).
        let (adjust, outcomes) = self.0.booking.settlement(&HttpHeaders(headers));
        for (header, outcome) in &outcomes {
            metrics::counter!("rl_settled_total", "header" => header.clone(), "outcome" => outcome.name())
                .increment(1);
        }
        let items: Vec<(&str, &Policy, Adjust)> = self
            .0
            .items
            .iter()
            .zip(adjust)
            .filter(|((_, _, in_redis), a)| *in_redis && *a != Adjust::Keep)
            .map(|((k, p, _), a)| (k.as_str(), p, a))
            .collect();
        if items.is_empty() {
            return;
        }
        if let Err(e) = self.0.limiter.settle_all(&items).await {
            metrics::counter!("rl_settled_total", "header" => "-", "outcome" => "error")
                .increment(1);
            tracing::warn!(error = %e, "settling the cost after the response failed: the reservation stands");
        }
    }
}
