//! A fleet of rl-gateway processes on one server: each counts the others, the
//! global limit is served from leases and never over-admitted, and when Redis is killed
//! the local fallback divides each limit by the fleet size.

use std::path::Path;

use redis_rl_testkit::{eventually, Server};

use super::{named_config, Gateway};

/// Two gateways with no flags beyond the config (leases, membership, fleet-aware fallback
/// are the defaults), seeing each other.
async fn pair(server: &Server, config: &Path) -> [Gateway; 2] {
    let args = [
        "--redis",
        &server.url(),
        "--config",
        config.to_str().unwrap(),
    ];
    let fleet = [Gateway::start(&args).await, Gateway::start(&args).await];
    for gw in &fleet {
        eventually("each gateway counts two", async || {
            gw.health().await["stats"]["fleet_size"] == 2
        })
        .await;
    }
    fleet
}

#[tokio::test]
async fn gateways_share_the_global_budget_through_leases_without_exceeding_it() {
    let server = Server::start();
    // 60 an hour (no refill within the test); the two gateways' leases hold at most 20% of
    // it together: 6 units each.
    let path = named_config(
        &server,
        "fleet-budget",
        "dimensions = [\"ip\", \"global\"]\n\
         [ip]\nlimit = 100000\n\
         [global]\nlimit = 60\nalgorithm = \"token_bucket\"\nwindow_ms = 3600000\n\
         [fleet]\nheartbeat_ms = 200\nttl_ms = 2000\n\
         [leases]\nmax_percent = 20\n",
    );
    let fleet = pair(&server, &path).await;
    let mut admitted = 0;
    for _ in 0..50 {
        for gw in &fleet {
            let (status, _, body) = gw.get("/api/search", &[]).await.unwrap();
            assert!(status == 200 || status == 429, "{status} {body}");
            admitted += u32::from(status == 200);
        }
    }
    assert!(
        admitted <= 60,
        "{admitted} admitted for a global limit of 60"
    );
    assert!(
        admitted >= 60 - 6,
        "{admitted}: more than the other's lease short"
    );
    let mut hits = 0;
    for gw in &fleet {
        let h = gw.health().await;
        hits += h["stats"]["lease_hits"].as_u64().unwrap();
        let (_, _, metrics) = gw.ops("/metrics").await.unwrap();
        for line in [
            "rl_lease_takes_total",
            "rl_decisions_total{dimension=\"global\",source=\"redis\"}",
            "rl_fleet_size 2",
        ] {
            assert!(metrics.contains(line), "{line} missing:\n{metrics}");
        }
    }
    assert!(hits > 0, "some requests were served from leases");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[tokio::test]
async fn when_redis_is_killed_each_gateway_enforces_its_share_of_the_fleet() {
    let mut server = Server::start();
    let path = named_config(
        &server,
        "fleet-fallback",
        "dimensions = [\"ip\"]\n\
         [ip]\nlimit = 10\nalgorithm = \"token_bucket\"\nwindow_ms = 3600000\n\
         [fleet]\nheartbeat_ms = 200\nttl_ms = 2000\n",
    );
    let fleet = pair(&server, &path).await;
    server.kill();
    let mut admitted = Vec::new();
    for gw in &fleet {
        let mut n = 0;
        for _ in 0..10 {
            let (status, _, body) = gw.get("/api/search", &[]).await.unwrap();
            assert!(status == 200 || status == 429, "{status} {body}");
            n += u32::from(status == 200);
        }
        admitted.push(n);
    }
    assert_eq!(admitted, [5, 5], "10 / 2 gateways each, not 10 each");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
