//! /healthz says whether the gateway would serve; /metrics describes every metric and has
//! latency histograms; --admin-listen moves both off the public listener.

use std::collections::BTreeSet;

use axum::routing::get;
use axum::Router;
use redis_rl_testkit::{eventually, Server};

use super::upstream::Upstream;
use super::{proxy_args, Gateway};

#[tokio::test]
async fn healthz_is_503_while_closed_mode_would_refuse_and_200_otherwise() {
    let mut server = Server::start();
    let closed = Gateway::launch(
        &[
            "--redis",
            &server.url(),
            "--failure-mode",
            "closed",
            "--breaker-failures",
            "1",
            "--breaker-open-ms",
            "100",
        ],
        true,
        None,
    )
    .await;
    let (status, _, body) = closed.ops("/healthz").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let h: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(h["status"], "ok");
    assert_eq!(h["failure_mode"], "closed");
    assert_eq!(h["deciding"], "redis");
    assert_eq!(h["redis"], "up");
    assert_eq!(h["breaker"], "closed");
    assert_eq!(
        h["fail_closed"],
        serde_json::json!(["api_key", "ip", "endpoint", "global"])
    );
    // With an admin listener, the public one serves /healthz and /metrics like any path:
    // rate-limited, answered by the upstream (here the demo).
    let (status, headers, body) = closed.get("/healthz", &[]).await.unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("\"route\":\"/{*path}\""), "{body}");
    assert!(headers.contains_key("ratelimit-policy"));
    let (_, _, body) = closed.get("/metrics", &[]).await.unwrap();
    assert!(!body.contains("# TYPE"), "{body}");

    let local = Gateway::serve(&server, &["--failure-mode", "local"]).await;
    server.kill();
    let (status, _, body) = closed.ops("/healthz").await.unwrap();
    assert_eq!(status, 503, "{body}");
    let h: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(h["status"], "unavailable");
    assert_eq!(h["redis"], "down");
    assert_eq!(closed.get("/api/search", &[]).await.unwrap().0, 503);
    // The local failure mode keeps serving: healthy, degraded.
    let (status, _, body) = local.ops("/healthz").await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"status\":\"degraded\""), "{body}");
    assert_eq!(local.get("/api/search", &[]).await.unwrap().0, 200);

    server.restart();
    // No traffic needed: the health check itself probes Redis and closes the breaker.
    eventually("closed mode is healthy again", async || {
        closed
            .ops("/healthz")
            .await
            .is_some_and(|(s, _, b)| s == 200 && b.contains("\"status\":\"ok\""))
    })
    .await;
    assert_eq!(closed.get("/api/search", &[]).await.unwrap().0, 200);
}

#[tokio::test]
async fn metrics_describe_every_family_and_have_latency_histograms() {
    let server = Server::start();
    let app = Router::new().route("/{*rest}", get(|| async { "up" }));
    let up = Upstream::plain(app).await;
    let empty = std::env::temp_dir().join(format!("rl-gw-empty-{}.toml", server.port));
    std::fs::write(&empty, "").unwrap();
    let gw = Gateway::launch(&proxy_args(&server, &up, &empty), true, None).await;
    for _ in 0..3 {
        assert_eq!(gw.get("/api/search", &[]).await.unwrap().0, 200);
    }
    gw.hangup();
    eventually("reloaded", async || {
        gw.health().await["config"]["generation"] == 2
    })
    .await;
    let (status, h, text) = gw.ops("/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(h["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));

    let mut help = BTreeSet::new();
    let mut types = std::collections::BTreeMap::new();
    let mut samples = BTreeSet::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("#"), Some("HELP"), Some(name)) => {
                help.insert(name.to_string());
            }
            (Some("#"), Some("TYPE"), Some(name)) => {
                types.insert(name.to_string(), words.next().unwrap().to_string());
            }
            (Some(sample), Some(_), _) if !sample.starts_with('#') => {
                let name = sample.split('{').next().unwrap();
                samples.insert(name.to_string());
            }
            _ => {}
        }
    }
    for name in &samples {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|base| types.get(*base).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        assert!(help.contains(family), "no HELP for {family}:\n{text}");
        assert!(types.contains_key(family), "no TYPE for {family}:\n{text}");
    }
    for family in [
        "rl_requests_total",
        "rl_redis_call_duration_seconds",
        "rl_upstream_duration_seconds",
        "rl_breaker_open",
        "rl_config_reloads_total",
    ] {
        assert!(help.contains(family), "{family} missing:\n{text}");
    }
    assert_eq!(types["rl_redis_call_duration_seconds"], "histogram");
    assert_eq!(types["rl_upstream_duration_seconds"], "histogram");
    assert!(
        text.contains("rl_redis_call_duration_seconds_bucket{outcome=\"ok\",le=\"+Inf\"}"),
        "{text}"
    );
    assert!(
        text.contains("rl_upstream_duration_seconds_count{outcome=\"2xx\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("rl_config_reloads_total{result=\"ok\"} 1"),
        "{text}"
    );
}
