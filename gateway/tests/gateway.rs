//! The rl-gateway binary end to end: a real server, the gateway process on loopback, and
//! HTTP requests through it.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis_rl_testkit::{eventually, free_port, query, Server};
use std::ffi::OsStr;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

// The proxy, operations, reload, hardening and Redis TLS tests, in this one test binary.
#[path = "gateway/acl.rs"]
mod acl;
#[path = "gateway/bans.rs"]
mod bans;
#[path = "gateway/costs.rs"]
mod costs;
#[path = "gateway/debt.rs"]
mod debt;
#[path = "gateway/deny_cache.rs"]
mod deny_cache;
#[path = "gateway/envoy_env.rs"]
mod envoy_env;
#[path = "gateway/fleet.rs"]
mod fleet;
#[path = "gateway/forward_auth.rs"]
mod forward_auth;
#[path = "gateway/hardening.rs"]
mod hardening;
#[path = "gateway/key_digest.rs"]
mod key_digest;
#[path = "gateway/listeners.rs"]
mod listeners;
#[path = "gateway/ops.rs"]
mod ops;
#[path = "gateway/proxy.rs"]
mod proxy;
#[path = "gateway/redis_tls.rs"]
mod redis_tls;
#[path = "gateway/reload.rs"]
mod reload;
#[path = "gateway/rls.rs"]
mod rls;
#[path = "gateway/rls_limits.rs"]
mod rls_limits;
#[path = "gateway/rls_security.rs"]
mod rls_security;
#[path = "gateway/rls_upstream.rs"]
mod rls_upstream;
#[path = "gateway/rules.rs"]
mod rules;
#[path = "gateway/settle.rs"]
mod settle;
#[path = "gateway/upstream.rs"]
mod upstream;
#[path = "gateway/watch.rs"]
mod watch;

/// The gateway process, killed on drop.
struct Gateway {
    child: Child,
    port: u16,
    /// The `--admin-listen` port, if any (/healthz and /metrics are there, not on `port`).
    admin: Option<u16>,
}

impl Gateway {
    /// Starts the gateway on a free port (another port if that one was taken before the
    /// gateway could bind it). Redis calls get a timeout of seconds, not the default 50 ms: a
    /// loaded CI machine can take longer than that to answer, and a call that times out
    /// would be decided by the failure mode instead of Redis (none of these tests is about
    /// the timeout).
    async fn start(args: &[&str]) -> Gateway {
        Self::launch(args, false, None).await
    }

    /// [`start`](Self::start) with `server` as its Redis, then `extra`.
    async fn serve(server: &Server, extra: &[&str]) -> Gateway {
        let url = server.url();
        Self::start(&[&["--redis", &url][..], extra].concat()).await
    }

    /// [`serve`](Self::serve) with the configuration file `config`, then `extra`.
    async fn configured(server: &Server, config: &Path, extra: &[&str]) -> Gateway {
        let path = config.to_str().unwrap();
        Self::serve(server, &[&["--config", path][..], extra].concat()).await
    }

    /// A proxy in front of `upstream` with `server` as its Redis, then `extra`.
    async fn proxy(server: &Server, upstream: &str, extra: &[&str]) -> Gateway {
        Self::serve(server, &[&["--upstream", upstream][..], extra].concat()).await
    }

    /// [`start`](Self::start), with an admin listener on a free port when `admin`, and the
    /// log written to `log` (else discarded).
    async fn launch<A: AsRef<OsStr>>(args: &[A], admin: bool, log: Option<&Path>) -> Gateway {
        Self::launch_under(&[], args, admin, log).await
    }

    /// [`start`](Self::start) with `args` and `flag` (`--rls-listen`, `--auth-listen`) on a
    /// free port: the gateway and that port, once the port accepts connections (another
    /// port if that one was taken first).
    async fn listening(args: &[&str], flag: &str) -> (Gateway, u16) {
        Self::listening_watched(args, flag, false).await
    }

    /// [`listening`](Self::listening), watching the configuration's directory when `watch`.
    async fn listening_watched(args: &[&str], flag: &str, watch: bool) -> (Gateway, u16) {
        for _ in 0..5 {
            let port = free_port();
            let listen = format!("127.0.0.1:{port}");
            let all = [args, &[flag, &listen]].concat();
            let mut gw = Self::spawn(&[], &all, false, None, watch).await;
            let mut exited = false;
            let mut up = false;
            eventually("the extra listener accepts", async || {
                exited = matches!(gw.child.try_wait(), Ok(Some(_)));
                up = !exited && TcpStream::connect(("127.0.0.1", port)).await.is_ok();
                exited || up
            })
            .await;
            if up {
                return (gw, port);
            }
        }
        panic!("no free port for {flag}");
    }

