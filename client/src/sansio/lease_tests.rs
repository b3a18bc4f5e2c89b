//! Leases in the op, with canned replies: which keys reach Redis, what the leases answer,
//! and what the host's timer gives back.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::{Layers, LayersConfig, LeaseConfig, Outcome};
use crate::limiter::decision::{MultiDecision, Source};
use crate::limiter::policy::Policy;

fn words(s: &str) -> Vec<String> {
    s.split(' ').map(str::to_string).collect()
}

fn reply(fields: &[i64]) -> Value {
    Value::Array(fields.iter().map(|i| Value::Int(*i)).collect())
}

fn leased(lifetime_ms: u64) -> Arc<Layers> {
    Arc::new(Layers::new(LayersConfig {
        leases: Some(LeaseConfig {
            lifetime: Duration::from_millis(lifetime_ms),
            ..LeaseConfig::default()
        }),
        ..LayersConfig::default()
    }))
}

fn hot() -> Policy {
    Policy::sliding(1000, 60_000).unwrap().hot(true)
}

fn multi(op: &super::Op) -> MultiDecision {
    match op.outcome() {
        Some(Outcome::Multi(md)) => md.clone(),
        other => panic!("not a check_all outcome: {other:?}"),
    }
}

/// Takes the lease of `k` the way a steady key does: a first take of the request's own
/// unit, then a batch sized from that demand (20 units), one spent.
fn lease_of_19(l: &Arc<Layers>) {
    let mut first = l.check_all();
    first.add("k".into(), hot(), 1).unwrap();
    assert_eq!(
        first.start().unwrap(),
        Some(words("RL.SLIDING k 1000 60000 COST 1 UPTO"))
    );
    assert_eq!(
        first.feed(&reply(&[1, 1000, 999, 0, 60000, 1])).unwrap(),
        None
    );
    assert!(multi(&first).denied.is_none());
    let mut second = l.check_all();
    second.add("k".into(), hot(), 1).unwrap();
    assert_eq!(
        second.start().unwrap(),
        Some(words("RL.SLIDING k 1000 60000 COST 20 UPTO"))
    );
    assert_eq!(
        second.feed(&reply(&[1, 1000, 979, 0, 60000, 20])).unwrap(),
        None
    );
}

#[test]
fn a_hot_key_is_served_from_its_lease_without_a_command() {
    let l = leased(60_000);
    lease_of_19(&l);
    for left in (0..19).rev() {
        let mut op = l.check_all();
        op.add("k".into(), hot(), 1).unwrap();
        assert_eq!(op.start().unwrap(), None, "served from the lease");
        let md = multi(&op);
        let d = md.decisions.first().unwrap();
        assert_eq!(
            (md.denied, d.source, d.remaining),
            (None, Source::Lease, 979 + left)
        );
    }
    let stats = l.lease_stats();
    assert_eq!((stats.takes, stats.granted, stats.hits), (2, 21, 19));
}

#[test]
fn the_other_keys_go_to_redis_and_a_denial_gives_the_leased_units_back() {
    let l = leased(60_000);
    lease_of_19(&l);
    let cold = Policy::sliding(10, 1000).unwrap();
    let mut op = l.check_all();
    op.add("k".into(), hot(), 1).unwrap();
    op.add("c".into(), cold, 1).unwrap();
    // Only the key without a lease is sent: one key, its algorithm's own command.
    assert_eq!(op.start().unwrap(), Some(words("RL.SLIDING c 10 1000")));
    op.feed(&reply(&[0, 10, 0, 400, 1000])).unwrap();
    let md = multi(&op);
    assert_eq!(md.denied, Some(1), "the denying key's index in the request");
    assert_eq!(md.decisions.len(), 2);
    // The unit went back: the lease still holds 19.
    let mut next = l.check_all();
    next.add("k".into(), hot(), 1).unwrap();
    assert_eq!(next.start().unwrap(), None);
    assert_eq!(multi(&next).decisions.first().unwrap().remaining, 979 + 18);
}

