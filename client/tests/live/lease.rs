//! Leases on a live server: several limiters (gateways) sharing one hot global budget, and a
//! lease that ends while Redis is frozen.

use std::time::Duration;

use futures_util::future::join_all;
use redis_rl_client::{
    BreakerConfig, LeaseConfig, Limiter, LimiterBuilder, MultiDecision, Policy, Source,
};
use redis_rl_testkit::{eventually, ints, Server};

fn builder() -> LimiterBuilder {
    Limiter::builder()
        .timeout(Duration::from_millis(500))
        .breaker(BreakerConfig {
            failure_threshold: 2,
            open_for: Duration::from_millis(100),
        })
}

/// The units left in a token bucket of `capacity` refilled one token an hour, read directly.
fn left(server: &Server, key: &str, capacity: u64) -> u64 {
    let cap = capacity.to_string();
    let reply = ints(
        &mut server.client(),
        &["RL.TOKENBUCKET", key, &cap, "1", "3600000", "COST", "0"],
    );
    reply[2] as u64
}

/// Four limiters, eight concurrent callers each, 400 requests for a global budget of 200:
/// never more than 200 admitted; at most the units other leases hold (each at most 10% of
/// the limit here) short of it; and once every lease has ended, Redis counts exactly the
/// units admitted. A request another dimension denies spends no global unit.
#[tokio::test]
async fn limiters_sharing_a_hot_global_budget_never_admit_more_than_the_limit() {
    let server = Server::start();
    let lease = LeaseConfig {
        max_percent: 10,
        ..LeaseConfig::default()
    };
    let fleet: Vec<Limiter> = (0..4)
        .map(|_| builder().leases(lease).standalone(&server.url()).unwrap())
        .collect();
    // One token an hour: no refill to speak of within this test.
    let global = Policy::token_bucket(200, 1, 3_600_000).unwrap().hot(true);
    let ip = Policy::token_bucket(1, 1, 3_600_000).unwrap();

    // All or nothing: the IP limit (1) refuses 9 of 10 requests; they take no global unit.
    let mut admitted = 0u64;
    for _ in 0..10 {
        let md: MultiDecision = fleet[0]
            .check_all(&[("rl:{ip:9}", ip), ("rl:{global}", global)])
            .await;
        admitted += u64::from(md.allows());
    }
    assert_eq!(admitted, 1);

    let callers = fleet.iter().enumerate().flat_map(|(g, l)| {
        (0..8).map(move |c| async move {
            let mut mine = 0u64;
            for i in 0..12 {
                let ip_key = format!("rl:{{ip:{g}.{c}.{i}}}");
                let md = l
                    .check_all(&[(ip_key.as_str(), ip), ("rl:{global}", global)])
                    .await;
                if md.allows() {
                    assert!(
                        matches!(md.decisions[1].source, Source::Lease | Source::Redis),
                        "{md:?}"
                    );
                    mine += 1;
                }
            }
            mine
        })
    });
    admitted += join_all(callers).await.into_iter().sum::<u64>();
    assert!(admitted <= 200, "{admitted} admitted for a budget of 200");
    assert!(
        admitted >= 200 - 4 * 20,
        "{admitted}: short by more than the units leases can hold"
    );
    let stats: Vec<_> = fleet.iter().map(|l| l.stats().leases).collect();
    let hits: u64 = stats.iter().map(|s| s.hits).sum();
    assert!(hits > 0, "some requests were served from leases: {stats:?}");

    for l in &fleet {
        l.shutdown().await;
    }
    let granted: u64 = fleet.iter().map(|l| l.stats().leases.granted).sum();
    let back: u64 = fleet.iter().map(|l| l.stats().leases.refunded).sum();
    let dropped: u64 = fleet.iter().map(|l| l.stats().leases.dropped).sum();
    assert_eq!(dropped, 0, "Redis was up: every refund went through");
    assert_eq!(granted, admitted + back, "granted = spent + given back");
    assert_eq!(
        left(&server, "rl:{global}", 200),
        200 - admitted,
        "Redis counts what was admitted, no more, no less"
    );
}

/// A lease ends while Redis is frozen: the lease in hand is spent first, its refund fails
/// and is dropped (never sent again), and Redis ends up counting every unit spent and at
/// most the dropped ones besides: nothing lost, nothing given back twice.
#[tokio::test]
async fn a_lease_refunded_during_an_outage_loses_nothing_and_doubles_nothing() {
    let server = Server::start();
    let l = builder()
        .timeout(Duration::from_millis(200))
        .leases(LeaseConfig {
            lifetime: Duration::from_millis(500),
            // Ten seconds of demand: the second take is at least a few units on any machine.
            demand: Duration::from_secs(10),
            max_percent: 100,
            ..LeaseConfig::default()
        })
        .standalone(&server.url())
        .unwrap();
    let global = Policy::token_bucket(1_000, 1, 3_600_000).unwrap().hot(true);
    let mut spent = 0u64;
    for _ in 0..2 {
        let d = l.check("rl:{global}", &global).await;
        assert_eq!(d.source, Source::Redis, "{d:?}");
        spent += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    server.freeze();
    // Spend from the lease in hand (a take would fail now: those fall back locally).
    for _ in 0..3 {
        let d = l.check("rl:{global}", &global).await;
        if d.source == Source::Lease {
            spent += 1;
        }
    }
    // The lease ends: its refund times out and is dropped.
    eventually("the lease's refund is dropped", async || {
        let s = l.stats().leases;
        s.dropped > 0 && s.refunds >= 1
    })
    .await;
    server.thaw();
    eventually("back on Redis", async || {
        let d = l.check("rl:{global}", &global).await;
        if matches!(d.source, Source::Redis | Source::Lease) {
            spent += 1;
        }
        d.source == Source::Redis
    })
    .await;
    l.shutdown().await;

    let s = l.stats().leases;
    assert_eq!(s.granted, spent + s.refunded + s.dropped, "{s:?}");
    let counted = 1_000 - left(&server, "rl:{global}", 1_000);
    assert!(
        (spent..=spent + s.dropped).contains(&counted),
        "Redis counts {counted}: spent {spent}, dropped {}",
        s.dropped
    );
    assert_eq!(
        server.calls("rl.refund"),
        s.refunds,
        "every refund sent once, the dropped one never again"
    );
}
