//! The rate limit service against hostile callers: counters that cannot collide and live
//! under the key prefix, costs that can never be admitted answered over the limit (even
//! failing open), bounded requests, metric labels and header names from the configuration
//! only, the whole HTTP/2 opening under a deadline, idleness that PINGs do not hide (nor
//! a client that never reads), and bounded bytes of unfinished messages.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use redis_rl_testkit::{query, Server};
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use rl_gateway_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::rls::{descriptor, start, with_hits, Rls};
use super::test_dir;

const OK: i32 = 1;
const OVER: i32 = 2;

/// The RLS configuration in `dir` and a gateway configuration with `key_prefix` `prefix`.
fn files(dir: &Path, yaml: &str, prefix: &str) -> (PathBuf, PathBuf) {
    let rls = dir.join("rls.yaml");
    std::fs::write(&rls, yaml).unwrap();
    let gateway = dir.join("gateway.toml");
    std::fs::write(&gateway, format!("key_prefix = \"{prefix}\"\n")).unwrap();
    (rls, gateway)
}

async fn gateway(server: &Server, name: &str, yaml: &str, extra: &[&str]) -> (Rls, String) {
    let prefix = format!("sec{}", server.port);
    let (rls, toml) = files(&test_dir(name, server.port), yaml, &prefix);
    let args = [&["--config", toml.to_str().unwrap()][..], extra].concat();
    (start(server, &rls, &args).await, prefix)
}

const USERS: &str = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n    descriptors:\n      - key: sub\n        rate_limit: {unit: hour, requests_per_unit: 2}\n";

#[tokio::test]
async fn counters_never_collide_and_live_under_the_key_prefix() {
    let server = Server::start();
    let (mut rls, prefix) = gateway(&server, "rls-keys", USERS, &[]).await;
    let joined = || vec![descriptor(&[("user", "alice_sub_bob")])];
    let pair = || vec![descriptor(&[("user", "alice"), ("sub", "bob")])];
    for _ in 0..2 {
        assert_eq!(rls.ask("d", joined(), 1).await.overall_code, OK);
    }
    assert_eq!(rls.ask("d", joined(), 1).await.overall_code, OVER);
    // envoyproxy/ratelimit's joining gave both the counter d_user_alice_sub_bob_.
    let r = rls.ask("d", pair(), 1).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].limit_remaining),
        (OK, 1),
        "another tenant's counter"
    );
    let mut c = server.client();
    let mut keys: Vec<String> = query(&mut c, &["KEYS", "*"]);
    assert!(
        keys.iter().all(|k| k.starts_with(&format!("{prefix}:"))),
        "{keys:?}"
    );
    // The counters (not the top offenders' sets, `{top}`, of the refusal above).
    keys.retain(|k| k.contains(":rls:") && !k.contains(":{top}:"));
    keys.sort();
    assert_eq!(
        keys,
        [
            format!("{prefix}:rls:d:user=alice:sub=bob:fixed_window:3600"),
            format!("{prefix}:rls:d:user=alice_sub_bob:fixed_window:3600"),
        ],
        "every counter under the key prefix, its parts escaped"
    );
}

#[tokio::test]
async fn a_cost_that_can_never_be_admitted_is_over_the_limit_even_failing_open() {
    let server = Server::start();
    let yaml =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let (mut rls, _) = gateway(&server, "rls-cost", yaml, &["--failure-mode", "open"]).await;
    assert_eq!(
        rls.ask("d", vec![descriptor(&[("k", "a")])], 5)
            .await
            .overall_code,
        OK
    );
    let full = rls.ask("d", vec![descriptor(&[("k", "a")])], 1).await;
    assert_eq!(full.overall_code, OVER, "the counter is full");
    // Two descriptors on that counter, each within the module's cap, together past it:
    // Redis would answer an error and the failure mode would admit the request.
    let huge = || with_hits(descriptor(&[("k", "a")]), 600_000_000_000_000);
    let r = rls.ask("d", vec![huge(), huge()], 0).await;
    assert_eq!(r.overall_code, OVER, "{r:?}");
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OVER, OVER));
    // One descriptor past the cap: over the limit too (an error would make Envoy's
    // failure_mode_deny decide), and nothing taken from another counter.
    let r = rls
        .ask(
            "d",
            vec![
                descriptor(&[("k", "b")]),
                with_hits(descriptor(&[("k", "b")]), u64::MAX),
            ],
            0,
        )
        .await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(rls.left("d", &[("k", "b")]).await, 5, "nothing taken");
    let metrics = rls.gw.get("/metrics", &[]).await.unwrap().2;
    assert!(
        !metrics.contains("ratelimit_service_rate_limit_fallback"),
        "no decision fell to the failure mode: {metrics}"
    );
}

