//! A `check_all` across hash slots with canned replies: which ops each round holds, what a
//! denial or a failure gives back, and the decision put together.

use std::sync::Arc;

use redis::Value;

use super::{AcrossSlots, Layers, LayersConfig, Op, OpError, Schedule};
use crate::limiter::decision::Source;
use crate::limiter::policy::Policy;

fn cluster() -> Arc<Layers> {
    Arc::new(Layers::new(LayersConfig {
        cluster: true,
        deny_cache: None,
        ..LayersConfig::default()
    }))
}

/// An `RL.ALL` reply: `denied` (1-based, 0: allowed), each key `[limit, remaining, retry, reset]`.
fn all_reply(denied: i64, keys: &[[i64; 4]]) -> Value {
    let per_key = keys
        .iter()
        .map(|k| Value::Array(k.iter().map(|i| Value::Int(*i)).collect()))
        .collect();
    Value::Array(vec![
        Value::Int(i64::from(denied == 0)),
        Value::Int(denied),
        Value::Array(per_key),
    ])
}

const ALLOWS: [i64; 4] = [10, 9, 0, 1000];
const DENIES: [i64; 4] = [1, 0, 700, 1000];

/// `reply` (an `RL.ALL` reply) as the server gives it to `command`: a slot group of one key
/// goes out as the algorithm's own command, whose reply is `[allowed, limit, remaining,
/// retry, reset]`.
fn as_sent(command: &[String], reply: &Value) -> Value {
    let Value::Array(parts) = reply else {
        return reply.clone();
    };
    match (command.first().map(String::as_str), parts.as_slice()) {
        (Some("RL.ALL"), _) => reply.clone(),
        (_, [allowed, _, Value::Array(keys)]) => match keys.as_slice() {
            [Value::Array(fields)] => Value::Array(
                std::iter::once(allowed.clone())
                    .chain(fields.clone())
                    .collect(),
            ),
            _ => reply.clone(),
        },
        _ => reply.clone(),
    }
}

/// Runs `op` to its end with `reply`, and says so to the plan.
fn answer(plan: &mut AcrossSlots, index: usize, op: &mut Op, reply: &Value) {
    let command = op.start().unwrap().unwrap();
    assert_eq!(op.feed(&as_sent(&command, reply)).unwrap(), None);
    plan.done(index, op);
}

fn plan(layers: &Arc<Layers>, schedule: Schedule, keys: &[(&str, Policy)]) -> AcrossSlots {
    let mut plan = layers.check_all_across(schedule);
    for (k, p) in keys {
        plan.add((*k).to_string(), *p, 2).unwrap();
    }
    plan
}

fn first_word(op: &mut Op) -> String {
    op.start().unwrap().unwrap().remove(0)
}

#[test]
fn in_turn_a_denying_slot_gives_back_the_slots_before_and_skips_the_later() {
    let p = Policy::sliding(10, 1000).unwrap();
    let keys = [("{a}1", p), ("{b}1", p), ("{a}2", p), ("{c}1", p)];
    let mut plan = plan(&cluster(), Schedule::InTurn, &keys);
    let mut first = plan.next_round();
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].start().unwrap().unwrap()[..4],
        ["RL.ALL", "2", "{a}1", "{a}2"]
    );
    answer(
        &mut plan,
        0,
        &mut first[0],
        &all_reply(0, &[ALLOWS, ALLOWS]),
    );
    let mut second = plan.next_round();
    assert_eq!(second.len(), 1);
    answer(&mut plan, 0, &mut second[0], &all_reply(1, &[DENIES]));
    let mut refunds = plan.next_round();
    let refunded: Vec<Vec<String>> = refunds
        .iter_mut()
        .map(|op| op.start().unwrap().unwrap())
        .collect();
    assert_eq!(refunded.len(), 2);
    assert_eq!(refunded[0][..2], ["RL.REFUND", "{a}1"]);
    assert_eq!(refunded[1][..2], ["RL.REFUND", "{a}2"]);
    assert!(!plan.failed(0, "a lost refund is not the call's"));
    assert!(plan.next_round().is_empty());
    let m = plan.outcome().unwrap();
    assert_eq!(m.denied, Some(1));
    let sources: Vec<Source> = m.decisions.iter().map(|d| d.source).collect();
    assert_eq!(
        sources,
        [
            Source::Redis,
            Source::Redis,
            Source::Redis,
            Source::Unchecked
        ]
    );
}

