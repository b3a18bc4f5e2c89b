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

/// Writes `n` members with 31-year leases into `key`, as an attacker with write access would.
fn forge(server: &Server, key: &str, n: usize) {
    let mut c = server.client();
    for i in 0..n {
        let id = format!("forged-{i}");
        let _: Vec<i64> = redis_rl_testkit::query(
            &mut c,
            &[
                "RL.CONCURRENCY",
                key,
                "10000",
                "1000000000000",
                "ACQUIRE",
                &id,
            ],
        );
    }
}

/// Heartbeat after heartbeat, every member still counts `size`.
async fn stays(fleet: &[Limiter], size: u32) {
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for l in fleet {
            assert_eq!(l.fleet_size().map(|n| n.get()), Some(size));
        }
    }
}

/// Leases longer than the fleet's ttl, written by someone else, never count, whatever their
/// number.
#[tokio::test]
async fn leases_longer_than_the_ttl_never_count() {
    let server = Server::start();
    let fleet: Vec<Limiter> = (0..2).map(|_| member(&server, "fl:{fleet}")).collect();
    all_see(&fleet, 2).await;
    forge(&server, "fl:{fleet}", 2_000);
    stays(&fleet, 2).await;
}

/// A member that cannot check the leases' length (RL.STATE refused to its user, or not
/// answered in time) does not believe the count either: the size stays.
#[tokio::test]
async fn a_count_that_cannot_be_checked_is_not_believed() {
    let server = Server::start();
    let _: String = redis_rl_testkit::query(
        &mut server.client(),
        &[
            "ACL",
            "SETUSER",
            "nostate",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "+rl.state",
        ],
    );
    let url = format!("redis://nostate:pw@127.0.0.1:{}/", server.port);
    let l = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .standalone(&url)
        .unwrap();
    l.join_fleet(FleetConfig {
        heartbeat: Duration::from_millis(100),
        ttl: Duration::from_millis(2_000),
        ..FleetConfig::new("fs:{fleet}")
    })
    .unwrap();
    let fleet = [l];
    all_see(&fleet, 1).await;
    let _: String = redis_rl_testkit::query(
        &mut server.client(),
        &["ACL", "SETUSER", "nostate", "-rl.state"],
    );
    forge(&server, "fs:{fleet}", 2_000);
    stays(&fleet, 1).await;
}
