//! The limiter against a real server: decisions, multi-key checks, the deny cache, and
//! outages (killed, frozen, not yet started) with each failure mode and the breaker.

use std::num::NonZeroU32;
use std::time::Duration;

use redis_rl_client::{BreakerConfig, BreakerState, FailureMode, Limiter, Policy, Source, Verdict};
use redis_rl_testkit::{eventually, free_port, Server};

fn limiter(server: &Server) -> Limiter {
    builder().standalone(&server.url()).unwrap()
}

fn builder() -> redis_rl_client::LimiterBuilder {
    Limiter::builder()
        // Generous for a loaded CI machine; the outage tests do not wait for it anyway.
        .timeout(Duration::from_millis(500))
        .breaker(BreakerConfig {
            failure_threshold: 3,
            open_for: Duration::from_millis(100),
        })
}

#[tokio::test]
async fn single_key_decisions_come_from_the_module() {
    let server = Server::start();
    let l = limiter(&server);
    let tb = Policy::token_bucket(3, 1, 60_000).unwrap();
    let started = std::time::Instant::now();
    for remaining in [2, 1, 0] {
        let d = l.check("tb", &tb).await;
        assert_eq!(d.source, Source::Redis);
        assert!(d.allows());
        assert_eq!(d.remaining, remaining);
        assert_eq!(d.limit, 3);
    }
    let d = l.check("tb", &tb).await;
    assert!(!d.allows());
    // A token takes 60 s to refill, counted from the first call (however long this
    // machine took since; a few ms of slack for the clocks' rounding).
    let wait = d.retry_after().unwrap();
    let since = started.elapsed() + Duration::from_millis(5);
    assert!(
        wait + since >= Duration::from_secs(60) && wait <= Duration::from_secs(60),
        "{wait:?} after {since:?}"
    );

    let sw = Policy::sliding(10, 60_000).unwrap();
    assert_eq!(l.check_n("sw", &sw, 4).await.remaining, 6);
    assert_eq!(l.peek("sw", &sw, 6).await.remaining, 0);
    assert_eq!(l.peek("sw", &sw, 1).await.remaining, 5, "peek took nothing");
    assert!(!l.check_n("sw", &sw, 7).await.allows());
    assert_eq!(l.check_n("sw", &sw, 11).await.verdict, Verdict::Never);
}

/// The seed's four dimensions: a request the IP dimension denies consumes nothing on the
/// others, with RL.ALL (detected) and with single calls (forced).
#[tokio::test]
async fn check_all_is_all_or_nothing_with_and_without_rl_all() {
    let server = Server::start();
    for (name, use_all) in [("detected", None), ("single calls", Some(false))] {
        let l = builder().rl_all(use_all).standalone(&server.url()).unwrap();
        let p = |limit| Policy::sliding(limit, 60_000).unwrap();
        let prefix = format!("{}:", name.replace(' ', "_"));
        let keys = ["{k:1}:key", "{ip:1.2.3.4}", "{k:1}:ep:/a", "{global}"]
            .map(|k| format!("{prefix}{k}"));
        let items = [
            (keys[0].clone(), p(1_000)),
            (keys[1].clone(), p(1)),
            (keys[2].clone(), p(100)),
            (keys[3].clone(), p(100_000)),
        ];
        let first = l.check_all(&items).await;
        assert!(first.allows(), "{name}");
        assert_eq!(first.decisions[1].remaining, 0);
        let second = l.check_all(&items).await;
        assert_eq!(second.denied, Some(1), "{name}");
        assert!(second.retry_after().is_some());
        // Exactly one unit taken on every other dimension.
        assert_eq!(
            l.peek(&keys[0], &p(1_000), 1).await.remaining,
            998,
            "{name}"
        );
        assert_eq!(l.peek(&keys[2], &p(100), 1).await.remaining, 98, "{name}");
        assert_eq!(
            l.peek(&keys[3], &p(100_000), 1).await.remaining,
            99_998,
            "{name}"
        );
    }
    assert!(server.calls("rl.all") >= 2, "RL.ALL was used when detected");
}

