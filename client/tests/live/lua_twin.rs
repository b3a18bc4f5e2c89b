//! The limiter on servers without the module: it asks once whether the RL commands exist and
//! decides with the Lua twin (`lua/rl.lua`, a function library; a script where FUNCTION is
//! refused), standalone and on a 3-master cluster; keys it writes are continued by the module.

use std::time::Duration;

use redis_rl_client::{Limiter, Policy, ServerImpl, Source};
use redis_rl_testkit::{query, Cluster, Server};

fn limiter(server: &Server) -> Limiter {
    Limiter::builder()
        .timeout(Duration::from_millis(500))
        .standalone(&server.url())
        .unwrap()
}

#[tokio::test]
async fn without_the_module_the_twin_decides_with_the_same_bytes() {
    let plain = Server::start_plain(&[]);
    let l = limiter(&plain);
    let tb = Policy::token_bucket(3, 1, 3_600_000).unwrap();
    for left in [2, 1, 0] {
        let d = l.check("api:alice", &tb).await;
        assert_eq!(d.source, Source::Redis);
        assert!(d.allows());
        assert_eq!(d.remaining, left);
    }
    let d = l.check("api:alice", &tb).await;
    assert_eq!(d.source, Source::Redis);
    assert!(!d.allows());
    assert!(d.retry_after().unwrap() > Duration::from_secs(1_000));
    // The library was loaded once, by the client.
    let libs: redis::Value = query(
        &mut plain.client(),
        &["FUNCTION", "LIST", "LIBRARYNAME", "redisrl"],
    );
    assert!(
        matches!(libs, redis::Value::Array(ref l) if l.len() == 1),
        "{libs:?}"
    );

    // Several dimensions, all or nothing.
    let s = Policy::sliding(1, 60_000).unwrap();
    let g = Policy::gcra(5, 1_000, None).unwrap();
    let md = l.check_all(&[("{t}:a", s), ("{t}:b", g)]).await;
    assert!(md.allows());
    let md = l.check_all(&[("{t}:a", s), ("{t}:b", g)]).await;
    assert_eq!(md.denied, Some(0));
    assert_eq!(
        l.peek("{t}:b", &g, 0).await.remaining,
        4,
        "nothing taken on a denial"
    );

    // Move to a server with the module, keeping the state: DUMP / RESTORE (or replication,
    // MIGRATE, an RDB file) carries the bytes; the module continues the limiter.
    let module = Server::start();
    for key in ["api:alice", "{t}:b"] {
        let dump: Vec<u8> = query(&mut plain.client(), &["DUMP", key]);
        let pttl: i64 = query(&mut plain.client(), &["PTTL", key]);
        let mut restore = redis::cmd("RESTORE");
        restore.arg(key).arg(pttl).arg(dump);
        let _: () = restore.query(&mut module.client()).unwrap();
    }
    let m = limiter(&module);
    let d = m.check("api:alice", &tb).await;
    assert_eq!(d.source, Source::Redis);
    assert!(!d.allows(), "the module sees the bucket the twin emptied");
    assert_eq!(m.peek("{t}:b", &g, 0).await.remaining, 4);
}

#[tokio::test]
async fn where_function_is_refused_the_twin_runs_as_a_script() {
    let plain = Server::start_plain(&["--rename-command", "FUNCTION", ""]);
    let l = limiter(&plain);
    let p = Policy::fixed(2, 60_000).unwrap();
    assert!(l.check("k", &p).await.allows());
    assert!(l.check("k", &p).await.allows());
    let d = l.check("k", &p).await;
    assert_eq!(d.source, Source::Redis);
    assert!(!d.allows());
    // A script cache flush (restart, failover) is repaired on NOSCRIPT.
    let _: () = query(&mut plain.client(), &["SCRIPT", "FLUSH"]);
    let d = l.check("k2", &p).await;
    assert_eq!(d.source, Source::Redis);
    assert_eq!(d.remaining, 1);
}

#[tokio::test]
async fn a_forced_engine_is_used_as_is() {
    let plain = Server::start_plain(&[]);
    let forced = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .server_impl(ServerImpl::Module)
        .standalone(&plain.url())
        .unwrap();
    let p = Policy::sliding(5, 1_000).unwrap();
    assert_ne!(forced.check("k", &p).await.source, Source::Redis);
    let module = Server::start();
    let lua = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .server_impl(ServerImpl::Lua)
        .standalone(&module.url())
        .unwrap();
    let d = lua.check("k", &p).await;
    assert_eq!(d.source, Source::Redis);
    assert_eq!(d.remaining, 4);
    // Function not found, FUNCTION LOAD, FCALL again.
    assert_eq!(module.calls("fcall"), 2, "the twin");
    assert_eq!(module.calls("RL.SLIDING"), 0, "not the module");
    // Parameters beyond the twin's exact range are refused before any call.
    let huge = Policy::token_bucket(1_000_000_000_000_000, 1, 1_000_000_000_000).unwrap();
    assert_ne!(lua.check("h", &huge).await.source, Source::Redis);
}

