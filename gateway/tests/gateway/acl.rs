//! Every front end as exactly the ACL user the book documents (the `ACL SETUSER limiter`
//! blocks of docs/src/security.md, read from the page): the proxy, forward auth and the
//! Envoy rate limit service decide in Redis, bans start and are listed, top offenders are
//! read, and the server's `ACL LOG` stays empty. With the module and with the Lua twin.

use axum::routing::get;
use axum::Router;
use redis_rl_testkit::{eventually, free_port, query, Server};

use super::rls::descriptor;
use super::upstream::Upstream;
use super::{named_config, request, Gateway};
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rl_gateway_proto::envoy::service::ratelimit::v3::RateLimitRequest;

const PASSWORD: &str = "documented";

/// The words of the book's `ACL SETUSER limiter ...` block: the first (with the module) or
/// the second (the Lua twin), its password replaced.
fn documented_rules(module: bool) -> Vec<String> {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/security.md"
    ))
    .unwrap();
    let mut blocks = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("ACL SETUSER limiter ") {
            continue;
        }
        let mut text = line.to_string();
        while text.ends_with('\\') {
            text.pop();
            text.push(' ');
            text.push_str(lines.next().unwrap());
        }
        blocks.push(text);
    }
    assert_eq!(blocks.len(), 2, "the module's and the twin's blocks");
    let block = &blocks[usize::from(!module)];
    block
        .split_whitespace()
        .skip(3)
        .map(|w| {
            if w == ">PASSWORD" {
                format!(">{PASSWORD}")
            } else {
                w.to_string()
            }
        })
        .collect()
}

const CONFIG: &str = "dimensions = [\"ip\"]\n\
    trusted_proxies = [\"127.0.0.1/32\"]\n\
    [ip]\nlimit = 100000\n\
    [[rules]]\nname = \"login\"\npaths = [\"/login\"]\nkey = [\"ip\"]\n\
    limit = 1\nwindow_ms = 3600000\n\
    ban = { after = 2, within_ms = 60000, for_ms = 60000 }\n";

const RLS: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n";

async fn every_front_end_as_the_documented_user(server: Server, module: bool) {
    let mut c = server.client();
    let mut setuser = redis::cmd("ACL");
    setuser.arg("SETUSER").arg("limiter");
    for w in documented_rules(module) {
        setuser.arg(w);
    }
    let _: () = setuser.query(&mut c).unwrap();
    let config = named_config(&server, "acl", CONFIG);
    let rls_config = config.with_file_name("rls.yaml");
    std::fs::write(&rls_config, RLS).unwrap();
    let upstream = Upstream::plain(Router::new().fallback(get(|| async { "upstream" }))).await;
    let (auth, rls) = (free_port(), free_port());
    let url = format!("redis://limiter:{PASSWORD}@127.0.0.1:{}/", server.port);
    let args = [
        "--redis".to_string(),
        url,
        "--config".into(),
        config.to_str().unwrap().into(),
        "--upstream".into(),
        upstream.url(),
        "--auth-listen".into(),
        format!("127.0.0.1:{auth}"),
        "--rls-listen".into(),
        format!("127.0.0.1:{rls}"),
        "--rls-config".into(),
        rls_config.to_str().unwrap().into(),
        // A decision that fails (NOPERM) refuses: nothing below passes by the failure mode.
        "--failure-mode".into(),
        "closed".into(),
    ];
    let gw = Gateway::launch(&args, true, None).await;

    // The proxy: the limit, then a ban after two refusals.
    let ip = [("x-forwarded-for", "198.51.100.7")];
    let send = async |path: &str| request(gw.port, None, "GET", path, &ip).await.unwrap();
    assert_eq!(send("/login").await.0, 200);
    assert_eq!(send("/login").await.0, 429);
    assert_eq!(send("/login").await.0, 429);
    eventually("the ban started", async || {
        send("/login").await.2.contains("\"banned\":true")
    })
    .await;
    let admin = gw.admin.unwrap();
    let (status, _, bans) = request(admin, None, "GET", "/bans", &[]).await.unwrap();
    assert_eq!(status, 200);
    assert!(bans.contains("\"policy\":\"login\""), "{bans}");
    eventually("the refusals are in the top offenders", async || {
        let (s, _, top) = request(admin, None, "GET", "/top", &[]).await.unwrap();
        s == 200 && top.contains("198.51.100.7")
    })
    .await;

    // Forward auth: decided in Redis (closed would answer 503 otherwise).
    let check = [
        ("x-forwarded-for", "198.51.100.8"),
        ("x-forwarded-method", "GET"),
        ("x-forwarded-uri", "/login"),
    ];
    let (first, _, _) = request(auth, None, "GET", "/", &check).await.unwrap();
    let (second, _, _) = request(auth, None, "GET", "/", &check).await.unwrap();
    assert_eq!((first, second), (200, 429));

    // The Envoy rate limit service: 2 an hour, in Redis.
    let mut client = None;
    eventually("the rate limit service answers", async || {
        client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{rls}"))
            .await
            .ok();
        client.is_some()
    })
    .await;
    let mut client = client.unwrap();
    let mut codes = Vec::new();
    for _ in 0..3 {
        let r = client
            .should_rate_limit(RateLimitRequest {
                domain: "d".into(),
                descriptors: vec![descriptor(&[("k", "v")])],
                hits_addend: 1,
            })
            .await
            .unwrap()
            .into_inner();
        codes.push(r.overall_code);
    }
    assert_eq!(codes, [1, 1, 2], "OK, OK, OVER_LIMIT");

    let health = gw.health().await;
    assert_eq!(health["status"], "ok", "{health}");
    let log: Vec<redis::Value> = query(&mut c, &["ACL", "LOG"]);
    assert!(log.is_empty(), "the user was refused something: {log:?}");
}

#[tokio::test]
async fn every_front_end_works_as_the_documented_user_with_the_module() {
    every_front_end_as_the_documented_user(Server::start(), true).await;
}

#[tokio::test]
async fn every_front_end_works_as_the_documented_user_with_the_lua_twin() {
    every_front_end_as_the_documented_user(Server::start_plain(&[]), false).await;
}
