//! A request as the flow sees it: plain owned data, so any binding can build one.

use std::net::IpAddr;

/// What the flow needs to know of an HTTP request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpRequest {
    /// The method (`GET`).
    pub method: String,
    /// The path as received (the engine normalises it).
    pub path: String,
    /// The host from the URI's authority (`None`: the `Host` header).
    pub host: Option<String>,
    /// The headers, names in any case, every value in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The address of the peer that sent it.
    pub peer: Option<IpAddr>,
    /// The front end's own route template for it (a router's matched pattern), if any.
    pub route: Option<String>,
    /// The request id its answer carries (the front end picks it: the caller's if sane).
    pub request_id: String,
    /// The W3C trace id, written into problem bodies.
    pub trace_id: Option<String>,
    /// A report of a response's actual cost (forward auth's `POST /.rl/settle`): planned as
    /// its check was, its reservation settled from these headers, nothing taken, 204. Set
    /// only by trusted code, never from something a client sends.
    pub settle_report: bool,
}

impl HttpRequest {
    /// The engine's view of it.
    pub(crate) fn view(&self) -> redis_rl_policy::Request<'_> {
        redis_rl_policy::Request {
            method: &self.method,
            path: &self.path,
            host: self.host.as_deref(),
            headers: &self.headers,
            peer: self.peer,
            route: self.route.as_deref(),
        }
    }
}