#[test]
fn an_ended_lease_is_refunded_through_pending_and_only_once() {
    let l = leased(1);
    lease_of_19(&l);
    std::thread::sleep(Duration::from_millis(5));
    let mut refund = l.pending(0).expect("a refund is due");
    assert_eq!(
        refund.start().unwrap(),
        Some(words("RL.REFUND k SLIDING 1000 60000 COST 19"))
    );
    assert_eq!(
        refund.feed(&reply(&[19, 1000, 998, 0, 60000])).unwrap(),
        None
    );
    assert!(l.pending(0).is_none(), "nothing more is due");
    let stats = l.lease_stats();
    assert_eq!((stats.refunds, stats.refunded, stats.dropped), (1, 19, 0));
    // The next request takes a new batch rather than spending expired units.
    let mut op = l.check_all();
    op.add("k".into(), hot(), 1).unwrap();
    assert!(op.start().unwrap().is_some());
}

#[test]
fn leases_are_released_at_shutdown_and_a_failed_refund_is_dropped() {
    let l = leased(60_000);
    lease_of_19(&l);
    let mut ops = l.release_leases();
    assert_eq!(ops.len(), 1);
    let refund = ops.first_mut().unwrap();
    assert!(refund.start().unwrap().is_some());
    assert!(refund.fail("connection refused", true).is_err());
    let stats = l.lease_stats();
    assert_eq!((stats.refunded, stats.dropped), (0, 19));
    assert!(l.pending(0).is_none(), "never retried");
}

#[test]
fn a_grant_of_nothing_denies_and_the_key_is_not_asked_again_at_once() {
    let l = leased(60_000);
    let mut op = l.check_all();
    op.add("k".into(), hot(), 1).unwrap();
    op.add("c".into(), Policy::sliding(10, 1000).unwrap(), 1)
        .unwrap();
    assert!(op.start().unwrap().is_some());
    // Nothing granted: the request is denied before the other key is sent.
    assert_eq!(op.feed(&reply(&[0, 1000, 0, 300, 60000, 0])).unwrap(), None);
    assert_eq!(multi(&op).denied, Some(0));
    let mut again = l.check_all();
    again.add("k".into(), hot(), 1).unwrap();
    assert_eq!(again.start().unwrap(), None, "refused locally");
    let md = multi(&again);
    assert_eq!(
        (md.denied, md.decisions.first().unwrap().source),
        (Some(0), Source::DenyCache)
    );
}

#[test]
fn a_take_that_fails_leaves_the_key_to_the_failure_mode() {
    let l = leased(60_000);
    let mut op = l.check_all();
    op.add("k".into(), hot(), 1).unwrap();
    assert!(op.start().unwrap().is_some());
    // The take fails: the key goes to the ordinary call, which fails too: failure mode.
    assert_eq!(
        op.fail("connection refused", true).unwrap(),
        Some(words("RL.SLIDING k 1000 60000"))
    );
    assert_eq!(op.fail("connection refused", true).unwrap(), None);
    let md = multi(&op);
    assert_eq!(md.decisions.first().unwrap().source, Source::Local);
    // Within a lifetime the key is not taken again: the ordinary call.
    let mut next = l.check_all();
    next.add("k".into(), hot(), 1).unwrap();
    assert_eq!(
        next.start().unwrap(),
        Some(words("RL.SLIDING k 1000 60000"))
    );
}

#[test]
fn an_op_dropped_during_its_take_lets_the_next_request_take() {
    let l = leased(60_000);
    let mut op = l.check_all();
    op.add("k".into(), hot(), 1).unwrap();
    assert!(op.start().unwrap().is_some());
    drop(op);
    let mut next = l.check_all();
    next.add("k".into(), hot(), 1).unwrap();
    let sent = next.start().unwrap().unwrap();
    assert_eq!(
        sent.last().map(String::as_str),
        Some("UPTO"),
        "a take, not the ordinary call: {sent:?}"
    );
}
