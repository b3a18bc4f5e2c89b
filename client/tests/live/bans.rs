//! Bans through the client's `bans` module on a live server: the ban script's escalation
//! agrees with the policy engine's `Ban::length_ms`, refusals during a ban do not count, the
//! index lists what is banned and a lift forgets everything.

use std::time::Duration;

use redis_rl_client::{bans, Limiter};
use redis_rl_policy::Ban;
use redis_rl_testkit::{eventually, Server};

#[tokio::test]
async fn escalation_in_redis_follows_the_engines_lengths_up_to_the_cap() {
    let server = Server::start_plain(&[]);
    let limiter = Limiter::builder()
        .timeout(Duration::from_secs(5))
        .standalone(&server.url())
        .unwrap();
    let ban = Ban::new(2, 60_000, 40)
        .unwrap()
        .escalating(3, 1_000)
        .unwrap();
    let subject = "t:{ip:1}:r:login";
    for level in 1..=5 {
        assert_eq!(
            bans::strike(&limiter, "t", "login", subject, &ban)
                .await
                .unwrap(),
            None,
            "the first of two refusals"
        );
        let new = bans::strike(&limiter, "t", "login", subject, &ban)
            .await
            .unwrap()
            .expect("the second bans");
        assert_eq!((new.level, new.length_ms), (level, ban.length_ms(level)));
        let left = bans::remaining_ms(&limiter, subject)
            .await
            .unwrap()
            .unwrap();
        assert!(left <= new.length_ms, "{left}");
        // Refusals while banned count towards nothing.
        for _ in 0..3 {
            assert_eq!(
                bans::strike(&limiter, "t", "login", subject, &ban)
                    .await
                    .unwrap(),
                None
            );
        }
        let listed = bans::list(&limiter, "t", 10).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (
                listed[0].policy.as_str(),
                listed[0].subject.as_str(),
                listed[0].level
            ),
            ("login", subject, level)
        );
        eventually("the ban ends", async || {
            bans::remaining_ms(&limiter, subject)
                .await
                .unwrap()
                .is_none()
        })
        .await;
    }
    assert_eq!(ban.length_ms(5), 1_000, "40, 120, 360, 1080 capped at 1000");
    assert!(bans::list(&limiter, "t", 10).await.unwrap().is_empty());
    // A lift forgets the escalation: the next ban is a first one again.
    assert!(!bans::lift(&limiter, "t", "login", subject).await.unwrap());
    for _ in 0..2 {
        bans::strike(&limiter, "t", "login", subject, &ban)
            .await
            .unwrap();
    }
    assert!(bans::lift(&limiter, "t", "login", subject).await.unwrap());
    assert_eq!(bans::remaining_ms(&limiter, subject).await.unwrap(), None);
    bans::strike(&limiter, "t", "login", subject, &ban)
        .await
        .unwrap();
    let new = bans::strike(&limiter, "t", "login", subject, &ban)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(new.level, 1);
}
