//! Forwarding allowed requests to the upstream: hyper's HTTP/1.1 client connections, kept
//! alive in [`crate::proxy_pool`], over hyper-rustls (https upstreams), with the proxy's own duties done here:
//! hop-by-hop headers removed both ways (RFC 9110 section 7.6.1), `X-Forwarded-*`,
//! `Forwarded` (RFC 7239) and `Via` set, connect and response timeouts. Bodies stream both ways:
//! nothing is buffered whole.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::uri::PathAndQuery;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hyper_rustls::ConfigBuilderExt;
use hyper_util::client::legacy::connect::HttpConnector;
use ipnet::IpNet;
use redis_rl_middleware::{PendingSettle, REQUEST_ID, TRACEPARENT};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::proxy_pool::{Connections, Failure};
use crate::settle_body::SettleOnTrailers;

/// Headers that belong to one connection, not to the message (RFC 9110 section 7.6.1),
/// besides those named in `Connection`.
/// Names, not strings: removing by a string parses it into a name first, seven times per
/// message each way.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// How to reach the upstream.
pub struct UpstreamOptions<'a> {
    /// `http://host:port[/base]` or `https://...`.
    pub url: &'a str,
    /// Limit on establishing a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Limit on the response head, from sending the request (connecting included).
    pub response_timeout: Duration,
    /// PEM file of the CAs an https upstream's certificate must chain to, instead of the
    /// system's roots.
    pub ca_file: Option<&'a Path>,
}

/// The upstream base URL and its kept-alive connections; clones share them.
#[derive(Clone)]
pub struct Upstream {
    base: Arc<Base>,
    connections: Arc<Connections>,
}

struct Base {
    /// The `Host` sent upstream.
    host: Option<HeaderValue>,
    path: String,
    timeout: Duration,
    /// `rl_upstream_duration_seconds` by outcome, registered once (a label lookup per
    /// request was a visible cost) when the upstream is built, after the recorder is
    /// installed: every outcome's histogram is on /metrics, at 0, before the first call.
    durations: Durations,
}

/// The outcomes of an upstream call, as the duration histogram labels them.
const OUTCOMES: [&str; 7] = ["1xx", "2xx", "3xx", "4xx", "5xx", "timeout", "error"];

struct Durations([metrics::Histogram; 7]);

impl Durations {
    fn new() -> Self {
        Self(OUTCOMES.map(|o| metrics::histogram!("rl_upstream_duration_seconds", "outcome" => o)))
    }
}

impl Upstream {
    /// Parses the URL and builds the client (TLS roots are read only for https).
    pub fn new(o: &UpstreamOptions<'_>) -> Result<Self, String> {
        let url = o.url;
        let uri: Uri = url.parse().map_err(|e| format!("--upstream {url}: {e}"))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(format!(
                "--upstream {url}: expected http(s)://host[:port][/path]"
            ));
        };
        if uri.query().is_some() {
            return Err(format!("--upstream {url}: a query is not allowed"));
        }
        let tls = match scheme {
            "http" | "https" => rustls_config(scheme == "https", o.ca_file)?,
            _ => {
                return Err(format!(
                    "--upstream {url}: the scheme must be http or https"
                ))
            }
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(o.connect_timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let origin = Uri::builder()
            .scheme(scheme)
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| format!("--upstream {url}: {e}"))?;
        Ok(Self {
            base: Arc::new(Base {
                host: HeaderValue::from_str(authority.as_str()).ok(),
                path: uri.path().trim_end_matches('/').to_string(),
                timeout: o.response_timeout,
                durations: Durations::new(),
            }),
            connections: Connections::new(connector, origin),
        })
    }

