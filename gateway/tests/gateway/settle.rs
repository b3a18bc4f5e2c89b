//! Cost settled after the response and delay instead of 429, through the rl-gateway proxy:
//! a reservation from a request header refunded or charged from the upstream's response
//! header or trailer (a missing or garbage one keeps it), a bad cost header refused with
//! 400; a refused request held for its slot and forwarded (with the module and with the
//! Lua twin), one beyond `delay_max_ms` refused, the cap on held requests.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use redis_rl_testkit::configs::rules_preamble;
use redis_rl_testkit::{eventually, query, Server};

use super::upstream::Upstream;
use super::{check_config, get_from, named_config, proxy_args, request, Gateway};

/// The upstream: `/used` answers the `x-used` request header as `x-tokens-used` (none when
/// absent), `/trailer` sends it as a trailer after the body.
async fn upstream() -> Upstream {
    let app = Router::new()
        .route(
            "/used",
            get(|h: HeaderMap| async move {
                let mut resp = Response::new(Body::from("ok"));
                if let Some(v) = h.get("x-used") {
                    resp.headers_mut().insert("x-tokens-used", v.clone());
                }
                resp
            }),
        )
        .route(
            "/trailer",
            get(|h: HeaderMap| async move {
                let used = h.get("x-used").cloned();
                let (mut tx, body) = http_body_util::channel::Channel::<Bytes>::new(2);
                tokio::spawn(async move {
                    let _ = tx.send_data(Bytes::from_static(b"generated text")).await;
                    let mut trailers = HeaderMap::new();
                    if let Some(v) = used {
                        trailers.insert("x-tokens-used", v);
                    }
                    let _ = tx.send_trailers(trailers).await;
                });
                Response::builder()
                    .header("trailer", "x-tokens-used")
                    .body(Body::new(body))
                    .unwrap()
            }),
        )
        .route("/{*rest}", get(|| async { "up" }));
    Upstream::plain(app).await
}

async fn start(server: &Server, name: &str, toml: &str) -> (Gateway, Upstream) {
    let up = upstream().await;
    let config = named_config(server, name, toml);
    let gw = Gateway::launch(&proxy_args(server, &up, &config), true, None).await;
    (gw, up)
}

/// GET through the gateway, the body read to its end (trailers included).
async fn send(gw: &Gateway, path: &str, headers: &[(&str, &str)]) -> (u16, HeaderMap, String) {
    get_from(gw.port, path, headers).await.unwrap()
}

/// A rule of 1000 units an hour whose reservation is settled from the response.
fn settled() -> String {
    rules_preamble("st")
        + r#"
[[rules]]
name = "tokens"
key = ["global"]
limits = ["1000/hour"]
algorithm = "fixed"
cost = "header:X-Max-Tokens"
settle = "response-header:X-Tokens-Used"
"#
}

/// The units left of the rule's hour (a look: `COST 0`).
fn left(server: &Server) -> i64 {
    let reply: Vec<i64> = query(
        &mut server.client(),
        &[
            "RL.FIXED",
            "st:{global}:r:tokens",
            "1000",
            "3600000",
            "COST",
            "0",
        ],
    );
    reply[2]
}

#[tokio::test]
async fn the_reservation_is_refunded_or_charged_from_the_response_header_or_trailer() {
    let server = Server::start();
    let (gw, _up) = start(&server, "settle", &settled()).await;
    let reserve = |n: &'static str, used: Option<&'static str>| {
        let mut h = vec![("x-max-tokens", n)];
        if let Some(u) = used {
            h.push(("x-used", u));
        }
        h
    };
    // Over-reserved: 100 taken, 40 used, 60 given back once the response is in.
    let (status, _, _) = send(&gw, "/used", &reserve("100", Some("40"))).await;
    assert_eq!(status, 200);
    assert_eq!(left(&server), 960);
    // Under-reserved: 250 used of 100, the 150 more taken.
    assert_eq!(
        send(&gw, "/used", &reserve("100", Some("250"))).await.0,
        200
    );
    assert_eq!(left(&server), 710);
    // No header, or one that is not a count: the reservation stands.
    assert_eq!(send(&gw, "/used", &reserve("100", None)).await.0, 200);
    assert_eq!(left(&server), 610);
    assert_eq!(
        send(&gw, "/used", &reserve("100", Some("lots"))).await.0,
        200
    );
    assert_eq!(left(&server), 510);
    // Without the cost header: one unit reserved, settled the same way.
    assert_eq!(send(&gw, "/used", &[("x-used", "11")]).await.0, 200);
    assert_eq!(left(&server), 499);
    // A bad cost header: 400 with a problem body, nothing taken.
    let (status, h, body) = send(&gw, "/used", &reserve("-5", Some("1"))).await;
    assert_eq!(status, 400);
    assert_eq!(h["content-type"], "application/problem+json");
    assert!(
        body.contains("header x-max-tokens must be one positive integer"),
        "{body}"
    );
    assert_eq!(left(&server), 499);
    // The actual cost in a trailer, after the body: settled when the body ends.
    let (status, _, body) = send(&gw, "/trailer", &reserve("100", Some("30"))).await;
    assert_eq!((status, body.as_str()), (200, "generated text"));
    eventually(
        "the trailer's 30 settles the reservation of 100",
        async || left(&server) == 469,
    )
    .await;
    let (status, _, _) = send(&gw, "/trailer", &reserve("100", Some("160"))).await;
    assert_eq!(status, 200);
    eventually("the trailer's 160 charges 60 more", async || {
        left(&server) == 309
    })
    .await;
    // A trailer-less end keeps the reservation; the metric says why.
    assert_eq!(send(&gw, "/trailer", &reserve("9", None)).await.0, 200);
    eventually("counted as missing", async || {
        let (_, _, text) = gw.ops("/metrics").await.unwrap();
        text.lines().any(|l| {
            l.starts_with("rl_settled_total{")
                && l.contains("outcome=\"missing\"")
                && l.ends_with(" 2")
        })
    })
    .await;
    assert_eq!(left(&server), 300);
}

