//! Envoy's rate limit service (RLS v3) on `--rls-listen`: gRPC over HTTP/2 without TLS,
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! `grpc.health.v1.Health/Check` and gRPC server reflection, reading
//! envoyproxy/ratelimit's configuration (`--rls-config`, a file or a directory) and deciding with the gateway's limiter: the
//! same Redis, breaker, failure mode, deny cache and leases. SIGHUP, and a change in the
//! configuration's directory, re-read the configuration (or an xDS server pushes a new one,
//! `crate::xds`); one that does not load is refused and the running one stays.

mod budget;
pub mod config;
mod decide;
mod frames;
mod headers;
mod listener;
mod lookup;
mod offenders;
mod plan;
mod service;
mod yaml_position;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use redis_rl_client::Limiter;
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;

use crate::envoy_env::{GrpcServerTls, HeaderNames};
use crate::limits::ListenerLimits;
use crate::reload::Live;
use config::{LoadOptions, RlsConfig};
pub use service::RequestBounds;

/// What `--rls-*` (or envoyproxy/ratelimit's environment) asked for.
pub struct RlsOptions {
    pub listen: SocketAddr,
    /// The files; None: the configuration comes over xDS (empty until it does).
    pub config: Option<PathBuf>,
    /// How the files (or the pushed documents) are read: `--rls-merge-domains`, and
    /// RUNTIME_IGNOREDOTFILES.
    pub load: LoadOptions,
    pub response_headers: bool,
    pub hot_per_second: u64,
    pub bounds: RequestBounds,
    /// envoyproxy/ratelimit's three headers under these names instead of the gateway's.
    pub header_names: Option<HeaderNames>,
    /// Every answer's overall code is OK (the statuses still say who is over).
    pub shadow_mode: bool,
    pub tls: Option<GrpcServerTls>,
    /// A connection is closed (GOAWAY) after the first, and cut after the second more.
    pub max_connection_age: Option<(Duration, Duration)>,
    /// Reload when the configuration's directory changes.
    pub watch: bool,
}

/// A bound, configured service, ready to serve.
pub struct Bound {
    listener: tokio::net::TcpListener,
    tls: Option<tonic::transport::ServerTlsConfig>,
    max_connection_age: Option<(Duration, Duration)>,
    /// The files (None: xDS).
    source: Option<Source>,
    /// The watch of the configuration's directory (stops when dropped).
    watch: Option<crate::watch::DirWatch>,
    service: service::Rls,
}

/// The service as a function, for the HTTP `/json` endpoint.
#[derive(Clone)]
pub struct Checker(service::Rls);

impl Checker {
    pub async fn check(
        &self,
        request: rl_gateway_proto::envoy::service::ratelimit::v3::RateLimitRequest,
    ) -> Result<rl_gateway_proto::envoy::service::ratelimit::v3::RateLimitResponse, tonic::Status>
    {
        use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
        self.0
            .should_rate_limit(tonic::Request::new(request))
            .await
            .map(tonic::Response::into_inner)
    }

    /// How many domains the live configuration has.
    pub fn domains(&self) -> usize {
        self.0.config.load().domains.len()
    }

    /// The names the live configuration's refusals are counted under among the top
    /// offenders (`GET /top`): one per domain, `rls:<domain>`.
    pub fn top_policies(&self) -> Vec<String> {
        let config = self.0.config.load();
        config
            .domains
            .keys()
            .map(|d| decide::top_policy(d))
            .collect()
    }
}

