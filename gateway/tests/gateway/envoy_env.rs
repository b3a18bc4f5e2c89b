//! rl-gateway started as envoyproxy/ratelimit is, with only that service's environment (its
//! docker-compose example's settings, on free loopback ports and a temporary RUNTIME_ROOT):
//! decisions over gRPC and `/json`, `/healthcheck`, the operations on DEBUG_PORT, a reload,
//! the refusal of a setting it cannot honour, and CACHE_KEY_PREFIX (every key under it);
//! then the same process configured over xDS by a small ADS server of the test: a
//! configuration, a changed one, a broken one (NACKed, the previous one kept), and the server
//! gone (decisions go on).

use std::path::Path;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prost_types::value::Kind;
use prost_types::Any;
use redis_rl_testkit::{eventually, free_port, query, Server};
use rl_gateway_proto::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use rl_gateway_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rl_gateway_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

use super::rls::descriptor;
use super::{get_from, Gateway};

const OK: i32 = 1;
const OVER: i32 = 2;
const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The environment of envoyproxy/ratelimit's docker-compose example, with `server` as its
/// Redis, `root` as RUNTIME_ROOT and free loopback ports; REDIS_TIMEOUT is that service's
/// setting too (its default is 10 s; the gateway's own is 50 ms, short for a loaded CI
/// machine).
fn compose_env(server: &Server, root: &Path) -> Vec<(String, String)> {
    [
        ("USE_STATSD", "false".to_string()),
        ("LOG_LEVEL", "debug".to_string()),
        ("REDIS_SOCKET_TYPE", "tcp".to_string()),
        ("REDIS_URL", format!("127.0.0.1:{}", server.port)),
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_string()),
        ("MEMCACHE_HOST_PORT", "memcached:11211".to_string()),
        ("REDIS_TIMEOUT", "5s".to_string()),
        ("HOST", "127.0.0.1".to_string()),
        ("PORT", free_port().to_string()),
        ("GRPC_HOST", "127.0.0.1".to_string()),
        ("GRPC_PORT", free_port().to_string()),
        ("DEBUG_HOST", "127.0.0.1".to_string()),
        ("DEBUG_PORT", free_port().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// rl-gateway with no argument and only `env`; its gRPC port.
fn spawn(env: &[(String, String)]) -> (Gateway, u16) {
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let port: u16 = get("PORT").unwrap().parse().unwrap();
    let debug: u16 = get("DEBUG_PORT").unwrap().parse().unwrap();
    let grpc: u16 = get("GRPC_PORT").unwrap().parse().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start rl-gateway");
    (
        Gateway {
            child,
            port,
            admin: Some(debug),
        },
        grpc,
    )
}

/// GET /healthcheck once the HTTP port listens: status and body.
async fn healthcheck(port: u16) -> (u16, String) {
    let mut answer = None;
    eventually("HOST:PORT answers", async || {
        answer = get_from(port, "/healthcheck", &[]).await;
        answer.is_some()
    })
    .await;
    let (status, _, body) = answer.unwrap();
    (status, body)
}

async fn rls_client(port: u16) -> RateLimitServiceClient<Channel> {
    let mut client = None;
    eventually("the rate limit service answers", async || {
        client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}"))
            .await
            .ok();
        client.is_some()
    })
    .await;
    client.unwrap()
}

/// One descriptor's code and configured limit.
async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    entries: &[(&str, &str)],
) -> (i32, u32) {
    let r = client
        .should_rate_limit(RateLimitRequest {
            domain: domain.into(),
            descriptors: vec![descriptor(entries)],
            hits_addend: 1,
        })
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    let s = &r.statuses[0];
    (
        r.overall_code,
        s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit),
    )
}

/// POST `body` to `/json` on `port`: the status and the body.
async fn post_json(port: u16, body: &str) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = http::Request::post(format!("http://127.0.0.1:{port}/json"))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.expect("POST /json");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

const PER_USER: &str = "domain: rl\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 2\n";
const PER_USER_WIDER: &str = "domain: rl\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 4\n";

