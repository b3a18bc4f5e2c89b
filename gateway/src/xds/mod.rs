//! The rate limit service's configuration over xDS (`CONFIG_TYPE=GRPC_XDS_SOTW`), as
//! envoyproxy/ratelimit takes it from Envoy Gateway's control plane: one
//! `envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources`
//! stream in the state-of-the-world protocol, asking for every
//! `ratelimit.config.ratelimit.v3.RateLimitConfig`. Each response is the whole
//! configuration: it is loaded as files are and swapped in at once through the same path
//! as a SIGHUP reload, then acknowledged (ACK: its version and nonce), or, when it does not
//! load, refused (NACK: the last accepted version, its nonce and the error) with the running
//! configuration kept. When the server goes away the last configuration keeps serving and
//! the client reconnects: a failed connection is retried after
//! CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL, a stream that ends is reopened after a
//! doubling wait from XDS_CLIENT_BACKOFF_INITIAL_INTERVAL to _MAX_INTERVAL.

pub mod rls_conf;

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use prost::Message;
use prost_types::{value::Kind, Struct, Value};
use rl_gateway_proto::envoy::config::core::v3::Node;
use rl_gateway_proto::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use rl_gateway_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use rl_gateway_proto::google::rpc::Status;
use tokio::sync::{mpsc, watch};
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::envoy_env::{XdsSettings, XdsTls};
use crate::rls::config::{LoadOptions, RlsConfig};
use rls_conf::{to_document, RateLimitConfig, TYPE_URL};

/// gRPC status code INVALID_ARGUMENT, the NACK's `error_detail`.
const INVALID_ARGUMENT: i32 = 3;

/// The client: its settings, the live configuration it replaces, and the signal of the
/// first configuration accepted.
pub struct XdsClient {
    pub settings: XdsSettings,
    pub live: Arc<ArcSwap<RlsConfig>>,
    /// How the pushed documents are loaded (MERGE_DOMAIN_CONFIG).
    pub load: LoadOptions,
    pub loaded: watch::Sender<bool>,
}

impl XdsClient {
    /// Runs until the process ends: connect, stream, reconnect.
    pub async fn run(self) {
        // The version last accepted: a NACK names it, and a new stream starts from it.
        let mut accepted = String::new();
        let mut failures: u32 = 0;
        loop {
            let channel = match self.connect().await {
                Ok(c) => c,
                Err(e) => {
                    let wait = jittered(self.settings.connect_retry, 0.5, true);
                    tracing::warn!(server = %self.settings.server, error = %e, retry_in_ms = wait.as_millis() as u64, "xDS server unreachable; the running rate limit configuration stays");
                    tokio::time::sleep(wait).await;
                    continue;
                }
            };
            tracing::info!(server = %self.settings.server, node = %self.settings.node_id, "xDS stream opening");
            let (responses, result) = self.stream(channel, &mut accepted).await;
            if responses > 0 {
                failures = 0;
            }
            let wait = self.backoff(failures);
            failures = failures.saturating_add(1);
            match result {
                Ok(()) => tracing::warn!(
                    retry_in_ms = wait.as_millis() as u64,
                    "xDS server closed the stream; the running rate limit configuration stays"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "xDS stream failed; the running rate limit configuration stays")
                }
            }
            metrics::counter!("rl_xds_streams_ended_total").increment(1);
            tokio::time::sleep(wait).await;
        }
    }

    async fn connect(&self) -> Result<Channel, String> {
        let s = &self.settings;
        let url = if s.server.contains("://") {
            s.server.clone()
        } else if s.tls.is_some() {
            format!("https://{}", s.server)
        } else {
            format!("http://{}", s.server)
        };
        let mut endpoint = Endpoint::from_shared(url)
            .map_err(|e| format!("CONFIG_GRPC_XDS_SERVER_URL={}: {e}", s.server))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            // A control plane that vanished without closing the connection is noticed
            // by its unanswered pings.
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        if let Some(tls) = &s.tls {
            endpoint = endpoint
                .tls_config(client_tls(tls)?)
                .map_err(|e| format!("xDS TLS: {e}"))?;
        }
        endpoint.connect().await.map_err(|e| error_chain(&e))
    }

    /// One stream: requests every configuration, then answers each response. Returns the
    /// responses received and how the stream ended.
    async fn stream(&self, channel: Channel, accepted: &mut String) -> (u32, Result<(), String>) {
        let mut client = AggregatedDiscoveryServiceClient::new(channel);
        if let Some(n) = self.settings.max_message_bytes {
            client = client.max_decoding_message_size(n);
        }
        let (tx, rx) = mpsc::channel(4);
        let first = DiscoveryRequest {
            version_info: accepted.clone(),
            node: Some(self.node()),
            type_url: TYPE_URL.to_string(),
            ..Default::default()
        };
        if tx.send(first).await.is_err() {
            return (0, Err("request stream closed".to_string()));
        }
        let mut request = tonic::Request::new(Outgoing(rx));
        for (k, v) in &self.settings.headers {
            match (
                MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes()),
                MetadataValue::try_from(v.as_str()),
            ) {
                (Ok(k), Ok(v)) => {
                    request.metadata_mut().insert(k, v);
                }
                _ => {
                    tracing::warn!(header = %k, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: not a valid gRPC header, not sent")
                }
            }
        }
        let mut incoming = match client.stream_aggregated_resources(request).await {
            Ok(r) => r.into_inner(),
            Err(status) => return (0, Err(status_text(&status))),
        };
        let mut responses = 0u32;
        loop {
            let response = match incoming.message().await {
                Ok(Some(r)) => r,
                Ok(None) => return (responses, Ok(())),
                Err(status) => return (responses, Err(status_text(&status))),
            };
            responses = responses.saturating_add(1);
            let reply = self.answer(&response, accepted);
            if tx.send(reply).await.is_err() {
                return (responses, Err("request stream closed".to_string()));
            }
        }
    }

    /// Applies one response: the ACK or the NACK to send.
    fn answer(&self, response: &DiscoveryResponse, accepted: &mut String) -> DiscoveryRequest {
        let applied = decode(response).and_then(|documents| {
            let names: Vec<String> = documents.iter().map(|(n, _)| n.clone()).collect();
            crate::rls::install(
                &self.live,
                RlsConfig::from_documents(&documents, self.load),
                &format!("xDS version {}", response.version_info),
            )
            .map(|()| names)
        });
        let mut reply = DiscoveryRequest {
            node: Some(self.node()),
            type_url: TYPE_URL.to_string(),
            response_nonce: response.nonce.clone(),
            ..Default::default()
        };
        match applied {
            Ok(names) => {
                accepted.clone_from(&response.version_info);
                reply.version_info = response.version_info.clone();
                metrics::counter!("rl_xds_responses_total", "result" => "ack").increment(1);
                tracing::info!(version = %response.version_info, configs = ?names, "xDS configuration applied (ACK)");
                self.loaded.send_replace(true);
            }
            Err(e) => {
                reply.version_info = accepted.clone();
                reply.error_detail = Some(Status {
                    code: INVALID_ARGUMENT,
                    message: e.clone(),
                    details: Vec::new(),
                });
                metrics::counter!("rl_xds_responses_total", "result" => "nack").increment(1);
                tracing::error!(version = %response.version_info, error = %e, "xDS configuration refused (NACK); the running one stays");
            }
        }
        reply
    }

    /// This instance as the management server sees it: CONFIG_GRPC_XDS_NODE_ID and
    /// CONFIG_GRPC_XDS_NODE_METADATA (string values).
    fn node(&self) -> Node {
        let fields: BTreeMap<String, Value> = self
            .settings
            .node_metadata
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Value {
                        kind: Some(Kind::StringValue(v.clone())),
                    },
                )
            })
            .collect();
        Node {
            id: self.settings.node_id.clone(),
            metadata: Some(Struct { fields }),
            user_agent_name: "rl-gateway".to_string(),
            ..Default::default()
        }
    }

    /// The wait before reopening a stream after `failures` in a row without a response.
    fn backoff(&self, failures: u32) -> Duration {
        let s = &self.settings;
        let doubled = s
            .backoff_initial
            .saturating_mul(1u32.checked_shl(failures.min(30)).unwrap_or(u32::MAX));
        jittered(
            doubled.min(s.backoff_max.max(s.backoff_initial)),
            s.backoff_random_factor,
            s.backoff_jitter,
        )
    }
}

