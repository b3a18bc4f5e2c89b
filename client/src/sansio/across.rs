//! [`AcrossSlots`]: a `check_all` (or an `each`) whose keys may span several cluster hash
//! slots, with shadow keys, as ops without I/O. A multi-key command must stay in one slot
//! (even on a node holding every slot), so the enforced keys go out as one `RL.ALL` per slot
//! ([`Op`]s of [`Layers::check_all`]); all or nothing across them is kept by giving back
//! (`RL.REFUND`) what the slots that allowed took in Redis once another denies or fails
//! (between the take and the refund another client can see the lower count). Shadow keys
//! never deny, so they are checked on their own ([`Layers::check`]).
//!
//! The host runs the ops of each round ([`AcrossSlots::next_round`]) with its client, together or
//! one after the other, tells the plan how each ended ([`AcrossSlots::done`],
//! [`AcrossSlots::failed`]) and asks for the next round until it is empty; then
//! [`AcrossSlots::outcome`].

use std::sync::Arc;

use crate::layers::decider::{cost_at, unknown};
use crate::limiter::decision::{Decision, MultiDecision, Source};
use crate::limiter::policy::Policy;
use crate::transport::command::slot_groups;

use super::layers::Layers;
use super::op::{Op, OpError, Outcome, MAX_ALL_KEYS};

/// When the slots are asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Every slot (and every shadow key) in the first round: one round trip of latency,
    /// for hosts that send concurrently. Every key gets Redis's own answer.
    Together,
    /// One slot a round, in the order of their first key; none after a slot denies or
    /// fails (their keys are `unchecked`); the shadow keys last: for hosts that send one
    /// command at a time, so a denial costs no call to the later slots.
    InTurn,
}

/// What an op of the current round was for.
#[derive(Clone, Copy, Debug)]
enum Role {
    /// The `RL.ALL` of the slot group at this index.
    Slot(usize),
    /// The check of the shadow key at this index of the request.
    Shadow(usize),
    /// A give-back, best effort: its failure is not the call's.
    Refund,
}

/// A `check_all` across hash slots, or an `each` (every key's own decision, no refunds).
#[derive(Debug)]
pub struct AcrossSlots {
    layers: Arc<Layers>,
    schedule: Schedule,
    /// `Some(force)`: an `each` (`RL.ALL ... FORCE` or `PEEK`); `None`: a `check_all`.
    each: Option<bool>,
    items: Vec<(String, Policy)>,
    costs: Vec<u64>,
    /// The enforced keys' indexes by hash slot (one group off a cluster), made at the first
    /// round.
    slots: Option<Vec<Vec<usize>>>,
    /// How many slot groups were handed out.
    sent: usize,
    shadows_sent: bool,
    refunds_sent: bool,
    round: Vec<Role>,
    decisions: Vec<Decision>,
    /// Per slot group, the request index of its denying key.
    denials: Vec<Option<usize>>,
    /// The keys whose units Redis took (a refund gives them back).
    taken: Vec<usize>,
    error: Option<OpError>,
}

impl AcrossSlots {
    pub(crate) fn new(layers: Arc<Layers>, schedule: Schedule, each: Option<bool>) -> Self {
        Self {
            layers,
            schedule,
            each,
            items: Vec::new(),
            costs: Vec::new(),
            slots: None,
            sent: 0,
            shadows_sent: false,
            refunds_sent: false,
            round: Vec::new(),
            decisions: Vec::new(),
            denials: Vec::new(),
            taken: Vec::new(),
            error: None,
        }
    }

    /// Adds a key with its own cost (before the first round).
    pub fn add(&mut self, key: String, policy: Policy, cost: u64) -> Result<(), OpError> {
        if self.slots.is_some() {
            return Err(OpError::Failed(
                "add: the keys are already being checked".to_string(),
            ));
        }
        if key.is_empty() {
            return Err(OpError::Invalid("key must not be empty".to_string()));
        }
        if self.items.iter().any(|(k, _)| *k == key) {
            return Err(OpError::Invalid(format!(
                "key {key:?} repeats an earlier key: each key may appear once"
            )));
        }
        if self.items.len() == MAX_ALL_KEYS {
            return Err(OpError::Invalid(
                "checkAll takes at most 16 keys (rl.max-all-keys)".to_string(),
            ));
        }
        let mut d = unknown(policy.params());
        d.shadow = policy.is_shadow();
        self.decisions.push(d);
        self.items.push((key, policy));
        self.costs.push(cost);
        Ok(())
    }

    /// Whether the key at `i` is checked on its own (a shadow key of a `check_all`).
    fn shadow(&self, i: usize) -> bool {
        self.each.is_none() && self.items.get(i).is_some_and(|(_, p)| p.is_shadow())
    }

    /// The enforced keys by hash slot, slots in the order of their first key (the grouping
    /// the async client's `RL.ALL` per slot uses).
    fn group(&self) -> Vec<Vec<usize>> {
        let enforced: Vec<usize> = (0..self.items.len()).filter(|&i| !self.shadow(i)).collect();
        let keys: Vec<&str> = enforced
            .iter()
            .filter_map(|&i| self.items.get(i).map(|(k, _)| k.as_str()))
            .collect();
        if keys.is_empty() {
            return Vec::new();
        }
        slot_groups(&keys, self.layers.cluster)
            .into_iter()
            .map(|(_, members)| {
                members
                    .into_iter()
                    .filter_map(|m| enforced.get(m).copied())
                    .collect()
            })
            .collect()
    }

