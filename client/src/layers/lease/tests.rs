//! Leases through a limiter on a scripted Redis.

use std::time::Duration;

use redis::Value;

use crate::limiter::decision::Source;
use crate::limiter::policy::Policy;
use crate::testing::*;

/// The cost a command names.
fn cost(w: &[String]) -> i64 {
    let i = w.iter().position(|a| a == "COST").unwrap();
    w[i + 1].parse().unwrap()
}

/// Grants every `UPTO` in full, refunds in full, denies every booking of `ip` (the one key
/// left to Redis goes out as its algorithm's own command).
fn server(w: &[String]) -> Value {
    match w[0].as_str() {
        "COMMAND" => caps(true),
        "RL.SLIDING" if w.iter().any(|a| a == "UPTO") => {
            ints(&[1, 100_000, 50_000, 0, 60_000, cost(w)])
        }
        "RL.REFUND" => ints(&[cost(w), 100_000, 50_000, 0, 60_000]),
        "RL.SLIDING" if w[1] == "ip" => ints(&[0, 1, 0, 900, 60_000]),
        _ => allow(),
    }
}

fn hot() -> Policy {
    Policy::sliding(100_000, 60_000).unwrap().hot(true)
}

fn takes(mock: &Mock) -> Vec<i64> {
    mock.commands()
        .iter()
        .filter(|w| w.iter().any(|a| a == "UPTO"))
        .map(|w| cost(w))
        .collect()
}

/// Two requests 1 ms apart: the first takes one unit (no demand known yet), the second
/// a batch for 200 ms of the demand measured (1 unit over the 10 ms floor: 100/s, 20).
async fn warm_up(l: &crate::Limiter) {
    assert_eq!(l.check("g", &hot()).await.source, Source::Redis);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(l.check("g", &hot()).await.source, Source::Redis);
}

#[tokio::test(start_paused = true)]
async fn a_hot_key_takes_batches_sized_from_demand_and_refunds_the_rest() {
    let mock = Mock::new(false, server);
    let l = limiter(&mock);
    warm_up(&l).await;
    assert_eq!(takes(&mock), [1, 20]);
    for _ in 0..19 {
        let d = l.check("g", &hot()).await;
        assert!(d.allows());
        assert_eq!(d.source, Source::Lease);
    }
    assert_eq!(takes(&mock).len(), 2, "19 units spent without a call");
    // The demand grows: one request per millisecond is 1000/s, 200 per lease (well
    // under the largest lease, 10% of the limit).
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(l.check("g", &hot()).await.allows());
    }
    let sizes = takes(&mock);
    assert!(sizes.len() < 12, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n <= 1_000), "{sizes:?}");
    // Idle past the lifetime: the rest goes back, once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = l.stats().leases;
    assert_eq!(s.takes, sizes.len() as u64);
    assert_eq!(s.granted, sizes.iter().sum::<i64>() as u64);
    assert_eq!(s.granted, 421 + s.refunded, "granted = spent + refunded");
    assert_eq!((s.refunds, s.dropped), (1, 0));
    assert_eq!(s.hits, 421 - s.takes);
}

#[tokio::test(start_paused = true)]
async fn a_unit_is_spent_only_if_every_other_dimension_allows() {
    let mock = Mock::new(false, server);
    let l = limiter(&mock);
    warm_up(&l).await; // 19 units in hand
    let ip = Policy::sliding(1, 60_000).unwrap();
    let md = l.check_all(&[("ip", ip), ("g", hot())]).await;
    assert_eq!(md.denied, Some(0));
    assert_eq!(md.decisions[1].source, Source::Lease);
    // The unit went back: 19 still in hand.
    for _ in 0..19 {
        assert_eq!(l.check("g", &hot()).await.source, Source::Lease);
    }
    assert_eq!(l.check("g", &hot()).await.source, Source::Redis);
    assert_eq!(takes(&mock).len(), 3);
}

/// With different costs per key, a leased key spends its own cost from its lease and the
/// others go to Redis with theirs in one call (the one key left: its algorithm's own).
#[tokio::test(start_paused = true)]
async fn a_leased_key_spends_its_own_cost() {
    let mock = Mock::new(false, |w| match w[0].as_str() {
        "RL.SLIDING" if w[1] == "ip" => ints(&[1, 10, 7, 0, 60_000]),
        _ => server(w),
    });
    let l = limiter(&mock);
    warm_up(&l).await; // 19 units in hand
    let ip = Policy::sliding(10, 60_000).unwrap();
    let md = l
        .check_all_units(&[("ip", ip), ("g", hot())], &[3, 5])
        .await;
    assert!(md.allows());
    assert_eq!(md.decisions[1].source, Source::Lease);
    let booked: Vec<Vec<String>> = mock
        .commands()
        .into_iter()
        .filter(|w| w[1] == "ip")
        .collect();
    assert_eq!(booked, [["RL.SLIDING", "ip", "10", "60000", "COST", "3"]]);
    assert_eq!(md.decisions[0].remaining, 7);
    // 5 of the 19 spent: 14 left in hand.
    for _ in 0..14 {
        assert_eq!(l.check("g", &hot()).await.source, Source::Lease);
    }
    assert_eq!(l.check("g", &hot()).await.source, Source::Redis);
}

