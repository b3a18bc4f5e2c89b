//! What an attacker on the public port, or with write access to the config file's path or
//! to Redis, tried against the gateway: slow and idle connections, a full file table,
//! secrets in /healthz, pipes and devices as config files, settings that cannot work, a
//! flooded fleet key, an HTTP/1.0 upstream, a missing module.

use std::process::{Command, Stdio};
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use redis_rl_testkit::{eventually, free_port, query, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::upstream::Upstream;
use super::{closed_within, get_from, test_dir, Gateway};

async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port)).await.unwrap()
}

#[tokio::test]
async fn slow_headers_and_idle_connections_are_closed() {
    let server = Server::start();
    let gw = Gateway::serve(
        &server,
        &["--header-timeout-ms", "300", "--idle-timeout-ms", "300"],
    )
    .await;
    // A header line every 100 ms: the head never completes.
    let mut slow = connect(gw.port).await;
    slow.write_all(b"GET /api/search HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut cut = false;
    for i in 0..200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if slow
            .write_all(format!("X-Slow-{i}: 1\r\n").as_bytes())
            .await
            .is_err()
        {
            cut = true;
            break;
        }
        let mut probe = [0u8; 256];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(1), slow.read(&mut probe)).await
        {
            cut = true;
            break;
        }
    }
    assert!(cut, "a slow header stream was still open after 20 s");

    // A connection that sends nothing.
    let mut silent = connect(gw.port).await;
    assert!(closed_within(&mut silent, Duration::from_secs(20)).await);

    // A keep-alive connection after its request.
    let mut kept = connect(gw.port).await;
    kept.write_all(b"GET /api/search HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    assert!(closed_within(&mut kept, Duration::from_secs(20)).await);
    // The gateway still serves.
    assert_eq!(gw.get("/api/search", &[]).await.unwrap().0, 200);
}

#[tokio::test]
async fn a_body_that_does_not_arrive_closes_the_connection() {
    let server = Server::start();
    let app = Router::new().route("/{*rest}", post(|body: String| async move { body }));
    let up = Upstream::plain(app).await;
    let gw = Gateway::proxy(
        &server,
        &up.url(),
        &[
            "--upstream-timeout-ms",
            "120000",
            "--body-timeout-ms",
            "300",
        ],
    )
    .await;
    let mut s = connect(gw.port).await;
    s.write_all(b"POST /api/search HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
        .await
        .unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(20)).await);
    // A body that arrives is forwarded.
    let mut s = connect(gw.port).await;
    s.write_all(
        b"POST /api/search HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab",
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.ends_with("ab"), "{out}");
}

/// The gateway under `prlimit --nofile=N`, as [`Gateway::launch`] starts it.
async fn launch_with_file_limit(nofile: u32, args: &[&str], admin: bool) -> Gateway {
    let limit = format!("--nofile={nofile}:{nofile}");
    Gateway::launch_under(&["prlimit", &limit, "--"], args, admin, None).await
}

/// `GET /healthz` on `port` answered 200 within a few seconds (None: no answer).
async fn healthz_status(port: u16) -> Option<u16> {
    let got = tokio::time::timeout(Duration::from_secs(3), get_from(port, "/healthz", &[])).await;
    got.ok().flatten().map(|(status, _, _)| status)
}

