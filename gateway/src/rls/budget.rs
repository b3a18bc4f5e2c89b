//! The bytes of request messages the rate limit service holds while they arrive (tonic
//! gathers a message whole before decoding it, so a client that sends most of a large
//! message and stalls holds that memory): at most [`PER_CONNECTION_BYTES`] per connection
//! and [`TOTAL_BYTES`] for the process, each message at most [`MAX_MESSAGE_BYTES`]. A call
//! whose bytes would go past a budget is refused with RESOURCE_EXHAUSTED and its bytes
//! are freed at once; a stalled call's bytes are freed at the call timeout at the latest.
//! The bytes are given back when the message has been read (before it is decided).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

use super::listener::RlsConnectInfo;

/// The largest request message (an Envoy check is a few hundred bytes).
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Bytes of unfinished request messages one connection may hold.
pub const PER_CONNECTION_BYTES: usize = 4 << 20;
/// Bytes of unfinished request messages all connections together may hold.
pub const TOTAL_BYTES: usize = 64 << 20;

type GrpcBody = tonic::body::Body;
type Data = <GrpcBody as Body>::Data;

/// Counts every call's request bytes against its connection's budget and the process's.
#[derive(Clone)]
pub struct BudgetLayer {
    total: Arc<Semaphore>,
}

impl BudgetLayer {
    pub fn new() -> Self {
        Self {
            total: Arc::new(Semaphore::new(TOTAL_BYTES)),
        }
    }
}

impl<S> tower::Layer<S> for BudgetLayer {
    type Service = Budgeted<S>;

    fn layer(&self, inner: S) -> Budgeted<S> {
        Budgeted {
            inner,
            total: self.total.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Budgeted<S> {
    inner: S,
    total: Arc<Semaphore>,
}

impl<S> tower::Service<http::Request<GrpcBody>> for Budgeted<S>
where
    S: tower::Service<http::Request<GrpcBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<GrpcBody>) -> S::Future {
        let connection = req
            .extensions()
            .get::<RlsConnectInfo>()
            .map(|c| c.buffered.clone());
        let total = self.total.clone();
        self.inner.call(req.map(|body| {
            GrpcBody::new(Counted {
                inner: body,
                connection,
                total,
                held: Vec::new(),
            })
        }))
    }
}

/// A call's request body, holding a permit per byte received until it is dropped.
struct Counted {
    inner: GrpcBody,
    connection: Option<Arc<Semaphore>>,
    total: Arc<Semaphore>,
    held: Vec<OwnedSemaphorePermit>,
}

impl Counted {
    /// Takes `n` bytes from the connection's budget and the process's, or names the one
    /// that is spent.
    fn take(&mut self, n: usize) -> Result<(), Status> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(c) = &self.connection {
            let permit = c
                .clone()
                .try_acquire_many_owned(n)
                .map_err(|_| spent("connection", PER_CONNECTION_BYTES))?;
            self.held.push(permit);
        }
        let permit = self
            .total
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| spent("total", TOTAL_BYTES))?;
        self.held.push(permit);
        Ok(())
    }
}

fn spent(scope: &'static str, bytes: usize) -> Status {
    metrics::counter!("rl_rls_requests_refused_total", "reason" => "buffer_full").increment(1);
    Status::resource_exhausted(format!(
        "rate limit service: request bytes buffered ({scope}) past {bytes}; try again"
    ))
}

impl Body for Counted {
    type Data = Data;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Data>, Status>>> {
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => f,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            let n = data.len();
            if let Err(e) = self.take(n) {
                self.held.clear();
                return Poll::Ready(Some(Err(e)));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