/// Loads the configuration and binds the listener (both errors are start-up errors).
pub async fn bind(
    opts: &RlsOptions,
    limiter: Limiter,
    gateway: Arc<Live>,
) -> Result<Bound, String> {
    let source = opts.config.clone().map(|path| Source {
        path,
        options: opts.load,
    });
    let loaded = match &source {
        Some(source) => {
            let loaded = source.load().map_err(|e| format!("--rls-config: {e}"))?;
            tracing::info!(
                path = %source.path.display(),
                domains = loaded.domains.len(),
                files = loaded.files.len(),
                "rate limit service configuration loaded"
            );
            loaded
        }
        None => RlsConfig::default(),
    };
    let tls = opts.tls.as_ref().map(server_tls).transpose()?;
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| format!("--rls-listen {}: {e}", opts.listen))?;
    let config = Arc::new(ArcSwap::from_pointee(loaded));
    let watch = match (&source, opts.watch) {
        (Some(source), true) => Some(watch(config.clone(), source.clone())?),
        _ => None,
    };
    Ok(Bound {
        listener,
        tls,
        max_connection_age: opts.max_connection_age,
        source,
        watch,
        service: service::Rls {
            config,
            offenders: Arc::new(offenders::TopOffenders::new(limiter.clone())),
            limiter,
            gateway,
            response_headers: opts.response_headers,
            hot_per_second: opts.hot_per_second,
            bounds: opts.bounds,
            header_names: opts.header_names.clone(),
            shadow_mode: opts.shadow_mode,
        },
    })
}

/// The listener's TLS: GRPC_SERVER_TLS_CERT and _KEY, and GRPC_CLIENT_TLS_CACERT to require
/// client certificates.
fn server_tls(t: &GrpcServerTls) -> Result<tonic::transport::ServerTlsConfig, String> {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let read = |name: &str, path: &std::path::Path| {
        crate::files::read_bounded(path).map_err(|e| format!("{name} {e}"))
    };
    let mut config = ServerTlsConfig::new().identity(Identity::from_pem(
        read("GRPC_SERVER_TLS_CERT", &t.cert)?,
        read("GRPC_SERVER_TLS_KEY", &t.key)?,
    ));
    if let Some(ca) = &t.client_ca {
        config = config.client_ca_root(Certificate::from_pem(read("GRPC_CLIENT_TLS_CACERT", ca)?));
    }
    Ok(config)
}

/// Swaps `loaded` in, or keeps the running configuration when it is an error: the one path
/// of every reload (SIGHUP, xDS), logged and counted in `rl_rls_config_reloads_total`.
pub fn install(
    live: &ArcSwap<RlsConfig>,
    loaded: Result<RlsConfig, String>,
    origin: &str,
) -> Result<(), String> {
    match loaded {
        Ok(c) => {
            tracing::info!(from = %origin, domains = c.domains.len(), "rate limit service configuration reloaded");
            live.store(Arc::new(c));
            metrics::counter!("rl_rls_config_reloads_total", "result" => "ok").increment(1);
            Ok(())
        }
        Err(e) => {
            tracing::error!(from = %origin, error = %e, "rate limit service configuration refused; the running one stays");
            metrics::counter!("rl_rls_config_reloads_total", "result" => "error").increment(1);
            Err(e)
        }
    }
}

impl Bound {
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The live configuration (for a source other than the files: xDS).
    pub fn live_config(&self) -> Arc<ArcSwap<RlsConfig>> {
        self.service.config.clone()
    }

    pub fn checker(&self) -> Checker {
        Checker(self.service.clone())
    }

    /// Serves until `stop` within `limits` (the public listener's: connection cap, preface
    /// and idle timeouts, and `body_timeout` for a whole call); reloads the configuration
    /// from its files (if any) on each SIGHUP and each change of their directory meanwhile.
    pub async fn serve(
        self,
        limits: ListenerLimits,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        // Kept until the service stops.
        let _watch = self.watch;
        #[cfg(unix)]
        if let Some(source) = self.source {
            tokio::spawn(reload_on_sighup(self.service.config.clone(), source));
        }
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(rl_gateway_proto::RLS_DESCRIPTOR_SET)
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
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = self.tls {
            server = server
                .tls_config(tls)
                .map_err(|e| format!("GRPC_SERVER_TLS_CERT/KEY: {e}"))?;
        }
        if let Some((age, grace)) = self.max_connection_age {
            server = server
                .max_connection_age(age)
                .max_connection_age_grace(grace);
        }
        server
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

/// Loads the configuration from `source` and swaps it in (on `cause`) through [`install`].
pub fn reload(live: &ArcSwap<RlsConfig>, source: &Source, cause: &str) {
    let _ = install(
        live,
        source.load(),
        &format!("{cause}: {}", source.path.display()),
    );
}