    /// [`launch`](Self::launch) as the arguments of `wrapper` (`prlimit ... --`): the
    /// gateway's path follows the wrapper's words; none, the gateway runs itself.
    async fn launch_under<A: AsRef<OsStr>>(
        wrapper: &[&str],
        args: &[A],
        admin: bool,
        log: Option<&Path>,
    ) -> Gateway {
        Self::spawn(wrapper, args, admin, log, false).await
    }

    /// [`launch_under`](Self::launch_under); the gateway watches the directories of its
    /// configuration files only when `watch` (the other tests write a file and send SIGHUP,
    /// and count the reloads that follow: one, not also the watch's).
    async fn spawn<A: AsRef<OsStr>>(
        wrapper: &[&str],
        args: &[A],
        admin: bool,
        log: Option<&Path>,
        watch: bool,
    ) -> Gateway {
        let gateway = env!("CARGO_BIN_EXE_rl-gateway");
        let (program, wrapped) = match wrapper.split_first() {
            Some((program, words)) => (*program, [words, &[gateway]].concat()),
            None => (gateway, Vec::new()),
        };
        for _ in 0..5 {
            let port = free_port();
            let admin = admin.then(free_port);
            let mut cmd = Command::new(program);
            cmd.args(&wrapped)
                .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn"])
                .args(["--timeout-ms", "5000"])
                .args(args)
                .env("RL_GATEWAY_NO_WATCH", if watch { "false" } else { "true" })
                .stdout(Stdio::null());
            if let Some(a) = admin {
                cmd.args(["--admin-listen", &format!("127.0.0.1:{a}")]);
            }
            if let Some(log) = log {
                cmd.stdout(std::fs::File::create(log).unwrap());
            }
            let child = cmd.spawn().expect("start rl-gateway");
            let mut gw = Gateway { child, port, admin };
            let mut exited = false;
            eventually("the gateway answers /healthz", async || {
                exited = matches!(gw.child.try_wait(), Ok(Some(_)));
                exited || gw.ops("/healthz").await.is_some()
            })
            .await;
            if !exited {
                return gw;
            }
        }
        panic!("rl-gateway did not start on any of 5 free ports");
    }

