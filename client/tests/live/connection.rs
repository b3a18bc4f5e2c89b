//! The limiter's own pipelined connection to a plain `redis://` server: the URL's user,
//! password and database are used, a wrong password is a refusal (not an outage), and each
//! of many concurrent calls, which share one connection and leave in batches, gets its own
//! reply.

use std::time::Duration;

use futures_util::future::join_all;
use redis_rl_client::{Limiter, Policy, Refusal, Source};
use redis_rl_testkit::{query, Server};

fn limiter(url: &str) -> Limiter {
    Limiter::builder()
        .timeout(Duration::from_secs(5))
        .standalone(url)
        .unwrap()
}

fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap()
}

#[tokio::test]
async fn the_urls_user_password_and_database_are_used() {
    let server = Server::start();
    let mut admin = server.client();
    let _: () = query(
        &mut admin,
        &["ACL", "SETUSER", "limiter", "on", ">secret", "~*", "+@all"],
    );
    let _: () = query(&mut admin, &["CONFIG", "SET", "requirepass", "pw"]);
    let tb = Policy::token_bucket(2, 1, 3_600_000).unwrap();
    let port = server.port;

    // The default user's password, and database 3.
    let l = limiter(&format!("redis://:pw@127.0.0.1:{port}/3"));
    let d = l.check("conn:db", &tb).await;
    assert_eq!((d.source, d.remaining), (Source::Redis, 1));
    let in_db = |db: u32| -> i64 {
        query(
            &mut connect(&format!("redis://:pw@127.0.0.1:{port}/{db}")),
            &["DBSIZE"],
        )
    };
    assert_eq!((in_db(3), in_db(0)), (1, 0));

    // An ACL user.
    let user = limiter(&format!("redis://limiter:secret@127.0.0.1:{port}/"));
    let d = user.check("conn:user", &tb).await;
    assert_eq!((d.source, d.remaining), (Source::Redis, 1));
    assert!(user.refusals().is_empty());

    // A wrong password: decided by the failure mode, reported as a refusal.
    for url in [
        format!("redis://limiter:wrong@127.0.0.1:{port}/"),
        format!("redis://:wrong@127.0.0.1:{port}/"),
        format!("redis://127.0.0.1:{port}/"),
    ] {
        let wrong = limiter(&url);
        assert_ne!(wrong.check("conn:wrong", &tb).await.source, Source::Redis);
        let refusals = wrong.refusals();
        assert!(
            refusals
                .iter()
                .any(|(_, r)| *r == Refusal::AuthenticationFailed),
            "{url}: {refusals:?}"
        );
    }
}

#[tokio::test]
async fn concurrent_calls_each_get_their_own_reply() {
    let server = Server::start();
    let l = limiter(&server.url());
    let tb = Policy::token_bucket(1_000, 1, 3_600_000).unwrap();
    // Different keys and costs: a reply handed to the wrong call shows as a wrong remainder.
    let keys: Vec<String> = (0..500).map(|i| format!("conn:{i}")).collect();
    let cost = |i: usize| (i % 97 + 1) as u64;
    for round in 0..3u64 {
        let decisions = join_all(
            keys.iter()
                .enumerate()
                .map(|(i, key)| l.check_n(key, &tb, cost(i))),
        )
        .await;
        for (i, d) in decisions.iter().enumerate() {
            assert_eq!(d.source, Source::Redis);
            assert_eq!(d.remaining, 1_000 - (round + 1) * cost(i), "key {i}");
        }
    }
    assert!(
        server.calls("rl.tokenbucket") >= 1_500,
        "every call reached the server"
    );
}

#[test]
fn a_limiter_outliving_its_first_runtime_connects_again_on_the_next() {
    let server = Server::start();
    let l = limiter(&server.url());
    let tb = Policy::token_bucket(10, 1, 3_600_000).unwrap();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    // The connection's task lives on the first runtime, and goes with it.
    let d = runtime().block_on(l.check("conn:runtime", &tb));
    assert_eq!((d.source, d.remaining), (Source::Redis, 9));
    let d = runtime().block_on(l.check("conn:runtime", &tb));
    assert_eq!((d.source, d.remaining), (Source::Redis, 8));
}
