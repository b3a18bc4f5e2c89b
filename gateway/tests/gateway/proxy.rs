//! The proxy against real upstreams: hop-by-hop headers, X-Forwarded-* and Forwarded,
//! keep-alive both sides, streaming both ways, timeouts, an https upstream.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Uri};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http_body_util::channel::Channel;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use redis_rl_testkit::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::upstream::{seen, Upstream};
use super::Gateway;

/// An upstream route answering what it saw, with connection-specific response headers that
/// must not reach the client.
fn echo_app() -> Router {
    Router::new().route(
        "/base/{*rest}",
        get(|uri: Uri, headers: HeaderMap| async move {
            (
                [
                    ("connection", "keep-alive, x-hop"),
                    ("x-hop", "secret"),
                    ("keep-alive", "timeout=5"),
                    ("proxy-connection", "keep-alive"),
                    ("x-end-to-end", "kept"),
                ],
                axum::Json(seen(&uri, &headers)),
            )
        }),
    )
}

/// One HTTP/1.1 connection to the gateway (requests go one after another on it).
async fn connect(port: u16) -> hyper::client::conn::http1::SendRequest<Body> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

async fn text(resp: http::Response<hyper::body::Incoming>) -> (u16, HeaderMap, String) {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn strips_hop_by_hop_headers_sets_forwarded_and_keeps_connections_alive() {
    let server = Server::start();
    let up = Upstream::plain(echo_app()).await;
    let gw = Gateway::proxy(&server, &format!("http://127.0.0.1:{}/base", up.port), &[]).await;

    let mut conn = connect(gw.port).await;
    let requests = 6;
    for i in 0..requests {
        let req = http::Request::get(format!("/api/items/{i}?q=1"))
            .header("host", "front.example:8080")
            .header("connection", "keep-alive, x-client-hop")
            .header("x-client-hop", "secret")
            .header("keep-alive", "timeout=5")
            .header("te", "trailers")
            .header("proxy-connection", "keep-alive")
            .header("x-forwarded-for", "198.51.100.7")
            .header("x-forwarded-proto", "https")
            .header("x-request-id", format!("hop-{i}"))
            .body(Body::empty())
            .unwrap();
        conn.ready()
            .await
            .expect("the client connection stays open");
        let (status, h, body) = text(conn.send_request(req).await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        let seen: serde_json::Value = serde_json::from_str(&body).unwrap();
        let got = &seen["headers"];
        assert_eq!(seen["uri"], format!("/base/api/items/{i}?q=1"));
        for hop in [
            "connection",
            "x-client-hop",
            "keep-alive",
            "te",
            "proxy-connection",
        ] {
            assert!(got.get(hop).is_none(), "{hop} reached the upstream: {got}");
        }
        assert_eq!(got["host"], format!("127.0.0.1:{}", up.port));
        assert_eq!(got["x-request-id"], format!("hop-{i}"));
        // Appended to what the client sent; proto and host from an untrusted client replaced.
        assert_eq!(got["x-forwarded-for"], "198.51.100.7, 127.0.0.1");
        assert_eq!(got["x-forwarded-proto"], "http");
        assert_eq!(got["x-forwarded-host"], "front.example:8080");
        assert_eq!(
            got["forwarded"],
            "for=127.0.0.1;proto=http;host=\"front.example:8080\""
        );
        assert_eq!(got["via"], "1.1 rl-gateway");
        for hop in ["connection", "x-hop", "keep-alive", "proxy-connection"] {
            assert!(!h.contains_key(hop), "{hop} reached the client: {h:?}");
        }
        assert_eq!(h["x-end-to-end"], "kept");
        assert_eq!(h["x-request-id"], format!("hop-{i}").as_str());
        assert_eq!(h["x-ratelimit-limit"], "100");
    }
    // An HTTP/1.0 client (its connection closes after one answer) is served over the pooled
    // upstream connection too.
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .unwrap();
    raw.write_all(b"GET /api/search HTTP/1.0\r\nHost: old.example\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), raw.read_to_string(&mut answer))
        .await
        .expect("the gateway closes an HTTP/1.0 connection after the answer")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert!(
        answer.contains("\"x-forwarded-host\":\"old.example\""),
        "{answer}"
    );
    // One client connection carried every request; the upstream pool reused its connections.
    let upstream_connections = up.connections();
    assert!(
        (1..=requests).contains(&upstream_connections),
        "{upstream_connections} upstream connections for {} sequential requests",
        requests + 1
    );
}

#[tokio::test]
async fn streams_request_and_response_bodies_without_buffering_them() {
    let server = Server::start();
    // Echoes each chunk of the request body as a chunk of the response, as it arrives.
    let app = Router::new().route(
        "/echo",
        post(|body: Body| async move {
            let (mut tx, rx) = Channel::<Bytes, Infallible>::new(1);
            tokio::spawn(async move {
                let mut body = body;
                while let Some(Ok(frame)) = body.frame().await {
                    if let Ok(data) = frame.into_data() {
                        if tx.send_data(data).await.is_err() {
                            return;
                        }
                    }
                }
            });
            Body::new(rx)
        }),
    );
    let up = Upstream::plain(app).await;
    let gw = Gateway::proxy(&server, &up.url(), &[]).await;
    let mut conn = connect(gw.port).await;
    let (mut tx, body) = Channel::<Bytes, Infallible>::new(1);
    let req = http::Request::post("/echo")
        .header("host", "x")
        .body(Body::new(body))
        .unwrap();
    let sent = tokio::spawn(conn.send_request(req));
    tx.send_data(Bytes::from_static(b"first")).await.unwrap();
    // The response head and the first chunk arrive while the request body is still open:
    // neither side is buffered whole by the gateway.
    let bounded = Duration::from_secs(10);
    let resp = tokio::time::timeout(bounded, sent)
        .await
        .expect("the response head came before the request body ended")
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let frame = next(&mut body).await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first");
    tx.send_data(Bytes::from_static(b"second")).await.unwrap();
    let frame = next(&mut body).await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "second");
    drop(tx);
    let mut rest = Vec::new();
    while let Some(frame) = next(&mut body).await {
        if let Ok(data) = frame.unwrap().into_data() {
            rest.extend_from_slice(&data);
        }
    }
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test]
async fn slow_or_unreachable_upstreams_get_504_and_502_problems() {
    let server = Server::start();
    let app = Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            "late"
        }),
    );
    let up = Upstream::plain(app).await;
    let gw = Gateway::proxy(&server, &up.url(), &["--upstream-timeout-ms", "300"]).await;
    let (status, h, body) = gw
        .get("/slow", &[("x-request-id", "slow-1")])
        .await
        .unwrap();
    assert_eq!(status, 504, "{body}");
    assert_eq!(h["content-type"], "application/problem+json");
    let p: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(p["title"], "upstream timed out");
    assert_eq!(p["request_id"], "slow-1");
    drop(gw);

    // A listener whose accept queue is full and that never accepts: the kernel drops
    // further SYNs, so connecting hangs until the connect timeout.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let full = socket.listen(1).unwrap();
    let full_port = full.local_addr().unwrap().port();
    let mut fillers = Vec::new();
    for _ in 0..8 {
        match tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(("127.0.0.1", full_port)),
        )
        .await
        {
            Ok(Ok(s)) => fillers.push(s),
            _ => break,
        }
    }
    let gw = Gateway::proxy(
        &server,
        &format!("http://127.0.0.1:{full_port}"),
        &["--upstream-connect-timeout-ms", "200"],
    )
    .await;
    let (status, _, body) = gw.get("/x", &[]).await.unwrap();
    assert_eq!(status, 504, "{body}");
    assert!(body.contains("upstream connect timed out"), "{body}");
    drop(gw);
    drop(full);

    let dead = super::free_port();
    let gw = Gateway::proxy(&server, &format!("http://127.0.0.1:{dead}"), &[]).await;
    let (status, _, body) = gw.get("/x", &[]).await.unwrap();
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("upstream unavailable"), "{body}");
}

