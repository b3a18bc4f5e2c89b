//! Calendar quotas through the client: `Policy::quota` on the module, on the Lua twin
//! (the same bytes), in RL.ALL with other limiters, and decided by the local fallback while
//! Redis is away.

use std::time::Duration;

use redis_rl_client::{Limiter, Period, Policy, ServerImpl, Source, Verdict};
use redis_rl_testkit::{free_port, Server};

fn limiter(url: &str, engine: Option<ServerImpl>) -> Limiter {
    let mut b = Limiter::builder().timeout(Duration::from_millis(500));
    if let Some(engine) = engine {
        b = b.server_impl(engine);
    }
    b.standalone(url).unwrap()
}

#[tokio::test]
async fn a_monthly_quota_on_the_module_and_on_the_twin() {
    let server = Server::start();
    let plan = Policy::calendar_quota(3, Period::Month, -300, 31).unwrap();
    for (engine, key) in [
        (ServerImpl::Module, "q:module"),
        (ServerImpl::Lua, "q:twin"),
    ] {
        let l = limiter(&server.url(), Some(engine));
        for remaining in [2, 1, 0] {
            let d = l.check(key, &plan).await;
            assert_eq!(
                (d.source, d.allows(), d.remaining),
                (Source::Redis, true, remaining)
            );
        }
        let d = l.check(key, &plan).await;
        assert!(!d.allows());
        // Until the next period: at most a month (31 days) away.
        assert!(
            d.retry_after().unwrap() <= Duration::from_secs(31 * 86_400),
            "{engine:?}"
        );
        assert_eq!(l.check_n(key, &plan, 4).await.verdict, Verdict::Never);
    }
    // The twin wrote the module's bytes.
    let mut c = server.client();
    let module: Vec<u8> = redis::cmd("GET").arg("q:module").query(&mut c).unwrap();
    let twin: Vec<u8> = redis::cmd("GET").arg("q:twin").query(&mut c).unwrap();
    assert_eq!(module, twin);
}

#[tokio::test]
async fn a_quota_takes_part_in_check_all() {
    let server = Server::start();
    let l = limiter(&server.url(), None);
    let items = [
        (
            "{t}:plan".to_string(),
            Policy::calendar_quota(2, Period::Year, 330, 1).unwrap(),
        ),
        (
            "{t}:rate".to_string(),
            Policy::sliding(100, 60_000).unwrap(),
        ),
    ];
    assert!(l.check_all(&items).await.allows());
    assert!(l.check_all(&items).await.allows());
    let third = l.check_all(&items).await;
    assert_eq!(third.denied, Some(0));
    assert_eq!(l.peek("{t}:rate", &items[1].1, 0).await.remaining, 98);
}

#[tokio::test]
async fn the_local_fallback_runs_the_quota_while_redis_is_away() {
    let server = Server::unstarted(free_port());
    let l = limiter(&server.url(), None);
    let plan = Policy::calendar_quota(2, Period::Week, 0, 1).unwrap();
    let mut allowed = 0;
    for _ in 0..3 {
        let d = l.check("q", &plan).await;
        assert_eq!(d.source, Source::Local);
        allowed += u32::from(d.allows());
    }
    assert_eq!(allowed, 2);
}

/// Reserve, then settle both ways: an over-reservation is given back, an under-reservation
/// is charged even over the limit (and later calls wait for it).
#[tokio::test]
async fn a_reservation_is_settled_by_refund_or_forced_charge() {
    use redis_rl_client::settle::Settled;
    let server = Server::start();
    let l = limiter(&server.url(), None);
    for (name, policy) in [
        (
            "quota",
            Policy::calendar_quota(100, Period::Month, 0, 1).unwrap(),
        ),
        ("bucket", Policy::token_bucket(100, 1, 3_600_000).unwrap()),
        ("fixed", Policy::fixed(100, 3_600_000_000).unwrap()),
    ] {
        let key = format!("settle:{name}");
        assert!(l.check_n(&key, &policy, 60).await.allows());
        // Used 20 of the 60 reserved: 40 back.
        assert_eq!(
            l.settle(&key, &policy, 60, 20).await.unwrap(),
            Settled::Refunded(40)
        );
        assert_eq!(l.peek(&key, &policy, 0).await.remaining, 80, "{name}");
        assert!(l.check_n(&key, &policy, 50).await.allows());
        // Used 90 of the 50 reserved: 40 more, over the limit (70 + 40 = 110 of 100).
        let Settled::Charged(d) = l.settle(&key, &policy, 50, 90).await.unwrap() else {
            panic!("{name}: not charged");
        };
        assert!(d.allows(), "{name}");
        assert_eq!(d.remaining, 0, "{name}");
        assert!(!l.check(&key, &policy).await.allows(), "{name}: in debt");
        assert_eq!(l.settle(&key, &policy, 5, 5).await.unwrap(), Settled::Exact);
    }
}
