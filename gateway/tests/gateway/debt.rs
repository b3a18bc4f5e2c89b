//! An under-declared cost on a fixed window: the overage a settlement charges holds the
//! subject until the debt is paid, not only until the window ends.

use redis_rl_testkit::configs::rules_preamble;
use redis_rl_testkit::{query, Server};

use super::{named_config, request, Gateway};

/// 1000 tokens a minute per client address in a fixed window, reserved from a request
/// header and settled by a report.
fn minute() -> String {
    rules_preamble("debt")
        + r#"
[[rules]]
name = "tokens"
key = ["ip"]
limits = ["1000/minute"]
algorithm = "fixed"
cost = "header:X-Max-Tokens"
settle = "response-header:X-Tokens-Used"
"#
}

const CLIENT: &str = "198.51.100.9";

/// A check declaring `tokens`: the status, the Retry-After and the settle token.
async fn check(port: u16, tokens: &str) -> (u16, Option<u64>, Option<String>) {
    let h = [
        ("x-forwarded-uri", "/v1/chat"),
        ("x-forwarded-for", CLIENT),
        ("x-max-tokens", tokens),
    ];
    let (status, headers, _) = request(port, None, "GET", "/", &h).await.unwrap();
    let header = |n: &str| headers.get(n).map(|v| v.to_str().unwrap().to_owned());
    let retry = header("retry-after").map(|v| v.parse().unwrap());
    (status, retry, header("rl-settle-token"))
}

#[tokio::test]
async fn a_settled_overage_holds_the_client_until_the_debt_is_paid() {
    let server = Server::start();
    let config = named_config(&server, "debt", &minute());
    let args = [
        "--redis",
        &server.url(),
        "--config",
        config.to_str().unwrap(),
    ];
    let (_gw, auth) = Gateway::listening(&args, "--auth-listen").await;
    // Declares 1 token, uses 5,000: 4,000 over the minute's 1,000.
    let (status, _, token) = check(auth, "1").await;
    assert_eq!(status, 200);
    let h = [
        ("x-forwarded-uri", "/v1/chat"),
        ("x-forwarded-for", CLIENT),
        ("x-tokens-used", "5000"),
        ("rl-settle-token", token.as_deref().unwrap()),
    ];
    let (status, _, body) = request(auth, None, "POST", "/.rl/settle", &h)
        .await
        .unwrap();
    assert_eq!(status, 204, "{body}");
    // Refused past this window's end: the rest of it and four more windows (4,000 units at
    // 1,000 a window), not the rest of the window alone (at most 60 s).
    let h = [
        ("x-forwarded-uri", "/v1/chat"),
        ("x-forwarded-for", CLIENT),
        ("x-max-tokens", "1"),
    ];
    let (_, _, body) = request(auth, None, "GET", "/", &h).await.unwrap();
    assert!(
        body.contains("held by rule 'tokens' until a settled overage is paid"),
        "{body}"
    );
    let (status, retry, _) = check(auth, "1").await;
    assert_eq!(status, 429);
    let retry = retry.unwrap();
    assert!((240..=301).contains(&retry), "Retry-After {retry}");
    let hold: i64 = query(
        &mut server.client(),
        &["PTTL", &format!("debt:{{ip:{CLIENT}}}:r:tokens:ban")],
    );
    assert!((240_000..=301_000).contains(&hold), "hold {hold} ms");
    // A client within its declaration is never held: another address is served.
    let h = [
        ("x-forwarded-uri", "/v1/chat"),
        ("x-forwarded-for", "198.51.100.10"),
        ("x-max-tokens", "1"),
    ];
    assert_eq!(request(auth, None, "GET", "/", &h).await.unwrap().0, 200);
}