    /// GET `path` with `headers`: status, headers and body text (None if not listening).
    async fn get(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Option<(u16, http::HeaderMap, String)> {
        get_from(self.port, path, headers).await
    }

    /// GET an operations path (/healthz, /metrics) where the gateway serves it.
    async fn ops(&self, path: &str) -> Option<(u16, http::HeaderMap, String)> {
        get_from(self.admin.unwrap_or(self.port), path, &[]).await
    }

    async fn health(&self) -> serde_json::Value {
        let (_, _, body) = self.ops("/healthz").await.expect("healthz");
        serde_json::from_str(&body).unwrap()
    }

    /// Sends SIGHUP (reload the configuration file).
    fn hangup(&self) {
        let ok = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -HUP");
    }
}

/// The arguments of a proxy in front of `up`, with `server` as its Redis and `config` as its
/// configuration file.
fn proxy_args(server: &Server, up: &upstream::Upstream, config: &Path) -> Vec<String> {
    let config = config.to_str().unwrap();
    [
        "--redis",
        &server.url(),
        "--upstream",
        &up.url(),
        "--config",
        config,
    ]
    .map(String::from)
    .to_vec()
}

/// A limit of 3 per API key and endpoint.
const PER_KEY_AND_ENDPOINT: &str =
    "dimensions = [\"api_key\", \"endpoint\"]\n[endpoint]\nlimit = 3\n";

/// A directory for the files of the test `name`, named by it and `port` (its server's).
fn test_dir(name: &str, port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rl-gw-{name}-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `toml` as `gateway.toml` in a directory of this test (named by the server's port)
/// and returns its path.
fn config_file(server: &Server, toml: &str) -> PathBuf {
    named_config(server, "test", toml)
}

/// [`config_file`] in the directory of the test `name` ([`test_dir`]).
fn named_config(server: &Server, name: &str, toml: &str) -> PathBuf {
    let config = test_dir(name, server.port).join("gateway.toml");
    std::fs::write(&config, toml).unwrap();
    config
}

/// `rl-gateway --check-config path`: its exit status and output.
fn check_config(path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
        .arg("--check-config")
        .arg(path)
        .output()
        .unwrap()
}

/// Reads until the peer closes the connection (true), or `limit` passes (false). An upper
/// bound only: a gateway that never closes fails, a slow machine does not.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(limit, read_all).await.is_ok()
}

/// GET `http://127.0.0.1:{port}{path}` on a new connection.
async fn get_from(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, http::HeaderMap, String)> {
    request(port, None, "GET", path, headers).await
}

/// `method` `http://127.0.0.1:{port}{path}` with `headers` (a name may repeat) on a new
/// connection from the local address `from` (any when None): status, headers and body read
/// to its end, trailers included (None if nothing answers).
async fn request(
    port: u16,
    from: Option<IpAddr>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, http::HeaderMap, String)> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(from);
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1:{port}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client.request(req.body(Empty::new()).unwrap()).await.ok()?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    Some((status, headers, String::from_utf8_lossy(&body).into_owned()))
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--listen",
        "--redis",
        "--cluster",
        "--config",
        "--upstream",
        "--upstream-timeout-ms",
        "--upstream-connect-timeout-ms",
        "--upstream-ca",
        "--admin-listen",
        "SIGHUP",
        "--trusted-proxy",
        "--failure-mode",
        "--instances",
        "--no-fleet",
        "--hot",
        "--no-leases",
        "--timeout-ms",
        "--breaker-failures",
        "--breaker-open-ms",
        "--deny-cache",
        "--engine",
        "--tier-hash",
        "--tier-cache-ms",
        "--route",
        "--log",
        "--envoy-env",
        "--header-timeout-ms",
        "--idle-timeout-ms",
        "--body-timeout-ms",
        "--max-connections",
        "--redis-ca",
        "--redis-cert",
        "--redis-key",
        "--no-watch",
        "--rls-merge-domains",
        "rediss://",
        "RL_GATEWAY_REDIS",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[tokio::test]
async fn limits_by_tier_and_endpoint_with_headers_health_and_metrics() {
    let server = Server::start();
    let _: () = query(
        &mut server.client(),
        &["HSET", "rl:tiers", "pro-key", "pro"],
    );
    let config = config_file(&server, PER_KEY_AND_ENDPOINT);
    let gw = Gateway::serve(&server, &["--config", config.to_str().unwrap()]).await;

    let (status, h, body) = gw
        .get(
            "/api/items/1",
            &[("x-api-key", "pro-key"), ("x-request-id", "t-1")],
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(h["x-request-id"], "t-1");
    assert!(body.contains("\"route\":\"/api/items/{id}\""), "{body}");
    assert!(body.contains("\"request_id\":\"t-1\""), "{body}");
    // The endpoint (3, still a sliding window) is more restrictive than the pro tier (1000).
    assert_eq!(
        h["ratelimit-policy"],
        "\"api_key\";q=1000;w=60, \"endpoint\";q=3;w=60"
    );
    assert_eq!(h["ratelimit"], "\"endpoint\";r=2;t=60");
    gw.get("/api/items/2", &[("x-api-key", "pro-key")])
        .await
        .unwrap();
    gw.get("/api/items/3", &[("x-api-key", "pro-key")])
        .await
        .unwrap();
    let caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (status, h, body) = gw
        .get(
            "/api/items/4",
            &[("x-api-key", "pro-key"), ("traceparent", caller)],
        )
        .await
        .unwrap();
    assert_eq!(status, 429);
    assert_eq!(h["content-type"], "application/problem+json");
    assert!(h.contains_key("retry-after"));
    assert!(body.contains("\"dimension\":\"endpoint\""), "{body}");
    assert!(
        body.contains("\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\""),
        "{body}"
    );
    // Another route pattern: its own quota; the key's tier is pro.
    let (status, h, _) = gw
        .get("/api/search", &[("x-api-key", "pro-key")])
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(h["x-ratelimit-remaining"], "2");

    let health = gw.health().await;
    assert_eq!(health["redis"], "up");
    assert_eq!(health["breaker"], "closed");
    let (status, _, metrics) = gw.get("/metrics", &[]).await.unwrap();
    assert_eq!(status, 200);
    assert!(
        metrics.contains("rl_requests_total{dimension=\"endpoint\",outcome=\"denied\"} 1"),
        "{metrics}"
    );
    // Responses by status and the tier whose limits applied (the built-ins are not counted).
    assert!(
        metrics.contains("rl_responses_total{status=\"200\",tier=\"pro\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rl_responses_total{status=\"429\",tier=\"pro\"} 1"),
        "{metrics}"
    );
    // The built-ins are never limited.
    for _ in 0..5 {
        assert_eq!(gw.get("/healthz", &[]).await.unwrap().0, 200);
    }
    let _ = std::fs::remove_dir_all(config.parent().unwrap());
}

#[tokio::test]
async fn fail_open_serves_through_an_outage_and_the_breaker_recovers() {
    let mut server = Server::start();
    let gw = Gateway::serve(
        &server,
        &[
            "--failure-mode",
            "open",
            "--breaker-failures",
            "2",
            "--breaker-open-ms",
            "100",
        ],
    )
    .await;
    assert_eq!(gw.get("/api/search", &[]).await.unwrap().0, 200);
    server.kill();
    for _ in 0..5 {
        assert_eq!(
            gw.get("/api/search", &[]).await.unwrap().0,
            200,
            "no 5xx while failing open"
        );
    }
    let health = gw.health().await;
    assert_eq!(health["redis"], "down");
    // Open, or already half-open if the machine is slow: not closed, and it did open.
    assert_ne!(health["breaker"], "closed");
    assert!(health["stats"]["breaker_opened"].as_u64().unwrap() >= 1);
    assert!(health["stats"]["fail_open"].as_u64().unwrap() > 0);
    server.restart();
    eventually("the breaker closes", async || {
        gw.get("/api/search", &[]).await;
        gw.health().await["breaker"] == "closed"
    })
    .await;
}

#[tokio::test]
async fn forwards_allowed_requests_to_the_upstream() {
    let server = Server::start();
    // A tiny upstream that echoes what it saw.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_port = upstream.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/base/{*rest}",
        axum::routing::get(|headers: http::HeaderMap, uri: http::Uri| async move {
            let header = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            };
            format!(
                "uri={} id={} xff={} traceparent={}",
                uri,
                header("x-request-id"),
                header("x-forwarded-for"),
                header("traceparent")
            )
        }),
    );
    tokio::spawn(async move { axum::serve(upstream, app).await.unwrap() });
    let gw = Gateway::proxy(
        &server,
        &format!("http://127.0.0.1:{upstream_port}/base"),
        &[],
    )
    .await;
    // The caller's trace goes on, with the gateway as the parent span.
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (status, h, body) = gw
        .get(
            "/api/items/9?x=1",
            &[("x-request-id", "up-1"), ("traceparent", caller)],
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let (seen, traceparent) = body.split_once(" traceparent=").unwrap();
    assert_eq!(seen, "uri=/base/api/items/9?x=1 id=up-1 xff=127.0.0.1");
    assert!(
        traceparent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-")
            && traceparent.ends_with("-01"),
        "{traceparent}"
    );
    assert_eq!(traceparent.len(), caller.len());
    assert_ne!(traceparent, caller, "the gateway's own span is the parent");
    assert_eq!(h["x-ratelimit-limit"], "100");
    // Without one, a new trace starts.
    let (_, _, body) = gw.get("/api/items/9", &[]).await.unwrap();
    let (_, traceparent) = body.split_once(" traceparent=").unwrap();
    assert_eq!(traceparent.len(), 55, "{body}");
    assert!(!traceparent.contains("4bf92f3577b34da6a3ce929d0e0e4736"));

    drop(gw);
    let log = std::env::temp_dir().join(format!("rl-gw-trace-{}.log", server.port));
    let dead = Gateway::launch(
        &[
            "--redis",
            &server.url(),
            "--upstream",
            &format!("http://127.0.0.1:{}", free_port()),
        ],
        false,
        Some(&log),
    )
    .await;
    let (status, _, body) = dead.get("/x", &[("traceparent", caller)]).await.unwrap();
    assert_eq!(status, 502, "{body}");
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        problem["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
        "{body}"
    );
    drop(dead);
    // Every log line of the request carries the trace id (the warnings of the failed call).
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("upstream")).collect();
    assert!(!lines.is_empty(), "{text}");
    for line in lines {
        assert!(
            line.contains("trace_id=4bf92f3577b34da6a3ce929d0e0e4736"),
            "{line}"
        );
    }
    let _ = std::fs::remove_file(&log);
}

/// In front of a server without the module (a managed service), unchanged: the limiter
/// finds no RL commands and decides with the Lua twin, in closed mode too (no 503).
#[tokio::test]
async fn works_unchanged_on_a_server_without_the_module() {
    let server = Server::start_plain(&[]);
    let config = config_file(&server, PER_KEY_AND_ENDPOINT);
    let gw = Gateway::configured(&server, &config, &["--failure-mode", "closed"]).await;
    for i in 1..=3 {
        let (status, h, body) = gw
            .get(&format!("/api/items/{i}"), &[("x-api-key", "k")])
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(h["x-ratelimit-remaining"], (3 - i).to_string());
    }
    let (status, _, _) = gw.get("/api/items/4", &[("x-api-key", "k")]).await.unwrap();
    assert_eq!(status, 429);
    let libraries: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut server.client())
        .unwrap();
    assert!(
        format!("{libraries:?}").contains("redisrl"),
        "{libraries:?}"
    );
}