/// Two rules of one request per window, refused requests held up to their `delay_max_ms`:
/// `/slow` (`slow_window_ms`, `slow_delay_ms`) and `/strict` (5 s, 1 s), at most `held`
/// requests held at once.
fn delayed(held: u32, slow_window_ms: u64, slow_delay_ms: u64) -> String {
    let rule = |name: &str, window_ms: u64, delay_max_ms: u64| {
        format!(
            r#"
[[rules]]
name = "{name}"
paths = ["/{name}"]
key = ["global"]
limits = [{{ limit = 1, window_ms = {window_ms} }}]
algorithm = "gcra"
delay_max_ms = {delay_max_ms}
"#
        )
    };
    format!(
        "{}delay_max_held = {held}\n{}{}",
        rules_preamble("dl"),
        rule("slow", slow_window_ms, slow_delay_ms),
        rule("strict", 5_000, 1_000),
    )
}

#[tokio::test]
async fn a_refused_request_is_held_for_its_slot_and_one_beyond_the_delay_is_refused() {
    held_then_forwarded(Server::start()).await;
}

/// The same through the Lua twin, on a server without the module (as managed Redis): the
/// held request's look (`PEEK`) and booking (`FORCE`) go over the twin's wire too.
#[tokio::test]
async fn delay_works_through_the_lua_twin_on_a_server_without_the_module() {
    held_then_forwarded(Server::start_plain(&[])).await;
}

async fn held_then_forwarded(server: Server) {
    let (gw, _up) = start(&server, "delay", &delayed(2, 600, 1_500)).await;
    assert_eq!(send(&gw, "/slow", &[]).await.0, 200);
    // Two more at once: each booked for its own slot (600 ms apart), both forwarded.
    let started = Instant::now();
    let timed = || async {
        let r = send(&gw, "/slow", &[]).await;
        (r.0, started.elapsed())
    };
    let (a, b) = tokio::join!(timed(), timed());
    assert_eq!((a.0, b.0), (200, 200), "held, then forwarded");
    let (first, second) = if a.1 <= b.1 { (a.1, b.1) } else { (b.1, a.1) };
    assert!(first >= Duration::from_millis(400), "held: {first:?}");
    assert!(
        second >= Duration::from_millis(1_000),
        "booked behind the first, not at the same slot: {second:?}"
    );
    // A wait beyond delay_max_ms (5 s per request, 1 s of delay): 429 at once.
    assert_eq!(send(&gw, "/strict", &[]).await.0, 200);
    let (status, h, body) = send(&gw, "/strict", &[]).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(h["retry-after"], "5");
    let (_, _, text) = gw.ops("/metrics").await.unwrap();
    assert!(
        text.contains("rl_delayed_total{outcome=\"held\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("rl_delayed_total{outcome=\"too_long\"}"),
        "{text}"
    );
}

#[tokio::test]
async fn held_requests_are_capped() {
    let server = Server::start();
    let (gw, _up) = start(&server, "cap", &delayed(1, 1_000, 5_000)).await;
    assert_eq!(send(&gw, "/slow", &[]).await.0, 200);
    // Both could be held (1 s and 2 s), but only one at a time may be.
    let (a, b) = tokio::join!(send(&gw, "/slow", &[]), send(&gw, "/slow", &[]));
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 429]);
    let (_, _, text) = gw.ops("/metrics").await.unwrap();
    assert!(
        text.contains("rl_delayed_total{outcome=\"over_cap\"} 1"),
        "{text}"
    );
    assert!(text.contains("rl_held_requests 0"), "{text}");
}

#[test]
fn check_config_explains_cost_settle_and_delay_and_refuses_bad_ones() {
    let dir = std::env::temp_dir().join(format!("rl-gw-settle-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, settled() + "delay_max_ms = 250\n").unwrap();
    let out = check_config(&good);
    assert!(out.status.success(), "{out:?}");
    let plan = String::from_utf8_lossy(&out.stdout);
    for part in [
        "(held up to 250 ms instead of 429)",
        "reserves the units of request header x-max-tokens (1 without it)",
        "settled after the response from its header or trailer x-tokens-used",
    ] {
        assert!(plan.contains(part), "{part}\n{plan}");
    }
    for (bad, expected) in [
        (
            settled().replace("response-header:X-Tokens-Used", "header:X-Tokens-Used"),
            "settle: expected \"response-header:<name>\"",
        ),
        (
            settled() + "delay_max_ms = 60001\n",
            "delay_max_ms must be an integer between 1 and 60000",
        ),
    ] {
        let path = dir.join("bad.toml");
        std::fs::write(&path, bad).unwrap();
        let out = check_config(&path);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected) && err.contains("rules[0]"), "{err}");
    }
}