#[tokio::test]
async fn healthz_answers_while_idle_connections_fill_the_file_table() {
    let server = Server::start();
    for admin in [false, true] {
        let gw = launch_with_file_limit(256, &["--redis", &server.url()], admin).await;
        let mut held = Vec::new();
        for _ in 0..300 {
            match TcpStream::connect(("127.0.0.1", gw.port)).await {
                Ok(s) => held.push(s),
                Err(_) => break,
            }
        }
        let ops = gw.admin.unwrap_or(gw.port);
        let mut answered = false;
        // Bounded retries: the overflow pool may be full of the held connections for its
        // one-second head timeout.
        for _ in 0..40 {
            if healthz_status(ops).await == Some(200) {
                answered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(
            answered,
            "/healthz (admin: {admin}) with 300 idle connections held"
        );
        if !admin {
            // Past the cap, other requests get a quick 503, not a hang.
            let mut s = connect(gw.port).await;
            s.write_all(b"GET /api/search HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut out = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
            let out = String::from_utf8_lossy(&out);
            assert!(out.is_empty() || out.starts_with("HTTP/1.1 503"), "{out}");
        }
        drop(held);
    }
}

#[tokio::test]
async fn the_public_healthz_never_shows_the_config_its_path_or_the_upstream() {
    let server = Server::start();
    let dir = test_dir("secrets", server.port);
    let config = dir.join("gateway.toml");
    std::fs::write(&config, "dimensions = [\"ip\"]\n").unwrap();
    let upstream = format!("http://127.0.0.1:{}/internal-base", free_port());
    let args = [
        "--redis",
        &server.url(),
        "--config",
        config.to_str().unwrap(),
        "--upstream",
        &upstream,
    ];
    let public = Gateway::start(&args).await;
    let admin = Gateway::launch(&args, true, None).await;
    std::fs::write(
        &config,
        "[access]\nallow_api_keys = [\"vip\", \"sk_live_SECRET123\"] deny = 1\n",
    )
    .unwrap();
    public.hangup();
    admin.hangup();
    for gw in [&public, &admin] {
        eventually("the reload is refused", async || {
            gw.health().await["config"]["reloads_refused"] == 1
        })
        .await;
    }
    let (_, _, body) = public.ops("/healthz").await.unwrap();
    for secret in [
        "SECRET123",
        "gateway.toml",
        "internal-base",
        &dir.display().to_string(),
    ] {
        assert!(
            !body.contains(secret),
            "public /healthz shows {secret}: {body}"
        );
    }
    // The details are on the admin listener.
    let h = admin.health().await;
    assert!(h["config"]["last_reload_error"]
        .as_str()
        .unwrap()
        .contains("allow_api_keys"));
    assert_eq!(h["config"]["path"], config.display().to_string());
    assert_eq!(h["upstream"], upstream);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the gateway to its exit (it must refuse to start): its stderr.
fn refused_start(args: &[&str], address_space: Option<&str>) -> String {
    let mut cmd = match address_space {
        Some(limit) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--as={limit}"))
                .arg("--")
                .arg(env!("CARGO_BIN_EXE_rl-gateway"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_rl-gateway")),
    };
    let out = cmd
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(args)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "the gateway started with {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn config_paths_that_are_not_regular_files_are_refused_without_reading() {
    let server = Server::start();
    // A device that never ends: refused before reading (within 2 GB of address space the
    // old reader died of it).
    let err = refused_start(
        &["--redis", &server.url(), "--config", "/dev/zero"],
        Some("2000000000"),
    );
    assert!(err.contains("not a regular file"), "{err}");

    // A named pipe put in place of the file: the reload is refused, nothing hangs.
    let dir = test_dir("fifo", server.port);
    let config = dir.join("gateway.toml");
    std::fs::write(&config, "dimensions = [\"ip\"]\n").unwrap();
    let gw = Gateway::serve(&server, &["--config", config.to_str().unwrap()]).await;
    std::fs::remove_file(&config).unwrap();
    assert!(Command::new("mkfifo")
        .arg(&config)
        .status()
        .unwrap()
        .success());
    gw.hangup();
    eventually("the reload is refused", async || {
        gw.health().await["config"]["reloads_refused"] == 1
    })
    .await;
    assert_eq!(gw.get("/api/search", &[]).await.unwrap().0, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_fleet_ttl_the_server_refuses_is_refused_at_start_and_reload() {
    let server = Server::start();
    let dir = test_dir("fleet-ttl", server.port);
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[fleet]\nttl_ms = 1000000000000000\n").unwrap();
    let err = refused_start(
        &["--redis", &server.url(), "--config", bad.to_str().unwrap()],
        None,
    );
    assert!(err.contains("ttl_ms"), "{err}");

    let config = dir.join("gateway.toml");
    std::fs::write(&config, "[fleet]\nttl_ms = 3000\n").unwrap();
    let gw = Gateway::serve(&server, &["--config", config.to_str().unwrap()]).await;
    std::fs::copy(&bad, &config).unwrap();
    gw.hangup();
    eventually("the reload is refused", async || {
        gw.health().await["config"]["reloads_refused"] == 1
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_failing_heartbeat_is_logged_at_warn_with_its_reason() {
    let server = Server::start();
    // The fleet key holds a string: every heartbeat gets an error reply.
    let _: () = query(&mut server.client(), &["SET", "rl:{fleet}", "x"]);
    let dir = test_dir("heartbeat", server.port);
    let log = dir.join("gateway.log");
    let _gw = Gateway::launch(&["--redis", &server.url()], false, Some(&log)).await;
    eventually("the failure is logged at warn", async || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("WARN")
            && text.contains("heartbeat failed")
            && text.contains("not a redis-rl limiter")
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn members_with_leases_longer_than_the_ttl_are_not_counted() {
    let server = Server::start();
    let dir = test_dir("fleet-forged", server.port);
    let config = dir.join("gateway.toml");
    std::fs::write(&config, "[fleet]\nheartbeat_ms = 100\nttl_ms = 1000\n").unwrap();
    let gw = Gateway::serve(&server, &["--config", config.to_str().unwrap()]).await;
    eventually("fleet size 1", async || {
        gw.health().await["stats"]["fleet_size"] == 1
    })
    .await;
    let mut c = server.client();
    for i in 0..50 {
        let _: redis::Value = query(
            &mut c,
            &[
                "RL.CONCURRENCY",
                "rl:{fleet}",
                "10000",
                "1000000000000",
                "ACQUIRE",
                &format!("fake-{i}"),
            ],
        );
    }
    eventually("the forged key is noticed", async || {
        let (_, _, m) = gw.ops("/metrics").await.unwrap();
        m.lines()
            .any(|l| l.starts_with("rl_fleet_untrusted_total ") && !l.ends_with(" 0"))
    })
    .await;
    assert_eq!(gw.health().await["stats"]["fleet_size"], 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn clients_get_http_1_1_whatever_the_upstream_speaks() {
    let server = Server::start();
    // An HTTP/1.0 upstream: answers one request per connection and closes.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = upstream.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = upstream.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s
                    .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await;
            });
        }
    });
    let gw = Gateway::proxy(&server, &format!("http://127.0.0.1:{port}"), &[]).await;
    let mut s = connect(gw.port).await;
    for _ in 0..2 {
        s.write_all(b"GET /api/search HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
        // The rest of the head and the 2-byte body; the connection stays open for the next.
        let mut seen = Vec::new();
        let mut byte = [0u8; 1];
        while !seen.ends_with(b"\r\n\r\nok") {
            s.read_exact(&mut byte).await.unwrap();
            seen.push(byte[0]);
        }
        let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
        assert!(!text.contains("connection: close"), "{text}");
    }
}

#[tokio::test]
async fn healthz_is_degraded_when_the_configured_module_is_missing() {
    let server = Server::start_plain(&[]);
    let gw = Gateway::serve(&server, &["--engine", "module"]).await;
    let (status, _, _) = gw.get("/api/search", &[]).await.unwrap();
    assert_eq!(status, 200, "decided by the failure mode (local)");
    let h = gw.health().await;
    assert_eq!(h["status"], "degraded", "{h}");
    assert_eq!(h["deciding"], "failure_mode", "{h}");
    assert_eq!(h["failure_mode"], "local", "{h}");
    assert!(h["reasons"].to_string().contains("module missing"), "{h}");
    // The same server with the twin allowed: ok.
    drop(gw);
    let auto = Gateway::serve(&server, &[]).await;
    auto.get("/api/search", &[]).await.unwrap();
    let h = auto.health().await;
    assert_eq!(h["status"], "ok", "{h}");
    assert_eq!(h["engine"]["in_use"], "lua", "{h}");
}

#[tokio::test]
async fn an_unknown_tier_name_is_counted_and_logged() {
    let server = Server::start();
    let _: () = query(
        &mut server.client(),
        &["HSET", "rl:tiers", "gold-key", "gold"],
    );
    let dir = test_dir("unknown-tier", server.port);
    let log = dir.join("gateway.log");
    let gw = Gateway::launch(&["--redis", &server.url()], false, Some(&log)).await;
    let (status, h, _) = gw
        .get("/api/search", &[("x-api-key", "gold-key")])
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(h["x-ratelimit-limit"], "100", "limited as the default tier");
    let (_, _, metrics) = gw.get("/metrics", &[]).await.unwrap();
    assert!(metrics.contains("rl_unknown_tier_total 1"), "{metrics}");
    eventually("the warning is logged", async || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("not among the configured tiers")
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
