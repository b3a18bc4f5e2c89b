//! The flow of a request planned elsewhere: counters whose keys, policies and costs a front
//! end of its own configuration already chose (Envoy's rate limit service: one counter per
//! descriptor). It books them as [`crate::RequestFlow`] books a plan's items (the same
//! [`Book`] step, the same [`Decided`] answers: the host's limiter layers decide), and
//! records what they leave behind as it does (refusals towards the top offenders, units to
//! give back):
//!
//! ```text
//! give back (negative costs) ─ book (all or nothing, chunks of MAX_KEYS_PER_BOOK) ─ look (exact counters) ─ record
//! ```
//!
//! - counters that name the same key are one counter, their units added;
//! - a counter that can admit nothing (a limit of 0, or more than [`MAX_UNITS`] units in
//!   one request) is answered over the limit here, without asking Redis: Redis would refuse
//!   the cost as an error, and an error is decided by the failure mode (`open` admits);
//! - every counter is taken together or not at all: one [`Step`]`::Book` of at most
//!   [`MAX_KEYS_PER_BOOK`] keys (one `RL.ALL`) for a request of up to that many counters;
//!   past that, several in order, the later ones only looked at (0 units) once one refused,
//!   and what the earlier ones took given back ([`Record::give_back`]);
//! - shadow counters are decided and reported, never enforced, never given back;
//! - each counter reports its own count: those the limiter did not ask Redis about
//!   because a layer refused the request locally (the deny cache, a lease) are looked at
//!   ([`CounterStep::Look`]), only on such a refusal.
//!
//! [`Step`]: crate::Step

use crate::record::{self, Record};
use crate::step::{Book, Decided, Source, Take};
use redis_rl_policy::Verdict;

/// The most keys one [`Book`] of counters holds (the module's default `rl.max-all-keys`:
/// one `RL.ALL`).
pub const MAX_KEYS_PER_BOOK: usize = 16;

/// The most units one counter may be asked for in one request (the module's bound on any
/// count): a request asking more can never be admitted.
pub const MAX_UNITS: u64 = 1_000_000_000_000_000;

/// One counter a request is limited on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// The Redis key.
    pub key: String,
    /// The units the request takes (0: only look).
    pub units: u64,
    /// Decided and reported, never enforced.
    pub shadow: bool,
    /// False when the counter's rule admits nothing (a limit of 0): no key to ask.
    pub admits: bool,
    /// Give `units` back instead of taking them, then look at the count.
    pub give_back: bool,
    /// The counter's window in milliseconds: the reset of a decision made here.
    pub window_ms: u64,
    /// The length of the key's part its refusals are counted under among the top
    /// offenders (the key without its window's suffix): a length, not a copy, as it is
    /// read only for a refused request.
    pub subject_len: usize,
}

impl Counter {
    /// The key its refusals are counted under (the whole key if `subject_len` is not a
    /// place in it).
    pub fn subject(&self) -> &str {
        self.key.get(..self.subject_len).unwrap_or(&self.key)
    }
}

/// What the host must do next for a request of counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CounterStep {
    /// Give each take's units back (`RL.REFUND`), then look at its count (nothing taken);
    /// then [`CounterFlow::returned`] with one decision per take.
    Return(Vec<Take>),
    /// Take every take's units, all or nothing (the host's limiter, as for a plan: one
    /// `RL.ALL ... COSTS`); then [`CounterFlow::booked`]. No ban reads.
    Book(Book),
    /// Look at these keys (`RL.ALL ... PEEK`, 0 units: nothing taken, asked of Redis);
    /// then [`CounterFlow::looked`].
    Look(Vec<Take>),
    /// Decided; done.
    Done(Counted),
}

/// The request's decisions and what it leaves behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counted {
    /// Each counter's decision, in the order given (`None`: the host answered none).
    pub decided: Vec<Option<Decided>>,
    /// An enforced counter refused the request.
    pub refused: bool,
    /// Refusals towards the top offenders, and units to give back (before answering:
    /// the request consumes nothing).
    pub record: Record,
}

/// Counters that name one key: booked once, their units added.
#[derive(Debug)]
struct Group {
    /// The counters, first the one whose policy the host books with.
    members: Vec<usize>,
    units: u64,
}