#[tokio::test]
async fn the_docker_compose_environment_alone_serves_as_envoyproxy_ratelimit() {
    let server = Server::start();
    let root = std::env::temp_dir().join(format!("rl-envoy-env-{}", server.port));
    let config = root.join("ratelimit").join("config");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&config).unwrap();
    config_map(&config, "..2026_12_05_10_00_00.1", PER_USER);
    std::os::unix::fs::symlink("..data/config.yaml", config.join("config.yaml")).unwrap();
    let env = compose_env(&server, &root);
    let (gw, grpc) = spawn(&env);
    let mut client = rls_client(grpc).await;

    // HOST:PORT: the health check of that service, not the gateway's routes.
    let (status, body) = healthcheck(gw.port).await;
    assert_eq!((status, body.as_str()), (200, "OK"));
    // DEBUG_PORT: the gateway's operations.
    let mut answer = None;
    eventually("DEBUG_PORT answers", async || {
        answer = gw.ops("/metrics").await;
        answer.is_some()
    })
    .await;
    let (status, _, metrics) = answer.unwrap();
    assert_eq!(status, 200);
    assert!(metrics.contains("rl_"), "{metrics}");

    // Decisions from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, over gRPC and /json.
    assert_eq!(ask(&mut client, "rl", &[("user", "a")]).await, (OK, 2));
    let check =
        r#"{"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]}"#;
    let (status, body) = post_json(gw.port, check).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["overallCode"], "OK");
    assert_eq!(json["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
    assert_eq!(json["statuses"][0]["currentLimit"]["unit"], "HOUR");
    let (status, body) = post_json(gw.port, check).await;
    assert_eq!(status, 429, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["overallCode"], "OVER_LIMIT");
    assert_eq!(ask(&mut client, "rl", &[("user", "a")]).await, (OVER, 2));
    let (status, _) = post_json(gw.port, r#"{"domain": "rl", "descriptor": []}"#).await;
    assert_eq!(status, 400, "an unknown field is a bad request");

    // The ConfigMap is updated (Kubernetes' atomic swap of ..data): the change is seen
    // without a signal, as RUNTIME_WATCH_ROOT's watch there; a broken one is refused and the
    // running configuration stays.
    config_map(&config, "..2026_12_05_10_01_00.2", PER_USER_WIDER);
    eventually("the wider limit applies", async || {
        ask(&mut client, "rl", &[("user", "b")]).await.1 == 4
    })
    .await;
    config_map(
        &config,
        "..2026_12_05_10_02_00.3",
        "domain: rl\ndescriptors: [{key: user, rate_limit: {unit: fortnight}}]\n",
    );
    eventually("the refused reload is counted", async || {
        let (_, _, m) = gw.ops("/metrics").await.unwrap();
        m.contains("rl_rls_config_reloads_total{result=\"error\"}")
    })
    .await;
    assert_eq!(ask(&mut client, "rl", &[("user", "c")]).await, (OK, 4));
    // SIGHUP re-reads it too (and refuses it again).
    gw.hangup();
    assert_eq!(ask(&mut client, "rl", &[("user", "d")]).await, (OK, 4));
}

#[tokio::test]
async fn cache_key_prefix_puts_every_key_under_it() {
    let server = Server::start();
    let root = std::env::temp_dir().join(format!("rl-envoy-prefix-{}", server.port));
    let config = root.join("ratelimit").join("config");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.yaml"), PER_USER).unwrap();
    let mut env = compose_env(&server, &root);
    env.push(("CACHE_KEY_PREFIX".into(), "ratelimit:".into()));
    let (_gw, grpc) = spawn(&env);
    let mut client = rls_client(grpc).await;
    assert_eq!(ask(&mut client, "rl", &[("user", "a")]).await, (OK, 2));
    assert_eq!(ask(&mut client, "rl", &[("user", "a")]).await, (OK, 2));
    assert_eq!(ask(&mut client, "rl", &[("user", "a")]).await, (OVER, 2));
    let mut c = server.client();
    let keys: Vec<String> = query(&mut c, &["KEYS", "*"]);
    assert!(
        keys.contains(&"ratelimit:rls:rl:user=a:fixed_window:3600".to_string()),
        "the counter is under CACHE_KEY_PREFIX: {keys:?}"
    );
    assert!(
        keys.iter().all(|k| k.starts_with("ratelimit:")),
        "every key begins with CACHE_KEY_PREFIX (one ACL pattern covers them): {keys:?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// Writes `yaml` as config.yaml the way Kubernetes updates a mounted ConfigMap: a new
/// timestamped folder, a temporary symlink to it renamed over `..data`.
fn config_map(dir: &Path, folder: &str, yaml: &str) {
    std::fs::create_dir_all(dir.join(folder)).unwrap();
    std::fs::write(dir.join(folder).join("config.yaml"), yaml).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(folder, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

#[tokio::test]
async fn a_setting_it_cannot_honour_stops_the_start_by_name() {
    let server = Server::start();
    let root = std::env::temp_dir().join(format!("rl-envoy-refused-{}", server.port));
    for (name, value) in [
        ("BACKEND_TYPE", "memcache"),
        ("USE_STATSD", "true"),
        ("REDIS_TYPE", "sentinel"),
    ] {
        let mut env = compose_env(&server, &root);
        env.retain(|(k, _)| k != name);
        env.push((name.to_string(), value.to_string()));
        let out = Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{name}={value} started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{name}={value} is not supported")),
            "{name}: {err}"
        );
    }
}

/// The test's ADS server: one stream at a time; what the gateway sends goes to `seen`, and
/// what the test pushes goes out on the stream.
struct Ads {
    pushes: Arc<Mutex<Option<PushReceiver>>>,
    seen: mpsc::UnboundedSender<DiscoveryRequest>,
}

type PushReceiver = mpsc::Receiver<Result<DiscoveryResponse, Status>>;

/// The pushed responses as the server's response stream.
struct Pushes(PushReceiver);

impl futures_core::Stream for Pushes {
    type Item = Result<DiscoveryResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Pushes;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Pushes>, Status> {
        let mut incoming = request.into_inner();
        let seen = self.seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(r)) = incoming.message().await {
                let _ = seen.send(r);
            }
        });
        let pushes = self.pushes.lock().unwrap().take();
        pushes
            .map(|rx| Response::new(Pushes(rx)))
            .ok_or_else(|| Status::unavailable("the test serves one stream"))
    }
}

/// A RateLimitConfig as the wire has it (field numbers of envoyproxy/ratelimit's
/// rls_conf.proto), written with prost's encoder: name 1, domain 2, descriptors 3
/// (key 1, rate_limit 3 (unit 1, requests_per_unit 2)).
fn rate_limit_config(name: &str, domain: &str, key: &str, unit: i32, per_unit: u32) -> Any {
    let mut policy = Vec::new();
    prost::encoding::int32::encode(1, &unit, &mut policy);
    prost::encoding::uint32::encode(2, &per_unit, &mut policy);
    let mut descriptor = Vec::new();
    prost::encoding::string::encode(1, &key.to_string(), &mut descriptor);
    prost::encoding::bytes::encode(3, &policy, &mut descriptor);
    let mut config = Vec::new();
    prost::encoding::string::encode(1, &name.to_string(), &mut config);
    prost::encoding::string::encode(2, &domain.to_string(), &mut config);
    prost::encoding::bytes::encode(3, &descriptor, &mut config);
    Any {
        type_url: TYPE_URL.to_string(),
        value: config,
    }
}

fn response(version: &str, nonce: &str, resources: Vec<Any>) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: version.to_string(),
        nonce: nonce.to_string(),
        type_url: TYPE_URL.to_string(),
        resources,
        ..Default::default()
    }
}

