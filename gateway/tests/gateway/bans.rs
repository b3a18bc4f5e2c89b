//! Bans and top offenders through two rl-gateway processes on one server: a key banned
//! through one gateway is refused by the other (with the module and with the Lua twin),
//! bans escalate, end and are lifted by an admin call; `GET /top` merges the refusals of
//! both gateways and its Redis sets stay bounded.

use std::path::Path;

use redis_rl_testkit::{eventually, query, Server};

use super::{check_config, named_config, request, Gateway};

/// `method path` on `port` with `headers`: status, headers, body.
async fn send(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, String) {
    request(port, None, method, path, headers).await.unwrap()
}

/// A client at `ip` (the gateways trust loopback's X-Forwarded-For).
async fn from(gw: &Gateway, ip: &str, path: &str) -> (u16, http::HeaderMap, serde_json::Value) {
    let (status, h, body) = send(gw.port, "GET", path, &[("x-forwarded-for", ip)]).await;
    (status, h, serde_json::from_str(&body).unwrap_or_default())
}

async fn admin(gw: &Gateway, method: &str, path: &str) -> (u16, serde_json::Value) {
    let (status, _, body) = send(gw.admin.unwrap(), method, path, &[]).await;
    (status, serde_json::from_str(&body).unwrap())
}

fn rules(prefix: &str, extra: &str) -> String {
    format!(
        "key_prefix = \"{prefix}\"\n\
         dimensions = [\"ip\"]\n\
         trusted_proxies = [\"127.0.0.1/32\"]\n\
         [ip]\nlimit = 100000\n\
         [fleet]\nmembership = false\n\
         [[rules]]\nname = \"login\"\npaths = [\"/login\"]\nkey = [\"ip\"]\n\
         limit = 1\nwindow_ms = 3600000\n{extra}"
    )
}

async fn pair(server: &Server, path: &Path) -> [Gateway; 2] {
    let args = ["--redis", &server.url(), "--config", path.to_str().unwrap()];
    [
        Gateway::launch(&args, true, None).await,
        Gateway::launch(&args, true, None).await,
    ]
}

