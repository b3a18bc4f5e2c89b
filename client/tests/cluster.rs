//! The limiter against a real 3-master Redis Cluster on loopback: calls are routed by slot,
//! a multi-key check spanning slots is all-or-nothing by compensation (RL.REFUND).

mod common;

use std::time::Duration;

use common::Server;
use redis_rl_client::{Limiter, Policy, Source};

const SLOTS: u16 = 16384;

fn query<T: redis::FromRedisValue>(server: &Server, args: &[&str]) -> T {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(&mut server.client())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Three masters sharing the slots, each with the module loaded.
fn cluster() -> Vec<Server> {
    let nodes: Vec<Server> = (0..3)
        .map(|_| {
            Server::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
        })
        .collect();
    let per_node = SLOTS / 3 + 1;
    for (i, node) in nodes.iter().enumerate() {
        let first = i as u16 * per_node;
        let last = ((i as u16 + 1) * per_node).min(SLOTS) - 1;
        let _: () = query(
            node,
            &[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ],
        );
    }
    for node in &nodes[1..] {
        let _: () = query(
            &nodes[0],
            &["CLUSTER", "MEET", "127.0.0.1", &node.port.to_string()],
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        loop {
            let info: String = query(node, &["CLUSTER", "INFO"]);
            if info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "cluster did not form");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    nodes
}

#[tokio::test]
async fn routes_by_slot_and_compensates_across_slots() {
    let nodes = cluster();
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let limiter = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .cluster(&urls)
        .unwrap();
    let tb = Policy::token_bucket(2, 1, 3_600_000).unwrap();
    // Keys spread over the three nodes: every decision comes from the module.
    for key in ["user:1", "user:2", "user:3", "user:4", "user:5"] {
        let d = limiter.check(key, &tb).await;
        assert_eq!(d.source, Source::Redis, "{key}");
        assert_eq!(d.remaining, 1, "{key}");
    }
    // "user:1" and "user:2" are in different slots: exhaust the second, then a check of
    // both must deny and give back what it took on the first.
    let one: i64 = query(&nodes[0], &["CLUSTER", "KEYSLOT", "user:1"]);
    let two: i64 = query(&nodes[0], &["CLUSTER", "KEYSLOT", "user:2"]);
    assert_ne!(one, two);
    assert!(limiter.check("user:2", &tb).await.allows());
    let both = limiter.check_all(&[("user:1", tb), ("user:2", tb)]).await;
    assert!(!both.allows());
    assert_eq!(both.denied, Some(1));
    let d = limiter.peek("user:1", &tb, 0).await;
    assert_eq!(d.remaining, 1, "the first slot was refunded");
}
