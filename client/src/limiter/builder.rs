//! The builder of a [`Limiter`]: its settings, and the stack of layers it assembles from
//! them (see [`crate::layers::decider`] for the diagram).

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Cached, Inner, Limiter, Stack, DEFAULT_TIMEOUT};
use crate::error::Result;
use crate::fleet::denials::{Denials, Source};
use crate::fleet::FleetView;
use crate::layers::decider::{Decider, ServerDecider, ServerImpl};
use crate::layers::deny_cache::{DenyCache, DenyCached};
use crate::layers::failover::Failover;
use crate::layers::fallback::LocalLimiter;
use crate::layers::lease::{LeaseConfig, Leased, Leases};
use crate::layers::shadow::Shadow;
use crate::transport::backend::{Backend, Cluster, Standalone, TlsFiles};
use crate::transport::breaker::BreakerConfig;
use crate::transport::Transport;

/// Builds a [`Limiter`].
///
/// ```
/// use std::time::Duration;
/// use redis_rl_client::{BreakerConfig, Limiter};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let limiter = Limiter::builder()
///     .timeout(Duration::from_millis(20))
///     .breaker(BreakerConfig { failure_threshold: 3, open_for: Duration::from_secs(1) })
///     .standalone("redis://127.0.0.1:6379/")
///     .unwrap(); // nothing is connected until the first call
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct LimiterBuilder {
    timeout: Duration,
    breaker: BreakerConfig,
    deny_cache: usize,
    local_capacity: usize,
    rl_all: Option<bool>,
    server_impl: ServerImpl,
    fleet_fallback: bool,
    leases: LeaseConfig,
    tls: Option<TlsFiles>,
}

impl Default for LimiterBuilder {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            breaker: BreakerConfig::default(),
            deny_cache: 10_000,
            local_capacity: 100_000,
            rl_all: None,
            server_impl: ServerImpl::Auto,
            fleet_fallback: true,
            leases: LeaseConfig::default(),
            tls: None,
        }
    }
}

impl LimiterBuilder {
    /// Timeout of each call to Redis (default 50 ms). A slow Redis then costs each request
    /// at most this, and the breaker soon stops even that.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Circuit breaker settings.
    pub fn breaker(mut self, config: BreakerConfig) -> Self {
        self.breaker = config;
        self
    }

    /// Keys remembered by the hot-key deny cache (default 10000; 0 turns it off).
    pub fn deny_cache(mut self, capacity: usize) -> Self {
        self.deny_cache = capacity;
        self
    }

    /// Keys held by the local fallback limiter (default 100000).
    pub fn local_capacity(mut self, capacity: usize) -> Self {
        self.local_capacity = capacity;
        self
    }

    /// Forces the use of `RL.ALL` (`Some(true)`) or of single calls (`Some(false)`) for
    /// multi-key checks, instead of detecting it once with `COMMAND INFO`.
    pub fn rl_all(mut self, use_it: Option<bool>) -> Self {
        self.rl_all = use_it;
        self
    }

    /// How the server decides (default [`ServerImpl::Auto`]: the module where its commands
    /// exist, else the Lua twin `lua/rl.lua`, for servers that cannot load modules).
    pub fn server_impl(mut self, server_impl: ServerImpl) -> Self {
        self.server_impl = server_impl;
        self
    }

    /// Whether the local fallback divides each limit by the live fleet size once
    /// [`Limiter::join_fleet`] has read it (default true), instead of by each policy's
    /// `FailureMode::Local { instances }` (which still applies before the size is known).
    /// Turn it off to keep a static `instances`.
    pub fn fleet_fallback(mut self, on: bool) -> Self {
        self.fleet_fallback = on;
        self
    }

    /// Lease settings for hot policies ([`Policy::hot`](crate::Policy::hot); default: 250 ms lifetime, 200 ms
    /// of demand, the fleet's leases of a key holding at most 10% of its limit).
    pub fn leases(mut self, config: LeaseConfig) -> Self {
        self.leases = config;
        self
    }

    /// TLS settings for `rediss://` URLs: the CA certificates the server must chain to
    /// (instead of the system's roots) and a client certificate. Without this, `rediss://`
    /// checks the server against the system's roots. The server's name (the URL's host)
    /// is checked either way.
    pub fn tls(mut self, files: TlsFiles) -> Self {
        self.tls = Some(files);
        self
    }

    /// A limiter on a standalone server (`redis://[user:password@]host:port/db`, or
    /// `rediss://` for TLS).
    pub fn standalone(self, url: &str) -> Result<Limiter> {
        let backend = Standalone::with_tls(url, self.timeout, self.tls.clone())?;
        let source = Source {
            url: url.to_owned(),
            tls: self.tls.clone(),
        };
        Ok(self.build(Arc::new(backend), Some(source)))
    }

    /// A limiter on a Redis Cluster reached through the seed `nodes` (URLs as for
    /// [`standalone`](Self::standalone)).
    pub fn cluster(self, nodes: &[String]) -> Result<Limiter> {
        let backend = Cluster::with_tls(nodes, self.timeout, self.tls.clone())?;
        // A PUBLISH reaches every node of a cluster: one seed node is enough to listen.
        let source = nodes.first().map(|url| Source {
            url: url.clone(),
            tls: self.tls.clone(),
        });
        Ok(self.build(Arc::new(backend), source))
    }

    /// A limiter on any [`Backend`] (tests use this to inject faults).
    pub fn backend(self, backend: Arc<dyn Backend>) -> Limiter {
        self.build(backend, None)
    }

    fn build(self, backend: Arc<dyn Backend>, source: Option<Source>) -> Limiter {
        let transport = Arc::new(Transport::new(
            backend,
            self.timeout,
            self.breaker,
            self.rl_all,
        ));
        let server: Box<dyn Decider> =
            Box::new(ServerDecider::new(transport.clone(), self.server_impl));
        let cached: Cached = Arc::new(DenyCached::new(
            server,
            NonZeroUsize::new(self.deny_cache).map(DenyCache::new),
        ));
        let fleet = Arc::new(FleetView::new(self.fleet_fallback));
        let failover = Failover::new(
            cached.clone(),
            transport.clone(),
            LocalLimiter::new(self.local_capacity),
            fleet.clone(),
        );
        let leases = Leases::new(self.leases, cached.clone(), fleet.clone());
        let resets = ServerDecider::new(transport.clone(), self.server_impl);
        let stack: Stack = Shadow::new(Leased::new(failover, leases));
        Limiter {
            inner: Arc::new(Inner {
                transport,
                stack,
                fleet,
                membership: Mutex::new(None),
                cached,
                denials: Denials::new(source),
                resets,
            }),
        }
    }
}
