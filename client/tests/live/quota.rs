//! Calendar quotas through the client: `Policy::quota` on the module, on the Lua twin
//! (the same bytes), in RL.ALL with other limiters, and decided by the local fallback while
//! Redis is away.

use std::time::Duration;

use redis_rl_client::{Engine, Limiter, Period, Policy, Source, Verdict};
use redis_rl_testkit::{free_port, Server};

fn limiter(url: &str, engine: Option<Engine>) -> Limiter {
    let mut b = Limiter::builder().timeout(Duration::from_millis(500));
    if let Some(engine) = engine {
        b = b.engine(engine);
    }
    b.standalone(url).unwrap()
}

#[tokio::test]
async fn a_monthly_quota_on_the_module_and_on_the_twin() {
    let server = Server::start();
    let plan = Policy::quota(3, Period::Month, -300, 31).unwrap();
    for (engine, key) in [(Engine::Module, "q:module"), (Engine::Lua, "q:twin")] {
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
            Policy::quota(2, Period::Year, 330, 1).unwrap(),
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
    let plan = Policy::quota(2, Period::Week, 0, 1).unwrap();
    let mut allowed = 0;
    for _ in 0..3 {
        let d = l.check("q", &plan).await;
        assert_eq!(d.source, Source::Local);
        allowed += u32::from(d.allows());
    }
    assert_eq!(allowed, 2);
}
