//! A fleet of limiters (one per gateway) on one server: membership seen by every member,
//! and the local fallback dividing each limit by the last known fleet size once Redis is
//! gone.

use std::time::Duration;

use redis_rl_client::{FleetConfig, Limiter, Policy, Source};
use redis_rl_testkit::{eventually, Server};

/// A member with a fast heartbeat (the default is 1 s; tests need not wait for it).
fn member(server: &Server, fleet: &str) -> Limiter {
    let l = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .standalone(&server.url())
        .unwrap();
    let config = FleetConfig {
        heartbeat: Duration::from_millis(100),
        ttl: Duration::from_millis(2_000),
        ..FleetConfig::new(fleet)
    };
    l.join_fleet(config).unwrap();
    l
}

async fn all_see(fleet: &[Limiter], size: u32) {
    eventually(&format!("every member counts {size}"), async || {
        fleet
            .iter()
            .all(|l| l.fleet_size().map(|n| n.get()) == Some(size))
    })
    .await;
}

#[tokio::test]
async fn membership_is_seen_by_every_member_and_a_clean_stop_leaves_at_once() {
    let server = Server::start();
    let mut fleet: Vec<Limiter> = (0..3).map(|_| member(&server, "rl:{fleet}")).collect();
    all_see(&fleet, 3).await;
    // Another fleet key is another fleet.
    let other = member(&server, "other:{fleet}");
    eventually("a fleet of one", async || {
        other.fleet_size().map(|n| n.get()) == Some(1)
    })
    .await;
    assert_eq!(other.stats().fleet_size, 1);

    // A new member is counted; one that stops cleanly releases its lease.
    fleet.push(member(&server, "rl:{fleet}"));
    all_see(&fleet, 4).await;
    let gone = fleet.pop().unwrap();
    gone.shutdown().await;
    all_see(&fleet, 3).await;
    // A member that vanished without a word (dropped, not shut down) expires after its ttl.
    drop(fleet.pop());
    all_see(&fleet, 2).await;
}

#[tokio::test]
async fn the_fallback_divides_by_the_last_known_fleet_size_after_redis_is_killed() {
    let mut server = Server::start();
    let mut fleet: Vec<Limiter> = (0..3).map(|_| member(&server, "rl:{fleet}")).collect();
    // A fourth member with a static count: fleet-aware fallback off (`--instances`).
    let fixed = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .fleet_fallback(false)
        .standalone(&server.url())
        .unwrap();
    fixed
        .join_fleet(FleetConfig {
            heartbeat: Duration::from_millis(100),
            ..FleetConfig::new("rl:{fleet}")
        })
        .unwrap();
    fleet.push(fixed);
    all_see(&fleet, 4).await;
    let ip = Policy::sliding(100, 60_000).unwrap(); // local fallback, instances 1
    assert_eq!(fleet[0].check("rl:{ip:1}", &ip).await.source, Source::Redis);

    server.kill();
    let mut admitted = Vec::new();
    for l in &fleet {
        let mut n = 0;
        for _ in 0..100 {
            let d = l.check("rl:{ip:2}", &ip).await;
            assert_eq!(d.source, Source::Local);
            n += u32::from(d.allows());
        }
        assert_eq!(l.fleet_size().unwrap().get(), 4, "the last size known");
        admitted.push(n);
    }
    assert_eq!(
        admitted,
        [25, 25, 25, 100],
        "100 / 4 members; the static one: 100 / 1"
    );
}
