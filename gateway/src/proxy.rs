//! Forwarding allowed requests to an upstream HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis_rl_client::middleware::REQUEST_ID;

/// Headers that belong to one connection, not to the request (RFC 9110 section 7.6.1).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// An upstream base URL and a pooled HTTP/1 client.
#[derive(Clone)]
pub struct Upstream {
    scheme: String,
    authority: String,
    base_path: String,
    timeout: Duration,
    client: Arc<Client<HttpConnector, Body>>,
}

impl Upstream {
    /// Parses `http://host:port[/base]`.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, String> {
        let uri: Uri = url.parse().map_err(|e| format!("--upstream {url}: {e}"))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(format!(
                "--upstream {url}: expected http://host:port[/path]"
            ));
        };
        if scheme != "http" {
            return Err(format!("--upstream {url}: only http is supported"));
        }
        Ok(Self {
            scheme: scheme.to_string(),
            authority: authority.to_string(),
            base_path: uri.path().trim_end_matches('/').to_string(),
            timeout,
            client: Arc::new(Client::builder(TokioExecutor::new()).build_http()),
        })
    }

    /// Sends `req` upstream; 502 when the upstream fails, 504 when it is too slow.
    pub async fn forward(&self, req: Request) -> Response {
        let (mut parts, body) = req.into_parts();
        let request_id = parts
            .headers
            .get(REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let target = format!(
            "{}://{}{}{}",
            self.scheme, self.authority, self.base_path, path
        );
        parts.uri = match target.parse() {
            Ok(uri) => uri,
            Err(_) => return problem(StatusCode::BAD_REQUEST, "bad request target", &request_id),
        };
        for name in HOP_BY_HOP {
            parts.headers.remove(name);
        }
        if let Ok(host) = HeaderValue::from_str(&self.authority) {
            parts.headers.insert(header::HOST, host);
        }
        if let Some(ConnectInfo(peer)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
            let xff = HeaderName::from_static("x-forwarded-for");
            let value = match parts.headers.get(&xff).and_then(|v| v.to_str().ok()) {
                Some(prev) => format!("{prev}, {}", peer.ip()),
                None => peer.ip().to_string(),
            };
            if let Ok(v) = HeaderValue::from_str(&value) {
                parts.headers.insert(xff, v);
            }
        }
        let upstream_req = Request::from_parts(parts, body);
        match tokio::time::timeout(self.timeout, self.client.request(upstream_req)).await {
            Ok(Ok(resp)) => resp.map(Body::new),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "upstream request failed");
                problem(StatusCode::BAD_GATEWAY, "upstream unavailable", &request_id)
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                    "upstream timed out"
                );
                problem(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream timed out",
                    &request_id,
                )
            }
        }
    }
}

fn problem(status: StatusCode, title: &str, request_id: &str) -> Response {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "request_id": request_id,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}