    /// Sends `req` upstream and streams the answer back; a problem+json 502 when the
    /// upstream cannot be reached, 504 when connecting or the response head takes too long.
    /// `X-Forwarded-Proto` and `X-Forwarded-Host` from a peer in `trusted` are kept (the
    /// proxy in front knows the original scheme and host); anyone else's are replaced.
    pub async fn forward(&self, req: Request, trusted: &[IpNet]) -> Response {
        let (mut parts, body) = req.into_parts();
        let request_id = parts
            .headers
            .get(REQUEST_ID_NAME)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string();
        // The trace id of the traceparent the middleware set (the caller's trace, or the one
        // it started), for the problem bodies.
        let trace_id = parts
            .headers
            .get(TRACEPARENT_NAME)
            .and_then(|v| v.to_str().ok())
            .and_then(|t| t.get(3..35))
            .map(str::to_owned);
        let host = parts.headers.get(header::HOST).cloned().or_else(|| {
            let a = parts.uri.authority()?;
            HeaderValue::from_str(a.as_str()).ok()
        });
        // The request target in origin form (the connection is to the upstream itself).
        let target = match (parts.uri.path_and_query(), self.base.path.is_empty()) {
            (Some(pq), true) => Ok(pq.clone()),
            (pq, _) => {
                let pq = pq.map_or("/", PathAndQuery::as_str);
                PathAndQuery::try_from(format!("{}{pq}", self.base.path))
            }
        };
        parts.uri = match target {
            Ok(pq) => Uri::from(pq),
            Err(_) => {
                return problem(
                    StatusCode::BAD_REQUEST,
                    "bad request target",
                    &request_id,
                    trace_id.as_deref(),
                )
            }
        };
        strip_hop_by_hop(&mut parts.headers);
        // A cost settled from the response: ask for trailers too (an HTTP/1.1 upstream sends
        // them only to a client that says it accepts them).
        let pending = parts.extensions.remove::<PendingSettle>();
        if pending.is_some() {
            parts
                .headers
                .insert(header::TE, HeaderValue::from_static("trailers"));
        }
        // HTTP/1.1 upstream whatever the client spoke (the pool holds HTTP/1.1 connections;
        // an HTTP/1.0 request line would let the upstream close one after answering).
        parts.version = axum::http::Version::HTTP_11;
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(a)| a.ip());
        set_forwarded(&mut parts.headers, peer, host, trusted);
        // An HTTP-to-HTTP gateway sends Via in each inbound request (RFC 9110 section 7.6.3).
        const VIA: &str = "1.1 rl-gateway";
        append_value(&mut parts.headers, header::VIA, VIA, || {
            Some(HeaderValue::from_static(VIA))
        });
        if let Some(host) = &self.base.host {
            parts.headers.insert(header::HOST, host.clone());
        }

        let started = Instant::now();
        let sent = self.connections.send(Request::from_parts(parts, body));
        let (outcome, response) = match tokio::time::timeout(self.base.timeout, sent).await {
            Ok(Ok(resp)) => {
                let class = match resp.status().as_u16() {
                    100..=199 => "1xx",
                    200..=299 => "2xx",
                    300..=399 => "3xx",
                    400..=499 => "4xx",
                    _ => "5xx",
                };
                let mut resp = resp;
                if let Some(p) = pending.filter(|p| !p.found_in(resp.headers())) {
                    resp = resp.map(|b| SettleOnTrailers::wrap(b, p));
                }
                strip_hop_by_hop(resp.headers_mut());
                (class, resp)
            }
            Ok(Err(Failure::Connect(e))) if timed_out(e.as_ref()) => {
                tracing::warn!(error = %e, "upstream connect timed out");
                (
                    "timeout",
                    problem(
                        StatusCode::GATEWAY_TIMEOUT,
                        "upstream connect timed out",
                        &request_id,
                        trace_id.as_deref(),
                    ),
                )
            }
            Ok(Err(failure)) => {
                match &failure {
                    Failure::Connect(e) => {
                        tracing::warn!(error = %e, source = ?std::error::Error::source(e.as_ref()), "upstream connect failed");
                    }
                    Failure::Send(e) => {
                        tracing::warn!(error = %e, source = ?std::error::Error::source(e), "upstream request failed");
                    }
                }
                (
                    "error",
                    problem(
                        StatusCode::BAD_GATEWAY,
                        "upstream unavailable",
                        &request_id,
                        trace_id.as_deref(),
                    ),
                )
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = u64::try_from(self.base.timeout.as_millis()).unwrap_or(u64::MAX),
                    "upstream timed out"
                );
                (
                    "timeout",
                    problem(
                        StatusCode::GATEWAY_TIMEOUT,
                        "upstream timed out",
                        &request_id,
                        trace_id.as_deref(),
                    ),
                )
            }
        };
        let durations = &self.base.durations;
        if let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) {
            durations.0[i].record(started.elapsed().as_secs_f64());
        }
        response
    }
}

