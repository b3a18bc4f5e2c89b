//! rl-gateway: an example API gateway on axum with the redis-rl rate-limit middleware.
//! Run `rl-gateway --help` for the flags.

mod admin;
mod app;
mod cli;
mod envoy_env;
mod envoy_http;
mod files;
mod forward_auth;
mod health;
mod limits;
mod ops;
mod proxy;
mod proxy_pool;
mod reload;
mod rls;
mod secret;
mod settle_body;
mod watch;
mod xds;

use std::num::{NonZeroU32, NonZeroUsize};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};
use redis_rl_client::{BreakerConfig, LeaseConfig, Limiter};
use redis_rl_middleware::RedisHashTiers;
use redis_rl_middleware::{FailureModeName, RateLimitConfig, RateLimitConfigExt, SettleTokens};

use crate::cli::{Args, Mode};
use crate::envoy_env::{ConfigSource, EnvoyEnv};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let matches = Args::command().get_matches();
    let mut args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(path) = &args.check_config {
        if rls::is_rls_config(path) {
            return check_rls_config(path, args.rls_merge_domains);
        }
        return check_config(path, &args.routes);
    }
    let env = |name: &str| std::env::var(name).ok();
    let envoy = if EnvoyEnv::wanted(args.envoy_env, &matches, &env) {
        match EnvoyEnv::read(&env) {
            Ok(mut e) => {
                e.apply(&mut args, &matches);
                Some(e)
            }
            Err(e) => {
                eprintln!("rl-gateway: envoyproxy/ratelimit's environment: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let workers = match args.workers {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        n => n,
    };
    // One worker: the current-thread scheduler. The multi-threaded one with one worker runs
    // a task woken by another next (its LIFO slot), so each request's Redis command and
    // each connection's write went out in a system call of its own.
    let runtime = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    };
    match runtime {
        Ok(rt) => rt.block_on(serve(args, envoy)),
        Err(e) => {
            eprintln!("rl-gateway: cannot start the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args, envoy: Option<EnvoyEnv>) -> ExitCode {
    let logs = tracing_subscriber::fmt()
        .with_max_level(args.log)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    if envoy.as_ref().is_some_and(|e| e.json_logs) {
        logs.json().init();
    } else {
        logs.init();
    }
    if let Some(e) = &envoy {
        tracing::info!("configured from envoyproxy/ratelimit's environment");
        for note in &e.notes {
            tracing::warn!("{note}");
        }
    }
    match run(args, envoy).await {
        Ok(()) => ExitCode::SUCCESS,
        // Once, on stderr (the log lines go to stdout: a terminal showed both).
        Err(e) => {
            eprintln!("rl-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The middleware configuration: the file (or the defaults), then the flags. Read at start
/// and again on each SIGHUP.
pub(crate) fn config(args: &Args) -> Result<RateLimitConfig, String> {
    let mut config = match &args.config {
        Some(path) => RateLimitConfig::load(path).map_err(|e| e.to_string())?,
        None => RateLimitConfig::default(),
    };
    if let Some(prefix) = &args.key_prefix {
        config.key_prefix = prefix.clone();
    }
    config
        .trusted_proxies
        .extend(args.trusted_proxies.iter().copied());
    if let Some(mode) = args.failure_mode {
        config.failure_mode = match mode {
            Mode::Open => FailureModeName::Open,
            Mode::Closed => FailureModeName::Closed,
            Mode::Local => FailureModeName::Local,
        };
    }
    // The gateway's secret keys API-key digests too (the engine derives a key of its own
    // from it), unless the file names a secret for that.
    if config.api_key_digest_secret_file.is_none() {
        if let Some(path) = &args.secret_file {
            let path = path
                .to_str()
                .ok_or("--secret-file: the path is not UTF-8")?;
            config.api_key_digest_secret_file = Some(path.to_string());
        }
    }
    if let Some(n) = args.instances {
        config.instances = Some(NonZeroU32::new(n).ok_or("--instances must be at least 1")?);
    }
    if args.no_fleet {
        config.fleet.membership = false;
    }
    if args.no_leases {
        config.hot.clear();
    } else if !args.hot.is_empty() {
        config.hot = args.hot.clone();
    }
    config.check().map_err(|e| e.to_string())?;
    Ok(config)
}

/// What the local fallback divides a limit by, for the start-up line: the static
/// `instances`, else the live fleet size (membership leases in Redis), else 1 (alone).
fn instances_shown(config: &RateLimitConfig) -> String {
    match config.instances {
        Some(n) => n.to_string(),
        None if config.fleet.membership => "live".to_string(),
        None => "1".to_string(),
    }
}

/// A listener's address as `127.0.0.1:8081` (`-` when it is not known).
fn address_shown(addr: Option<std::net::SocketAddr>) -> String {
    addr.map_or_else(|| "-".to_string(), |a| a.to_string())
}

/// `--check-config FILE`: the effective plan (exit 0) or the error naming the line and the
/// field (exit 1), without starting anything.
fn check_config(path: &std::path::Path, routes: &[String]) -> ExitCode {
    let engine = RateLimitConfig::load(path)
        .map_err(|e| e.to_string())
        .and_then(|c| {
            redis_rl_middleware::Engine::new(c, routes)
                .map_err(|e| format!("{}: {}: {}", path.display(), e.field, e.message))
        });
    match engine {
        Ok(engine) => {
            println!("{}: ok\n\n{}", path.display(), engine.explain());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rl-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--check-config` of envoyproxy/ratelimit's YAML (a `.yaml`/`.yml` file or a directory):
/// the rules (exit 0) or the error naming the file, line and column (exit 1).
fn check_rls_config(path: &std::path::Path, merge_domains: bool) -> ExitCode {
    let options = rls::config::LoadOptions {
        merge_domains,
        ..Default::default()
    };
    match rls::config::RlsConfig::load(path, options) {
        Ok(config) => {
            let count = |n: usize, what: &str| match n {
                1 => format!("1 {what}"),
                n => format!("{n} {what}s"),
            };
            println!(
                "{}: ok ({}, {})\n\n{}",
                path.display(),
                count(config.files.len(), "file"),
                count(config.domains.len(), "domain"),
                config.explain()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rl-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args, envoy: Option<EnvoyEnv>) -> Result<(), String> {
    #[cfg(unix)]
    let hangups = reload::hangups();
    let config = config(&args)?;
    // Before anything records (the fleet's first heartbeat): a metric recorded earlier
    // would be lost.
    let prometheus = ops::install_recorder()?;
    ops::at_zero(&config);
    let builder = Limiter::builder()
        .timeout(Duration::from_millis(args.timeout_ms.max(1)))
        .breaker(BreakerConfig {
            failure_threshold: args.breaker_failures.max(1),
            open_for: Duration::from_millis(args.breaker_open_ms),
        })
        .deny_cache(args.deny_cache)
        .server_impl(args.engine)
        .fleet_fallback(config.fleet_fallback())
        .leases(LeaseConfig {
            lifetime: Duration::from_millis(config.leases.lifetime_ms),
            demand: Duration::from_millis(config.leases.demand_ms),
            max_percent: config.leases.max_percent,
            ..LeaseConfig::default()
        });
    let builder = match redis_tls(&args)? {
        Some(files) => builder.tls(files),
        None => builder,
    };
    let limiter = if args.cluster {
        let nodes: Vec<String> = args.redis.split(',').map(str::to_string).collect();
        builder.cluster(&nodes)
    } else {
        builder.standalone(&args.redis)
    }
    .map_err(|e| format!("--redis {}: {e}", redacted(&args.redis)))?;
    if let Some(fleet) = config.fleet_config() {
        limiter.join_fleet(fleet).map_err(|e| e.to_string())?;
    }
    // Refunds, settlements and resets in one gateway end the others' cached refusals.
    if args.deny_cache > 0 {
        limiter
            .share_denials(format!("{}:denials", config.key_prefix))
            .map_err(|e| e.to_string())?;
    }
    let tiers = RedisHashTiers::new(
        limiter.clone(),
        args.tier_hash.clone(),
        Duration::from_millis(args.tier_cache_ms),
        NonZeroUsize::new(100_000).unwrap_or(NonZeroUsize::MIN),
    );
    let secret = secret::load(args.secret_file.as_deref())?;
    let upstream = match &args.upstream {
        Some(url) => Some(proxy::Upstream::new(&proxy::UpstreamOptions {
            url,
            connect_timeout: Duration::from_millis(args.upstream_connect_timeout_ms.max(1)),
            response_timeout: Duration::from_millis(args.upstream_timeout_ms.max(1)),
            ca_file: args.upstream_ca.as_deref(),
        })?),
        None => None,
    };
    let live = Arc::new(reload::Live::new(
        reload::Parts {
            args: args.clone(),
            limiter: limiter.clone(),
            tiers: Arc::new(tiers),
            upstream,
        },
        config.clone(),
    )?);
    let xds = envoy.as_ref().and_then(|e| match &e.config {
        ConfigSource::Xds(x) if args.rls_config.is_none() => Some(x.as_ref().clone()),
        _ => None,
    });
    let rls = match args.rls_listen {
        Some(listen) if args.rls_config.is_some() || xds.is_some() => {
            let opts = rls::RlsOptions {
                listen,
                config: args.rls_config.clone(),
                load: rls::config::LoadOptions {
                    merge_domains: args.rls_merge_domains,
                    skip_dot_files: envoy.as_ref().is_some_and(|e| e.ignore_dot_files),
                },
                response_headers: args.rls_response_headers,
                hot_per_second: args.rls_hot_rate,
                bounds: rls::RequestBounds {
                    max_descriptors: usize::try_from(args.rls_max_descriptors)
                        .unwrap_or(usize::MAX),
                    max_entries: usize::try_from(args.rls_max_entries).unwrap_or(usize::MAX),
                },
                header_names: envoy.as_ref().and_then(|e| e.headers.clone()),
                shadow_mode: envoy.as_ref().is_some_and(|e| e.shadow_mode),
                tls: envoy.as_ref().and_then(|e| e.grpc_tls.clone()),
                max_connection_age: envoy.as_ref().map(|e| e.max_connection_age),
                watch: !args.no_watch,
            };
            Some(rls::bind(&opts, limiter.clone(), live.clone()).await?)
        }
        _ => None,
    };
    let ops = ops::router(Arc::new(ops::Ops {
        live: live.clone(),
        prometheus: prometheus.clone(),
        admin: args.admin_listen.is_some(),
        rls: rls.as_ref().map(rls::Bound::checker),
    }));
    let (public_ops, admin) = match args.admin_listen {
        Some(addr) => (None, Some((addr, ops))),
        None => (Some(ops), None),
    };
    // Whether the rate limit service counts as configured (for /healthcheck): at start from
    // files, or over xDS with FORCE_START_WITHOUT_INITIAL_CONFIG; else at the first push.
    let (loaded, loaded_rx) =
        tokio::sync::watch::channel(xds.as_ref().is_none_or(|x| x.force_start));
    if let (Some(settings), Some(bound)) = (&xds, &rls) {
        tokio::spawn(
            xds::XdsClient {
                settings: settings.clone(),
                live: bound.live_config(),
                load: rls::config::LoadOptions {
                    merge_domains: args.rls_merge_domains,
                    skip_dot_files: false,
                },
                loaded,
            }
            .run(),
        );
    }
    let envoy_http = match (&envoy, &rls) {
        (Some(e), Some(bound)) => {
            let health = envoy_http::Health {
                checker: bound.checker(),
                limiter: limiter.clone(),
                loaded: loaded_rx.clone(),
                needs_domain: e.healthy_needs_config,
                needs_redis: e.healthy_needs_redis,
            };
            let prometheus = match &e.prometheus {
                Some((addr, path)) => {
                    let l = tokio::net::TcpListener::bind(addr)
                        .await
                        .map_err(|err| format!("PROMETHEUS_ADDR {addr}: {err}"))?;
                    Some((l, envoy_http::prometheus(path, prometheus.clone())))
                }
                None => None,
            };
            Some((envoy_http::router(health), prometheus))
        }
        _ => None,
    };
    let forward_auth = match args.auth_listen {
        Some(addr) => {
            let ttl = Duration::from_millis(args.settle_token_ttl_ms);
            let tokens = match &secret {
                Some(s) => SettleTokens::new(s, ttl),
                None => SettleTokens::random(ttl),
            };
            let app = forward_auth::ForwardAuth::new(live.clone(), tokens)?.app();
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("--auth-listen {addr}: {e}"))?;
            Some((l, app))
        }
        None => None,
    };
    let overflow = limits::overflow(public_ops.clone());
    let (router, prometheus_listener) = match envoy_http {
        // envoyproxy/ratelimit's HTTP port: its endpoints only.
        Some((router, prometheus)) => (app::Public::WithOps(router), prometheus),
        None => (app::public(live.clone(), public_ops), None),
    };
    // Kept for the life of the process.
    let _config_watch = if args.no_watch {
        None
    } else {
        reload::watch(&live)?
    };
    #[cfg(unix)]
    tokio::spawn(reload::on_sighup(live, hangups));

    let listener = match args.public_listen() {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("--listen {addr}: {e}"))?,
        ),
        None => None,
    };
    let local = match &listener {
        Some(l) => l.local_addr().map_err(|e| e.to_string())?.to_string(),
        None => "(none: no --listen)".to_string(),
    };
    if listener.is_none() && args.admin_listen.is_none() {
        tracing::warn!(
            "no --listen and no --admin-listen: /healthz and /metrics are not served (give --admin-listen)"
        );
    }
    let admin = match admin {
        Some((addr, router)) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("--admin-listen {addr}: {e}"))?;
            Some((l, router))
        }
        None => None,
    };
    tracing::info!(
        listen = %local,
        admin = %args.admin_listen.map_or_else(|| "(on --listen)".to_string(), |a| a.to_string()),
        redis = %redacted(&args.redis),
        failure_mode = ?config.failure_mode,
        instances = %instances_shown(&config),
        fleet = config.fleet.membership,
        hot = ?config.hot,
        upstream = args.upstream.as_deref().unwrap_or("(demo responses)"),
        "rl-gateway listening"
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown().await;
        let _ = stop.send(true);
    });
    let limits = limits::ListenerLimits {
        header_timeout: Duration::from_millis(args.header_timeout_ms),
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        body_timeout: Duration::from_millis(args.body_timeout_ms),
        max_connections: match args.max_connections {
            0 => limits::automatic_max_connections(args.upstream.is_some()),
            n => n,
        },
    };
    tracing::info!(
        max_connections = limits.max_connections,
        header_timeout_ms = args.header_timeout_ms,
        idle_timeout_ms = args.idle_timeout_ms,
        body_timeout_ms = args.body_timeout_ms,
        "listener limits"
    );
    if let Some(rls) = rls {
        let mut rx = stopped.clone();
        // envoyproxy/ratelimit waits for its first xDS configuration before serving,
        // unless FORCE_START_WITHOUT_INITIAL_CONFIG.
        let wait_for_config = xds.as_ref().is_some_and(|x| !x.force_start);
        let mut first = loaded_rx.clone();
        tokio::spawn(async move {
            if wait_for_config {
                tracing::info!("rate limit service waiting for its first configuration over xDS");
                let _ = first.wait_for(|l| *l).await;
            }
            tracing::info!(listen = %address_shown(rls.local_addr()), "rate limit service listening");
            let stop = async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            if let Err(e) = rls.serve(limits, stop).await {
                tracing::error!(error = %e, "rate limit service failed");
            }
        });
    }
    if let Some((l, router)) = prometheus_listener {
        let prometheus_limits = limits::ListenerLimits {
            max_connections: ADMIN_CONNECTIONS,
            ..limits
        };
        tokio::spawn(limits::serve(
            limits::Listener {
                listener: l,
                overflow: limits::overflow(None),
                router,
                limits: prometheus_limits,
                name: "prometheus",
            },
            stopped.clone(),
        ));
    }
    if let Some((l, app)) = forward_auth {
        tracing::info!(listen = %address_shown(l.local_addr().ok()), "forward auth listening");
        tokio::spawn(limits::serve(
            limits::Listener {
                listener: l,
                router: app,
                overflow: limits::overflow(None),
                limits,
                name: "auth",
            },
            stopped.clone(),
        ));
    }
    if let Some((l, router)) = admin {
        let rx = stopped.clone();
        // Operators and scrapers only: a few connections, always room for them.
        let admin_limits = limits::ListenerLimits {
            max_connections: ADMIN_CONNECTIONS,
            ..limits
        };
        tokio::spawn(limits::serve(
            limits::Listener {
                listener: l,
                overflow: limits::overflow(Some(router.clone())),
                router,
                limits: admin_limits,
                name: "admin",
            },
            rx,
        ));
    }
    match listener {
        Some(listener) => {
            limits::serve(
                limits::Listener {
                    listener,
                    router,
                    overflow,
                    limits,
                    name: "public",
                },
                stopped,
            )
            .await
        }
        None => {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|s| *s).await;
        }
    }
    // Leave the fleet at once (the others stop counting this gateway at their next
    // heartbeat) and give back what the leases hold.
    limiter.shutdown().await;
    Ok(())
}

/// Connections served at once on --admin-listen.
const ADMIN_CONNECTIONS: usize = 32;

/// `url` without its password (for logs and errors).
fn redacted(url: &str) -> String {
    url.split(',')
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                let userinfo = &u[scheme + 3..at];
                let user = userinfo.split(':').next().unwrap_or("");
                format!("{}{user}:***{}", &u[..scheme + 3], &u[at..])
            }
            _ => u.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The TLS material of --redis-ca, --redis-cert and --redis-key (None: none given).
fn redis_tls(args: &Args) -> Result<Option<redis_rl_client::TlsFiles>, String> {
    let read = |flag: &str, path: &std::path::Path| {
        files::read_bounded(path).map_err(|e| format!("{flag} {e}"))
    };
    let ca = args
        .redis_ca
        .as_deref()
        .map(|p| read("--redis-ca", p))
        .transpose()?;
    let client = match (&args.redis_cert, &args.redis_key) {
        (Some(cert), Some(key)) => Some((read("--redis-cert", cert)?, read("--redis-key", key)?)),
        _ => None,
    };
    if ca.is_none() && client.is_none() {
        return Ok(None);
    }
    if !args
        .redis
        .split(',')
        .all(|u| u.trim_start().starts_with("rediss://"))
    {
        return Err("--redis-ca, --redis-cert and --redis-key need rediss:// URLs".to_string());
    }
    Ok(Some(redis_rl_client::TlsFiles { ca, client }))
}

async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
}
