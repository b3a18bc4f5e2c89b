//! The deny cache of a fleet of gateways follows Redis: a settlement reported to one
//! gateway ends the refusal every gateway cached while the reservation was out, and an
//! operator's `DELETE /limits?key=` resets a key and its cached refusals fleet-wide (a key
//! deleted behind the gateways' backs stays refused from their caches until then).

use redis_rl_testkit::configs::rules_preamble;
use redis_rl_testkit::{eventually, free_port, Server};

use super::{named_config, request, test_dir, Gateway};

/// A monthly quota of 1000 tokens per client address, reserved from a request header and
/// settled by a report.
fn quota() -> String {
    rules_preamble("dc")
        + r#"
[[rules]]
name = "tokens"
key = ["ip"]
limits = ["1000/month"]
cost = "header:X-Max-Tokens"
settle = "response-header:X-Tokens-Used"
"#
}

/// A gateway answering forward-auth checks (and its admin listener) with the fleet's secret.
struct Member {
    _gw: Gateway,
    auth: u16,
    admin: u16,
}

async fn fleet(server: &Server) -> [Member; 2] {
    let config = named_config(server, "deny-cache", &quota());
    let secret = test_dir("deny-cache", server.port).join("secret");
    std::fs::write(&secret, "a fleet's shared secret, 32 bytes or more\n").unwrap();
    let mut members = Vec::new();
    for _ in 0..2 {
        let admin = free_port();
        let admin_listen = format!("127.0.0.1:{admin}");
        let args = [
            "--redis",
            &server.url(),
            "--config",
            config.to_str().unwrap(),
            "--secret-file",
            secret.to_str().unwrap(),
            "--admin-listen",
            &admin_listen,
        ];
        let (gw, auth) = Gateway::listening(&args, "--auth-listen").await;
        members.push(Member {
            _gw: gw,
            auth,
            admin,
        });
    }
    // Both listen for the fleet's refunds before anything is cached.
    eventually("both gateways listen on dc:denials", async || {
        let n: Vec<redis::Value> =
            redis_rl_testkit::query(&mut server.client(), &["PUBSUB", "NUMSUB", "dc:denials"]);
        matches!(n.get(1), Some(redis::Value::Int(2)))
    })
    .await;
    members.try_into().ok().unwrap()
}

/// A check of `tokens` units for the client 198.51.100.7: the status and the token.
async fn check(port: u16, tokens: &str) -> (u16, Option<String>) {
    let h = [
        ("x-forwarded-uri", "/v1/chat"),
        ("x-forwarded-for", "198.51.100.7"),
        ("x-max-tokens", tokens),
    ];
    let (status, headers, _) = request(port, None, "GET", "/", &h).await.unwrap();
    let token = headers
        .get("rl-settle-token")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, token)
}

#[tokio::test]
async fn a_settlement_ends_the_refusal_every_gateway_cached() {
    let server = Server::start();
    let [a, b] = fleet(&server).await;
    let (status, token) = check(a.auth, "1000").await;
    assert_eq!(status, 200, "the whole month reserved");
    // While the reservation is out, both gateways refuse and cache the refusal (a month).
    for m in [&a, &b] {
        assert_eq!(check(m.auth, "1").await.0, 429);
        assert_eq!(check(m.auth, "1").await.0, 429);
    }
    // The upstream used 10: reported to b with a's token.
    let h = [
        ("x-forwarded-uri", "/v1/chat"),
        ("x-forwarded-for", "198.51.100.7"),
        ("x-tokens-used", "10"),
        ("rl-settle-token", token.as_deref().unwrap()),
    ];
    let (status, _, body) = request(b.auth, None, "POST", "/.rl/settle", &h)
        .await
        .unwrap();
    assert_eq!(status, 204, "{body}");
    // Redis holds 10 of 1000: both serve again.
    assert_eq!(check(b.auth, "1").await.0, 200);
    eventually("a serves again", async || check(a.auth, "1").await.0 == 200).await;
}

#[tokio::test]
async fn an_admin_reset_ends_a_deleted_keys_cached_refusals() {
    let server = Server::start();
    let [a, b] = fleet(&server).await;
    assert_eq!(check(a.auth, "1000").await.0, 200);
    for m in [&a, &b] {
        assert_eq!(check(m.auth, "1").await.0, 429);
    }
    // Deleted behind the gateways' backs: their caches still refuse.
    let key = "dc:{ip:198.51.100.7}:r:tokens";
    let _: i64 = redis_rl_testkit::query(&mut server.client(), &["DEL", key]);
    assert_eq!(check(a.auth, "1").await.0, 429);
    // The admin call resets the key and every gateway's cached refusal of it.
    let path = format!(
        "/limits?key={}",
        key.replace('{', "%7B").replace('}', "%7D")
    );
    let (status, _, body) = request(a.admin, None, "DELETE", &path, &[]).await.unwrap();
    assert_eq!((status, body.as_str()), (404, r#"{"reset":false}"#));
    assert_eq!(check(a.auth, "1").await.0, 200);
    eventually("b serves again", async || check(b.auth, "1").await.0 == 200).await;
    let (status, _, body) = request(b.admin, None, "DELETE", &path, &[]).await.unwrap();
    assert_eq!((status, body.as_str()), (200, r#"{"reset":true}"#));
    // Only keys of the gateway's prefix.
    let (status, _, _) = request(b.admin, None, "DELETE", "/limits?key=other", &[])
        .await
        .unwrap();
    assert_eq!(status, 400);
}
