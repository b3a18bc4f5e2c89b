//! Rules, several windows and identity through the rl-gateway binary: a real server, the
//! gateway on loopback, requests over HTTP (rules matched by path template, method, host,
//! header and tier; keys by header; windows; one atomic decision across rules; paths
//! counted and forwarded in normal form; one API key per request; IPv4-mapped deny lists;
//! a bad rule refused at start, at reload and by --check-config with its field named).

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use redis_rl_testkit::{eventually, query, Server};

use super::upstream::Upstream;
use super::{check_config, request, test_dir, Gateway};

/// `method path` with `headers` (a name may repeat) from the local address `from`.
async fn send(
    port: u16,
    from: IpAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, String) {
    request(port, Some(from), method, path, headers)
        .await
        .unwrap()
}

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn config(prefix: &str) -> String {
    format!(
        r#"
key_prefix = "{prefix}"
dimensions = ["ip"]
hot = []
api_key_header = "Authorization"
[fleet]
membership = false
[ip]
limit = 1000
[access]
deny_ips = ["::ffff:127.0.0.2/128"]
deny_api_keys = ["badkey"]

[[rules]]
name = "login"
paths = ["/login"]
methods = ["POST"]
key = ["ip"]
limits = [{{ limit = 2, window_ms = 300 }}, "3/hour"]

[[rules]]
name = "tenant"
paths = ["/api/**"]
headers = {{ "x-client" = "mobile" }}
key = ["header:x-tenant"]
limit = 1
window_ms = 3600000

[[rules]]
name = "pro"
paths = ["/pro"]
hosts = ["api.example.com"]
tiers = ["pro"]
key = ["api_key"]
limit = 1
window_ms = 3600000

[[rules]]
name = "each"
paths = ["/atom"]
key = ["ip"]
limit = 1
window_ms = 3600000

[[rules]]
name = "both"
paths = ["/atom", "/atom2"]
key = ["global"]
limit = 2
window_ms = 3600000
"#
    )
}

