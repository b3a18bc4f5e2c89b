//! What the flow asks of its host, step by step, and what the host answers.

use redis_rl_policy::{Adjust, Booking, Headers, Outcome, Response, Verdict};

use crate::debt::DebtWatch;
use crate::record::Record;

/// One plan item's units, for a limiter call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Take {
    /// The item's index in the plan ([`crate::RequestFlow::plan`]): the host builds its
    /// limiter policy from that item (window, algorithm, shadow, failure mode, hot).
    pub item: usize,
    /// The Redis key.
    pub key: String,
    /// The units.
    pub units: u64,
}

/// Who made an item's decision, as the host's limiter reports it (the one list, the
/// core's: the client's and the bindings' too).
pub use redis_rl_core::Source;

/// One item's decision, as the host's limiter made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decided {
    /// Allowed, denied for a while, never.
    pub verdict: Verdict,
    /// Units left.
    pub remaining: u64,
    /// Milliseconds until the key is idle again.
    pub reset_after_ms: u64,
    /// A shadow policy's decision (recorded, never enforced).
    pub shadow: bool,
    /// Who decided.
    pub source: Source,
}

impl Decided {
    /// The limiter said no (enforced or not).
    pub fn is_denied(&self) -> bool {
        self.verdict != Verdict::Allowed
    }

    pub(crate) fn outcome(&self) -> Outcome {
        Outcome {
            verdict: self.verdict,
            remaining: self.remaining,
            reset_after_ms: self.reset_after_ms,
            shadow: self.shadow,
            fail_open: self.source == Source::FailOpen,
            fail_closed: self.source == Source::FailClosed,
        }
    }
}

/// The request's limiter call and its ban reads, to run concurrently (one round trip of
/// latency).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Book {
    /// Take every item's units, all or nothing (the host's `check_all` with a cost per key:
    /// one `RL.ALL ... COSTS` per hash slot), in plan order: one [`Decided`] each.
    pub takes: Vec<Take>,
    /// The ban keys to read (`PTTL` each, in the key's slot); answer each read's reply, or
    /// `None` when it failed (a failed read is no ban).
    pub ban_reads: Vec<String>,
}

/// A response the host sends as is; the application is not called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Status, headers (lower-case names), problem+json body.
    pub response: Response,
    /// What to count and queue.
    pub record: Record,
    /// A settlement report's reservation, to settle now from the request's own headers.
    pub settle: Option<Settle>,
}

/// The request goes to the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    /// Headers to set on the application's response (lower-case names; `x-request-id` is
    /// the host's).
    pub headers: Vec<(&'static str, String)>,
    /// Hold the request this long first (booked for a later slot), then forward it; the
    /// host drops the [`crate::RequestFlow`] (or calls its `release`) once the hold is over.
    pub hold_ms: Option<u64>,
    /// Settle the reservation once the response is known.
    pub settle: Option<Settle>,
    /// The path the application sees (the path's normal form).
    pub path: String,
    /// What to count and queue.
    pub record: Record,
}

/// A settled header and what happened (`exact`, `refund`, `charge`, `missing`, `invalid`).
pub type SettledHeader = (String, &'static str);

/// A reservation to settle after the response: the actual cost is read from the
/// response's headers, else from its trailers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settle {
    /// Each item: its take, and whether Redis took its units (only those are settled there:
    /// not a failure mode's, the local fallback's, or a shadow denial's).
    pub items: Vec<(Take, bool)>,
    booking: Booking,
    /// Each item's debt watch (`None`: its window keeps its debts itself, or shadow).
    watches: Vec<Option<DebtWatch>>,
}

impl Settle {
    pub(crate) fn new(
        items: Vec<(Take, bool)>,
        booking: Booking,
        watches: Vec<Option<DebtWatch>>,
    ) -> Self {
        Self {
            items,
            booking,
            watches,
        }
    }

    /// After the host applied `adjusted` (what [`Settle::adjust`] gave): the charged items
    /// whose window forgets its debt at its boundary (fixed window, calendar quota). For
    /// each, the host reads the window's count (`RL.STATE` of [`DebtWatch::key`]) and runs
    /// the command [`DebtWatch::hold`] gives, if any.
    pub fn debt_watches(&self, adjusted: &[(Take, Adjust)]) -> Vec<DebtWatch> {
        let mut out: Vec<DebtWatch> = Vec::new();
        for (take, adjust) in adjusted {
            if !matches!(adjust, Adjust::Charge(_)) {
                continue;
            }
            let watch = self
                .items
                .iter()
                .zip(&self.watches)
                .find(|((t, _), _)| t.item == take.item)
                .and_then(|(_, w)| w.clone());
            if let Some(w) = watch {
                if !out.iter().any(|o| o.key == w.key) {
                    out.push(w);
                }
            }
        }
        out
    }