#[tokio::test]
async fn requests_past_the_bounds_are_refused_naming_the_limit() {
    let server = Server::start();
    let yaml =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let (mut rls, _) = gateway(&server, "rls-bounds", yaml, &[]).await;
    let refusal = async |rls: &mut Rls, req: RateLimitRequest| {
        let e = rls.client.should_rate_limit(req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        e.message().to_string()
    };
    // Far more descriptors than the default bound (64): once quadratic work.
    let many = RateLimitRequest {
        domain: "d".into(),
        descriptors: (0..20_000)
            .map(|i| descriptor(&[("k", &i.to_string())]))
            .collect(),
        hits_addend: 1,
    };
    assert_eq!(
        refusal(&mut rls, many).await,
        "rate limit request has 20000 descriptors, more than --rls-max-descriptors 64"
    );
    let entries: Vec<(String, String)> = (0..33).map(|i| (format!("k{i}"), "v".into())).collect();
    let wide = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![
            descriptor(&[("k", "v")]),
            descriptor(
                &entries
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect::<Vec<_>>(),
            ),
        ],
        hits_addend: 1,
    };
    assert_eq!(
        refusal(&mut rls, wide).await,
        "rate limit descriptor 1 has 33 entries, more than --rls-max-entries 32"
    );
    assert_eq!(
        rls.left("d", &[("k", "v")]).await,
        5,
        "a refusal takes nothing"
    );
    // The bounds are flags.
    drop(rls);
    let (mut rls, _) = gateway(&server, "rls-bounds", yaml, &["--rls-max-descriptors", "2"]).await;
    let three = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![descriptor(&[("k", "v")]); 3],
        hits_addend: 1,
    };
    assert_eq!(
        refusal(&mut rls, three).await,
        "rate limit request has 3 descriptors, more than --rls-max-descriptors 2"
    );
    let at_bound: Vec<_> = (0..2)
        .map(|i| descriptor(&[("k", &format!("{i}"))]))
        .collect();
    assert_eq!(rls.ask("d", at_bound, 1).await.overall_code, OK);
    assert!(rls.gw.get("/healthz", &[]).await.is_some());
}

#[tokio::test]
async fn metric_labels_and_header_names_come_from_the_configuration() {
    let server = Server::start();
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let (mut rls, _) = gateway(&server, "rls-labels", yaml, &["--rls-response-headers"]).await;
    for i in 0..20 {
        let mut d = descriptor(&[(&format!("key{i}"), "v")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 10,
            unit: 3,
        });
        // A domain the configuration does not define limits nothing (its override neither),
        // so only the first carries a hostile domain; the others' keys come from the request.
        let domain = if i == 0 {
            "evil\r\nX-Injected: 1\"".to_string()
        } else {
            "d".to_string()
        };
        let r = rls.ask(&domain, vec![d], 1).await;
        assert_eq!(r.overall_code, OK);
        for h in &r.response_headers_to_add {
            assert!(
                !h.value.contains(['\r', '\n']) && !h.value.contains("X-Injected"),
                "{h:?}"
            );
        }
    }
    // A configured rule with detailed_metric: the value reaches the name, never CR or LF.
    let r = rls
        .ask("d", vec![descriptor(&[("k", "a\r\nb\"c")])], 1)
        .await;
    let policy = r
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "RateLimit-Policy")
        .unwrap();
    assert_eq!(policy.value, "\"d.k_a__b_c\";q=5;w=3600");
    let metrics = rls.gw.get("/metrics", &[]).await.unwrap().2;
    let hits: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("ratelimit_service_rate_limit_total_hits{"))
        .collect();
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert!(
        hits.iter().any(|l| l.contains("domain=\"d\"")
            && l.contains("key=\"limit_override\"")
            && l.ends_with(" 19")),
        "{hits:?}"
    );
    assert!(!metrics.contains("evil") && !metrics.contains("key7"));
}

/// An HTTP/2 frame on stream `stream`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// The client's whole opening: the preface, an empty SETTINGS and the acknowledgement of
/// the server's.
fn opening() -> Vec<u8> {
    let mut b = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    b.extend(frame(0x4, 0, 0, &[]));
    b.extend(frame(0x4, 0x1, 0, &[]));
    b
}

/// Sends `chunks`, one every `every`, reading (and dropping) whatever the server sends:
/// true when the server closed the connection before the last one.
async fn closed_while_sending(port: u16, chunks: Vec<Vec<u8>>, every: Duration) -> bool {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while matches!(read.read(&mut buf).await, Ok(n) if n > 0) {}
    });
    for chunk in chunks {
        if reader.is_finished() || write.write_all(&chunk).await.is_err() {
            return true;
        }
        tokio::time::sleep(every).await;
    }
    reader.is_finished()
}

/// [`closed_while_sending`] without reading anything: the server's close shows as a
/// failed write.
async fn closed_while_sending_unread(port: u16, chunks: Vec<Vec<u8>>, every: Duration) -> bool {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    for chunk in chunks {
        if stream.write_all(&chunk).await.is_err() {
            return true;
        }
        tokio::time::sleep(every).await;
    }
    false
}

