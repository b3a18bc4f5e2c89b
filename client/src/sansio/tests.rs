//! The op's steps with canned replies: what is sent, what a reply or an error leads to.

use std::num::NonZeroU32;
use std::sync::Arc;

use redis::Value;

use super::{Layers, LayersConfig, OpError, Outcome};
use crate::fleet::FleetConfig;
use crate::layers::decider::ServerImpl;
use crate::limiter::decision::Source;
use crate::limiter::policy::{FailureMode, Policy};
use crate::limiter::settle::Settled;

fn words(s: &str) -> Vec<String> {
    s.split(' ').map(str::to_string).collect()
}

fn reply(fields: &[i64]) -> Value {
    Value::Array(fields.iter().map(|i| Value::Int(*i)).collect())
}

fn layers(config: LayersConfig) -> Arc<Layers> {
    Arc::new(Layers::new(config))
}

#[test]
fn a_check_sends_the_module_command_and_reads_the_decision() {
    let l = layers(LayersConfig::default());
    let mut op = l.check("k".into(), Policy::sliding(10, 1000).unwrap(), 2, false);
    assert_eq!(
        op.start().unwrap(),
        Some(words("RL.SLIDING k 10 1000 COST 2"))
    );
    assert_eq!(op.feed(&reply(&[1, 10, 8, 0, 1000])).unwrap(), None);
    let Some(Outcome::Decision(d)) = op.outcome() else {
        panic!("no decision");
    };
    assert_eq!((d.remaining, d.source), (8, Source::Redis));
}

#[test]
fn a_grant_of_nothing_is_remembered_and_a_refund_forgets_it() {
    let l = layers(LayersConfig::default());
    let p = Policy::sliding(10, 1000).unwrap();
    let mut op = l.take_upto("k".into(), p, 5, false);
    assert!(op.start().unwrap().is_some());
    op.feed(&reply(&[0, 10, 0, 300, 1000, 0])).unwrap();
    // The next take and check of the key are answered without a call.
    let mut again = l.take_upto("k".into(), p, 5, false);
    assert_eq!(again.start().unwrap(), None);
    assert!(matches!(again.outcome(), Some(Outcome::Grant(g)) if g.granted == 0));
    let mut check = l.check("k".into(), p, 1, false);
    assert_eq!(check.start().unwrap(), None);
    let mut refund = l.refund("k".into(), p, 3);
    assert!(refund.start().unwrap().is_some());
    refund.feed(&reply(&[3, 10, 3, 0, 1000])).unwrap();
    let mut after = l.check("k".into(), p, 1, false);
    assert!(
        after.start().unwrap().is_some(),
        "the refund forgot the refusal"
    );
}

#[test]
fn a_check_all_is_refused_locally_when_the_cache_holds_an_enforced_key() {
    let l = layers(LayersConfig::default());
    let p = Policy::sliding(10, 1000).unwrap();
    let mut op = l.check_all();
    op.add("a".into(), p, 1).unwrap();
    op.add("b".into(), p, 1).unwrap();
    assert!(op.start().unwrap().is_some());
    op.feed(&Value::Array(vec![
        Value::Int(0),
        Value::Int(2),
        Value::Array(vec![reply(&[10, 5, 0, 1000]), reply(&[10, 0, 400, 1000])]),
    ]))
    .unwrap();
    let mut again = l.check_all();
    again.add("a".into(), p, 1).unwrap();
    again.add("b".into(), p, 1).unwrap();
    assert_eq!(again.start().unwrap(), None);
    let Some(Outcome::Multi(m)) = again.outcome() else {
        panic!("no decision");
    };
    assert_eq!(m.denied, Some(1));
    assert_eq!(m.decisions[0].source, Source::Unchecked);
    assert_eq!(m.decisions[1].source, Source::DenyCache);
}

#[test]
fn a_check_all_of_one_key_sends_its_algorithms_command_and_reads_the_denial() {
    let l = layers(LayersConfig::default());
    let p = Policy::sliding(10, 1000).unwrap();
    let mut op = l.check_all();
    op.add("a".into(), p, 3).unwrap();
    assert_eq!(
        op.start().unwrap(),
        Some(words("RL.SLIDING a 10 1000 COST 3"))
    );
    assert_eq!(op.feed(&reply(&[0, 10, 1, 250, 900])).unwrap(), None);
    let Some(Outcome::Multi(m)) = op.outcome() else {
        panic!("no decision");
    };
    assert_eq!(m.denied, Some(0));
    let d = m.decisions[0];
    assert_eq!(
        (d.retry_after(), d.remaining, d.limit, d.source),
        (
            Some(std::time::Duration::from_millis(250)),
            1,
            10,
            Source::Redis
        )
    );
    // The denial is remembered like RL.ALL's: the next request is refused locally.
    let mut again = l.check_all();
    again.add("a".into(), p, 3).unwrap();
    assert_eq!(again.start().unwrap(), None);
    // An allowing reply: no denied index.
    let mut other = l.check_all();
    other.add("b".into(), p, 1).unwrap();
    assert!(other.start().unwrap().is_some());
    other.feed(&reply(&[1, 10, 9, 0, 100])).unwrap();
    assert!(matches!(other.outcome(), Some(Outcome::Multi(m)) if m.denied.is_none()));
}

