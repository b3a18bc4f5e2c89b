//! Envoy's rate limit service (RLS v3) on `--rls-listen`: gRPC over HTTP/2 without TLS,
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! `grpc.health.v1.Health/Check` and gRPC server reflection, reading
//! envoyproxy/ratelimit's configuration (`--rls-config`, a file or a directory) and deciding with the gateway's limiter: the
//! same Redis, breaker, failure mode, deny cache and leases. SIGHUP, and a change in the
//! configuration's directory, re-read the configuration; one that does not load is refused
//! and the running one stays.

mod budget;
pub mod config;
mod decide;
mod frames;
mod headers;
mod listener;
mod lookup;
mod plan;
mod service;
mod yaml_position;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use redis_rl_client::Limiter;

use crate::limits::ListenerLimits;
use crate::reload::Live;
use config::{LoadOptions, RlsConfig};
pub use service::RequestBounds;

/// What `--rls-*` asked for.
pub struct RlsOptions {
    pub listen: SocketAddr,
    pub config: PathBuf,
    /// Merge the files of one domain (`--rls-merge-domains`).
    pub merge_domains: bool,
    pub response_headers: bool,
    pub hot_per_second: u64,
    pub bounds: RequestBounds,
    /// Reload when the configuration's directory changes.
    pub watch: bool,
}

/// A bound, configured service, ready to serve.
pub struct Bound {
    listener: tokio::net::TcpListener,
    source: Source,
    /// The watch of the configuration's directory (stops when dropped).
    watch: Option<crate::watch::DirWatch>,
    service: service::Rls,
}

/// Loads the configuration and binds the listener (both errors are start-up errors).
pub async fn bind(
    opts: &RlsOptions,
    limiter: Limiter,
    gateway: Arc<Live>,
) -> Result<Bound, String> {
    let source = Source {
        path: opts.config.clone(),
        options: LoadOptions {
            merge_domains: opts.merge_domains,
        },
    };
    let loaded = source.load().map_err(|e| format!("--rls-config: {e}"))?;
    tracing::info!(
        path = %opts.config.display(),
        domains = loaded.domains.len(),
        files = loaded.files.len(),
        "rate limit service configuration loaded"
    );
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| format!("--rls-listen {}: {e}", opts.listen))?;
    let config = Arc::new(ArcSwap::from_pointee(loaded));
    let watch = if opts.watch {
        Some(watch(config.clone(), source.clone())?)
    } else {
        None
    };
    Ok(Bound {
        listener,
        source,
        watch,
        service: service::Rls {
            config,
            limiter,
            gateway,
            response_headers: opts.response_headers,
            hot_per_second: opts.hot_per_second,
            bounds: opts.bounds,
        },
    })
}

impl Bound {
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `stop` within `limits` (the public listener's: connection cap, preface
    /// and idle timeouts, and `body_timeout` for a whole call); reloads the configuration
    /// on each SIGHUP and each change of its directory meanwhile.
    pub async fn serve(
        self,
        limits: ListenerLimits,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        // Kept until the service stops.
        let _watch = self.watch;
        #[cfg(unix)]
        tokio::spawn(reload_on_sighup(self.service.config.clone(), self.source));
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection()
            .build_v1()
            .map_err(|e| format!("rate limit service reflection: {e}"))?;
        let reflection_v1alpha = reflection()
            .build_v1alpha()
            .map_err(|e| format!("rate limit service reflection: {e}"))?;
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter
            .set_serving::<RateLimitServiceServer<service::Rls>>()
            .await;
        // TCP keepalive finds peers that vanished without a FIN; no HTTP/2 PING from the
        // server (an answered PING would keep every connection from ever being idle).
        let incoming = tonic::transport::server::TcpIncoming::from(self.listener)
            .with_nodelay(Some(true))
            .with_keepalive(Some(TCP_KEEPALIVE));
        let incoming = listener::CappedIncoming::new(incoming, limits);
        tonic::transport::Server::builder()
            .max_concurrent_streams(STREAMS_PER_CONNECTION)
            .concurrency_limit_per_connection(STREAMS_PER_CONNECTION as usize)
            .timeout(limits.body_timeout)
            .layer(budget::BudgetLayer::new())
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(
                RateLimitServiceServer::new(self.service)
                    .max_decoding_message_size(budget::MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(incoming, stop)
            .await
            .map_err(|e| format!("rate limit service: {e}"))
    }
}

/// Whether `path` is envoyproxy/ratelimit's YAML (a `.yaml`/`.yml` file, or a directory of
/// them) rather than the gateway's TOML, for `--check-config`.
pub fn is_rls_config(path: &std::path::Path) -> bool {
    path.is_dir()
        || path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

/// Where the configuration is read from (a file or a directory), and how.
#[derive(Clone, Debug)]
pub struct Source {
    pub path: PathBuf,
    pub options: LoadOptions,
}

impl Source {
    pub fn load(&self) -> Result<RlsConfig, String> {
        RlsConfig::load(&self.path, self.options)
    }
}

/// The service's protos (gateway/proto, compiled by `make proto`), for gRPC reflection.
const DESCRIPTOR_SET: &[u8] = include_bytes!("../../proto/rls.binpb");

/// Calls in flight on one connection (announced as HTTP/2's MAX_CONCURRENT_STREAMS, and
/// enforced): Envoy sends every check of a worker over one or a few connections.
const STREAMS_PER_CONNECTION: u32 = 1024;
/// Idle time before TCP keepalive probes start.
const TCP_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(60);

/// Re-reads the configuration on each SIGHUP.
#[cfg(unix)]
async fn reload_on_sighup(live: Arc<ArcSwap<RlsConfig>>, source: Source) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: no reload of --rls-config");
        return;
    };
    while hup.recv().await.is_some() {
        reload(&live, &source, "SIGHUP");
    }
}

/// Re-reads the configuration whenever its directory changes (a file of a directory, or
/// the directory holding the file: a ConfigMap's `..data` swap is seen either way).
pub fn watch(
    live: Arc<ArcSwap<RlsConfig>>,
    source: Source,
) -> Result<crate::watch::DirWatch, String> {
    let (dir, names) = crate::watch::Names::for_path(&source.path);
    let on_change = move || reload(&live, &source, "file changed");
    crate::watch::watch_dir(&dir, names, false, crate::watch::DEFAULT_QUIET, on_change)
        .map_err(|e| format!("--rls-config: {e}"))
}

/// Loads the configuration from `source` and swaps it in (on `cause`): one that does not
/// load is logged and counted, and the running configuration stays.
pub fn reload(live: &ArcSwap<RlsConfig>, source: &Source, cause: &str) {
    match source.load() {
        Ok(c) => {
            tracing::info!(path = %source.path.display(), domains = c.domains.len(), cause, "rate limit service configuration reloaded");
            live.store(Arc::new(c));
            metrics::counter!("rl_rls_config_reloads_total", "result" => "ok").increment(1);
        }
        Err(e) => {
            tracing::error!(error = %e, cause, "rate limit service configuration refused; the running one stays");
            metrics::counter!("rl_rls_config_reloads_total", "result" => "error").increment(1);
        }
    }
}
