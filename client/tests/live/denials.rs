//! Cached refusals end when Redis's answer changes: units given back (a refund, a
//! settlement) or a reset in any limiter of the fleet end the refusal every limiter cached
//! for the key (pub/sub on the fleet's channel), so a quota that was refused while a large
//! reservation was out serves again as soon as the reservation is settled.

use redis_rl_client::{Limiter, Policy, Source};
use redis_rl_testkit::{eventually, query, Server};

const CHANNEL: &str = "dn:denials";

/// Two limiters of one fleet, both listening on the fleet's channel.
async fn fleet(server: &Server) -> [Limiter; 2] {
    let pair = [
        Limiter::standalone(&server.url()).unwrap(),
        Limiter::standalone(&server.url()).unwrap(),
    ];
    for l in &pair {
        l.share_denials(CHANNEL).unwrap();
    }
    eventually("both limiters listen", async || {
        let n: Vec<redis::Value> = query(&mut server.client(), &["PUBSUB", "NUMSUB", CHANNEL]);
        matches!(n.get(1), Some(redis::Value::Int(2)))
    })
    .await;
    pair
}

/// A month's quota of 1000 units (the window ends in days: a cached refusal would last).
fn month() -> Policy {
    Policy::fixed(1_000, 30 * 86_400_000).unwrap()
}

/// Refused by Redis, then by the deny cache (the refusal is cached).
async fn refused_and_cached(l: &Limiter, key: &str, p: &Policy) {
    let d = l.check_n(key, p, 1).await;
    assert!(!d.allows());
    let d = l.check_n(key, p, 1).await;
    assert_eq!((d.allows(), d.source), (false, Source::DenyCache));
}

#[tokio::test]
async fn a_settlement_in_one_limiter_ends_the_refusal_cached_in_another() {
    let server = Server::start();
    let [a, b] = fleet(&server).await;
    let p = month();
    let key = "dn:{acme}:tokens";
    assert!(a.check_n(key, &p, 1_000).await.allows(), "the reservation");
    refused_and_cached(&a, key, &p).await;
    refused_and_cached(&b, key, &p).await;
    // The work used 10: 990 go back (here through b).
    b.settle(key, &p, 1_000, 10).await.unwrap();
    assert!(
        b.check_n(key, &p, 1).await.allows(),
        "b forgot its own refusal at once"
    );
    // Redis holds 11 of 1000: served (the first call a asks Redis for again).
    eventually("a hears of the refund", async || {
        a.check_n(key, &p, 1).await.allows()
    })
    .await;
}

#[tokio::test]
async fn a_reset_ends_every_cached_refusal_of_the_key() {
    let server = Server::start();
    let [a, b] = fleet(&server).await;
    let p = month();
    let key = "dn:{bob}:tokens";
    assert!(a.check_n(key, &p, 1_000).await.allows());
    refused_and_cached(&a, key, &p).await;
    refused_and_cached(&b, key, &p).await;
    // Deleting the key behind the limiters' backs leaves the cached refusals in place...
    let _: i64 = query(&mut server.client(), &["DEL", key]);
    assert_eq!(a.check_n(key, &p, 1).await.source, Source::DenyCache);
    // ...RL.RESET through a limiter ends them everywhere.
    assert!(!b.reset(key).await.unwrap(), "the key was deleted already");
    assert!(b.check_n(key, &p, 1).await.allows());
    eventually("a hears of the reset", async || {
        a.check_n(key, &p, 1).await.allows()
    })
    .await;
    assert!(b.reset(key).await.unwrap(), "2 units held: reset");
}
