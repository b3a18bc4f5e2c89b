//! Delay instead of 429 ([`redis_rl_policy::delay`]): a refused request whose wait is within
//! the `delay_max_ms` of every item refusing it is booked now with `FORCE` (its units taken
//! for its future slot, so the next callers wait behind it) and held until the slot, at
//! most `delay_max_held` requests at once in the process (`rl_held_requests`). The count
//! and the booking lock belong to the process, not to a layer: a gateway serves several
//! listeners and, after a reload, requests of two configuration generations at once, and
//! the cap bounds the memory and connections of the whole process. A process books its
//! held requests one at a time, so each one's look sees the debt of the one before; two
//! gateways that book within the same round trip may give two requests one slot.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis_rl_policy::{render, Outcome, Plan, Rendered, Verdict};

use super::plan::Shared;
use crate::policy::Policy;

/// Requests held right now in this process, whatever layer holds them.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Held requests are booked one at a time in the process (look, then take with `FORCE`):
/// two of its requests never get the same slot, whichever listener they came through.
static BOOKING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A held request's place under the cap, given back when it is dropped.
pub(crate) struct Held(());

impl Drop for Held {
    fn drop(&mut self) {
        let now = HELD.fetch_sub(1, Ordering::AcqRel).saturating_sub(1);
        metrics::gauge!("rl_held_requests").set(now as f64);
    }
}

impl Held {
    /// A place under `cap` (the configuration in force: a reload's new cap applies to the
    /// requests held after it, counted with those still held under the old one).
    fn take(cap: usize) -> Option<Self> {
        let taken = HELD.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < cap).then_some(n + 1)
        });
        match taken {
            Ok(n) => {
                metrics::gauge!("rl_held_requests").set((n + 1) as f64);
                Some(Self(()))
            }
            Err(_) => {
                metrics::counter!("rl_delayed_total", "outcome" => "over_cap").increment(1);
                None
            }
        }
    }
}

/// A request booked for a later slot: how long to hold it and the headers of its answer.
pub(crate) struct Hold {
    pub(crate) held: Held,
    pub(crate) wait: Duration,
    pub(crate) headers: Vec<(&'static str, String)>,
}

/// Books a refused request for its slot when every item refusing it allows the delay, the
/// cap has room and Redis answers; `None`: refuse it as before. `base` are the outcomes of
/// the refused check (the shadow items' stay as they were).
pub(crate) async fn hold(
    shared: &Shared,
    plan: &Plan,
    items: &[(&str, Policy)],
    units: &[u64],
    base: &[Outcome],
    request_id: &str,
) -> Option<Hold> {
    if plan.items.iter().all(|i| i.delay_max_ms.is_none()) {
        return None;
    }
    let held = Held::take(shared.engine.config().delay_max_held)?;
    let enforced: Vec<usize> = (0..items.len())
        .filter(|&i| items.get(i).is_some_and(|(_, p)| !p.is_shadow()))
        .collect();
    let pairs: Vec<(&str, &Policy)> = enforced
        .iter()
        .filter_map(|&i| items.get(i).map(|(k, p)| (*k, p)))
        .collect();
    let enforced_units: Vec<u64> = enforced
        .iter()
        .filter_map(|&i| units.get(i).copied())
        .collect();
    let _one_at_a_time = BOOKING.lock().await;
    // Each key's own wait, from Redis (a denial from the deny cache, or one key's refusal,
    // does not say how long every key would make the request wait).
    let peeked = shared
        .limiter
        .peek_all_units(&pairs, &enforced_units)
        .await
        .ok()?;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mut outcomes: Vec<Outcome> = base.to_vec();
    for (&i, d) in enforced.iter().zip(&peeked) {
        if let Some(o) = outcomes.get_mut(i) {
            o.verdict = d.verdict.map(ms).into();
            o.remaining = d
                .remaining
                .saturating_sub(units.get(i).copied().unwrap_or(1));
            o.reset_after_ms = ms(d.reset_after);
        }
    }
    let refused = enforced.iter().any(|&i| {
        outcomes
            .get(i)
            .is_some_and(|o| o.verdict != Verdict::Allowed)
    });
    let wait_ms = if refused {
        let Some(w) = redis_rl_policy::delay::hold_ms(plan, &outcomes) else {
            metrics::counter!("rl_delayed_total", "outcome" => "too_long").increment(1);
            return None;
        };
        w
    } else {
        0 // freed meanwhile: booked now, forwarded at once
    };
    if let Err(e) = shared
        .limiter
        .force_all_units(&pairs, &enforced_units)
        .await
    {
        tracing::warn!(error = %e, "booking a delayed request failed: refused instead");
        return None;
    }
    for &i in &enforced {
        if let Some(o) = outcomes.get_mut(i) {
            o.verdict = Verdict::Allowed;
        }
    }
    let Rendered::Headers(headers) = render(plan, &outcomes, None, request_id) else {
        return None;
    };
    metrics::counter!("rl_delayed_total", "outcome" => "held").increment(1);
    Some(Hold {
        held,
        wait: Duration::from_millis(wait_ms),
        headers,
    })
}
