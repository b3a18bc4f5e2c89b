//! The limiter on a managed-Redis stand-in: `rediss://user:password@host` with the CA and a
//! client certificate ([`LimiterBuilder::tls`]), deciding in Redis with the module and with
//! the Lua twin; a wrong password and a refused ACL are reported as refusals, not outages.

use std::time::Duration;

use redis_rl_client::{Limiter, LimiterBuilder, Policy, Refusal, Source, TlsFiles};
use redis_rl_testkit::tls::{TlsServer, NARROW_USER, PASSWORD, USER};
use redis_rl_testkit::tls_cluster::TlsCluster;

fn builder(server: &TlsServer) -> LimiterBuilder {
    let (cert, key) = server.client_cert();
    Limiter::builder()
        .timeout(Duration::from_secs(5))
        .tls(TlsFiles {
            ca: Some(std::fs::read(server.ca()).unwrap()),
            client: Some((std::fs::read(cert).unwrap(), std::fs::read(key).unwrap())),
        })
}

#[tokio::test]
async fn decides_over_tls_as_an_acl_user_with_the_module_and_the_twin() {
    for module in [true, false] {
        let server = TlsServer::start(module, true);
        let l = builder(&server)
            .standalone(&server.tls_url(USER, PASSWORD))
            .unwrap();
        let tb = Policy::token_bucket(2, 1, 3_600_000).unwrap();
        for left in [1, 0] {
            let d = l.check("tls:alice", &tb).await;
            assert_eq!(d.source, Source::Redis, "module {module}");
            assert_eq!(d.remaining, left);
        }
        let d = l.check("tls:alice", &tb).await;
        assert_eq!((d.source, d.allows()), (Source::Redis, false));
        assert!(l.refusals().is_empty());
    }
}

#[tokio::test]
async fn refused_users_are_refusals_and_the_server_name_is_checked() {
    let server = TlsServer::start(true, true);
    let tb = Policy::token_bucket(2, 1, 3_600_000).unwrap();

    let wrong = builder(&server)
        .standalone(&server.tls_url(USER, "wrong"))
        .unwrap();
    assert_ne!(wrong.check("tls:bob", &tb).await.source, Source::Redis);
    let refusals = wrong.refusals();
    assert!(
        refusals
            .iter()
            .any(|(_, r)| *r == Refusal::AuthenticationFailed),
        "{refusals:?}"
    );

    let narrow = builder(&server)
        .standalone(&server.tls_url(NARROW_USER, NARROW_USER))
        .unwrap();
    assert_ne!(narrow.check("tls:bob", &tb).await.source, Source::Redis);
    let refusals = narrow.refusals();
    assert!(
        refusals
            .iter()
            .any(|(_, r)| *r == Refusal::PermissionDenied),
        "{refusals:?}"
    );
    // Allowed keys work for the same user: the refusal is per command, not an outage.
    assert!(narrow.ping().await);

    // The certificate names 127.0.0.1 only.
    let url = format!("rediss://{USER}:{PASSWORD}@localhost:{}/", server.tls_port);
    let other_name = builder(&server).standalone(&url).unwrap();
    assert!(!other_name.ping().await);
    assert!(other_name.refusals().is_empty(), "not a refusal");
}

/// A managed cluster's stand-in: three masters with clients, the cluster bus and replication
/// over TLS; the limiter is given every node's `rediss://` URL and follows CLUSTER SLOTS to
/// the TLS ports, with the module and with the Lua twin.
#[tokio::test]
async fn decides_on_a_tls_cluster_as_an_acl_user_with_the_module_and_the_twin() {
    for module in [true, false] {
        let cluster = TlsCluster::start(module);
        let l = Limiter::builder()
            .timeout(Duration::from_secs(5))
            .tls(TlsFiles {
                ca: Some(std::fs::read(cluster.ca()).unwrap()),
                client: None,
            })
            .cluster(&cluster.tls_urls(USER, PASSWORD))
            .unwrap();
        let tb = Policy::token_bucket(2, 1, 3_600_000).unwrap();
        // Keys on every master (three hash tags whose slots the three masters serve).
        let keys = ["tls:{a}", "tls:{b}", "tls:{c}", "tls:{d}", "tls:{e}"];
        for key in keys {
            for left in [1, 0] {
                let d = l.check(key, &tb).await;
                assert_eq!(
                    (d.source, d.remaining),
                    (Source::Redis, left),
                    "module {module} {key}"
                );
            }
        }
        // Each key's bucket is on the master of its slot, as the limiter wrote it there.
        let mut written = 0;
        for node in &cluster.nodes {
            let n: i64 = redis_rl_testkit::query(&mut node.client(), &["DBSIZE"]);
            written += n;
        }
        assert_eq!(written, keys.len() as i64, "module {module}");
        let both = l.check_all(&[("tls:{a}", tb), ("tls:{b}", tb)]).await;
        assert!(!both.allows(), "module {module}");
        assert!(
            l.refusals().is_empty(),
            "module {module}: {:?}",
            l.refusals()
        );
    }
}
