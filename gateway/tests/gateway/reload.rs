//! SIGHUP reloads the configuration file: a new limit applies to new requests, a bad file
//! is refused (logged, the running configuration stays), a request in flight completes.

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use redis_rl_testkit::{eventually, Server};
use tokio::sync::{mpsc, Notify};

use super::upstream::Upstream;
use super::{proxy_args, Gateway};

#[tokio::test]
async fn sighup_reloads_refuses_a_bad_file_and_drops_nothing_in_flight() {
    let server = Server::start();
    // /hold tells the test it arrived, then waits to be released.
    let (arrived_tx, mut arrived) = mpsc::channel::<()>(4);
    let release = Arc::new(Notify::new());
    let gate = release.clone();
    let app = Router::new()
        .route(
            "/hold",
            get(move || {
                let arrived = arrived_tx.clone();
                let gate = gate.clone();
                async move {
                    arrived.send(()).await.unwrap();
                    gate.notified().await;
                    "held"
                }
            }),
        )
        .route("/{*rest}", get(|| async { "up" }));
    let up = Upstream::plain(app).await;
    let dir = std::env::temp_dir().join(format!("rl-gw-reload-{}", server.port));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    let log = dir.join("gateway.log");
    let limit = |n: u32| format!("dimensions = [\"endpoint\"]\n[endpoint]\nlimit = {n}\n");
    std::fs::write(&config, limit(3)).unwrap();
    let gw = Gateway::launch(
        &proxy_args(&server, &up, &config),
        // The refused reload's error is on the admin listener only.
        true,
        Some(&log),
    )
    .await;
    let (_, h, _) = gw.get("/api/search", &[]).await.unwrap();
    assert_eq!(h["x-ratelimit-limit"], "3");

    // A request in flight across the reload.
    let port = gw.port;
    let in_flight = tokio::spawn(async move { super::get_from(port, "/hold", &[]).await });
    tokio::time::timeout(Duration::from_secs(10), arrived.recv())
        .await
        .expect("the held request reached the upstream");

    std::fs::write(&config, limit(5)).unwrap();
    gw.hangup();
    eventually("generation 2", async || {
        gw.health().await["config"]["generation"] == 2
    })
    .await;
    let (_, h, _) = gw.get("/api/items/1", &[]).await.unwrap();
    assert_eq!(h["x-ratelimit-limit"], "5", "the new limit applies");

    release.notify_one();
    let (status, h, body) = in_flight
        .await
        .unwrap()
        .expect("the held request completed");
    assert_eq!((status, body.as_str()), (200, "held"));
    assert_eq!(
        h["x-ratelimit-limit"], "3",
        "decided under the configuration it started with"
    );

    // A bad file: refused, logged, the running configuration stays.
    std::fs::write(&config, "[endpoint]\nlimit = 0\n").unwrap();
    gw.hangup();
    eventually("the reload is refused", async || {
        gw.health().await["config"]["reloads_refused"] == 1
    })
    .await;
    let health = gw.health().await;
    assert_eq!(health["config"]["generation"], 2);
    let error = health["config"]["last_reload_error"].as_str().unwrap();
    assert!(error.contains("endpoint"), "{error}");
    let (status, h, _) = gw.get("/api/users/1", &[]).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(h["x-ratelimit-limit"], "5");
    eventually("the refusal is logged", async || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("configuration reload refused")
    })
    .await;
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}
