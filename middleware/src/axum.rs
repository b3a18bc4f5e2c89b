//! axum glue (feature `axum`): the peer from `ConnectInfo<SocketAddr>` and the route
//! pattern from `MatchedPath`, and refusals as axum [`Response`]s.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, MatchedPath};
use axum::response::Response;

use super::headers::to_response;
use super::request::{Extensions, RequestInfo, RequestView};
/// The default [`RequestInfo`] with the `axum` feature: axum's `ConnectInfo<SocketAddr>`
/// (serve with `into_make_service_with_connect_info::<SocketAddr>()`) and `MatchedPath`
/// (apply the layer with `Router::layer` so the pattern is known), else what
/// [`Extensions`] finds.
#[derive(Clone, Copy, Debug, Default)]
pub struct AxumRequestInfo;

impl RequestInfo for AxumRequestInfo {
    fn peer_ip(&self, req: &RequestView<'_>) -> Option<IpAddr> {
        req.extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
            .or_else(|| Extensions.peer_ip(req))
    }

    fn route(&self, req: &RequestView<'_>) -> Option<String> {
        req.extensions
            .get::<MatchedPath>()
            .map(|p| p.as_str().to_owned())
            .or_else(|| Extensions.route(req))
    }
}

/// The engine's refusal as an axum [`Response`].
pub fn refusal(r: redis_rl_policy::Response) -> Response {
    to_response(r)
}

#[cfg(test)]
mod tests {
    use http::header::CONTENT_TYPE;
    use http::StatusCode;

    use super::*;
    use crate::REQUEST_ID;

    #[tokio::test]
    async fn refusal_has_the_status_and_a_problem_body() {
        let resp = refusal(redis_rl_policy::forbidden("api_key", "req-1"));
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        assert_eq!(resp.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(resp.headers()[REQUEST_ID], "req-1");
        let bytes = axum::body::to_bytes(resp.into_body(), 10_000)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["status"], 403);
        assert_eq!(body["request_id"], "req-1");
    }
}
