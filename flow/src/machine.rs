//! The step machine: one [`Flow`] per configuration (shared by every request of a front
//! end), one [`RequestFlow`] per request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use redis_rl_policy::{
    delay, render, render_ban, reported_index, Admission, BanTarget, Booking, Engine, Identity,
    Outcome, Plan, Rendered, Response, Verdict,
};

use crate::bans::{ban_remaining_ms, BanMemory};
use crate::commands;
use crate::debt::DebtWatch;
use crate::record::{self, Count, Record, Refusal};
use crate::request::HttpRequest;
use crate::step::{Book, Decided, Forward, Reply, Settle, Source, Step, Take};

struct Shared {
    engine: Engine,
    bans: BanMemory,
    /// Requests held by `delay_max_ms` right now (at most `delay_max_held`), counted with
    /// every flow sharing this count.
    held: Holds,
}

/// A count of held requests that several flows share: a process serving several listeners,
/// or requests of two configuration generations after a reload, holds at most
/// `delay_max_held` requests in all, since the cap bounds the process's memory and
/// connections, not a layer's.
#[derive(Clone, Debug, Default)]
pub struct Holds(Arc<AtomicUsize>);

impl Holds {
    /// A new count, at 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests held right now.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// The flow of one configuration: the policy engine, the bans read a moment ago and the
/// count of held requests. Cheap to clone (shared); build one per configuration and front
/// end process, and start every request from it.
#[derive(Clone)]
pub struct Flow(Arc<Shared>);

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow")
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}

impl Flow {
    /// The flow of a validated configuration, with a count of held requests of its own.
    pub fn new(engine: Engine) -> Self {
        Self::sharing(engine, Holds::new())
    }

    /// The flow of a validated configuration, counting its held requests in `held` with
    /// every other flow given the same count (one cap for the process).
    pub fn sharing(engine: Engine, held: Holds) -> Self {
        Self(Arc::new(Shared {
            engine,
            bans: BanMemory::default(),
            held,
        }))
    }

    /// The policy engine.
    pub fn engine(&self) -> &Engine {
        &self.0.engine
    }

    /// Requests held right now.
    pub fn held(&self) -> usize {
        self.0.held.count()
    }

    /// Starts `req` at `now_ms` (the host's monotonic clock, in milliseconds: it dates the
    /// bans remembered in process): the request's machine and its first step.
    pub fn start(&self, req: HttpRequest, now_ms: u64) -> (RequestFlow, Step) {
        let mut flow = RequestFlow {
            flow: self.clone(),
            req,
            now_ms,
            id: None,
            plan: Plan::default(),
            booking: Booking::default(),
            targets: Vec::new(),
            outcomes: Vec::new(),
            enforced: Vec::new(),
            refusal: None,
            settle: None,
            record: Record::default(),
            wait_ms: 0,
            held: false,
            decided: Vec::new(),
            denied: None,
        };
        let step = flow.admit();
        (flow, step)
    }
}

/// One request's way through the flow. Each method takes the answer of the step that
/// named it and returns the next step. Keep it until the request is answered: dropping it
/// ends its hold (if it was held).
pub struct RequestFlow {
    flow: Flow,
    req: HttpRequest,
    now_ms: u64,
    id: Option<Identity>,
    plan: Plan,
    booking: Booking,
    targets: Vec<BanTarget>,
    outcomes: Vec<Outcome>,
    /// The items a hold books (the enforced ones), as indexes into the plan.
    enforced: Vec<usize>,
    /// The refusal a hold replaces, sent when it cannot.
    refusal: Option<Response>,
    settle: Option<Settle>,
    record: Record,
    wait_ms: u64,
    held: bool,
    /// The booked decisions and the refusing item, for the counts of a request held and
    /// then served.
    decided: Vec<Decided>,
    denied: Option<usize>,
}

impl std::fmt::Debug for RequestFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestFlow")
            .field("request_id", &self.req.request_id)
            .field("items", &self.plan.items.len())
            .finish_non_exhaustive()
    }
}