#[tokio::test]
async fn the_deny_cache_spares_redis_a_blocked_keys_flood() {
    let server = Server::start();
    let l = limiter(&server);
    let p = Policy::sliding(1, 60_000).unwrap();
    assert!(l.check("hot", &p).await.allows());
    let before = server.calls("rl.sliding");
    for _ in 0..500 {
        assert!(!l.check("hot", &p).await.allows());
    }
    let calls = server.calls("rl.sliding") - before;
    assert!(calls <= 1, "{calls} calls reached Redis for a blocked key");
    assert!(l.stats().deny_cache >= 499);
}

/// Redis killed: open allows, closed denies, local enforces the limit in process; the
/// breaker opens after N failures and closes once Redis is back.
#[tokio::test]
async fn a_killed_redis_uses_the_failure_modes_and_the_breaker_recovers() {
    let mut server = Server::start();
    let l = limiter(&server);
    let open = Policy::sliding(2, 60_000)
        .unwrap()
        .on_failure(FailureMode::Open);
    let closed = Policy::sliding(2, 60_000)
        .unwrap()
        .on_failure(FailureMode::Closed);
    let local = Policy::sliding(2, 60_000)
        .unwrap()
        .on_failure(FailureMode::Local {
            instances: NonZeroU32::new(2).unwrap(),
        });
    assert_eq!(l.check("warm", &open).await.source, Source::Redis);

    server.kill();
    let o = l.check("k", &open).await;
    assert!(o.allows() && o.source == Source::FailOpen, "{o:?}");
    let c = l.check("k", &closed).await;
    assert!(!c.allows() && c.source == Source::FailClosed, "{c:?}");
    // Local with 2 instances: 2 / 2 = 1 per gateway.
    let first = l.check("k", &local).await;
    let second = l.check("k", &local).await;
    assert_eq!(first.source, Source::Local);
    assert!(first.allows() && !second.allows());
    // Open (or half-open already on a slow machine), and it did open.
    assert_ne!(l.breaker_state(), BreakerState::Closed);
    assert!(l.stats().breaker.opened >= 1);
    assert!(l.stats().breaker.opened >= 1);

    server.restart();
    eventually("the breaker closes after recovery", async || {
        l.check("k2", &open).await.source == Source::Redis
    })
    .await;
    assert_eq!(l.breaker_state(), BreakerState::Closed);
    assert!(l.stats().breaker.closed >= 1);
}

/// Redis frozen (SIGSTOP): every call ends at the timeout, the breaker opens, and calls
/// then return without waiting; after SIGCONT the limiter is back on Redis.
#[tokio::test]
async fn a_frozen_redis_is_cut_off_by_the_timeout_and_the_breaker() {
    let server = Server::start();
    let l = builder()
        .timeout(Duration::from_millis(200))
        .standalone(&server.url())
        .unwrap();
    let p = Policy::sliding(100, 60_000)
        .unwrap()
        .on_failure(FailureMode::Open);
    // Connected and answering (the first call also connects, which a loaded machine may
    // not do within the short timeout).
    eventually("a first answer from Redis", async || {
        l.check("k", &p).await.source == Source::Redis
    })
    .await;
    server.freeze();
    for _ in 0..3 {
        assert_eq!(l.check("k", &p).await.source, Source::FailOpen);
    }
    // Open (or half-open already on a slow machine), and it did open.
    assert_ne!(l.breaker_state(), BreakerState::Closed);
    assert!(l.stats().breaker.opened >= 1);
    server.thaw();
    eventually("back on Redis after SIGCONT", async || {
        l.check("k", &p).await.source == Source::Redis
    })
    .await;
}

/// A gateway started while Redis is down decides locally, then switches to Redis when it
/// appears, without a restart.
#[tokio::test]
async fn cold_start_without_redis_then_redis_appears() {
    let mut server = Server::unstarted(free_port());
    let l = limiter(&server);
    let p = Policy::sliding(5, 60_000).unwrap();
    assert_eq!(l.check("k", &p).await.source, Source::Local);
    server.restart();
    eventually("switches to Redis", async || {
        l.check("k", &p).await.source == Source::Redis
    })
    .await;
}