#[tokio::test]
async fn configuration_over_xds_is_acked_nacked_and_outlives_the_server() {
    let server = Server::start();
    let (push, pushes) = mpsc::channel(4);
    let (seen, mut requests) = mpsc::unbounded_channel();
    let ads = Ads {
        pushes: Arc::new(Mutex::new(Some(pushes))),
        seen,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ads_port = listener.local_addr().unwrap().port();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let ads_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AggregatedDiscoveryServiceServer::new(ads))
            .serve_with_incoming(incoming),
    );

    let root = std::env::temp_dir().join(format!("rl-envoy-xds-{}", server.port));
    let mut env = compose_env(&server, &root);
    env.extend(
        [
            ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_string()),
            (
                "CONFIG_GRPC_XDS_SERVER_URL",
                format!("127.0.0.1:{ads_port}"),
            ),
            ("CONFIG_GRPC_XDS_NODE_ID", "test-node-id".to_string()),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a".to_string()),
            (
                "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
                "100ms".to_string(),
            ),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms".to_string()),
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "200ms".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let (gw, grpc) = spawn(&env);

    // The subscription: this node, every RateLimitConfig.
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), requests.recv())
        .await
        .expect("a DiscoveryRequest within 10 s")
        .unwrap();
    let node = first.node.unwrap();
    assert_eq!(node.id, "test-node-id");
    let zone = node.metadata.unwrap().fields.remove("zone").unwrap().kind;
    assert_eq!(zone, Some(Kind::StringValue("a".into())));
    assert_eq!(first.type_url, TYPE_URL);
    assert!(first.resource_names.is_empty(), "a wildcard subscription");
    // No configuration yet: not healthy (FORCE_START_WITHOUT_INITIAL_CONFIG is false).
    assert_eq!(healthcheck(gw.port).await.0, 500);

    let next = async |requests: &mut mpsc::UnboundedReceiver<DiscoveryRequest>| {
        tokio::time::timeout(std::time::Duration::from_secs(10), requests.recv())
            .await
            .expect("an answer within 10 s")
            .unwrap()
    };
    // A configuration: ACKed with its version and nonce, then served.
    push.send(Ok(response(
        "1",
        "n1",
        vec![rate_limit_config("rl-config", "xds", "user", 3, 2)],
    )))
    .await
    .unwrap();
    let ack = next(&mut requests).await;
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("1", "n1")
    );
    assert!(ack.error_detail.is_none());
    let mut client = rls_client(grpc).await;
    assert_eq!(ask(&mut client, "xds", &[("user", "a")]).await, (OK, 2));
    assert_eq!(ask(&mut client, "xds", &[("user", "a")]).await, (OK, 2));
    assert_eq!(ask(&mut client, "xds", &[("user", "a")]).await, (OVER, 2));
    assert_eq!(healthcheck(gw.port).await, (200, "OK".to_string()));

    // A changed one: swapped in whole.
    push.send(Ok(response(
        "2",
        "n2",
        vec![rate_limit_config("rl-config", "xds", "user", 3, 5)],
    )))
    .await
    .unwrap();
    let ack = next(&mut requests).await;
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("2", "n2")
    );
    assert_eq!(ask(&mut client, "xds", &[("user", "b")]).await, (OK, 5));

    // A broken one (a limit without a unit): NACKed with the error and the version still
    // in force; the running configuration stays.
    push.send(Ok(response(
        "3",
        "n3",
        vec![rate_limit_config("rl-config", "xds", "user", 0, 1)],
    )))
    .await
    .unwrap();
    let nack = next(&mut requests).await;
    assert_eq!(
        (nack.version_info.as_str(), nack.response_nonce.as_str()),
        ("2", "n3")
    );
    let detail = nack.error_detail.expect("a NACK carries the error");
    assert!(
        detail.message.contains("invalid rate limit unit 'UNKNOWN'"),
        "{}",
        detail.message
    );
    assert_eq!(ask(&mut client, "xds", &[("user", "b")]).await, (OK, 5));

    // The control plane goes away (its stream ends, its port closes): decisions go on with
    // the last accepted configuration while the client retries.
    drop(push);
    ads_server.abort();
    let _ = ads_server.await;
    for _ in 0..3 {
        assert_eq!(ask(&mut client, "xds", &[("user", "c")]).await, (OK, 5));
    }
    assert_eq!(healthcheck(gw.port).await.0, 200);
}

