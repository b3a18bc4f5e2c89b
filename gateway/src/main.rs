//! rl-gateway: an example API gateway on axum with the redis-rl rate-limit middleware.
//! Run `rl-gateway --help` for the flags.

mod app;
mod cli;
mod forward_auth;
mod ops;
mod proxy;
mod reload;
mod rls;

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use redis_rl_client::middleware::RateLimitConfig;
use redis_rl_client::tier::FailureModeName;
use redis_rl_client::{BreakerConfig, LeaseConfig, Limiter, RedisHashTiers};

use crate::cli::{Args, Mode};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_max_level(args.log)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
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
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

async fn run(args: Args) -> Result<(), String> {
    #[cfg(unix)]
    let hangups = reload::hangups();
    let config = config(&args)?;
    let builder = Limiter::builder()
        .timeout(Duration::from_millis(args.timeout_ms.max(1)))
        .breaker(BreakerConfig {
            failure_threshold: args.breaker_failures.max(1),
            open_for: Duration::from_millis(args.breaker_open_ms),
        })
        .deny_cache(args.deny_cache)
        .engine(args.engine)
        .fleet_fallback(config.fleet_fallback())
        .leases(LeaseConfig {
            lifetime: Duration::from_millis(config.leases.lifetime_ms),
            demand: Duration::from_millis(config.leases.demand_ms),
            max_percent: config.leases.max_percent,
            ..LeaseConfig::default()
        });
    let limiter = if args.cluster {
        let nodes: Vec<String> = args.redis.split(',').map(str::to_string).collect();
        builder.cluster(&nodes)
    } else {
        builder.standalone(&args.redis)
    }
    .map_err(|e| format!("--redis {}: {e}", args.redis))?;
    if let Some(fleet) = config.fleet_config() {
        limiter.join_fleet(fleet).map_err(|e| e.to_string())?;
    }
    let tiers = RedisHashTiers::new(
        limiter.clone(),
        args.tier_hash.clone(),
        Duration::from_millis(args.tier_cache_ms),
        NonZeroUsize::new(100_000).unwrap_or(NonZeroUsize::MIN),
    );
    let prometheus = ops::install_recorder()?;
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
    let ops = ops::router(Arc::new(ops::Ops {
        live: live.clone(),
        prometheus,
    }));
    let (public_ops, admin) = match args.admin_listen {
        Some(addr) => (None, Some((addr, ops))),
        None => (Some(ops), None),
    };
    let rls = match (args.rls_listen, &args.rls_config) {
        (Some(listen), Some(path)) => {
            let opts = rls::RlsOptions {
                listen,
                config: path.clone(),
                response_headers: args.rls_response_headers,
                hot_per_second: args.rls_hot_rate,
            };
            Some(rls::bind(&opts, limiter.clone(), live.clone()).await?)
        }
        _ => None,
    };
    let forward_auth = match args.auth_listen {
        Some(addr) => {
            let app = forward_auth::ForwardAuth::new(live.clone())?.app();
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("--auth-listen {addr}: {e}"))?;
            Some((l, app))
        }
        None => None,
    };
    let router = app::public(live.clone(), public_ops);
    #[cfg(unix)]
    tokio::spawn(reload::on_sighup(live, hangups));

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
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
        redis = %args.redis,
        failure_mode = ?config.failure_mode,
        instances = config.instances.map_or(0, NonZeroU32::get),
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
    let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    if let Some(rls) = rls {
        let rx = stopped.clone();
        let path = args.rls_config.clone().unwrap_or_default();
        tracing::info!(listen = ?rls.local_addr(), "rate limit service listening");
        tokio::spawn(async move {
            if let Err(e) = rls.serve(path, until_stopped(rx)).await {
                tracing::error!(error = %e, "rate limit service failed");
            }
        });
    }
    if let Some((l, app)) = forward_auth {
        let rx = stopped.clone();
        tracing::info!(listen = ?l.local_addr().ok(), "forward auth listening");
        tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            if let Err(e) = axum::serve(l, app)
                .with_graceful_shutdown(until_stopped(rx))
                .await
            {
                tracing::error!(error = %e, "forward auth listener failed");
            }
        });
    }
    if let Some((l, router)) = admin {
        let rx = stopped.clone();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(l, router)
                .with_graceful_shutdown(until_stopped(rx))
                .await
            {
                tracing::error!(error = %e, "admin listener failed");
            }
        });
    }
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(until_stopped(stopped))
    .await
    .map_err(|e| e.to_string())?;
    // Leave the fleet at once (the others stop counting this gateway at their next
    // heartbeat) and give back what the leases hold.
    limiter.shutdown().await;
    Ok(())
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
