//! The limiter against a real 3-master Redis Cluster on loopback: calls are routed by slot,
//! a multi-key check spanning slots is all-or-nothing by compensation (RL.REFUND).

use std::time::Duration;

use redis_rl_client::{Limiter, Policy, Source};
use redis_rl_testkit::{query, Cluster, Server};

#[tokio::test]
async fn routes_by_slot_and_compensates_across_slots() {
    let cluster = Cluster::start();
    let nodes = &cluster.nodes;
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
    let one: i64 = query(&mut nodes[0].client(), &["CLUSTER", "KEYSLOT", "user:1"]);
    let two: i64 = query(&mut nodes[0].client(), &["CLUSTER", "KEYSLOT", "user:2"]);
    assert_ne!(one, two);
    assert!(limiter.check("user:2", &tb).await.allows());
    let both = limiter.check_all(&[("user:1", tb), ("user:2", tb)]).await;
    assert!(!both.allows());
    assert_eq!(both.denied, Some(1));
    let d = limiter.peek("user:1", &tb, 0).await;
    assert_eq!(d.remaining, 1, "the first slot was refunded");
}