/// One request of counters on its way: each method takes the answer of the step that
/// named it and returns the next step.
#[derive(Debug)]
pub struct CounterFlow {
    counters: Vec<Counter>,
    /// The name the request's refusals are counted under among the top offenders.
    policy: String,
    decided: Vec<Option<Decided>>,
    /// The counters to give back, then to book, as indexes into `counters`.
    returns: Vec<usize>,
    groups: Vec<Group>,
    /// The first group of the next book.
    next: usize,
    /// The groups of the last book.
    booking: std::ops::Range<usize>,
    /// Groups whose units Redis took (enforced ones), given back on a later refusal.
    taken: Vec<usize>,
    refused: bool,
    record: Record,
    /// The keys of the last look, and the counters each answers.
    looking: Vec<Vec<usize>>,
}

impl CounterFlow {
    /// Starts a request limited on `counters`, its refusals counted under `policy` among
    /// the top offenders: its machine and the first step.
    pub fn start(counters: Vec<Counter>, policy: String) -> (CounterFlow, CounterStep) {
        let mut flow = CounterFlow {
            decided: vec![None; counters.len()],
            counters,
            policy,
            returns: Vec::new(),
            groups: Vec::new(),
            next: 0,
            booking: 0..0,
            taken: Vec::new(),
            refused: false,
            record: Record::default(),
            looking: Vec::new(),
        };
        flow.group();
        let step = if flow.returns.is_empty() {
            flow.book_next()
        } else {
            let takes = flow.returns.iter().map(|&i| flow.take(i, None)).collect();
            CounterStep::Return(takes)
        };
        (flow, step)
    }

    fn take(&self, i: usize, units: Option<u64>) -> Take {
        let c = self.counters.get(i);
        Take {
            item: i,
            key: c.map(|c| c.key.clone()).unwrap_or_default(),
            units: units.unwrap_or_else(|| c.map_or(0, |c| c.units)),
        }
    }

    /// Sorts the counters: answered here, given back, or booked (one group per key).
    fn group(&mut self) {
        // Each key's group: one lookup per counter, linear in the request.
        let mut index: std::collections::HashMap<&str, usize> = Default::default();
        for (i, c) in self.counters.iter().enumerate() {
            if !c.admits {
                let d = never(c, c.units);
                self.refused |= d.is_denied() && !c.shadow;
                if let Some(slot) = self.decided.get_mut(i) {
                    *slot = Some(d);
                }
            } else if c.give_back {
                self.returns.push(i);
            } else if let Some(g) = index
                .get(c.key.as_str())
                .and_then(|&g| self.groups.get_mut(g))
            {
                g.units = g.units.saturating_add(c.units);
                g.members.push(i);
            } else {
                index.insert(&c.key, self.groups.len());
                self.groups.push(Group {
                    members: vec![i],
                    units: c.units,
                });
            }
        }
        // Groups that can never admit this request: answered now, not booked.
        let counters = &self.counters;
        let decided = &mut self.decided;
        let refused = &mut self.refused;
        self.groups.retain(|g| {
            if g.units <= MAX_UNITS {
                return true;
            }
            *refused |= g
                .members
                .first()
                .and_then(|&i| counters.get(i))
                .is_some_and(|c| !c.shadow);
            for &i in &g.members {
                if let (Some(slot), Some(c)) = (decided.get_mut(i), counters.get(i)) {
                    *slot = Some(never(c, g.units));
                }
            }
            false
        });
    }

    /// The answer to [`CounterStep::Return`]: each take's count after the units went back.
    pub fn returned(&mut self, decided: Vec<Decided>) -> CounterStep {
        for (&i, d) in self.returns.iter().zip(decided) {
            if let Some(slot) = self.decided.get_mut(i) {
                *slot = Some(d);
            }
        }
        self.book_next()
    }

    fn book_next(&mut self) -> CounterStep {
        let end = self.groups.len().min(self.next + MAX_KEYS_PER_BOOK);
        if self.next >= end {
            return self.look();
        }
        self.booking = self.next..end;
        self.next = end;
        let refused = self.refused;
        let takes = self
            .groups
            .get(self.booking.clone())
            .unwrap_or_default()
            .iter()
            .filter_map(|g| {
                let first = *g.members.first()?;
                // Once refused, the rest is only looked at: 0 units take nothing.
                Some(self.take(first, Some(if refused { 0 } else { g.units })))
            })
            .collect();
        CounterStep::Book(Book {
            takes,
            ban_reads: Vec::new(),
        })
    }

