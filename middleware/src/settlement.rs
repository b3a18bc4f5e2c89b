//! Settling a request's cost after the response: the rules with `settle =
//! "response-header:<name>"` read the actual units from the response's header, and what was
//! reserved is given back or taken to match ([`redis_rl_client::Limiter::settle_all`]).
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
use redis_rl_flow::Settle;
use redis_rl_policy::Adjust;

use super::extract::HttpHeaders;
use super::settle_token::SettleTokens;
use redis_rl_client::limiter::Limiter;
use redis_rl_client::policy::Policy;

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

/// A reservation to settle once the response is known (the flow's [`Settle`], with the
/// limiter and each plan item's policy); clones share it, and it is settled at most once.
#[derive(Clone)]
pub struct PendingSettle(Arc<Inner>);

struct Inner {
    limiter: Limiter,
    settle: Settle,
    /// Each plan item's policy, by index.
    policies: Vec<Policy>,
    claimed: AtomicBool,
    done: AtomicBool,
}

impl PendingSettle {
    pub(crate) fn new(limiter: Limiter, settle: Settle, policies: Vec<Policy>) -> Self {
        Self(Arc::new(Inner {
            limiter,
            settle,
            policies,
            claimed: AtomicBool::new(false),
            done: AtomicBool::new(false),
        }))
    }

    /// A token naming this reservation: each key and the units Redis took on it (0 where it
    /// took nothing), for a report to settle later.
    pub(crate) fn token(&self, tokens: &SettleTokens) -> String {
        tokens.issue(
            self.0.settle.reserved(),
            redis_rl_client::transport::wall_ms(),
        )
    }

    /// The response headers (or trailers) the actual cost is read from, in lower case.
    pub fn headers(&self) -> Vec<&str> {
        self.0.settle.headers()
    }

    /// True when `headers` carry every header the settlement reads.
    pub fn found_in(&self, headers: &HeaderMap) -> bool {
        self.0.settle.found_in(&HttpHeaders(headers))
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
        let (adjust, outcomes) = self.0.settle.adjust(&HttpHeaders(headers));
        for (header, outcome) in outcomes {
            metrics::counter!("rl_settled_total", "header" => header, "outcome" => outcome)
                .increment(1);
        }
        let items: Vec<(&str, &Policy, Adjust)> = adjust
            .iter()
            .filter_map(|(t, a)| Some((t.key.as_str(), self.0.policies.get(t.item)?, *a)))
            .collect();
        if items.is_empty() {
            return;
        }
        if let Err(e) = self.0.limiter.settle_all(&items).await {
            metrics::counter!("rl_settled_total", "header" => "-", "outcome" => "error")
                .increment(1);
            tracing::warn!(error = %e, "settling the cost after the response failed: the reservation stands");
            return;
        }
        // A charge on a window that forgets debts at its boundary: hold while it is owed.
        let limiter = &self.0.limiter;
        let holds = self
            .0
            .settle
            .debt_watches(&adjust)
            .into_iter()
            .map(|w| async move {
                match redis_rl_client::bans::hold_debt(limiter, &w).await {
                    Ok(true) => {
                        metrics::counter!("rl_settled_total", "header" => "-", "outcome" => "debt_hold")
                            .increment(1);
                        tracing::debug!(subject = %w.subject, "a settled debt holds its subject");
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "a settled debt's hold was not written"),
                }
            });
        futures_util::future::join_all(holds).await;
    }
}