/// rustls on ring, TLS 1.2 and 1.3. An https upstream's certificate must chain to a CA of
/// `ca_file`, else to one of the system's roots (read by rustls-native-certs); an http
/// upstream needs no roots.
fn rustls_config(https: bool, ca_file: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("tls: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    match (https, ca_file) {
        (false, _) => {}
        (true, Some(path)) => {
            let bad = |e: &dyn std::fmt::Display| format!("--upstream-ca {}: {e}", path.display());
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))? {
                roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
            }
            if roots.is_empty() {
                return Err(bad(&"no certificate in the file"));
            }
        }
        (true, None) => {
            return Ok(builder
                .with_native_roots()
                .map_err(|e| {
                    format!("--upstream: no system CA certificates ({e}); pass --upstream-ca")
                })?
                .with_no_client_auth())
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// True when a connect error was caused by a timeout (hyper-util's connector reports it as
/// an `io::Error` of kind `TimedOut` in the source chain).
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Removes the connection-specific headers: the fixed list and every header named in
/// `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none of them: one look at each name present is cheaper than
    // seven removals, each a hash and a probe.
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    if headers.contains_key(header::CONNECTION) {
        strip_named_in_connection(headers);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

fn strip_named_in_connection(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
}

/// The middleware's headers as names: a `&str` is parsed into a name on each lookup.
const REQUEST_ID_NAME: HeaderName = HeaderName::from_static(REQUEST_ID);
const TRACEPARENT_NAME: HeaderName = HeaderName::from_static(TRACEPARENT);
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Appends the peer to `X-Forwarded-For` and `Forwarded`; sets `X-Forwarded-Proto` (the
/// gateway listens on plain http) and `X-Forwarded-Host` (the client's `Host`) unless a
/// trusted peer already set them.
fn set_forwarded(
    headers: &mut HeaderMap,
    peer: Option<IpAddr>,
    host: Option<HeaderValue>,
    trusted: &[IpNet],
) {
    let from_trusted = peer.is_some_and(|ip| trusted.iter().any(|n| n.contains(&ip)));
    if !from_trusted || !headers.contains_key(X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    }
    if !from_trusted || !headers.contains_key(X_FORWARDED_HOST) {
        match &host {
            Some(h) => headers.insert(X_FORWARDED_HOST, h.clone()),
            None => headers.remove(X_FORWARDED_HOST),
        };
    }
    let Some(peer) = peer else { return };
    // Written once, by hand for IPv4 (every request): an address's Display goes through the
    // formatting machinery, among the costlier steps of a request.
    let mut address = String::with_capacity(39);
    push_ip(&mut address, peer);
    let mut element = String::with_capacity(64);
    element.push_str("for=");
    match peer {
        IpAddr::V4(_) => element.push_str(&address),
        IpAddr::V6(_) => {
            element.push_str("\"[");
            element.push_str(&address);
            element.push_str("]\"");
        }
    }
    element.push_str(";proto=http");
    if let Some(h) = host.as_ref().and_then(|h| h.to_str().ok()) {
        element.push_str(";host=");
        push_quoted(&mut element, h);
    }
    append(headers, X_FORWARDED_FOR, &address);
    append(headers, header::FORWARDED, &element);
}

/// Writes `ip` as its Display does (dotted decimal for IPv4).
fn push_ip(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                if octet >= 100 {
                    out.push(char::from(b'0' + octet / 100));
                }
                if octet >= 10 {
                    out.push(char::from(b'0' + octet / 10 % 10));
                }
                out.push(char::from(b'0' + octet % 10));
            }
        }
        IpAddr::V6(v6) => {
            use std::fmt::Write;
            let _ = write!(out, "{v6}");
        }
    }
}

/// Sets `name` to its existing values (all lines, comma-joined) followed by `value`.
fn append(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    append_value(headers, name, value, || HeaderValue::from_str(value).ok());
}

/// [`append`] with the value to set when `name` is absent made by `alone` (a static value
/// needs no copy and no check).
fn append_value(
    headers: &mut HeaderMap,
    name: HeaderName,
    value: &str,
    alone: impl FnOnce() -> Option<HeaderValue>,
) {
    if !headers.contains_key(&name) {
        if let Some(v) = alone() {
            headers.insert(name, v);
        }
        return;
    }
    let prev: Vec<&str> = headers
        .get_all(&name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    let joined = if prev.is_empty() {
        value.to_string()
    } else {
        format!("{}, {value}", prev.join(", "))
    };
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(name, v);
    }
}