#[tokio::test(start_paused = true)]
async fn a_grant_of_nothing_is_a_denial_and_goes_to_the_deny_cache() {
    let mock = Mock::new(false, |w| match w[0].as_str() {
        "COMMAND" => caps(true),
        _ => ints(&[0, 100_000, 0, 500, 60_000, 0]),
    });
    let l = limiter(&mock);
    let d = l.check("g", &hot()).await;
    assert_eq!(d.retry_after(), Some(Duration::from_millis(500)));
    let ip = Policy::sliding(10, 60_000).unwrap();
    let md = l.check_all(&[("ip", ip), ("g", hot())]).await;
    assert_eq!(md.denied, Some(1));
    assert_eq!(md.decisions[1].source, Source::DenyCache);
    assert_eq!(
        mock.commands().len(),
        1,
        "the other dimension was not asked"
    );
}

#[tokio::test(start_paused = true)]
async fn a_saturated_key_is_asked_again_once_a_batch_could_have_freed_up() {
    let saturated = Mock::new(false, |w| match w[0].as_str() {
        "COMMAND" => caps(true),
        // One unit frees every 2 ms, and another gateway takes it.
        _ => ints(&[0, 100_000, 0, 2, 60_000, 0]),
    });
    let l2 = limiter(&saturated);
    warm_up_denied(&l2).await;
    let mut denied = 0;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        denied += u32::from(l2.check("g", &hot()).await.is_denied());
    }
    assert_eq!(denied, 200);
    let calls = saturated
        .names()
        .iter()
        .filter(|n| *n == "RL.SLIDING")
        .count();
    // Without the hold: one call per 2 ms (the deny cache's wait), 100.
    assert!(calls <= 20, "{calls} calls for 200 denied requests");
}

/// Demand measured on a key that is saturated from the start.
async fn warm_up_denied(l: &crate::Limiter) {
    for _ in 0..3 {
        assert!(l.check("g", &hot()).await.is_denied());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn after_a_partial_grant_the_key_is_asked_again_once_a_batch_could_have_freed_up() {
    // Always two units left: the key is at its limit.
    let mock = Mock::new(false, |w| match w[0].as_str() {
        "COMMAND" => caps(true),
        "RL.REFUND" => ints(&[cost(w), 100_000, 2, 0, 60_000]),
        _ => ints(&[1, 100_000, 0, 0, 60_000, cost(w).min(2)]),
    });
    let l = limiter(&mock);
    let (mut allowed, mut held) = (0, 0);
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let d = l.check("g", &hot()).await;
        allowed += u32::from(d.allows());
        held += u32::from(d.source == Source::DenyCache);
    }
    let takes = takes(&mock).len();
    // Without the hold: a take for every other request (100). A unit of 100000 per
    // minute frees every 0.6 ms, a batch of 200 in 120 ms.
    assert!(takes <= 10, "{takes} takes");
    assert!(
        held > 0 && allowed as usize <= 2 * takes,
        "{allowed} {held}"
    );
}

#[tokio::test(start_paused = true)]
async fn in_an_outage_the_lease_is_spent_first_and_its_refund_is_dropped_not_retried() {
    let mock = Mock::new(false, server);
    let l = limiter(&mock);
    warm_up(&l).await; // 19 units in hand
    mock.set(DOWN);
    for _ in 0..10 {
        assert_eq!(l.check("g", &hot()).await.source, Source::Lease);
    }
    // The lease ends during the outage: its refund fails and is dropped.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(l.check("g", &hot()).await.source, Source::Local);
    let s = l.stats().leases;
    assert_eq!((s.refunds, s.refunded, s.dropped), (1, 0, 9));
    mock.set(UP);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(l.check("g", &hot()).await.allows());
    let refunds = mock.names().iter().filter(|n| *n == "RL.REFUND").count();
    assert_eq!(refunds, 1, "the failed refund is never sent again");
    assert_eq!(l.stats().leases.dropped, 9);
}