/// The TOML a platform team writes, end to end over HTTP: per-tier overrides of the
/// endpoint dimension, `Authorization: Bearer` keys, deny and allow lists, one wait in
/// every header of a 429, and no quota fields on the 503 of closed mode.
#[tokio::test]
async fn config_file_sets_tiers_identity_access_and_coherent_headers() {
    let mut server = Server::start();
    let _: () = query(
        &mut server.client(),
        &["HSET", "rl:tiers", "pro-tok", "pro"],
    );
    let config = named_config(
        &server,
        "policy",
        r#"
dimensions = ["api_key", "endpoint"]
api_key_header = "Authorization"
[endpoint]
limit = 2
[tiers.free]
limit = 100
[tiers.pro]
limit = 1000
[tiers.pro.endpoint]
limit = 4
[access]
allow_api_keys = ["partner-tok"]
deny_api_keys = ["revoked-tok"]
"#,
    );
    let gw = Gateway::configured(&server, &config, &["--failure-mode", "closed"]).await;
    let bearer = |t: &str| format!("Bearer {t}");
    let admitted = async |token: &str, path: &str| {
        let mut ok = 0;
        let mut last = None;
        for _ in 0..6 {
            let auth = bearer(token);
            let (status, h, _) = gw.get(path, &[("authorization", &auth)]).await.unwrap();
            if status == 200 {
                ok += 1;
            } else {
                last = Some((status, h));
            }
        }
        (ok, last)
    };
    let (free, refused) = admitted("free-tok", "/api/items/1").await;
    assert_eq!(free, 2, "free keys: the [endpoint] table");
    let (status, h) = refused.unwrap();
    assert_eq!(status, 429);
    let t = h["retry-after"].to_str().unwrap();
    assert_eq!(h["ratelimit"], format!("\"endpoint\";r=0;t={t}").as_str());
    assert_eq!(h["x-ratelimit-reset"], t);
    assert_eq!(
        h["ratelimit-policy"],
        "\"api_key\";q=100;w=60, \"endpoint\";q=2;w=60"
    );
    let (pro, _) = admitted("pro-tok", "/api/items/1").await;
    assert_eq!(pro, 4, "pro keys: [tiers.pro.endpoint]");

    let (status, h, body) = gw
        .get(
            "/api/items/1",
            &[
                ("authorization", "bearer revoked-tok"),
                ("x-request-id", "r-403"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(status, 403, "{body}");
    assert_eq!(h["content-type"], "application/problem+json");
    assert_eq!(h["x-request-id"], "r-403");
    assert!(body.contains("\"request_id\":\"r-403\""), "{body}");
    let (partner, _) = admitted("partner-tok", "/api/items/1").await;
    assert_eq!(partner, 6, "allowed keys are never limited");

    // A key and route Redis never denied (the deny cache would answer those locally).
    server.kill();
    let (status, h, body) = gw
        .get("/api/search", &[("authorization", "Bearer other-tok")])
        .await
        .unwrap();
    assert_eq!(status, 503, "{body}");
    for name in [
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert!(h.get(name).is_none(), "503 with {name}");
    }
}