/// The configurations of a response, as YAML documents named by their `name`.
fn decode(response: &DiscoveryResponse) -> Result<Vec<(String, serde_yaml_ng::Value)>, String> {
    if response.type_url != TYPE_URL {
        return Err(format!(
            "unexpected type {}, expected {TYPE_URL}",
            response.type_url
        ));
    }
    let mut documents = Vec::with_capacity(response.resources.len());
    for (i, any) in response.resources.iter().enumerate() {
        if any.type_url != TYPE_URL {
            return Err(format!(
                "resource {i}: type {}, expected {TYPE_URL}",
                any.type_url
            ));
        }
        let config = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|e| format!("resource {i}: {e}"))?;
        let name = if config.name.is_empty() {
            format!("resource {i}")
        } else {
            config.name.clone()
        };
        documents.push((name, to_document(&config)));
    }
    Ok(documents)
}

fn client_tls(tls: &XdsTls) -> Result<ClientTlsConfig, String> {
    let read = |name: &str, path: &std::path::Path| {
        crate::files::read_bounded(path).map_err(|e| format!("{name} {e}"))
    };
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read(
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            ca,
        )?)),
        None => config.with_native_roots(),
    };
    if let Some((cert, key)) = &tls.identity {
        config = config.identity(Identity::from_pem(
            read("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", cert)?,
            read("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", key)?,
        ));
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// `wait` varied by up to `factor` of itself either way (when `jitter`), so a fleet that
/// lost its control plane at once does not come back at once.
fn jittered(wait: Duration, factor: f64, jitter: bool) -> Duration {
    if !jitter || factor <= 0.0 {
        return wait;
    }
    // A fresh random seed per call (std's hasher keys): spread, not secrecy.
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let unit = (r >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
    wait.mul_f64((1.0 - factor + 2.0 * factor * unit).max(0.0))
}

/// A transport error with its causes (tonic's own text is only "transport error").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn status_text(s: &tonic::Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const KEEPALIVE: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The requests of one stream, sent as the responses are answered.
struct Outgoing(mpsc::Receiver<DiscoveryRequest>);

impl futures_core::Stream for Outgoing {
    type Item = DiscoveryRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_its_factor() {
        let base = Duration::from_secs(10);
        for _ in 0..200 {
            let w = jittered(base, 0.5, true);
            assert!(
                w >= Duration::from_secs(5) && w <= Duration::from_secs(15),
                "{w:?}"
            );
        }
        assert_eq!(jittered(base, 0.5, false), base);
    }
}