    fn slot_op(&self, members: &[usize]) -> Op {
        let mut op = match self.each {
            Some(force) => self.layers.each(force),
            None => self.layers.check_all(),
        };
        for &i in members {
            if let Some((key, policy)) = self.items.get(i) {
                // The keys were checked by `add`: this cannot refuse them.
                let _ = op.add(key.clone(), *policy, cost_at(&self.costs, i));
            }
        }
        op
    }

    fn stopped(&self) -> bool {
        self.error.is_some() || self.denials.iter().any(Option::is_some)
    }

    /// The ops of the next round, to run (in any order, or together) and report on with
    /// [`AcrossSlots::done`] or [`AcrossSlots::failed`] by their index in this round before
    /// asking for the next; empty when the call is over.
    pub fn next_round(&mut self) -> Vec<Op> {
        self.round.clear();
        let slots = match self.slots.take() {
            Some(slots) => slots,
            None => {
                let slots = self.group();
                self.denials = vec![None; slots.len()];
                slots
            }
        };
        let mut ops = Vec::new();
        if !self.stopped() && self.sent < slots.len() {
            let end = match self.schedule {
                Schedule::Together => slots.len(),
                Schedule::InTurn => self.sent + 1,
            };
            for g in self.sent..end {
                if let Some(members) = slots.get(g) {
                    ops.push(self.slot_op(members));
                    self.round.push(Role::Slot(g));
                }
            }
            self.sent = end;
        }
        self.slots = Some(slots);
        if !ops.is_empty() {
            if self.schedule == Schedule::Together {
                ops.extend(self.shadow_ops());
            }
            return ops;
        }
        if self.stopped() && !std::mem::replace(&mut self.refunds_sent, true) {
            let refunds = self.refund_ops();
            if !refunds.is_empty() {
                return refunds;
            }
        }
        if self.error.is_none() {
            return self.shadow_ops();
        }
        Vec::new()
    }

    fn shadow_ops(&mut self) -> Vec<Op> {
        if std::mem::replace(&mut self.shadows_sent, true) {
            return Vec::new();
        }
        let mut ops = Vec::new();
        for (i, (key, policy)) in self.items.iter().enumerate() {
            if self.each.is_none() && policy.is_shadow() {
                ops.push(
                    self.layers
                        .check(key.clone(), *policy, cost_at(&self.costs, i), false),
                );
                self.round.push(Role::Shadow(i));
            }
        }
        ops
    }

    /// Gives back what Redis took on the slots that allowed, once a slot denied or a call
    /// failed (an `each` takes back nothing: every key's decision is its own).
    fn refund_ops(&mut self) -> Vec<Op> {
        if self.each.is_some() {
            return Vec::new();
        }
        let mut ops = Vec::new();
        for &i in &self.taken {
            let (Some((key, policy)), cost) = (self.items.get(i), cost_at(&self.costs, i)) else {
                continue;
            };
            if cost > 0 {
                ops.push(self.layers.refund(key.clone(), *policy, cost));
                self.round.push(Role::Refund);
            }
        }
        ops
    }

    /// The op at `index` of the last round ended with its outcome.
    pub fn done(&mut self, index: usize, op: &Op) {
        let Some(&role) = self.round.get(index) else {
            return;
        };
        match (role, op.outcome()) {
            (Role::Slot(g), Some(Outcome::Multi(m))) => {
                let members = self
                    .slots
                    .as_ref()
                    .and_then(|s| s.get(g))
                    .cloned()
                    .unwrap_or_default();
                for (&i, d) in members.iter().zip(&m.decisions) {
                    if let Some(slot) = self.decisions.get_mut(i) {
                        *slot = *d;
                    }
                }
                match m.denied.and_then(|j| members.get(j)) {
                    Some(&i) => {
                        if let Some(denial) = self.denials.get_mut(g) {
                            *denial = Some(i);
                        }
                    }
                    // Only what Redis took is given back: a lease's units or a failure
                    // mode's answer took nothing there.
                    None => self.taken.extend(members.iter().copied().filter(|&i| {
                        self.decisions
                            .get(i)
                            .is_some_and(|d| d.source == Source::Redis)
                    })),
                }
            }
            (Role::Shadow(i), Some(Outcome::Decision(d))) => {
                if let Some(slot) = self.decisions.get_mut(i) {
                    *slot = *d;
                }
            }
            (Role::Refund, _) => {}
            (_, _) => {
                self.failed(index, "the op ended without a decision");
            }
        }
    }

    /// The op at `index` of the last round failed with `message`. Returns whether the
    /// failure is the call's (a refund's is not: it is best effort, the host may log it).
    pub fn failed(&mut self, index: usize, message: &str) -> bool {
        match self.round.get(index) {
            Some(Role::Refund) | None => false,
            Some(_) => {
                self.error
                    .get_or_insert_with(|| OpError::Failed(message.to_string()));
                true
            }
        }
    }

    /// The decision once the rounds are over (the first failure, if one was the call's):
    /// `denied` is the denying key of the first slot (in the order of their first key) that
    /// denied.
    pub fn outcome(&self) -> Result<MultiDecision, OpError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        Ok(MultiDecision {
            denied: self.denials.iter().find_map(|d| *d),
            decisions: self.decisions.clone(),
        })
    }
}