/// The units left of the rule's hour for `subject` (`global`, `ip:203.0.113.5`).
fn left_of(server: &Server, subject: &str) -> i64 {
    let key = format!("st:{{{subject}}}:r:tokens");
    let reply: Vec<i64> = query(
        &mut server.client(),
        &["RL.FIXED", &key, "1000", "3600000", "COST", "0"],
    );
    reply[2]
}

#[tokio::test]
async fn forward_auth_reserves_on_the_check_and_settles_on_a_report_with_its_token() {
    let server = Server::start();
    let per_ip = settled().replace("key = [\"global\"]", "key = [\"ip\"]");
    let config = named_config(&server, "fwd-settle", &per_ip);
    let args = [
        "--redis",
        &server.url(),
        "--config",
        config.to_str().unwrap(),
    ];
    let (_gw, auth) = Gateway::listening(&args, "--auth-listen").await;
    let (me, victim) = ("ip:203.0.113.5", "ip:203.0.113.77");
    let left = || left_of(&server, me);
    let before = left();
    let describe = |extra: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("x-forwarded-method", "POST".to_owned()),
            ("x-forwarded-uri", "/v1/chat".to_owned()),
            ("x-forwarded-for", "203.0.113.5".to_owned()),
            ("x-max-tokens", "100".to_owned()),
        ];
        h.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        h
    };
    let send = |method: &'static str, path: &'static str, h: Vec<(&'static str, String)>| async move {
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        request(auth, None, method, path, &h).await.unwrap()
    };
    // The check reserves the request's cost header and answers the reservation's token.
    let (status, headers, _) = send("GET", "/", describe(&[])).await;
    assert_eq!(status, 200);
    assert_eq!(left(), before - 100);
    let token = headers["rl-settle-token"].to_str().unwrap().to_owned();
    // A report without the token (anyone's word) settles nothing: 403 with a problem body.
    let (status, headers, body) =
        send("POST", "/.rl/settle", describe(&[("x-tokens-used", "0")])).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(body.contains("rl-settle-token"), "{body}");
    assert_eq!(left(), before - 100, "nothing given back");
    // A forged or altered token neither.
    let forged = format!("{}x", token);
    let report = describe(&[("x-tokens-used", "0"), ("rl-settle-token", &forged)]);
    assert_eq!(send("POST", "/.rl/settle", report).await.0, 403);
    assert_eq!(left(), before - 100);
    // My token aimed at another subject (the report describes the victim): refused, the
    // victim untouched (a charge would otherwise take from them).
    let victim_before = left_of(&server, victim);
    let mut aimed = describe(&[
        ("x-tokens-used", "999999999999999"),
        ("rl-settle-token", &token),
    ]);
    aimed[2].1 = "203.0.113.77".to_owned();
    let (status, _, body) = send("POST", "/.rl/settle", aimed).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(left_of(&server, victim), victim_before);
    // The upstream's usage with the token: the difference given back...
    let report = describe(&[("x-tokens-used", "30"), ("rl-settle-token", &token)]);
    assert_eq!(send("POST", "/.rl/settle", report.clone()).await.0, 204);
    assert_eq!(left(), before - 30);
    // ...once: the same token again is refused (409), nothing moves.
    let (status, _, body) = send("POST", "/.rl/settle", report).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(left(), before - 30);
    // A report claiming more reserved units than its token names gives back at most those.
    let (_, headers, _) = send("GET", "/", describe(&[])).await;
    let token = headers["rl-settle-token"].to_str().unwrap().to_owned();
    let mut report = describe(&[("x-tokens-used", "0"), ("rl-settle-token", &token)]);
    report[3].1 = "900".to_owned();
    assert_eq!(send("POST", "/.rl/settle", report).await.0, 204);
    assert_eq!(left(), before - 30, "the 100 reserved came back, not 900");
    // Under-reserved: the difference taken.
    let (_, headers, _) = send("GET", "/", describe(&[])).await;
    let token = headers["rl-settle-token"].to_str().unwrap().to_owned();
    let report = describe(&[("x-tokens-used", "160"), ("rl-settle-token", &token)]);
    assert_eq!(send("POST", "/.rl/settle", report).await.0, 204);
    assert_eq!(left(), before - 30 - 160);
    // A check that carries the usage header is still a check (a client cannot refund).
    let sneaky = describe(&[("x-tokens-used", "0"), ("rl-settle-token", &token)]);
    assert_eq!(send("GET", "/", sneaky).await.0, 200);
    assert_eq!(left(), before - 30 - 160 - 100);
}
