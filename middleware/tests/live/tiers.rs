//! API-key tiers from a Redis hash against a real server: cached, and the last known tier
//! while Redis is down.

use std::num::NonZeroUsize;
use std::time::Duration;

use redis_rl_client::Limiter;
use redis_rl_middleware::{RedisHashTiers, TierResolver};
use redis_rl_testkit::Server;

fn limiter(server: &Server) -> Limiter {
    Limiter::builder()
        .timeout(Duration::from_millis(500))
        .standalone(&server.url())
        .unwrap()
}

#[tokio::test]
async fn tiers_come_from_a_redis_hash_and_are_cached() {
    let mut server = Server::start();
    let mut conn = server.client();
    let _: () = redis::cmd("HSET")
        .arg("rl:tiers")
        .arg("key-a")
        .arg("pro")
        .query(&mut conn)
        .unwrap();
    let l = limiter(&server);
    let cap = NonZeroUsize::new(100).unwrap();
    let tiers = RedisHashTiers::new(l.clone(), "rl:tiers", Duration::from_secs(3_600), cap);
    assert_eq!(tiers.tier("key-a").await.as_deref(), Some("pro"));
    assert_eq!(tiers.tier("key-b").await, None);
    let lookups = server.calls("hget");
    let _: () = redis::cmd("HSET")
        .arg("rl:tiers")
        .arg("key-a")
        .arg("enterprise")
        .query(&mut conn)
        .unwrap();
    for _ in 0..100 {
        assert_eq!(tiers.tier("key-a").await.as_deref(), Some("pro"), "cached");
    }
    assert_eq!(server.calls("hget"), lookups, "no round trip while cached");
    let fresh = RedisHashTiers::new(l.clone(), "rl:tiers", Duration::ZERO, cap);
    assert_eq!(fresh.tier("key-a").await.as_deref(), Some("enterprise"));
    // Redis down: the last known tier, even past its TTL.
    server.kill();
    assert_eq!(fresh.tier("key-a").await.as_deref(), Some("enterprise"));
    assert_eq!(fresh.tier("unknown").await, None);
}
