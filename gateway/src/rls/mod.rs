//! Envoy's rate limit service (RLS v3) on `--rls-listen`: gRPC over HTTP/2 without TLS,
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` and
//! `grpc.health.v1.Health/Check`, reading envoyproxy/ratelimit's configuration
//! (`--rls-config`, a file or a directory) and deciding with the gateway's limiter: the
//! same Redis, breaker, failure mode, deny cache and leases. SIGHUP re-reads the
//! configuration; one that does not load is refused and the running one stays.

mod budget;
pub mod config;
mod decide;
mod frames;
mod headers;
mod listener;
mod lookup;
mod plan;
mod service;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use redis_rl_client::Limiter;

use crate::limits::ListenerLimits;
use crate::reload::Live;
use config::RlsConfig;
pub use service::RequestBounds;

/// What `--rls-*` asked for.
pub struct RlsOptions {
    pub listen: SocketAddr,
    pub config: PathBuf,
    pub response_headers: bool,
    pub hot_per_second: u64,
    pub bounds: RequestBounds,
}

/// A bound, configured service, ready to serve.
pub struct Bound {
    listener: tokio::net::TcpListener,
    service: service::Rls,
}

/// Loads the configuration and binds the listener (both errors are start-up errors).
pub async fn bind(
    opts: &RlsOptions,
    limiter: Limiter,
    gateway: Arc<Live>,
) -> Result<Bound, String> {
    let loaded = RlsConfig::load(&opts.config).map_err(|e| format!("--rls-config: {e}"))?;
    tracing::info!(
        path = %opts.config.display(),
        domains = loaded.domains.len(),
        files = loaded.files.len(),
        "rate limit service configuration loaded"
    );
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| format!("--rls-listen {}: {e}", opts.listen))?;
    Ok(Bound {
        listener,
        service: service::Rls {
            config: Arc::new(ArcSwap::from_pointee(loaded)),
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
    /// from `path` on each SIGHUP meanwhile.
    pub async fn serve(
        self,
        path: PathBuf,
        limits: ListenerLimits,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        #[cfg(unix)]
        tokio::spawn(reload_on_sighup(self.service.config.clone(), path));
        #[cfg(not(unix))]
        let _ = path;
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
            .add_service(
                RateLimitServiceServer::new(self.service)
                    .max_decoding_message_size(budget::MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(incoming, stop)
            .await
            .map_err(|e| format!("rate limit service: {e}"))
    }
}

/// Calls in flight on one connection (announced as HTTP/2's MAX_CONCURRENT_STREAMS, and
/// enforced): Envoy sends every check of a worker over one or a few connections.
const STREAMS_PER_CONNECTION: u32 = 1024;
/// Idle time before TCP keepalive probes start.
const TCP_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(60);

/// Re-reads the configuration on each SIGHUP: a file that does not load is logged and
/// counted, and the running configuration stays.
#[cfg(unix)]
async fn reload_on_sighup(live: Arc<ArcSwap<RlsConfig>>, path: PathBuf) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: no reload of --rls-config");
        return;
    };
    while hup.recv().await.is_some() {
        match RlsConfig::load(&path) {
            Ok(c) => {
                tracing::info!(path = %path.display(), domains = c.domains.len(), "rate limit service configuration reloaded");
                live.store(Arc::new(c));
                metrics::counter!("rl_rls_config_reloads_total", "result" => "ok").increment(1);
            }
            Err(e) => {
                tracing::error!(error = %e, "rate limit service configuration refused; the running one stays");
                metrics::counter!("rl_rls_config_reloads_total", "result" => "error").increment(1);
            }
        }
    }
}