#[test]
fn together_every_slot_goes_at_once_and_the_allowing_ones_are_given_back() {
    let p = Policy::sliding(10, 1000).unwrap();
    let keys = [("{a}1", p), ("{b}1", p), ("{c}1", p)];
    let mut plan = plan(&cluster(), Schedule::Together, &keys);
    let mut round = plan.next_round();
    assert_eq!(round.len(), 3);
    // Reported out of order, as concurrent calls end.
    answer(&mut plan, 2, &mut round[2], &all_reply(0, &[ALLOWS]));
    answer(&mut plan, 1, &mut round[1], &all_reply(1, &[DENIES]));
    answer(&mut plan, 0, &mut round[0], &all_reply(0, &[ALLOWS]));
    let mut refunds = plan.next_round();
    let keys: Vec<String> = refunds
        .iter_mut()
        .map(|op| op.start().unwrap().unwrap().remove(1))
        .collect();
    assert_eq!(keys, ["{c}1", "{a}1"]);
    assert!(plan.next_round().is_empty());
    let m = plan.outcome().unwrap();
    assert_eq!(m.denied, Some(1));
    assert!(m.decisions.iter().all(|d| d.source == Source::Redis));
}

#[test]
fn a_shadow_key_is_checked_on_its_own_after_the_enforced_ones() {
    let layers = Arc::new(Layers::new(LayersConfig::default()));
    let p = Policy::sliding(10, 1000).unwrap();
    let keys = [("s", p.shadow(true)), ("e1", p), ("e2", p)];
    let mut plan = plan(&layers, Schedule::InTurn, &keys);
    let mut enforced = plan.next_round();
    assert_eq!(
        enforced.len(),
        1,
        "off a cluster every enforced key is in one RL.ALL"
    );
    answer(
        &mut plan,
        0,
        &mut enforced[0],
        &all_reply(0, &[ALLOWS, ALLOWS]),
    );
    let mut shadow = plan.next_round();
    assert_eq!(shadow.len(), 1);
    assert_eq!(first_word(&mut shadow[0]), "RL.SLIDING");
    assert_eq!(
        shadow[0]
            .feed(&Value::Array(
                [0, 10, 0, 500, 1000].map(Value::Int).to_vec()
            ))
            .unwrap(),
        None
    );
    plan.done(0, &shadow[0]);
    assert!(plan.next_round().is_empty());
    let m = plan.outcome().unwrap();
    assert_eq!(m.denied, None, "a shadow key never denies");
    assert!(m.decisions[0].shadow && m.decisions[0].is_denied());
    assert_eq!(m.decisions[0].source, Source::Redis);
}

#[test]
fn a_failed_slot_gives_back_the_slots_taken_and_is_the_calls_error() {
    let p = Policy::sliding(10, 1000).unwrap();
    let keys = [("{a}1", p), ("{b}1", p), ("s", p.shadow(true))];
    let mut plan = plan(&cluster(), Schedule::InTurn, &keys);
    let mut first = plan.next_round();
    answer(&mut plan, 0, &mut first[0], &all_reply(0, &[ALLOWS]));
    let _second = plan.next_round();
    assert!(plan.failed(0, "WRONGTYPE"));
    let mut refunds = plan.next_round();
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0].start().unwrap().unwrap()[1], "{a}1");
    assert!(
        plan.next_round().is_empty(),
        "after a failure no shadow key is checked"
    );
    assert_eq!(
        plan.outcome(),
        Err(OpError::Failed("WRONGTYPE".to_string()))
    );
}

#[test]
fn an_each_groups_every_key_and_gives_nothing_back() {
    let p = Policy::sliding(10, 1000).unwrap();
    let mut plan = cluster().each_across(true, Schedule::InTurn);
    plan.add("{a}1".into(), p.shadow(true), 3).unwrap();
    plan.add("{b}1".into(), p, 3).unwrap();
    let mut first = plan.next_round();
    let words = first[0].start().unwrap().unwrap();
    assert_eq!(words.last().map(String::as_str), Some("FORCE"));
    assert_eq!(first[0].feed(&all_reply(0, &[ALLOWS])).unwrap(), None);
    plan.done(0, &first[0]);
    let mut second = plan.next_round();
    answer(&mut plan, 0, &mut second[0], &all_reply(1, &[DENIES]));
    assert!(plan.next_round().is_empty());
    assert_eq!(plan.outcome().unwrap().decisions.len(), 2);
}

#[test]
fn a_slot_the_failure_mode_answered_is_not_given_back() {
    let p = Policy::sliding(10, 1000).unwrap();
    let keys = [("{a}1", p), ("{b}1", p)];
    let mut plan = plan(&cluster(), Schedule::InTurn, &keys);
    let mut first = plan.next_round();
    assert!(first[0].start().unwrap().is_some());
    // Redis did not answer: the failure mode (open by default) allowed, taking nothing there.
    assert_eq!(first[0].fail("connection refused", true).unwrap(), None);
    plan.done(0, &first[0]);
    let mut second = plan.next_round();
    answer(&mut plan, 0, &mut second[0], &all_reply(1, &[DENIES]));
    assert!(plan.next_round().is_empty(), "nothing to give back");
    let m = plan.outcome().unwrap();
    assert_eq!(m.denied, Some(1));
    assert_ne!(m.decisions[0].source, Source::Redis);
}
