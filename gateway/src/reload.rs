//! The live configuration: the limited router built from the config file and the flags,
//! swapped whole on SIGHUP and when the file changes. A request holds the router it started with until it is
//! answered, so a reload drops nothing in flight; a file that does not parse or validate is
//! refused and the running configuration stays.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use axum::Router;
use redis_rl_client::Limiter;
use redis_rl_middleware::TierResolver;
use redis_rl_middleware::{RateLimitConfig, RateLimitLayer};

use crate::cli::Args;
use crate::proxy::Upstream;

/// What a configuration is built into: fixed for the life of the process. A reload builds a
/// new rate-limit layer and drops the old one once its last request is answered, so state
/// that must outlive a reload (the breaker, the deny cache, the local fallback's counters,
/// fleet membership, the tier cache) lives in the limiter or the tier resolver, kept here.
pub struct Parts {
    pub args: Args,
    pub limiter: Limiter,
    pub tiers: Arc<dyn TierResolver>,
    pub upstream: Option<Upstream>,
}

/// One loaded configuration.
pub struct Current {
    /// The rate-limited routes (the upstream or the demo answers).
    pub router: Router,
    pub config: RateLimitConfig,
    /// 1 at start, +1 per successful reload.
    pub generation: u64,
}

/// The running configuration and the history of reloads.
pub struct Live {
    parts: Parts,
    current: ArcSwap<Current>,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Live {
    /// Builds the first configuration (`config`: the file and the flags, already read).
    pub fn new(parts: Parts, config: RateLimitConfig) -> Result<Self, String> {
        let router = build(&parts, &config)?;
        Ok(Self {
            parts,
            current: ArcSwap::from_pointee(Current {
                router,
                config,
                generation: 1,
            }),
            failed: AtomicU64::new(0),
            last_error: Mutex::new(None),
        })
    }

    /// The configuration new requests get.
    pub fn current(&self) -> Arc<Current> {
        self.current.load_full()
    }

    pub fn parts(&self) -> &Parts {
        &self.parts
    }

    /// Re-reads the file, applies the flags again and swaps the router in; on any error the
    /// running configuration stays. Returns the new generation.
    pub fn reload(&self) -> Result<u64, String> {
        let built = crate::config(&self.parts.args).and_then(|config| {
            let router = build(&self.parts, &config)?;
            Ok((router, config))
        });
        match built {
            Ok((router, config)) => {
                let generation = self.current.load().generation.saturating_add(1);
                self.current.store(Arc::new(Current {
                    router,
                    config,
                    generation,
                }));
                metrics::counter!("rl_config_reloads_total", "result" => "ok").increment(1);
                Ok(generation)
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                metrics::counter!("rl_config_reloads_total", "result" => "error").increment(1);
                Err(e)
            }
        }
    }

    /// For /healthz: the file, the generation, refused reloads and the last refusal.
    pub fn status(&self) -> ReloadStatus {
        ReloadStatus {
            path: self
                .parts
                .args
                .config
                .as_ref()
                .map(|p| p.display().to_string()),
            generation: self.current.load().generation,
            reloads_refused: self.failed.load(Ordering::Relaxed),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}

/// The reload history /healthz shows (the path and the error on the admin listener only:
/// a parse error quotes the file's line).
pub struct ReloadStatus {
    pub path: Option<String>,
    pub generation: u64,
    pub reloads_refused: u64,
    pub last_error: Option<String>,
}

fn build(parts: &Parts, config: &RateLimitConfig) -> Result<Router, String> {
    let layer = RateLimitLayer::with_routes(
        parts.limiter.clone(),
        config.clone(),
        &parts.args.routes,
        parts.tiers.clone(),
    )
    .map_err(|e| e.to_string())?;
    crate::app::limited(
        &parts.args.routes,
        layer,
        parts.upstream.clone(),
        config.trusted_proxies.clone(),
    )
}

/// SIGHUP as a stream, registered first thing at start: from then on a SIGHUP reloads (or,
/// until the configuration is built, waits) instead of ending the process, its default.
#[cfg(unix)]
pub fn hangups() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{signal, SignalKind};
    signal(SignalKind::hangup())
        .inspect_err(|e| tracing::warn!(error = %e, "cannot listen for SIGHUP: no reload"))
        .ok()
}

/// Reloads on every SIGHUP until the process ends.
#[cfg(unix)]
pub async fn on_sighup(live: Arc<Live>, hangups: Option<tokio::signal::unix::Signal>) {
    let Some(mut hup) = hangups else { return };
    while hup.recv().await.is_some() {
        reload_logged(&live, "SIGHUP");
    }
}

/// Reloads whenever the --config file changes (its directory is watched, so a ConfigMap's
/// swap is seen); None without --config. The watch stops when the returned value is dropped.
pub fn watch(live: &Arc<Live>) -> Result<Option<crate::watch::DirWatch>, String> {
    let Some(path) = &live.parts.args.config else {
        return Ok(None);
    };
    let (dir, names) = crate::watch::Names::for_path(path);
    // The watch calls back on a thread of its own: building the router runs in the
    // runtime's context, as a SIGHUP reload does (what it builds may spawn or use timers).
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| format!("--config: cannot watch outside the runtime: {e}"))?;
    let on_change = {
        let live = live.clone();
        move || {
            let _in_runtime = runtime.enter();
            reload_logged(&live, "file changed")
        }
    };
    crate::watch::watch_dir(&dir, names, false, crate::watch::DEFAULT_QUIET, on_change)
        .map(Some)
        .map_err(|e| format!("--config: {e}"))
}

/// Reloads the --config file (on `cause`), logging the outcome.
fn reload_logged(live: &Live, cause: &str) {
    let Some(path) = &live.parts.args.config else {
        tracing::warn!(cause, "no --config file to reload");
        return;
    };
    match live.reload() {
        Ok(generation) => {
            tracing::info!(path = %path.display(), generation, cause, "configuration reloaded")
        }
        Err(e) => tracing::error!(
            path = %path.display(),
            error = %e,
            cause,
            "configuration reload refused; the running configuration stays"
        ),
    }
}
