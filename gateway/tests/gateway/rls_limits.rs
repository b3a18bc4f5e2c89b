//! The rate limit service's listener is bounded like the HTTP ones: a cap on connections
//! (past it, closed on accept), a deadline for the HTTP/2 preface and an idle timeout.

use std::path::PathBuf;
use std::time::Duration;

use redis_rl_testkit::{eventually, Server};
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rl_gateway_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{closed_within, Gateway};

const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n";
/// The HTTP/2 connection preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

fn config(port: u16) -> PathBuf {
    let path = std::env::temp_dir().join(format!("rl-rls-limits-{port}.yaml"));
    std::fs::write(&path, CONFIG).unwrap();
    path
}

/// The gateway with `--rls-listen` on a free port, and that port.
async fn start(server: &Server, extra: &[&str]) -> (Gateway, u16) {
    let conf = config(server.port);
    let url = server.url();
    let args = ["--redis", &url, "--rls-config", conf.to_str().unwrap()];
    Gateway::listening(&[&args[..], extra].concat(), "--rls-listen").await
}

/// One ShouldRateLimit call on a new connection: true when it was answered.
async fn answered(port: u16) -> bool {
    let call = async {
        let mut client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}"))
            .await
            .ok()?;
        let request = RateLimitRequest {
            domain: "d".to_string(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "k".to_string(),
                    value: "v".to_string(),
                }],
                ..Default::default()
            }],
            hits_addend: 1,
        };
        client.should_rate_limit(request).await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(10), call).await,
        Ok(Some(_))
    )
}

/// A connection that sent the HTTP/2 preface and got the server's first frame (so it holds a
/// slot), or None when the server closed it.
async fn served(port: u16) -> Option<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(PREFACE).await.ok()?;
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(s),
        _ => None,
    }
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_and_served_again_once_others_leave() {
    let server = Server::start();
    let (gw, port) = start(&server, &["--max-connections", "2"]).await;
    assert!(answered(port).await);
    // Two connections the server serves (it answers their preface with its SETTINGS): the
    // slot of the connection just used may not be free yet, so one may be refused at first.
    let mut held = Vec::new();
    for _ in 0..200 {
        if held.len() == 2 {
            break;
        }
        if let Some(s) = served(port).await {
            held.push(s);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(held.len(), 2, "two connections were not served");
    let mut refused = false;
    for _ in 0..50 {
        if !answered(port).await {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        refused,
        "a third connection was served past --max-connections 2"
    );
    let metrics = gw.get("/metrics", &[]).await.unwrap().2;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("rl_connections_refused_total{listener=\"rls\"}")),
        "{metrics}"
    );
    drop(held);
    eventually("a connection is served once the others left", async || {
        answered(port).await
    })
    .await;
}

#[tokio::test]
async fn silent_and_idle_connections_are_closed() {
    let server = Server::start();
    let (_gw, port) = start(
        &server,
        &["--header-timeout-ms", "300", "--idle-timeout-ms", "300"],
    )
    .await;
    // Connects and sends nothing.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(20)).await);
    // Sends the HTTP/2 preface, then nothing.
    let mut idle = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    idle.write_all(PREFACE).await.unwrap();
    assert!(closed_within(&mut idle, Duration::from_secs(20)).await);
    // Calls are still answered.
    assert!(answered(port).await);
}