#[tokio::test]
async fn on_a_cluster_without_the_module() {
    let cluster = Cluster::start_plain();
    let nodes = &cluster.nodes;
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let l = Limiter::builder()
        .timeout(Duration::from_millis(500))
        .cluster(&urls)
        .unwrap();
    let tb = Policy::token_bucket(2, 1, 3_600_000).unwrap();
    // Keys on every node: the library is loaded on each as it is first needed there.
    for key in ["user:1", "user:2", "user:3", "user:4", "user:5"] {
        let d = l.check(key, &tb).await;
        assert_eq!(d.source, Source::Redis, "{key}");
        assert_eq!(d.remaining, 1, "{key}");
    }
    // Across slots: all or nothing by compensation (the twin's RL.REFUND).
    assert!(l.check("user:2", &tb).await.allows());
    let both = l.check_all(&[("user:1", tb), ("user:2", tb)]).await;
    assert_eq!(both.denied, Some(1));
    assert_eq!(l.peek("user:1", &tb, 0).await.remaining, 1, "refunded");
}

/// A client speaking RESP3 (`?protocol=resp3`: `HELLO 3` on every connection, as redis-py 8
/// and go-redis v9 do by default) reads the module's and the twin's decisions as a RESP2
/// client does.
#[tokio::test]
async fn the_decisions_read_alike_under_resp3() {
    let module = Server::start();
    let plain = Server::start_plain(&[]);
    let tb = Policy::token_bucket(3, 1, 3_600_000).unwrap();
    let s = Policy::sliding(1, 60_000).unwrap();
    for server in [&module, &plain] {
        for protocol in redis_rl_testkit::PROTOCOLS {
            let l = Limiter::builder()
                .timeout(Duration::from_millis(500))
                .standalone(&server.url_speaking(protocol))
                .unwrap();
            let key = format!("{protocol:?}:alice");
            for left in [2, 1, 0] {
                let d = l.check(&key, &tb).await;
                assert_eq!(d.source, Source::Redis, "{protocol:?}");
                assert!(d.allows(), "{protocol:?}");
                assert_eq!(d.remaining, left, "{protocol:?}");
            }
            let d = l.check(&key, &tb).await;
            assert_eq!(
                (d.source, d.allows()),
                (Source::Redis, false),
                "{protocol:?}"
            );
            assert!(d.retry_after().unwrap() > Duration::from_secs(1_000));
            let (a, b) = (format!("{{{protocol:?}}}:a"), format!("{{{protocol:?}}}:b"));
            assert!(l
                .check_all(&[(a.as_str(), s), (b.as_str(), tb)])
                .await
                .allows());
            let md = l.check_all(&[(a.as_str(), s), (b.as_str(), tb)]).await;
            assert_eq!(md.denied, Some(0), "{protocol:?}");
            assert_eq!(l.peek(&b, &tb, 0).await.remaining, 2, "{protocol:?}");
        }
    }
}

/// `Limiter::window_count` (what a settled debt's hold is computed from) reads the same
/// count and expiry from the twin's `RL.STATE` as from the module's.
#[tokio::test]
async fn window_counts_read_alike_from_the_twin_and_the_module() {
    let fixed = Policy::fixed(1_000, 60_000).unwrap();
    let quota = Policy::calendar_quota(1_000, redis_rl_client::Period::Month, 0, 1).unwrap();
    let gcra = Policy::gcra(5, 1_000, None).unwrap();
    for server in [Server::start_plain(&[]), Server::start()] {
        let l = limiter(&server);
        assert!(l.check_n("{w}:f", &fixed, 1).await.allows());
        assert!(l.check_n("{w}:q", &quota, 1).await.allows());
        assert!(l.check("{w}:g", &gcra).await.allows());
        l.settle("{w}:f", &fixed, 1, 5_000).await.unwrap();
        l.settle("{w}:q", &quota, 1, 1_500).await.unwrap();
        let f = l.window_count("{w}:f").await.unwrap().unwrap();
        assert_eq!(f.count, 5_000);
        assert!((1..=61_000).contains(&f.left_ms), "{f:?}");
        let q = l.window_count("{w}:q").await.unwrap().unwrap();
        assert_eq!(q.count, 1_500);
        assert!(q.left_ms > 0 && q.left_ms <= 32 * 86_400_000, "{q:?}");
        // Another algorithm, or no key: nothing.
        assert_eq!(l.window_count("{w}:g").await.unwrap(), None);
        assert_eq!(l.window_count("{w}:none").await.unwrap(), None);
    }
}