    /// The answer to [`CounterStep::Book`]: one decision per take, in order, and the index
    /// of the enforced take that refused (`None`: all taken).
    pub fn booked(&mut self, decided: Vec<Decided>, denied: Option<usize>) -> CounterStep {
        let booking = self.booking.clone();
        if denied.is_some() {
            self.refused = true;
            for g in std::mem::take(&mut self.taken) {
                if let Some(t) = self.group_take(g) {
                    self.record.give_back.push(t);
                }
            }
        } else if !self.refused {
            for g in booking.clone() {
                if !self.group_is_shadow(g) {
                    self.taken.push(g);
                }
            }
        }
        for (g, d) in booking.zip(decided) {
            let Some(group) = self.groups.get(g) else {
                continue;
            };
            for &i in &group.members {
                if let Some(slot) = self.decided.get_mut(i) {
                    *slot = Some(d);
                }
            }
        }
        self.book_next()
    }

    fn group_take(&self, g: usize) -> Option<Take> {
        let group = self.groups.get(g)?;
        Some(self.take(*group.members.first()?, Some(group.units)))
    }

    fn group_is_shadow(&self, g: usize) -> bool {
        self.groups
            .get(g)
            .and_then(|g| g.members.first())
            .and_then(|&i| self.counters.get(i))
            .is_some_and(|c| c.shadow)
    }

    /// The counters no layer asked Redis about, once each key.
    fn look(&mut self) -> CounterStep {
        let mut takes: Vec<Take> = Vec::new();
        for (i, (c, d)) in self.counters.iter().zip(&self.decided).enumerate() {
            if !d.is_some_and(|d| d.source == Source::Unchecked) || !c.admits {
                continue;
            }
            match takes.iter().position(|t| t.key == c.key) {
                Some(at) => {
                    if let Some(members) = self.looking.get_mut(at) {
                        members.push(i);
                    }
                }
                None => {
                    takes.push(self.take(i, Some(0)));
                    self.looking.push(vec![i]);
                }
            }
        }
        if takes.is_empty() {
            return self.done();
        }
        CounterStep::Look(takes)
    }

    /// The answer to [`CounterStep::Look`]: each key's count (`None`: Redis did not answer;
    /// those counters stay as they were).
    pub fn looked(&mut self, looked: Option<Vec<Decided>>) -> CounterStep {
        let looking = std::mem::take(&mut self.looking);
        for (members, d) in looking.iter().zip(looked.unwrap_or_default()) {
            for &i in members {
                let shadow = self.counters.get(i).is_some_and(|c| c.shadow);
                if let Some(slot) = self.decided.get_mut(i) {
                    *slot = Some(Decided { shadow, ..d });
                }
            }
        }
        self.done()
    }

    fn done(&mut self) -> CounterStep {
        if self.refused {
            // The first enforced counter that said no refused the request.
            let refuser = self.counters.iter().zip(&self.decided).find_map(|(c, d)| {
                d.as_ref()
                    .filter(|d| d.is_denied() && !c.shadow && d.source != Source::Unchecked)
                    .map(|d| (c, d))
            });
            if let Some(r) =
                refuser.and_then(|(c, d)| record::refusal_of(&self.policy, c.subject(), d))
            {
                self.record.refusals.push(r);
            }
        }
        CounterStep::Done(Counted {
            decided: std::mem::take(&mut self.decided),
            refused: self.refused,
            record: std::mem::take(&mut self.record),
        })
    }
}

/// The decision for `units` a counter can never admit: over the limit; 0 units are not.
fn never(c: &Counter, units: u64) -> Decided {
    Decided {
        verdict: if units == 0 {
            Verdict::Allowed
        } else {
            Verdict::Never
        },
        remaining: 0,
        reset_after_ms: c.window_ms,
        shadow: c.shadow,
        source: Source::Redis,
    }
}

#[cfg(test)]
#[path = "counters_tests.rs"]
mod tests;
