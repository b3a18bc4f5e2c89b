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

/// The metric names an expression queries (`rl_...`, histograms through `_bucket`, `_count`
/// and `_sum`).
fn queried_names(expr: &str, out: &mut BTreeSet<String>) {
    let mut rest = expr;
    while let Some(at) = rest.find("rl_") {
        let starts_word = at == 0
            || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        if starts_word {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
}

/// Every metric that deploy/grafana/redis-rl.json and deploy/prometheus/alerts.yml query
/// (read from those files, so the check follows them), as /metrics must show it.
fn dashboard_and_alert_metrics() -> BTreeSet<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut names = BTreeSet::new();
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("deploy/grafana/redis-rl.json")).unwrap(),
    )
    .unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queried_names(target["expr"].as_str().unwrap_or(""), &mut names);
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        queried_names(var["query"].as_str().unwrap_or(""), &mut names);
    }
    let alerts: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(root.join("deploy/prometheus/alerts.yml")).unwrap(),
    )
    .unwrap();
    for group in alerts["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            queried_names(rule["expr"].as_str().unwrap_or(""), &mut names);
        }
    }
    assert!(names.len() >= 17, "{names:?}");
    names
}

/// A gateway that has served nothing yet exports every metric a panel or an alert reads, at
/// 0: "no data" would hide exactly the first breaker opening, fallback or failed reload.
#[tokio::test]
async fn a_fresh_gateway_exports_every_metric_the_dashboard_and_alerts_read() {
    let server = Server::start();
    let app = Router::new().route("/{*rest}", get(|| async { "up" }));
    let up = Upstream::plain(app).await;
    let config = std::env::temp_dir().join(format!("rl-gw-fresh-{}.toml", server.port));
    std::fs::write(
        &config,
        "[[rules]]\nname = \"login\"\npaths = [\"/login\"]\nkey = [\"ip\"]\nlimit = 5\n",
    )
    .unwrap();
    let gw = Gateway::launch(&proxy_args(&server, &up, &config), true, None).await;
    let (status, _, text) = gw.ops("/metrics").await.unwrap();
    assert_eq!(status, 200);
    let samples: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let missing: Vec<String> = dashboard_and_alert_metrics()
        .into_iter()
        .filter(|name| !samples.contains(name.as_str()))
        .collect();
    assert!(missing.is_empty(), "missing {missing:?} in:\n{text}");
    // The label sets of the configuration, at 0 (its rule among the dimensions).
    for series in [
        "rl_requests_total{dimension=\"login\",outcome=\"denied\"} 0",
        "rl_requests_total{dimension=\"ip\",outcome=\"delayed\"} 0",
        "rl_fallback_total{dimension=\"login\",source=\"local\"} 0",
        "rl_config_reloads_total{result=\"error\"} 0",
        "rl_breaker_transitions_total{to=\"open\"} 0",
        "rl_access_total{list=\"deny\"} 0",
    ] {
        assert!(text.lines().any(|l| l == series), "no {series} in:\n{text}");
    }
    let _ = std::fs::remove_file(&config);
}

/// The start-up lines show addresses as addresses (`listen=127.0.0.1:8081`, not
/// `Some(...)`) and what the fallback divides by (`instances=live`, not `instances=0`).
#[tokio::test]
async fn the_start_up_log_shows_plain_addresses_and_the_fleet_size_it_divides_by() {
    let server = Server::start();
    let dir = super::test_dir("start-log", server.port);
    let yaml = dir.join("rls.yaml");
    std::fs::write(
        &yaml,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n",
    )
    .unwrap();
    let log_path = dir.join("gateway.log");
    let (listen, rls) = (redis_rl_testkit::free_port(), redis_rl_testkit::free_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--rls-listen", &format!("127.0.0.1:{rls}")])
        .args(["--rls-config", yaml.to_str().unwrap()])
        .args(["--redis", &server.url(), "--log", "info"])
        .env("NO_COLOR", "1")
        .stdout(std::fs::File::create(&log_path).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut log = String::new();
    eventually("the start-up lines", async || {
        log = std::fs::read_to_string(&log_path).unwrap_or_default();
        log.contains("rate limit service listening") && log.contains("rl-gateway listening")
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(!log.contains("Some("), "{log}");
    assert!(log.contains(&format!("listen=127.0.0.1:{rls}")), "{log}");
    assert!(log.contains(&format!("listen=127.0.0.1:{listen}")), "{log}");
    assert!(log.contains("instances=live"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
