//! The layer: validated configuration, shared by every service it makes.

use std::sync::Arc;

use tower_layer::Layer;

use super::config::RateLimitConfig;
use super::plan::Shared;
use super::request::RequestInfo;
use super::service::RateLimitService;
use crate::tier::TierResolver;
use redis_rl_client::error::Result;
use redis_rl_client::limiter::Limiter;

/// Rate-limits every request of the services it wraps; see the [module docs](super).
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
    info: Arc<dyn RequestInfo>,
}

impl RateLimitLayer {
    /// Validates `config` and builds the layer. `resolver` maps API keys to tier names.
    ///
    /// The peer address and the route pattern are read by the default [`RequestInfo`]:
    /// with the `axum` feature, axum's `ConnectInfo<SocketAddr>` and `MatchedPath`, else
    /// (or when those are missing) the [`SocketAddr`](std::net::SocketAddr) and
    /// [`RoutePattern`](super::RoutePattern) request extensions.
    pub fn new(
        limiter: Limiter,
        config: RateLimitConfig,
        resolver: Arc<dyn TierResolver>,
    ) -> Result<Self> {
        Self::with_routes(limiter, config, &[], resolver)
    }

    /// [`RateLimitLayer::new`] with route templates of the endpoint dimension besides the
    /// rules' paths (`/items/{id}`, `/files/**`): a path they match is counted under the
    /// template whatever the router says.
    pub fn with_routes(
        limiter: Limiter,
        config: RateLimitConfig,
        routes: &[String],
        resolver: Arc<dyn TierResolver>,
    ) -> Result<Self> {
        Ok(Self {
            shared: Arc::new(Shared::new(limiter, config, routes, resolver)?),
            info: default_request_info(),
        })
    }

    /// The policy engine (what a request is limited on, under which keys).
    pub fn engine(&self) -> &redis_rl_policy::Engine {
        self.shared.flow.engine()
    }

    /// Reads the peer address and the route pattern with `info` instead of the default.
    pub fn with_request_info(mut self, info: Arc<dyn RequestInfo>) -> Self {
        self.info = info;
        self
    }

    /// The limiter (for health endpoints: breaker state, stats).
    pub fn limiter(&self) -> &Limiter {
        &self.shared.limiter
    }
}

#[cfg(feature = "axum")]
fn default_request_info() -> Arc<dyn RequestInfo> {
    Arc::new(super::axum::AxumRequestInfo)
}

#[cfg(not(feature = "axum"))]
fn default_request_info() -> Arc<dyn RequestInfo> {
    Arc::new(super::request::Extensions)
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, self.shared.clone(), self.info.clone())
    }
}
