//! The limiter against a real 3-master Redis Cluster on loopback: calls are routed by slot,
//! a multi-key check spanning slots asks every slot at once and is all-or-nothing by
//! compensation (RL.REFUND).

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

    four_dimensions_over_three_masters(&cluster).await;
}

/// Hash tags whose slots are served by three different masters, in node order.
fn tags_on_every_master(cluster: &Cluster) -> Vec<String> {
    let mut tags: Vec<String> = Vec::new();
    for node in &cluster.nodes {
        let tag = (0..1_000)
            .map(|i| format!("t{i}"))
            .find(|t| cluster.owner(&format!("{{{t}}}")).port == node.port)
            .expect("a tag on every master");
        tags.push(tag);
    }
    tags
}

/// The design's request (API key, endpoint of that key, client IP, global) over three
/// masters: the per-slot calls (RL.ALL, or a slot's one key's own command) go out together, so a master that hangs does not stop
/// the others from being asked, and whatever they took is given back.
async fn four_dimensions_over_three_masters(cluster: &Cluster) {
    let urls: Vec<String> = cluster.nodes.iter().map(Server::url).collect();
    let limiter = Limiter::builder()
        .timeout(Duration::from_millis(300))
        .deny_cache(0)
        .cluster(&urls)
        .unwrap();
    let tags = tags_on_every_master(cluster);
    let keys = [
        format!("rl:{{{}}}:key", tags[0]),
        format!("rl:{{{}}}:ep:/search", tags[0]),
        format!("rl:{{{}}}:ip", tags[1]),
        format!("rl:{{{}}}:global", tags[2]),
    ];
    let p = Policy::sliding(10, 3_600_000).unwrap();
    let request: Vec<(&str, Policy)> = keys.iter().map(|k| (k.as_str(), p)).collect();
    let remaining = |limiter: &Limiter| {
        let limiter = limiter.clone();
        let keys = keys.clone();
        async move {
            let mut left = Vec::new();
            for k in &keys {
                left.push(limiter.peek(k, &p, 0).await.remaining);
            }
            left
        }
    };
    assert!(limiter.check_all_n(&request, 2).await.allows());
    assert_eq!(remaining(&limiter).await, [8, 8, 8, 8]);
    // The global limit runs out: the request is denied and every other master gives back.
    assert!(limiter.check_n(&keys[3], &p, 7).await.allows());
    let md = limiter.check_all_n(&request, 2).await;
    assert_eq!(md.denied, Some(3));
    assert_eq!(remaining(&limiter).await, [8, 8, 8, 1]);

    // The first master hangs: the other two are still asked (concurrently, not after it),
    // and what they took is refunded when the request fails. Their slots hold one key
    // each: its algorithm's own command, not RL.ALL.
    let (ip_node, global_node) = (&cluster.nodes[1], &cluster.nodes[2]);
    let before = (ip_node.calls("RL.SLIDING"), global_node.calls("RL.SLIDING"));
    assert_eq!(
        (ip_node.calls("RL.ALL"), global_node.calls("RL.ALL")),
        (0, 0)
    );
    cluster.nodes[0].freeze();
    let md = limiter.check_all_n(&request, 1).await;
    cluster.nodes[0].thaw();
    assert_ne!(md.decisions[0].source, Source::Redis, "{md:?}");
    assert_eq!(
        (ip_node.calls("RL.SLIDING"), global_node.calls("RL.SLIDING")),
        (before.0 + 1, before.1 + 1),
        "both other masters were asked while the first one hung"
    );
    let left = remaining(&limiter).await;
    assert_eq!(left[2..], [8, 1], "the ip and global slots were refunded");
}