/// One ShouldRateLimit call on stream `stream`: HEADERS (HPACK literals, no Huffman) and
/// one DATA frame with the message `{domain: "d", descriptors: [{k: v}], hits_addend: 1}`.
fn call(stream: u32) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (
            ":path",
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        ),
        (":authority", "127.0.0.1"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0x00);
        block.push(u8::try_from(name.len()).unwrap());
        block.extend(name.as_bytes());
        block.push(u8::try_from(value.len()).unwrap());
        block.extend(value.as_bytes());
    }
    let message = [
        0x0A, 1, b'd', 0x12, 8, 0x0A, 6, 0x0A, 1, b'k', 0x12, 1, b'v', 0x18, 1,
    ];
    let mut data = vec![0u8];
    data.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
    data.extend(message);
    let mut f = frame(0x1, 0x4, stream, &block);
    f.extend(frame(0x0, 0x1, stream, &data));
    f
}

#[tokio::test]
async fn a_trickled_opening_and_pings_without_calls_are_closed() {
    let server = Server::start();
    let yaml =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let (mut rls, _) = gateway(
        &server,
        "rls-opening",
        yaml,
        &["--header-timeout-ms", "1500", "--idle-timeout-ms", "1000"],
    )
    .await;
    // The opening a byte every 300 ms (about 13 s in all): each byte used to count as
    // activity, so the idle timeout never came.
    let bytes = opening().into_iter().map(|b| vec![b]).collect();
    assert!(
        closed_while_sending(rls.port, bytes, Duration::from_millis(300)).await,
        "a trickled opening held its connection"
    );
    // A complete opening, then a PING every 200 ms for 10 s and never a call.
    let mut chunks = vec![opening()];
    chunks.extend((0..50).map(|_| frame(0x6, 0, 0, &[0; 8])));
    assert!(
        closed_while_sending(rls.port, chunks, Duration::from_millis(200)).await,
        "PINGs kept an idle connection"
    );
    // A complete opening, 200 calls, then PINGs, and never a byte read: the answers are
    // written, and the PINGs do not keep the connection.
    let mut burst = opening();
    for i in 0..200 {
        burst.extend(call(2 * i + 1));
    }
    let mut chunks = vec![burst];
    chunks.extend((0..50).map(|_| frame(0x6, 0, 0, &[0; 8])));
    assert!(
        closed_while_sending_unread(rls.port, chunks, Duration::from_millis(200)).await,
        "a client that never reads held its connection"
    );
    let metrics = rls.gw.get("/metrics", &[]).await.unwrap().2;
    assert!(metrics.contains("reason=\"no preface\""), "{metrics}");
    assert!(metrics.contains("reason=\"idle\""), "{metrics}");
    // The 200 calls were decided (k=v is over its 5 an hour); other calls are answered.
    assert_eq!(rls.left("d", &[("k", "v")]).await, 0);
    assert_eq!(
        rls.ask("d", vec![descriptor(&[("k", "w")])], 1)
            .await
            .overall_code,
        OK
    );
}

#[tokio::test]
async fn unfinished_messages_hold_a_bounded_number_of_bytes() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let server = Server::start();
    let yaml =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let (mut rls, _) = gateway(
        &server,
        "rls-buffers",
        yaml,
        &["--body-timeout-ms", "120000"],
    )
    .await;
    let tcp = TcpStream::connect(("127.0.0.1", rls.port)).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    // Six calls on one connection, each announcing a message of 1,000,000 bytes and
    // sending 900,000 of them, then nothing: 5.4 MB held unless bounded.
    let mut bodies = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..6 {
        let (mut tx, body) = http_body_util::channel::Channel::<Bytes, Infallible>::new(4);
        let req = http::Request::post(format!(
            "http://127.0.0.1:{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            rls.port
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap();
        send.ready().await.unwrap();
        answers.push(tokio::spawn(send.send_request(req)));
        let mut prefix = vec![0u8];
        prefix.extend(1_000_000u32.to_be_bytes());
        let _ = tx.send_data(Bytes::from(prefix)).await;
        for _ in 0..9 {
            let _ = tx.send_data(Bytes::from(vec![0u8; 100_000])).await;
        }
        bodies.push(tx);
    }
    let mut exhausted = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for answer in answers {
        let Ok(Ok(Ok(r))) = tokio::time::timeout_at(deadline, answer).await else {
            continue;
        };
        let status = r
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap().to_string());
        if status.as_deref() == Some("8") {
            exhausted += 1;
        }
    }
    assert!(exhausted >= 1, "no call was refused RESOURCE_EXHAUSTED");
    drop(bodies);
    assert_eq!(
        rls.ask("d", vec![descriptor(&[("k", "v")])], 1)
            .await
            .overall_code,
        OK
    );
    let metrics = rls.gw.get("/metrics", &[]).await.unwrap().2;
    assert!(metrics.contains("rl_rls_requests_refused_total{reason=\"buffer_full\"}"));
}