#[tokio::test]
async fn rules_windows_identity_and_paths_through_the_gateway() {
    let server = Server::start();
    let prefix = format!("rules{}", server.port);
    let _: () = query(
        &mut server.client(),
        &["HSET", &format!("{prefix}:tiers"), "pro-key", "pro"],
    );
    let up = Upstream::plain(
        Router::new().fallback(|req: Request| async move { req.uri().path().to_string() }),
    )
    .await;
    let dir = test_dir("rules", server.port);
    let path = dir.join("gateway.toml");
    std::fs::write(&path, config(&prefix)).unwrap();
    let gw = Gateway::configured(
        &server,
        &path,
        &[
            "--tier-hash",
            &format!("{prefix}:tiers"),
            "--upstream",
            &format!("http://127.0.0.1:{}", up.port),
        ],
    )
    .await;
    let at =
        |method: &'static str, path: &'static str, headers: Vec<(&'static str, &'static str)>| {
            let port = gw.port;
            async move { send(port, LOCAL, method, path, &headers).await }
        };

    // Path template and method; several windows: the hour refuses once the 300 ms window
    // has refilled.
    let statuses = [
        at("POST", "/login", vec![]).await.0,
        at("POST", "/login", vec![]).await.0,
    ];
    assert_eq!(statuses, [200, 200]);
    let (status, h, body) = at("POST", "/login/", vec![]).await;
    assert_eq!(status, 429, "the same path with a trailing slash: {body}");
    assert!(h["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"login-300ms\";r=0;"));
    assert_eq!(
        h["ratelimit-policy"],
        "\"ip\";q=1000;w=60, \"login-300ms\";q=2;w=1, \"login-1h\";q=3;w=3600"
    );
    assert_eq!(at("GET", "/login", vec![]).await.0, 200, "another method");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(at("POST", "//login", vec![]).await.0, 200);
    let (status, _, body) = at("POST", "/x/../login", vec![]).await;
    assert_eq!(status, 429);
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (problem["dimension"].as_str(), problem["policy"].as_str()),
        (Some("login"), Some("login-1h"))
    );
    let mut keys: Vec<String> = query(
        &mut server.client(),
        &["KEYS", &format!("{prefix}:*:r:login:*")],
    );
    keys.sort();
    assert_eq!(
        keys,
        [
            format!("{prefix}:{{ip:127.0.0.1}}:r:login:1h"),
            format!("{prefix}:{{ip:127.0.0.1}}:r:login:300ms")
        ],
        "one key per window"
    );

    // Paths are forwarded in normal form.
    let (status, _, body) = at("GET", "//api//items/./7/", vec![]).await;
    assert_eq!((status, body.as_str()), (200, "/api/items/7"));

    // Header match, keyed by another header; a missing key part: the rule does not apply.
    let mobile = |tenant: &'static str| vec![("x-client", "mobile"), ("x-tenant", tenant)];
    assert_eq!(at("GET", "/api/items/1", mobile("acme")).await.0, 200);
    let (status, _, body) = at("GET", "/api/search", mobile("acme")).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(at("GET", "/api/items/1", mobile("other")).await.0, 200);
    assert_eq!(
        at("GET", "/api/items/1", vec![("x-client", "mobile")])
            .await
            .0,
        200
    );
    assert_eq!(
        at(
            "GET",
            "/api/items/1",
            vec![("x-client", "web"), ("x-tenant", "acme")]
        )
        .await
        .0,
        200
    );

    // Host and tier.
    let pro = vec![
        ("host", "api.example.com"),
        ("authorization", "Bearer pro-key"),
    ];
    assert_eq!(at("GET", "/pro", pro.clone()).await.0, 200);
    assert_eq!(at("GET", "/pro", pro).await.0, 429);
    let free = vec![
        ("host", "api.example.com"),
        ("authorization", "Bearer free-key"),
    ];
    assert_eq!(
        [
            at("GET", "/pro", free.clone()).await.0,
            at("GET", "/pro", free).await.0
        ],
        [200, 200]
    );
    let elsewhere = vec![
        ("host", "www.example.com"),
        ("authorization", "Bearer pro-key"),
    ];
    assert_eq!(at("GET", "/pro", elsewhere).await.0, 200);

    // All or nothing across rules: the request "each" refuses takes nothing from "both".
    assert_eq!(at("GET", "/atom", vec![]).await.0, 200);
    assert_eq!(at("GET", "/atom", vec![]).await.0, 429);
    assert_eq!(
        at("GET", "/atom2", vec![]).await.0,
        200,
        "both still had one left"
    );
    let (status, _, body) = at("GET", "/atom2", vec![]).await;
    assert_eq!(status, 429);
    assert!(body.contains("rule 'both'"), "{body}");

    // One API key per request; Bearer and a tab; an IPv4-mapped deny network.
    assert_eq!(
        at("GET", "/x", vec![("authorization", "Bearer\tbadkey")])
            .await
            .0,
        403
    );
    let (status, h, body) = at(
        "GET",
        "/x",
        vec![("authorization", "ok"), ("authorization", "badkey")],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(h["content-type"], "application/problem+json");
    assert_eq!(
        at("GET", "/x", vec![("authorization", "bad key")]).await.0,
        400
    );
    let mapped = send(
        gw.port,
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        "GET",
        "/x",
        &[],
    )
    .await;
    assert_eq!(
        mapped.0, 403,
        "::ffff:127.0.0.2/128 matches the IPv4 client"
    );
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_bad_rule_is_refused_at_start_at_reload_and_by_check_config() {
    let server = Server::start();
    let dir = test_dir("bad-rule", server.port);
    let good = dir.join("good.toml");
    let bad = dir.join("bad.toml");
    std::fs::write(&good, config(&format!("bad{}", server.port))).unwrap();
    let bad_rule = "[fleet]\nmembership = false\n\n[[rules]]\nname = \"login\"\nkey = [\"ip\"]\nlimits = [\"5/fortnight\"]\n";
    std::fs::write(&bad, bad_rule).unwrap();
    let expected = format!(
        "{}:7: rules[0].limits: \"5/fortnight\": unknown unit `fortnight`",
        bad.display()
    );
    let gateway = env!("CARGO_BIN_EXE_rl-gateway");

    let checked = check_config(&good);
    assert!(checked.status.success());
    let plan = String::from_utf8_lossy(&checked.stdout);
    for part in [
        "\"login-300ms\" 2/300ms sliding, \"login-1h\" 3/1h sliding",
        "matches POST /login",
        "counted per [header:x-tenant]",
    ] {
        assert!(plan.contains(part), "{part}\n{plan}");
    }
    let checked = check_config(&bad);
    assert_eq!(checked.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&checked.stderr).contains(&expected),
        "{checked:?}"
    );

    let start = Command::new(gateway)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--redis",
            &server.url(),
            "--config",
            bad.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!start.status.success());
    assert!(
        String::from_utf8_lossy(&start.stderr).contains(&expected),
        "{start:?}"
    );

    let live = dir.join("live.toml");
    std::fs::copy(&good, &live).unwrap();
    let log = dir.join("gateway.log");
    let gw = Gateway::launch(
        &["--redis", &server.url(), "--config", live.to_str().unwrap()],
        true,
        Some(&log),
    )
    .await;
    std::fs::write(&live, bad_rule).unwrap();
    gw.hangup();
    eventually("the reload is refused", async || {
        gw.health().await["config"]["reloads_refused"] == 1
    })
    .await;
    eventually("the refusal names the rule's field", async || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("rules[0].limits")
    })
    .await;
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--check-config` shows each policy's ban in the plan; a zero limit is refused naming its
/// field and line (not only its rule); a refused start prints its error once.
#[test]
fn check_config_shows_bans_names_a_zero_limits_field_and_a_start_error_once() {
    let dir = test_dir("check-ban", redis_rl_testkit::free_port());
    let banned = dir.join("banned.toml");
    std::fs::write(
        &banned,
        "[[rules]]\nname = \"login\"\npaths = [\"/login\"]\nkey = [\"ip\"]\nlimit = 5\n\
         ban = { after = 3, within_ms = 60000, for_ms = 600000, escalate = 2 }\n",
    )
    .unwrap();
    let checked = check_config(&banned);
    assert!(checked.status.success(), "{checked:?}");
    let plan = String::from_utf8_lossy(&checked.stdout);
    assert!(
        plan.contains("(banned after 3 refusals within 60000 ms, for 600000 ms (x2 per ban"),
        "{plan}"
    );

    let zero = dir.join("zero.toml");
    std::fs::write(
        &zero,
        "[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\n\n[[rules]]\nname = \"b\"\n\
         key = [\"ip\"]\nlimits = [\"10/second\", { limit = 0, window_ms = 60000 }]\n",
    )
    .unwrap();
    let expected = format!(
        "{}:9: rules[1].limits[1].limit: invalid policy: limit must be",
        zero.display()
    );
    let checked = check_config(&zero);
    assert_eq!(checked.status.code(), Some(1));
    let err = String::from_utf8_lossy(&checked.stderr);
    assert!(err.contains(&expected), "{err}");

    let start = Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&zero)
        .output()
        .unwrap();
    assert!(!start.status.success());
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&start.stdout),
        String::from_utf8_lossy(&start.stderr)
    );
    assert_eq!(all.matches(&expected).count(), 1, "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}
