//! rl-gateway in front of a managed-Redis stand-in: `rediss://` with an ACL user, the CA of
//! `--redis-ca`, a client certificate, with the module and without (the Lua twin); and the
//! failures a user meets first, each named in /healthz: a wrong password, a user whose ACL
//! refuses the limiter's keys, a certificate for another name, an untrusted CA.

use redis_rl_testkit::tls::{TlsServer, MINIMAL_USER, NARROW_USER, PASSWORD, USER};
use redis_rl_testkit::tls_cluster::TlsCluster;
use redis_rl_testkit::{eventually, query};

use super::Gateway;

fn tls_args(server: &TlsServer, url: &str) -> Vec<String> {
    let (cert, key) = server.client_cert();
    vec![
        "--redis".into(),
        url.into(),
        "--redis-ca".into(),
        server.ca().display().to_string(),
        "--redis-cert".into(),
        cert.display().to_string(),
        "--redis-key".into(),
        key.display().to_string(),
    ]
}

async fn start(args: &[String]) -> Gateway {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start(&args).await
}

#[tokio::test]
async fn decides_in_redis_over_tls_with_an_acl_user_with_and_without_the_module() {
    for module in [true, false] {
        let server = TlsServer::start(module, true);
        let gw = start(&tls_args(&server, &server.tls_url(USER, PASSWORD))).await;
        for expected in ["99", "98"] {
            let (status, h, body) = gw.get("/api/search", &[("x-api-key", "k")]).await.unwrap();
            assert_eq!(status, 200, "{body}");
            assert_eq!(h["x-ratelimit-remaining"], expected);
        }
        let health = gw.health().await;
        assert_eq!(health["status"], "ok", "{health}");
        assert_eq!(health["deciding"], "redis", "{health}");
        assert_eq!(
            health["engine"]["in_use"],
            if module { "module" } else { "lua" },
            "{health}"
        );
        assert_eq!(health["stats"]["local"], 0, "{health}");
        let keys: Vec<String> = query(&mut server.client(), &["KEYS", "rl:*"]);
        assert!(
            keys.iter().any(|k| k.starts_with("rl:{k:")),
            "the limiter wrote its keys: {keys:?}"
        );
        drop(gw);

        // The user with only the permissions docs/src/security.md lists.
        let minimal = start(&tls_args(
            &server,
            &server.tls_url(MINIMAL_USER, MINIMAL_USER),
        ))
        .await;
        // The IP dimension is shared with the requests above: one less per request.
        let mut left = Vec::new();
        for _ in 0..2 {
            let (status, h, body) = minimal
                .get("/api/search", &[("x-api-key", "m")])
                .await
                .unwrap();
            assert_eq!(status, 200, "{body}");
            left.push(
                h["x-ratelimit-remaining"]
                    .to_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
            );
        }
        assert_eq!(left[0], left[1] + 1, "decided in Redis: {left:?}");
        let health = minimal.health().await;
        assert_eq!(health["status"], "ok", "module {module}: {health}");
        // It listens for the fleet's forgotten refusals (SUBSCRIBE on its channel).
        eventually("the deny cache listens on rl:denials", async || {
            let n: Vec<redis::Value> =
                query(&mut server.client(), &["PUBSUB", "NUMSUB", "rl:denials"]);
            matches!(n.get(1), Some(redis::Value::Int(n)) if *n >= 1)
        })
        .await;
        if module {
            eventually("a fleet of one", async || {
                minimal.health().await["stats"]["fleet_size"] == 1
            })
            .await;
        }
    }
}

/// The reasons of /healthz once a request was tried.
async fn reasons(gw: &Gateway) -> String {
    gw.get("/api/search", &[("x-api-key", "k")]).await.unwrap();
    gw.health().await["reasons"].to_string()
}

#[tokio::test]
async fn refused_credentials_names_and_cas_are_reported_as_such() {
    let server = TlsServer::start(true, true);

    let wrong = start(&tls_args(&server, &server.tls_url(USER, "wrong"))).await;
    eventually("authentication failed", async || {
        reasons(&wrong).await.contains("authentication failed")
    })
    .await;
    let h = wrong.health().await;
    assert_eq!(h["status"], "degraded", "{h}");
    assert_eq!(h["deciding"], "failure_mode", "{h}");
    let (_, _, metrics) = wrong.get("/metrics", &[]).await.unwrap();
    assert!(
        metrics.contains("rl_redis_refusals_total{reason=\"authentication_failed\"}"),
        "{metrics}"
    );
    drop(wrong);

    let narrow = start(&tls_args(
        &server,
        &server.tls_url(NARROW_USER, NARROW_USER),
    ))
    .await;
    eventually("permission denied", async || {
        reasons(&narrow).await.contains("permission denied")
    })
    .await;
    drop(narrow);

    // The certificate is for 127.0.0.1 only: a client that asked for localhost refuses it.
    let other_name = format!("rediss://{USER}:{PASSWORD}@localhost:{}/", server.tls_port);
    let named = start(&tls_args(&server, &other_name)).await;
    let h = named.health().await;
    assert_eq!(h["redis"], "down", "{h}");
    assert_ne!(h["status"], "ok", "{h}");
    drop(named);

    // Without --redis-ca the system's roots do not know the test CA.
    let (cert, key) = server.client_cert();
    let untrusted = start(&[
        "--redis".into(),
        server.tls_url(USER, PASSWORD),
        "--redis-cert".into(),
        cert.display().to_string(),
        "--redis-key".into(),
        key.display().to_string(),
    ])
    .await;
    assert_eq!(untrusted.health().await["redis"], "down");
    drop(untrusted);

    // The server asks for a client certificate: without one, no connection.
    let anonymous = start(&[
        "--redis".into(),
        server.tls_url(USER, PASSWORD),
        "--redis-ca".into(),
        server.ca().display().to_string(),
    ])
    .await;
    assert_eq!(anonymous.health().await["redis"], "down");
}

/// `--cluster` with the nodes' `rediss://` URLs: the gateway decides on a cluster whose
/// clients, bus and replication are TLS, through the Lua twin (no module, as a managed
/// cluster).
#[tokio::test]
async fn decides_on_a_tls_cluster_without_the_module() {
    let cluster = TlsCluster::start(false);
    let gw = start(&[
        "--cluster".into(),
        "--redis".into(),
        cluster.tls_urls(USER, PASSWORD).join(","),
        "--redis-ca".into(),
        cluster.ca().display().to_string(),
    ])
    .await;
    for expected in ["99", "98"] {
        let (status, h, body) = gw.get("/api/search", &[("x-api-key", "k")]).await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(h["x-ratelimit-remaining"], expected);
    }
    let health = gw.health().await;
    assert_eq!(health["deciding"], "redis", "{health}");
    assert_eq!(health["engine"]["in_use"], "lua", "{health}");
    assert_eq!(health["stats"]["local"], 0, "{health}");
}