    /// The response headers (or trailers) the actual cost is read from, lower case, once
    /// each.
    pub fn headers(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.booking.settle.iter().flatten() {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
    }

    /// True when `headers` carry every header the settlement reads (else: the trailers).
    pub fn found_in(&self, headers: &dyn Headers) -> bool {
        self.headers()
            .iter()
            .all(|h| !headers.get_all(h).is_empty())
    }

    /// What to do with each item that Redis took, from the response's `headers` (or
    /// trailers): refund (`RL.REFUND`) or charge (`FORCE`) the difference, and for each
    /// settled header what happened (`exact`, `refund`, `charge`, `missing`, `invalid`).
    pub fn adjust(&self, headers: &dyn Headers) -> (Vec<(Take, Adjust)>, Vec<SettledHeader>) {
        let (adjust, outcomes) = self.booking.settlement(headers);
        let items = self
            .items
            .iter()
            .zip(adjust)
            .filter(|((_, in_redis), a)| *in_redis && *a != Adjust::Keep)
            .map(|((t, _), a)| (t.clone(), a))
            .collect();
        let outcomes = outcomes.into_iter().map(|(h, o)| (h, o.name())).collect();
        (items, outcomes)
    }

    /// Each item's key and the units Redis took on it (0 where it took nothing): what a
    /// settlement token names, for a report to settle later.
    pub fn reserved(&self) -> Vec<(String, u64)> {
        self.items
            .iter()
            .map(|(t, in_redis)| (t.key.clone(), if *in_redis { t.units } else { 0 }))
            .collect()
    }

    /// The part of this settlement a token's reservation names (`named`: key and units
    /// reserved, as [`Settle::reserved`] gave them): each item of the plan whose key it
    /// names, once per named key, with the named units (in Redis when more than 0). `None`
    /// when it names none of them: a report settles its own reservation and no more.
    pub fn bound_to(&self, named: &[(String, u64)]) -> Option<Settle> {
        let mut named = named.to_vec();
        let mut items = Vec::new();
        let mut watches = Vec::new();
        let mut booking = Booking::default();
        for (((take, _), header), watch) in self
            .items
            .iter()
            .zip(&self.booking.settle)
            .zip(&self.watches)
        {
            let Some(at) = named.iter().position(|(k, _)| *k == take.key) else {
                continue;
            };
            let (_, reserved) = named.swap_remove(at);
            items.push((
                Take {
                    units: reserved,
                    ..take.clone()
                },
                reserved > 0,
            ));
            booking.units.push(reserved);
            booking.settle.push(header.clone());
            watches.push(watch.clone());
        }
        (!items.is_empty()).then(|| Settle::new(items, booking, watches))
    }

    /// The same settlement with every item in Redis (a held request's units were booked
    /// there with `FORCE`).
    pub(crate) fn all_in_redis(mut self) -> Self {
        for (_, in_redis) in &mut self.items {
            *in_redis = true;
        }
        self
    }
}

/// What the host must do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Look the API key's tier up (the host's tier resolver), then
    /// [`crate::RequestFlow::tier`].
    Tier {
        /// The API key (never log it).
        api_key: String,
    },
    /// Run the limiter call and the ban reads, then [`crate::RequestFlow::booked`].
    Book(Book),
    /// A refusal that may be held: look at every take (`PEEK`, asked of Redis itself, not a
    /// deny cache), then [`crate::RequestFlow::peeked`]. From here to the answer of
    /// [`Step::Force`], hold the host's booking lock (one booking at a time per process,
    /// so two held requests never get the same slot).
    Peek(Vec<Take>),
    /// Take every one of these units even over the limits (`FORCE`), then
    /// [`crate::RequestFlow::forced`]; release the booking lock after.
    Force(Vec<Take>),
    /// Answer with this; done.
    Respond(Reply),
    /// Call the application; done (but for the settlement after the response).
    Forward(Forward),
}