#[test]
fn errors_fail_over_decides_a_calls_own_error_by_the_failure_mode() {
    let p = Policy::sliding(10, 1000)
        .unwrap()
        .on_failure(FailureMode::Open);
    let strict = layers(LayersConfig {
        server_impl: ServerImpl::Module,
        ..LayersConfig::default()
    });
    let mut op = strict.check("k".into(), p, 1, false);
    op.start().unwrap();
    assert!(matches!(
        op.fail("ERR unknown command 'RL.SLIDING'", false),
        Err(OpError::Failed(_))
    ));
    let lenient = layers(LayersConfig {
        server_impl: ServerImpl::Module,
        errors_fail_over: true,
        ..LayersConfig::default()
    });
    let mut op = lenient.check("k".into(), p, 1, false);
    op.start().unwrap();
    assert_eq!(op.fail("ERR unknown command 'RL.SLIDING'", false), Ok(None));
    assert!(matches!(op.outcome(), Some(Outcome::Decision(d)) if d.source == Source::FailOpen));
}

#[test]
fn a_heartbeat_renews_then_checks_the_key_and_the_fallback_divides_by_the_size() {
    let fleet = FleetConfig {
        id: "me".into(),
        ..FleetConfig::new("rl:{fleet}")
    };
    let l = layers(LayersConfig {
        fleet: Some(fleet),
        fleet_divides: true,
        ..LayersConfig::default()
    });
    let now_ms = 1_000_000;
    let mut beat = l.pending(now_ms).expect("due at once");
    assert!(l.pending(now_ms).is_none(), "one heartbeat at a time");
    assert_eq!(
        beat.start().unwrap(),
        Some(words("RL.CONCURRENCY rl:{fleet} 10000 3000 ACQUIRE me"))
    );
    // On a server without the module: the twin, then the script itself.
    let twin = beat
        .fail("ERR unknown command 'RL.CONCURRENCY'", false)
        .unwrap();
    assert_eq!(twin.unwrap().first().map(String::as_str), Some("EVALSHA"));
    let state = beat.feed(&reply(&[1, 10_000, 9_998, 0, 3000])).unwrap();
    assert_eq!(state.unwrap().last().map(String::as_str), Some("RL.STATE"));
    let expiry = Value::Array(vec![
        Value::BulkString(b"last_expiry_ms".to_vec()),
        Value::Int(i64::try_from(now_ms + 3000).unwrap()),
    ]);
    assert_eq!(beat.feed(&expiry).unwrap(), None);
    assert_eq!(beat.outcome(), Some(&Outcome::Units(2)));
    assert_eq!(l.fleet_size(), Some(2));
    assert!(
        l.pending(now_ms + 10).is_none(),
        "not due before the heartbeat"
    );
    // Redis down: the local fallback admits the limit divided by the 2 members.
    let p = Policy::sliding(10, 60_000)
        .unwrap()
        .on_failure(FailureMode::Local {
            instances: NonZeroU32::MIN,
        });
    let admitted = (0..10)
        .filter(|i| {
            let mut op = l.check(format!("x{}", i / 10), p, 1, false);
            op.start().unwrap();
            op.fail("connection refused", true).unwrap();
            matches!(op.outcome(), Some(Outcome::Decision(d)) if d.allows())
        })
        .count();
    assert_eq!(admitted, 5);
}

#[test]
fn a_key_holding_a_longer_lease_is_not_believed() {
    let l = layers(LayersConfig {
        fleet: Some(FleetConfig::new("rl:{fleet}")),
        ..LayersConfig::default()
    });
    let now_ms = 1_000_000;
    let mut beat = l.pending(now_ms).unwrap();
    beat.start().unwrap();
    beat.feed(&reply(&[1, 10_000, 9_000, 0, 3000])).unwrap();
    let forged = Value::Array(vec![
        Value::BulkString(b"last_expiry_ms".to_vec()),
        Value::Int(i64::try_from(now_ms + 3_600_000).unwrap()),
    ]);
    beat.feed(&forged).unwrap();
    assert_eq!(l.fleet_size(), None, "1000 members read from a forged key");
}

#[test]
fn a_settle_refunds_the_difference_charges_it_with_force_or_sends_nothing() {
    let l = layers(LayersConfig::default());
    let p = Policy::sliding(10, 1000).unwrap();
    let mut over = l.settle("k".into(), p, 5, 2);
    assert_eq!(
        over.start().unwrap(),
        Some(words("RL.REFUND k SLIDING 10 1000 COST 3"))
    );
    over.feed(&reply(&[3, 10, 5, 0, 1000])).unwrap();
    assert!(matches!(
        over.outcome(),
        Some(Outcome::Settled {
            settled: Settled::Refunded(3),
            units: 3
        })
    ));
    let mut under = l.settle("k".into(), p, 2, 9);
    assert_eq!(
        under.start().unwrap(),
        Some(words("RL.SLIDING k 10 1000 COST 7 FORCE"))
    );
    under.feed(&reply(&[1, 10, 0, 0, 1000])).unwrap();
    assert!(matches!(
        under.outcome(),
        Some(Outcome::Settled { settled: Settled::Charged(d), units: 7 }) if d.remaining == 0
    ));
    let mut exact = l.settle("k".into(), p, 4, 4);
    assert_eq!(exact.start().unwrap(), None, "nothing to send");
    assert!(matches!(
        exact.outcome(),
        Some(Outcome::Settled {
            settled: Settled::Exact,
            units: 0
        })
    ));
}
