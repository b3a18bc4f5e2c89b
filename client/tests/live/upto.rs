//! Taking batches (`Limiter::take_upto`, `COST n UPTO`) and giving back the rest
//! (`Limiter::refund`), with the module and with the Lua twin: the primitive of leases.

use std::time::Duration;

use redis_rl_client::{Limiter, Policy, ServerImpl, Source};
use redis_rl_testkit::Server;

async fn batches_then_refunds(limiter: &Limiter, engine: &str) {
    // Slow enough that nothing refills or rolls over during the test.
    let policies = [
        Policy::sliding(100, 1_000_000_000).unwrap(),
        Policy::fixed(100, 1_000_000_000).unwrap(),
        Policy::token_bucket(100, 1, 1_000_000_000).unwrap(),
        Policy::gcra(100, 1_000_000_000, None).unwrap(),
    ];
    for (i, p) in policies.iter().enumerate() {
        let key = format!("{engine}:global:{i}");
        let what = format!("{engine} {:?}", p.params());
        let g = limiter.take_upto(&key, p, 60).await.unwrap();
        assert_eq!((g.granted, g.decision.remaining), (60, 40), "{what}");
        assert_eq!(g.decision.source, Source::Redis);
        // A peek says what a take would get, and takes nothing.
        assert_eq!(limiter.peek_upto(&key, p, 60).await.unwrap().granted, 40);
        let g = limiter.take_upto(&key, p, 60).await.unwrap();
        assert_eq!((g.granted, g.decision.remaining), (40, 0), "{what}");
        // Nothing left: a grant of nothing, with the wait for one unit.
        let g = limiter.take_upto(&key, p, 60).await.unwrap();
        assert_eq!(g.granted, 0, "{what}");
        assert!(
            g.decision.retry_after().unwrap() > Duration::from_secs(1),
            "{what}"
        );
        // The rest of a lease goes back and can be taken again.
        assert_eq!(limiter.refund(&key, p, 25).await.unwrap(), 25, "{what}");
        let d = limiter.peek(&key, p, 0).await;
        assert_eq!(d.remaining, 25, "{what}");
    }
    // The log takes no UPTO: refused before any call.
    let log = Policy::log(10, 1_000).unwrap();
    assert!(limiter.take_upto("log", &log, 5).await.is_err());
}

#[tokio::test]
async fn take_upto_and_refund_with_the_module_and_the_twin() {
    let module = Server::start();
    let limiter = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .deny_cache(0)
        .standalone(&module.url())
        .unwrap();
    batches_then_refunds(&limiter, "module").await;

    let plain = Server::start_plain(&[]);
    let twin = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .deny_cache(0)
        .server_impl(ServerImpl::Auto)
        .standalone(&plain.url())
        .unwrap();
    batches_then_refunds(&twin, "twin").await;
}