/// Writes a `Forwarded` value: a token as is, anything else (a host with a port) quoted.
fn push_quoted(out: &mut String, v: &str) {
    let token = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if token {
        out.push_str(v);
        return;
    }
    out.push('"');
    for c in v.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

fn problem(status: StatusCode, title: &str, request_id: &str, trace_id: Option<&str>) -> Response {
    let mut body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "request_id": request_id,
    });
    if let (Some(id), Some(fields)) = (trace_id, body.as_object_mut()) {
        fields.insert("trace_id".to_owned(), serde_json::Value::from(id));
    }
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_headers_and_those_named_in_connection_are_removed() {
        let mut h = headers(&[
            ("connection", "keep-alive, X-Hop"),
            ("connection", "x-other"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("x-hop", "1"),
            ("x-other", "2"),
            ("x-end-to-end", "3"),
            ("cache-control", "no-store"),
        ]);
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-end-to-end", "cache-control"]);
    }

    #[test]
    fn forwarded_headers_append_and_replace_what_an_untrusted_client_sent() {
        let mut h = headers(&[
            ("x-forwarded-for", "198.51.100.7"),
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "evil.example"),
            ("forwarded", "for=198.51.100.7"),
        ]);
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        set_forwarded(
            &mut h,
            Some(peer),
            Some(HeaderValue::from_static("api.example:8080")),
            &[],
        );
        assert_eq!(h["x-forwarded-for"], "198.51.100.7, 203.0.113.9, 127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example:8080");
        assert_eq!(
            h["forwarded"],
            "for=198.51.100.7, for=127.0.0.1;proto=http;host=\"api.example:8080\""
        );
    }

    #[test]
    fn a_trusted_proxy_keeps_its_proto_and_host_and_ipv6_is_bracketed() {
        let mut h = headers(&[
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "api.example"),
        ]);
        let peer: IpAddr = "::1".parse().unwrap();
        let trusted: Vec<IpNet> = vec!["::1/128".parse().unwrap()];
        set_forwarded(
            &mut h,
            Some(peer),
            Some(HeaderValue::from_static("internal")),
            &trusted,
        );
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "api.example");
        assert_eq!(h["x-forwarded-for"], "::1");
        assert_eq!(h["forwarded"], "for=\"[::1]\";proto=http;host=internal");
    }

    #[test]
    fn addresses_are_written_as_their_display() {
        for ip in [
            "0.0.0.0",
            "9.10.99.100",
            "127.0.0.1",
            "255.255.255.255",
            "::1",
            "2001:db8::8:800:200c:417a",
            "::ffff:192.0.2.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            let mut out = String::new();
            push_ip(&mut out, ip);
            assert_eq!(out, ip.to_string());
        }
    }

    #[test]
    fn forwarded_hosts_are_quoted_unless_tokens() {
        for (host, expected) in [
            ("api.example", "api.example"),
            ("api.example:8080", "\"api.example:8080\""),
            ("a\"b\\c", "\"a\\\"b\\\\c\""),
        ] {
            let mut out = String::new();
            push_quoted(&mut out, host);
            assert_eq!(out, expected, "{host}");
        }
    }

    #[test]
    fn bad_upstreams_are_refused() {
        for (url, expected) in [
            ("ftp://x", "scheme must be http or https"),
            ("/relative", "expected http(s)://"),
            ("http://x/?q=1", "query is not allowed"),
        ] {
            let err = Upstream::new(&UpstreamOptions {
                url,
                connect_timeout: Duration::from_secs(1),
                response_timeout: Duration::from_secs(1),
                ca_file: None,
            })
            .err()
            .unwrap();
            assert!(err.contains(expected), "{url}: {err}");
        }
        let err = Upstream::new(&UpstreamOptions {
            url: "https://127.0.0.1:1",
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            ca_file: Some(Path::new("/nonexistent/ca.pem")),
        })
        .err()
        .unwrap();
        assert!(err.contains("--upstream-ca /nonexistent/ca.pem"), "{err}");
    }
}
