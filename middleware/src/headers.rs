//! The engine's responses and headers as `http` types.

use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

/// Adds `headers` to `map`, replacing what the application set under the same names.
pub fn write_headers(map: &mut HeaderMap, headers: &[(&'static str, String)]) {
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::try_from(value.as_str()) {
            map.insert(HeaderName::from_static(name), v);
        }
    }
}

/// The engine's refusal (429, 503, 403 or 400 with a problem+json body) as an
/// `http::Response` of any body type made from text.
pub fn to_response<B: From<String>>(r: redis_rl_policy::Response) -> Response<B> {
    let mut response = Response::new(B::from(r.body));
    *response.status_mut() =
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    write_headers(response.headers_mut(), &r.headers);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_status_headers_and_body() {
        let r = redis_rl_policy::forbidden("ip", "req-1");
        let resp: Response<String> = to_response(r);
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        assert_eq!(resp.headers()["x-request-id"], "req-1");
        let body: serde_json::Value = serde_json::from_str(resp.body()).unwrap();
        assert_eq!(body["denied_by"], "ip");
    }
}