impl Drop for RequestFlow {
    fn drop(&mut self) {
        self.release();
    }
}

impl RequestFlow {
    /// The request.
    pub fn request(&self) -> &HttpRequest {
        &self.req
    }

    /// Takes the request out of a flow that is done with it (its last step handed over): a
    /// binding fills it again for its next request, reusing its strings' memory. The flow
    /// holds an empty request after.
    pub fn take_request(&mut self) -> HttpRequest {
        std::mem::take(&mut self.req)
    }

    /// Each take's debt watch, in take order (a take's key is its item's).
    fn debt_watches(&self) -> Vec<Option<DebtWatch>> {
        self.plan
            .items
            .iter()
            .map(|i| DebtWatch::of(i, &i.key))
            .collect()
    }

    /// The units the booking reserves on the plan item `item` (1 unless its rule takes
    /// them from a header).
    fn units(&self, item: usize) -> u64 {
        self.booking.units.get(item).copied().unwrap_or(1)
    }

    /// The take of the plan item `item`.
    fn take(&self, item: usize) -> Option<Take> {
        let p = self.plan.items.get(item)?;
        Some(Take {
            item,
            key: p.key.clone(),
            units: self.units(item),
        })
    }

    /// Every plan item's take, in plan order. Made when a step needs them, not kept: the
    /// plan holds the keys already, and a copy per request costs an allocation per key.
    fn takes(&self) -> impl Iterator<Item = Take> + '_ {
        (0..self.plan.items.len()).filter_map(|i| self.take(i))
    }

    /// The plan (empty before [`Step::Book`]): a [`Take`]'s `item` indexes its items.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Who sent the request (`None` when it was refused before: a bad key or the deny list).
    pub fn identity(&self) -> Option<&Identity> {
        self.id.as_ref()
    }

    /// Ends the request's hold, if it was held (what dropping it does).
    pub fn release(&mut self) {
        if std::mem::take(&mut self.held) {
            self.flow.0.held.0.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn traced(&self, r: Response) -> Response {
        match &self.req.trace_id {
            Some(t) => r.with_trace_id(t),
            None => r,
        }
    }

    fn respond(&mut self, r: Response) -> Step {
        let response = self.traced(r);
        Step::Respond(Reply {
            response,
            record: std::mem::take(&mut self.record),
            settle: None,
        })
    }

    fn forward(&mut self, headers: Vec<(&'static str, String)>, hold_ms: Option<u64>) -> Step {
        Step::Forward(Forward {
            headers,
            hold_ms,
            settle: self.settle.take(),
            path: self
                .id
                .as_ref()
                .map_or_else(|| self.req.path.clone(), |id| id.path.clone()),
            record: std::mem::take(&mut self.record),
        })
    }

    fn admit(&mut self) -> Step {
        let admission = self
            .flow
            .engine()
            .admit(&self.req.view(), &self.req.request_id);
        match admission {
            Admission::Refuse(r) => {
                self.record.tier = "-".to_owned();
                self.record.access = Some(if r.status == 400 { "bad_key" } else { "deny" });
                self.respond(r)
            }
            Admission::Pass(id) => {
                self.record.tier = "-".to_owned();
                self.record.access = Some("allow");
                self.id = Some(id);
                self.forward(Vec::new(), None)
            }
            Admission::Limit(id) => {
                self.record.tenant.clone_from(&id.tenant);
                let key = id.api_key.clone();
                self.id = Some(id);
                match key {
                    Some(api_key) => Step::Tier { api_key },
                    None => self.tier(None),
                }
            }
        }
    }

    /// The answer to [`Step::Tier`]: the key's tier as the resolver found it (`None`:
    /// unknown, the default tier applies).
    pub fn tier(&mut self, tier: Option<String>) -> Step {
        let Some(id) = self.id.as_ref() else {
            return self.forward(Vec::new(), None);
        };
        let engine = self.flow.engine();
        let view = self.req.view();
        self.plan = engine.plan(&view, id, tier.as_deref());
        // The engine falls back to the default tier for a name it does not know: a typo in
        // the tier hash must not pass silently.
        if tier.is_some() && self.plan.tier != tier {
            self.record.unknown_tier = tier;
        }
        self.record.tier = self.plan.tier.clone().unwrap_or_else(|| "none".to_owned());
        // Without a rule reading its cost or settlement from headers, every item books 1
        // and nothing settles: the empty booking says that (`units` defaults to 1) without
        // two vectors per request. A settlement report keeps the whole booking (its
        // settlement pairs each item with its header).
        if engine.books_from_headers() || self.req.settle_report {
            self.booking = match engine.booking(&view, &self.plan, &self.req.request_id) {
                Ok(b) => b,
                Err(r) => return self.respond(r),
            };
        }
        if self.req.settle_report {
            // A report of the response's actual cost: settled from the report's own
            // headers, nothing taken.
            let items = self.takes().map(|t| (t, true)).collect();
            let settle = Settle::new(items, self.booking.clone(), self.debt_watches());
            let response = Response {
                status: 204,
                headers: vec![("x-request-id", self.req.request_id.clone())],
                body: String::new(),
            };
            return Step::Respond(Reply {
                response,
                record: std::mem::take(&mut self.record),
                settle: Some(settle),
            });
        }
        self.targets = self.plan.ban_checks(&self.booking);
        if let Some((index, remaining_ms)) = self.flow.0.bans.recall(&self.targets, self.now_ms) {
            return self.banned(index, remaining_ms);
        }
        Step::Book(Book {
            takes: self.takes().collect(),
            ban_reads: self
                .targets
                .iter()
                .map(|t| commands::ban_read(&t.subject).key)
                .collect(),
        })
    }

    /// The refusal of a ban of `remaining_ms` on the plan item `index`, counted as a
    /// refusal of the banning policy (not towards another ban).
    fn banned(&mut self, index: usize, remaining_ms: u64) -> Step {
        if let Some(item) = self.plan.items.get(index) {
            self.record.counts.push(Count {
                label: item.label.clone(),
                outcome: "banned",
                source: None,
            });
            self.record.refusals.push(Refusal {
                policy: item.label.clone(),
                subject: item.subject().to_owned(),
                ban: None,
            });
            self.record.reported = Some(item.label.clone());
        }
        self.record.banned_ms = Some(remaining_ms);
        let r = render_ban(&self.plan, index, remaining_ms, &self.req.request_id);
        self.respond(r)
    }

    /// The answer to [`Step::Book`]: one decision per take (in order), the index of the
    /// enforced take that refused the request (`None`: allowed), each ban read's `PTTL`
    /// reply (`None`: the read failed), and `now_ms` when they came back.
    pub fn booked(
        &mut self,
        decided: Vec<Decided>,
        denied: Option<usize>,
        ban_replies: Vec<Option<i64>>,
        now_ms: u64,
    ) -> Step {
        self.now_ms = now_ms;
        let ban = self
            .targets
            .iter()
            .zip(&ban_replies)
            .find_map(|(t, r)| r.and_then(ban_remaining_ms).map(|ms| (t.index, ms)));
        if let Some((index, remaining_ms)) = ban {
            self.flow
                .0
                .bans
                .remember(&self.targets, index, remaining_ms, now_ms);
            // A banned request consumes nothing, as any refused one.
            if denied.is_none() {
                self.record.give_back = self
                    .takes()
                    .zip(&decided)
                    .filter(|(t, d)| {
                        d.source == Source::Redis
                            && self.plan.items.get(t.item).is_some_and(|i| !i.shadow)
                    })
                    .map(|(t, _)| t)
                    .collect();
            }
            return self.banned(index, remaining_ms);
        }
        self.record.counts = record::counts(&self.plan, &decided, denied, false);
        self.record.refusals = record::refusals(&self.plan, &decided, denied, &self.targets);
        self.outcomes = decided.iter().map(Decided::outcome).collect();
        self.record.reported = reported_index(&self.plan, &self.outcomes, denied)
            .and_then(|i| self.plan.items.get(i))
            .map(|i| i.label.clone());
        if self.booking.settles() {
            let items = self
                .takes()
                .zip(&decided)
                .map(|(t, d)| (t, d.source == Source::Redis && !d.is_denied()))
                .collect();
            self.settle = Some(Settle::new(
                items,
                self.booking.clone(),
                self.debt_watches(),
            ));
        }
        match render(&self.plan, &self.outcomes, denied, &self.req.request_id) {
            Rendered::Headers(h) => self.forward(h, None),
            Rendered::Refuse(r) => {
                if r.status != 429 || self.plan.items.iter().all(|i| i.delay_max_ms.is_none()) {
                    return self.respond(r);
                }
                self.decided = decided;
                self.denied = denied;
                self.try_hold(r)
            }
        }
    }

    /// A refusal whose items allow a delay: a place under the cap, then a look.
    fn try_hold(&mut self, refusal: Response) -> Step {
        let cap = self.flow.engine().config().delay_max_held;
        let taken = self
            .flow
            .0
            .held
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            });
        if taken.is_err() {
            self.record.delayed = Some("over_cap");
            return self.respond(refusal);
        }
        self.held = true;
        self.refusal = Some(refusal);
        self.enforced = (0..self.plan.items.len())
            .filter(|&i| self.plan.items.get(i).is_some_and(|p| !p.shadow))
            .collect();
        Step::Peek(self.enforced_takes())
    }

    fn enforced_takes(&self) -> Vec<Take> {
        self.enforced.iter().filter_map(|&i| self.take(i)).collect()
    }

    fn refuse_after_all(&mut self) -> Step {
        self.release();
        match self.refusal.take() {
            Some(r) => self.respond(r),
            None => self.forward(Vec::new(), None),
        }
    }

    /// The answer to [`Step::Peek`]: each take's own decision with nothing taken, asked of
    /// Redis (`None`: Redis did not answer; the request is refused as it was).
    pub fn peeked(&mut self, looked: Option<Vec<Decided>>) -> Step {
        let Some(looked) = looked else {
            return self.refuse_after_all();
        };
        for (&i, d) in self.enforced.iter().zip(&looked) {
            let units = self.units(i);
            if let Some(o) = self.outcomes.get_mut(i) {
                o.verdict = d.verdict;
                o.remaining = d.remaining.saturating_sub(units);
                o.reset_after_ms = d.reset_after_ms;
            }
        }
        let refused = self.enforced.iter().any(|&i| {
            self.outcomes
                .get(i)
                .is_some_and(|o| o.verdict != Verdict::Allowed)
        });
        self.wait_ms = if refused {
            match delay::hold_ms(&self.plan, &self.outcomes) {
                Some(w) => w,
                None => {
                    self.record.delayed = Some("too_long");
                    return self.refuse_after_all();
                }
            }
        } else {
            0 // freed meanwhile: booked now, forwarded at once
        };
        Step::Force(self.enforced_takes())
    }

    /// The answer to [`Step::Force`]: true when Redis took the units.
    pub fn forced(&mut self, ok: bool) -> Step {
        if !ok {
            return self.refuse_after_all();
        }
        for &i in &self.enforced {
            if let Some(o) = self.outcomes.get_mut(i) {
                o.verdict = Verdict::Allowed;
            }
        }
        match render(&self.plan, &self.outcomes, None, &self.req.request_id) {
            Rendered::Headers(h) => {
                self.record.delayed = Some("held");
                // Served after its wait: not a refusal, neither in the counts nor towards
                // bans and the top offenders.
                self.record.counts = record::counts(&self.plan, &self.decided, self.denied, true);
                self.record.refusals.clear();
                self.settle = self.settle.take().map(Settle::all_in_redis);
                self.forward(h, Some(self.wait_ms))
            }
            Rendered::Refuse(_) => self.refuse_after_all(),
        }
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
