//! Settling a request's cost from the upstream's trailers: when the response head does not
//! carry the `settle` header, the proxy claims the settlement and reads the trailers at the
//! end of the body (a response without them, or one the client stopped reading, keeps the
//! reservation as taken).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::HeaderMap;
use http_body::{Frame, SizeHint};
use redis_rl_middleware::PendingSettle;

/// The upstream's body, watched for its trailers.
pub struct SettleOnTrailers {
    inner: Body,
    pending: Option<PendingSettle>,
}

impl SettleOnTrailers {
    /// Claims `pending` (the middleware no longer settles from the head) and wraps `inner`.
    pub fn wrap(inner: Body, pending: PendingSettle) -> Body {
        pending.claim();
        Body::new(Self {
            inner,
            pending: Some(pending),
        })
    }

    fn settle(&mut self, trailers: HeaderMap) {
        if let Some(p) = self.pending.take() {
            p.settle_later(trailers);
        }
    }
}

impl http_body::Body for SettleOnTrailers {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    this.settle(trailers.clone());
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.settle(HeaderMap::new()),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for SettleOnTrailers {
    fn drop(&mut self) {
        // The client stopped reading before the end: no trailer will come.
        self.settle(HeaderMap::new());
    }
}