#[tokio::test]
async fn shadow_mode_headers_prometheus_and_tls_from_the_environment() {
    let server = Server::start();
    let root = std::env::temp_dir().join(format!("rl-envoy-features-{}", server.port));
    let config = root.join("ratelimit").join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.yaml"), PER_USER).unwrap();
    // Not read with RUNTIME_IGNOREDOTFILES=true (it would stop the start).
    std::fs::write(config.join(".scratch.yaml"), "not: [a, config\n").unwrap();
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
    let prometheus = free_port();
    let mut env = compose_env(&server, &root);
    env.extend(
        [
            ("SHADOW_MODE", "true".to_string()),
            ("RUNTIME_IGNOREDOTFILES", "true".to_string()),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true".to_string()),
            ("LIMIT_REMAINING_HEADER", "X-Left".to_string()),
            ("USE_PROMETHEUS", "true".to_string()),
            ("PROMETHEUS_ADDR", format!("127.0.0.1:{prometheus}")),
            ("PROMETHEUS_PATH", "/prom".to_string()),
            ("GRPC_SERVER_USE_TLS", "true".to_string()),
            (
                "GRPC_SERVER_TLS_CERT",
                tls.join("upstream.pem").display().to_string(),
            ),
            (
                "GRPC_SERVER_TLS_KEY",
                tls.join("upstream.key").display().to_string(),
            ),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let (_gw, grpc) = spawn(&env);
    let ca = tonic::transport::Certificate::from_pem(std::fs::read(tls.join("ca.pem")).unwrap());
    let endpoint = Channel::from_shared(format!("https://127.0.0.1:{grpc}"))
        .unwrap()
        .tls_config(tonic::transport::ClientTlsConfig::new().ca_certificate(ca))
        .unwrap();
    let mut client = None;
    eventually("the rate limit service answers over TLS", async || {
        client = endpoint
            .connect()
            .await
            .ok()
            .map(RateLimitServiceClient::new);
        client.is_some()
    })
    .await;
    let mut client = client.unwrap();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let r = client
            .should_rate_limit(RateLimitRequest {
                domain: "rl".into(),
                descriptors: vec![descriptor(&[("user", "s")])],
                hits_addend: 1,
            })
            .await
            .expect("ShouldRateLimit over TLS")
            .into_inner();
        answers.push(r);
    }
    // Over the limit, the status says so but the overall code is OK (SHADOW_MODE).
    let last = &answers[2];
    assert_eq!(last.statuses[0].code, OVER);
    assert_eq!(last.overall_code, OK);
    // envoyproxy/ratelimit's three headers, the remaining one renamed.
    let headers: Vec<(String, String)> = answers[0]
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(headers[0], ("RateLimit-Limit".to_string(), "2".to_string()));
    assert_eq!(headers[1], ("X-Left".to_string(), "1".to_string()));
    assert_eq!(headers[2].0, "RateLimit-Reset");
    let reset: u64 = headers[2].1.parse().unwrap();
    assert!((1..=3600).contains(&reset), "{reset}");
    // PROMETHEUS_ADDR and PROMETHEUS_PATH.
    let mut answer = None;
    eventually("PROMETHEUS_ADDR answers", async || {
        answer = get_from(prometheus, "/prom", &[]).await;
        answer.is_some()
    })
    .await;
    let (status, _, text) = answer.unwrap();
    assert_eq!(status, 200);
    assert!(
        text.contains("ratelimit_service_global_shadow_mode"),
        "{text}"
    );
}

#[tokio::test]
async fn xds_over_tls_as_envoy_gateway_configures_it() {
    let server = Server::start();
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
    let identity = tonic::transport::Identity::from_pem(
        std::fs::read(tls.join("upstream.pem")).unwrap(),
        std::fs::read(tls.join("upstream.key")).unwrap(),
    );
    let (push, pushes) = mpsc::channel(4);
    let (seen, mut requests) = mpsc::unbounded_channel();
    let ads = Ads {
        pushes: Arc::new(Mutex::new(Some(pushes))),
        seen,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ads_port = listener.local_addr().unwrap().port();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let ads_server = tokio::spawn(
        tonic::transport::Server::builder()
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .unwrap()
            .add_service(AggregatedDiscoveryServiceServer::new(ads))
            .serve_with_incoming(incoming),
    );
    let root = std::env::temp_dir().join(format!("rl-envoy-xds-tls-{}", server.port));
    let mut env = compose_env(&server, &root);
    env.extend(
        [
            ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_string()),
            (
                "CONFIG_GRPC_XDS_SERVER_URL",
                format!("127.0.0.1:{ads_port}"),
            ),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".to_string()),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_string()),
            (
                "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                tls.join("ca.pem").display().to_string(),
            ),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".to_string()),
            ("RUNTIME_IGNOREDOTFILES", "true".to_string()),
            ("RUNTIME_WATCH_ROOT", "false".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let (gw, grpc) = spawn(&env);
    // FORCE_START_WITHOUT_INITIAL_CONFIG: serving and healthy at once, no domain yet (OK,
    // no limit).
    let mut client = rls_client(grpc).await;
    assert_eq!(ask(&mut client, "tls", &[("user", "a")]).await, (OK, 0));
    assert_eq!(healthcheck(gw.port).await.0, 200);
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), requests.recv())
        .await
        .expect("a DiscoveryRequest over TLS within 10 s")
        .unwrap();
    assert_eq!(first.node.unwrap().id, "envoy-ratelimit");
    push.send(Ok(response(
        "1",
        "n1",
        vec![rate_limit_config("tls-config", "tls", "user", 2, 1)],
    )))
    .await
    .unwrap();
    let ack = tokio::time::timeout(std::time::Duration::from_secs(10), requests.recv())
        .await
        .expect("an ACK within 10 s")
        .unwrap();
    assert_eq!((ack.version_info.as_str(), ack.error_detail), ("1", None));
    assert_eq!(ask(&mut client, "tls", &[("user", "a")]).await, (OK, 1));
    assert_eq!(ask(&mut client, "tls", &[("user", "a")]).await, (OVER, 1));
    assert_eq!(healthcheck(gw.port).await.0, 200);
    ads_server.abort();
}