#[tokio::test]
async fn https_upstream_verified_against_the_given_ca() {
    let server = Server::start();
    let up = Upstream::tls(echo_app()).await;
    let tls = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tls");
    let gw = Gateway::proxy(
        &server,
        &format!("https://127.0.0.1:{}/base", up.port),
        &["--upstream-ca", &format!("{tls}/ca.pem")],
    )
    .await;
    for i in 0..3 {
        let (status, h, body) = gw.get(&format!("/api/search?i={i}"), &[]).await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(&format!("/base/api/search?i={i}")), "{body}");
        assert!(!h.contains_key("x-hop"));
    }
    assert!(
        up.connections() < 3,
        "TLS connections are pooled: {}",
        up.connections()
    );
    drop(gw);

    // A CA file that did not sign the upstream's certificate (the leaf itself): refused.
    let gw = Gateway::proxy(
        &server,
        &format!("https://127.0.0.1:{}/base", up.port),
        &["--upstream-ca", &format!("{tls}/upstream.pem")],
    )
    .await;
    let (status, _, body) = gw.get("/api/search", &[]).await.unwrap();
    assert_eq!(status, 502, "{body}");
}

/// The next frame of `body`, waiting at most 10 s (a buffering proxy would hang here).
async fn next(
    body: &mut hyper::body::Incoming,
) -> Option<Result<hyper::body::Frame<Bytes>, hyper::Error>> {
    tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("a chunk streamed through")
}