/// `PTTL` calls since the last `CONFIG RESETSTAT`.
fn pttl_calls(server: &Server) -> u64 {
    let info: String = query(&mut server.client(), &["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_pttl:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// The gateway's `rl_bans_total` for `policy` (0 when it started none).
async fn bans_started(gw: &Gateway, policy: &str) -> u64 {
    let (_, _, metrics) = gw.ops("/metrics").await.unwrap();
    let series = format!("rl_bans_total{{policy=\"{policy}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0, |n| n.parse().unwrap())
}

fn banned(body: &serde_json::Value) -> bool {
    body["banned"] == true
}

async fn bans_across_two_gateways(server: Server) {
    let prefix = format!("bans{}", server.port);
    let text = rules(
        &prefix,
        "ban = { after = 2, within_ms = 60000, for_ms = 60000 }\n\
         [[rules]]\nname = \"esc\"\npaths = [\"/esc\"]\nkey = [\"ip\"]\n\
         limit = 1\nwindow_ms = 3600000\n\
         ban = { after = 2, within_ms = 60000, for_ms = 400, escalate = 50 }\n",
    );
    let path = named_config(&server, &format!("bans-{prefix}"), &text);
    let [a, b] = pair(&server, &path).await;
    let ip = "198.51.100.1";
    assert_eq!(from(&a, ip, "/login").await.0, 200);
    for _ in 0..2 {
        let (status, _, body) = from(&a, ip, "/login").await;
        assert_eq!(status, 429);
        assert!(
            !banned(&body),
            "refused by the limit, not yet banned: {body}"
        );
    }
    // The second refusal bans (counted in the background): the other gateway refuses the
    // key as banned, for the ban's time, not the limit's hour.
    let mut seen = None;
    eventually("the other gateway refuses the banned key", async || {
        let (status, h, body) = from(&b, ip, "/login").await;
        let is = status == 429 && banned(&body);
        if is {
            seen = Some((h, body));
        }
        is
    })
    .await;
    let (h, body) = seen.unwrap();
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(
        (1..=60).contains(&retry),
        "the ban's remaining time: {retry}"
    );
    assert_eq!(h["ratelimit"], format!("\"login\";r=0;t={retry}"));
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert_eq!(h["x-ratelimit-reset"], retry.to_string());
    assert_eq!(body["dimension"], "login");
    assert_eq!(body["retry_after"], retry);
    // A ban read a moment ago is believed for a second: a flood of banned requests does not
    // reach Redis for each (20 requests cannot take 20 seconds before the test's bound).
    let _: () = query(&mut server.client(), &["CONFIG", "RESETSTAT"]);
    for _ in 0..20 {
        assert!(banned(&from(&b, ip, "/login").await.2));
    }
    let reads = pttl_calls(&server);
    assert!(reads < 20, "{reads} ban reads for 20 banned requests");
    // Another client is not banned.
    assert_eq!(from(&b, "198.51.100.2", "/login").await.0, 200);
    // Listed by either gateway.
    let subject = format!("{prefix}:{{ip:{ip}}}:r:login");
    let (status, list) = admin(&a, "GET", "/bans").await;
    assert_eq!(status, 200);
    let bans = list["bans"].as_array().unwrap();
    assert_eq!(bans.len(), 1, "{list}");
    assert_eq!(bans[0]["policy"], "login");
    assert_eq!(bans[0]["key"], subject.as_str());
    assert_eq!(bans[0]["level"], 1);
    assert!(bans[0]["remaining_ms"].as_u64().unwrap() > 0);
    // Lifted through the other gateway: refused by the limit again, not banned.
    let lift = format!(
        "/bans/login?key={}",
        subject.replace('{', "%7B").replace('}', "%7D")
    );
    assert_eq!(
        admin(&b, "DELETE", &lift).await,
        (200, serde_json::json!({"lifted": true}))
    );
    assert_eq!(admin(&b, "DELETE", &lift).await.0, 404);
    let (status, _, body) = from(&a, ip, "/login").await;
    assert_eq!(status, 429);
    assert!(!banned(&body), "lifted: {body}");
    assert_eq!(
        admin(&a, "GET", "/bans").await.1["bans"],
        serde_json::json!([])
    );
    // Escalation: the first ban of 400 ms ends by itself, the next is 50 times longer.
    let ip = "198.51.100.3";
    assert_eq!(from(&a, ip, "/esc").await.0, 200);
    for _ in 0..2 {
        assert_eq!(from(&a, ip, "/esc").await.0, 429);
    }
    eventually("banned", async || banned(&from(&b, ip, "/esc").await.2)).await;
    eventually("the first ban ends", async || {
        let (status, _, body) = from(&b, ip, "/esc").await;
        status == 429 && !banned(&body)
    })
    .await;
    // That refusal was the first towards the next ban; one more bans again.
    assert_eq!(from(&a, ip, "/esc").await.0, 429);
    let mut second = serde_json::Value::Null;
    eventually("a second, longer ban", async || {
        second = admin(&a, "GET", "/bans").await.1;
        second["bans"][0]["level"] == 2
    })
    .await;
    assert!(
        second["bans"][0]["remaining_ms"].as_u64().unwrap() > 400,
        "{second}"
    );
    // One ban of the login rule was started, by whichever gateway's strike reached the count
    // first (strikes are counted in the background, so either may); the other refused as banned.
    assert_eq!(
        bans_started(&a, "login").await + bans_started(&b, "login").await,
        1
    );
    let (_, _, metrics) = b.ops("/metrics").await.unwrap();
    assert!(
        metrics.contains("rl_requests_total{dimension=\"login\",outcome=\"banned\"}"),
        "{metrics}"
    );
    // What bans leave in Redis: the index, the ban and its level; the count of refusals
    // since the lift (one) towards the next ban; nothing else.
    let mut keys: Vec<String> = query(&mut server.client(), &["KEYS", &format!("{prefix}:*ban*")]);
    keys.sort();
    let esc = format!("{prefix}:{{ip:{ip}}}:r:esc");
    assert_eq!(
        keys,
        [
            format!("{prefix}:{{bans}}"),
            format!("{subject}:ban:strikes"),
            format!("{esc}:ban"),
            format!("{esc}:ban:level")
        ],
    );
    let strikes: i64 = query(
        &mut server.client(),
        &["GET", &format!("{subject}:ban:strikes")],
    );
    assert_eq!(strikes, 1);
}

#[tokio::test]
async fn a_ban_through_one_gateway_holds_in_the_other_escalates_ends_and_lifts() {
    bans_across_two_gateways(Server::start()).await;
}

#[test]
fn check_config_refuses_a_nonsense_ban_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("rl-gw-bans-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\n\
         ban = { after = 1, within_ms = 1000, for_ms = 1000, escalate = 0 }\n",
    )
    .unwrap();
    let out = check_config(&path);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "bad.toml:5: rules[0].ban: ban: escalate must be an integer between 1 and 1000"
        ),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn bans_work_through_the_lua_twin_on_a_server_without_the_module() {
    bans_across_two_gateways(Server::start_plain(&[])).await;
}

#[tokio::test]
async fn top_offenders_merge_both_gateways_in_bounded_sets() {
    let server = Server::start();
    let prefix = format!("top{}", server.port);
    let path = named_config(&server, &format!("bans-{prefix}"), &rules(&prefix, ""));
    let [a, b] = pair(&server, &path).await;
    let ip = "198.51.100.7";
    assert_eq!(from(&a, ip, "/login").await.0, 200);
    for gw in [&a, &b, &a, &b, &a, &b, &b] {
        assert_eq!(from(gw, ip, "/login").await.0, 429);
    }
    let subject = format!("{prefix}:{{ip:{ip}}}:r:login");
    let mut top = serde_json::Value::Null;
    eventually("both gateways' refusals in /top", async || {
        top = admin(&b, "GET", "/top").await.1;
        top["top"]["login"][0]["refused"] == 7
    })
    .await;
    assert_eq!(top["minutes"], 5);
    assert_eq!(top["top"]["login"][0]["key"], subject.as_str());
    assert_eq!(top["top"]["login"].as_array().unwrap().len(), 1);
    assert_eq!(top["top"]["ip"], serde_json::json!([]), "{top}");
    assert_eq!(admin(&b, "GET", "/top?minutes=6").await.0, 400);
    // Many offenders: each minute's set keeps the 256 most refused, and expires.
    for i in 0..300 {
        let ip = format!("10.1.{}.{}", i / 250, i % 250);
        assert_eq!(from(&a, &ip, "/login").await.0, 200);
        assert_eq!(from(&a, &ip, "/login").await.0, 429);
    }
    let pattern = format!("{prefix}:{{top}}:login:*");
    eventually("the sets are trimmed", async || {
        let keys: Vec<String> = query(&mut server.client(), &["KEYS", &pattern]);
        let sizes: Vec<i64> = keys
            .iter()
            .map(|k| query(&mut server.client(), &["ZCARD", k]))
            .collect();
        assert!(sizes.iter().all(|&n| n <= 256), "{sizes:?}");
        // A minute may have turned during the writes, splitting them over two sets.
        sizes.contains(&256) || keys.len() > 1
    })
    .await;
    let keys: Vec<String> = query(&mut server.client(), &["KEYS", &pattern]);
    for k in &keys {
        let ttl: i64 = query(&mut server.client(), &["PTTL", k]);
        assert!((1..=360_000).contains(&ttl), "{k}: {ttl}");
    }
    let (_, top) = admin(&a, "GET", "/top?n=3&minutes=1").await;
    assert_eq!(top["top"]["login"].as_array().unwrap().len(), 3, "{top}");
}

/// Without `--admin-listen`, the admin calls show other clients' data and change limits:
/// only this machine answers, and a proxy on this machine forwarding a client (who might be
/// the banned one) is not this machine.
#[tokio::test]
async fn without_an_admin_listener_only_a_local_caller_that_is_no_proxy_gets_admin_calls() {
    let server = Server::start();
    let path = named_config(
        &server,
        "admin-local",
        &rules(
            "al",
            "ban = { after = 1, within_ms = 60000, for_ms = 60000 }\n",
        ),
    );
    let gw = Gateway::launch(
        &["--redis", &server.url(), "--config", path.to_str().unwrap()],
        false,
        None,
    )
    .await;
    let ip = "198.51.100.9";
    for _ in 0..3 {
        from(&gw, ip, "/login").await;
    }
    let subject = format!("al:{{ip:{ip}}}:r:login");
    eventually("the client is banned", async || {
        banned(&from(&gw, ip, "/login").await.2)
    })
    .await;
    let lift = format!(
        "/bans/login?key={}",
        subject.replace('{', "%7B").replace('}', "%7D")
    );
    let through_proxy = [("x-forwarded-for", ip)];
    // Through a proxy on this host: the banned client cannot lift its own ban, nor read
    // the others' addresses.
    for (method, p) in [
        ("DELETE", lift.as_str()),
        ("GET", "/bans"),
        ("GET", "/top"),
        ("DELETE", "/limits?key=al:x"),
    ] {
        let (status, _, body) = send(gw.port, method, p, &through_proxy).await;
        assert_eq!(status, 403, "{method} {p}: {body}");
    }
    let (status, _, _) = send(gw.port, "DELETE", &lift, &[("x-real-ip", ip)]).await;
    assert_eq!(status, 403);
    assert!(banned(&from(&gw, ip, "/login").await.2), "still banned");
    // The machine itself (an operator's curl on the host) may.
    assert_eq!(send(gw.port, "GET", "/top", &[]).await.0, 200);
    assert_eq!(send(gw.port, "GET", "/bans", &[]).await.0, 200);
    assert_eq!(send(gw.port, "DELETE", &lift, &[]).await.0, 200);
}
