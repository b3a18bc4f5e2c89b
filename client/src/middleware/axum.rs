//! axum glue (feature `axum`): the peer from `ConnectInfo<SocketAddr>` and the route
//! pattern from `MatchedPath`, and refusals as axum [`Response`]s.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, MatchedPath};
use axum::response::Response;

use super::headers::{refusal_response, QuotaPolicy, Reported};
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

/// [`refusal_response`] as an axum [`Response`].
pub fn refusal(
    r: &Reported,
    policies: &[QuotaPolicy],
    request_id: &str,
    unavailable: bool,
    trace_id: Option<&str>,
) -> Response {
    refusal_response(r, policies, request_id, unavailable, trace_id)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::header::{CONTENT_TYPE, RETRY_AFTER};
    use http::StatusCode;

    use super::*;
    use crate::decision::Verdict;
    use crate::middleware::headers::tests::{ip_policy, reported};
    use crate::middleware::REQUEST_ID;

    #[tokio::test]
    async fn refusal_has_the_true_wait_and_a_problem_body() {
        let r = reported(Verdict::Denied {
            retry_after: Duration::from_millis(1_200),
        });
        let resp = refusal(&r, &[ip_policy()], "req-1", false, Some("t-1"));
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[RETRY_AFTER], "2");
        assert_eq!(resp.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(resp.headers()[REQUEST_ID], "req-1");
        let bytes = axum::body::to_bytes(resp.into_body(), 10_000)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["status"], 429);
        assert_eq!(body["dimension"], "ip");
        assert_eq!(body["request_id"], "req-1");
        assert_eq!(body["retry_after"], 2);
        assert_eq!(body["trace_id"], "t-1");

        let never = refusal(&reported(Verdict::Never), &[], "r", false, None);
        assert!(never.headers().get(RETRY_AFTER).is_none());
        let closed = refusal(
            &reported(Verdict::Denied {
                retry_after: Duration::from_secs(1),
            }),
            &[ip_policy()],
            "r",
            true,
            None,
        );
        assert_eq!(closed.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(closed.headers()[RETRY_AFTER], "1");
    }
}
