//! What the middleware reads from a request besides its headers: the peer address and the
//! route pattern. Routers and servers keep these in different places, so a
//! [`RequestInfo`] says where; [`Extensions`] is the framework-free default.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use http::{Extensions as HttpExtensions, HeaderMap, Method, Uri};

/// The parts of a request a [`RequestInfo`] may look at (the body is not one of them).
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI.
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The extensions (where servers and routers put the peer address and the route).
    pub extensions: &'a HttpExtensions,
}

impl<'a> RequestView<'a> {
    /// A view of `req`.
    pub fn of<B>(req: &'a http::Request<B>) -> Self {
        Self {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }
}

/// Finds the peer address and the route pattern of a request.
pub trait RequestInfo: Send + Sync + 'static {
    /// The address of the peer that sent the request (`X-Forwarded-For` is applied after,
    /// and only for trusted proxies). `None`: the IP dimension uses `unknown`.
    fn peer_ip(&self, req: &RequestView<'_>) -> Option<IpAddr>;

    /// The route pattern (`/items/{id}`), not the path, so ids do not multiply keys.
    /// `None`: the endpoint dimension uses `<unmatched>`.
    fn route(&self, req: &RequestView<'_>) -> Option<String>;
}

/// A request's route pattern, for routers other than axum's: insert it as a request
/// extension before the rate-limit layer runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutePattern(pub Cow<'static, str>);

/// The framework-free [`RequestInfo`]: the peer from a [`SocketAddr`] request extension
/// (as hyper-based servers can insert per connection), the route from a [`RoutePattern`]
/// extension.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extensions;

impl RequestInfo for Extensions {
    fn peer_ip(&self, req: &RequestView<'_>) -> Option<IpAddr> {
        req.extensions.get::<SocketAddr>().map(SocketAddr::ip)
    }

    fn route(&self, req: &RequestView<'_>) -> Option<String> {
        req.extensions
            .get::<RoutePattern>()
            .map(|r| r.0.clone().into_owned())
    }
}
