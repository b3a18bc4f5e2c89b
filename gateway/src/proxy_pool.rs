//! The upstream's keep-alive connections: hyper's HTTP/1 client connections kept in a stack
//! (the most recently used first), each back in the stack as soon as its response body is
//! finished.
//!
//! hyper-util's pooled client did the same with more per request: a pool keyed by host
//! behind a lock, a waiter channel, and a task spawned for each response to put its
//! connection back once ready; in profiles of the proxy it cost about a tenth of the
//! gateway's own CPU. Here a request takes a connection, waits until it can send (at once,
//! unless the last response's end is still being processed), and its body gives it back.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::Uri;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower::ServiceExt;

/// How long a connection may stay unused before it is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Why a request got no response head.
pub enum Failure {
    /// No connection could be opened (TCP or TLS).
    Connect(Error),
    /// The connection failed while sending or before the response head.
    Send(hyper::Error),
}

/// The connections to one upstream (`base`: scheme and authority).
pub struct Connections {
    connector: HttpsConnector<HttpConnector>,
    base: Uri,
    idle: Mutex<Vec<Idle>>,
    reaper_started: AtomicBool,
}

struct Idle {
    sender: SendRequest<Body>,
    since: Instant,
}

impl Connections {
    pub fn new(connector: HttpsConnector<HttpConnector>, base: Uri) -> Arc<Self> {
        Arc::new(Self {
            connector,
            base,
            idle: Mutex::new(Vec::new()),
            reaper_started: AtomicBool::new(false),
        })
    }

    /// Sends `req` (its URI in origin form) on an idle connection, else on a new one. A
    /// request the upstream never received because a kept-alive connection had closed
    /// meanwhile is sent again on another.
    pub async fn send(self: &Arc<Self>, mut req: Request) -> Result<Response, Failure> {
        loop {
            let (mut sender, reused) = match self.checkout() {
                Some(s) => (s, true),
                None => (self.connect().await?, false),
            };
            if reused && sender.ready().await.is_err() {
                continue; // closed while idle: try the next one
            }
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    let pool = self.clone();
                    return Ok(resp.map(|inner| {
                        Body::new(Returning {
                            inner,
                            finished: false,
                            home: Some((sender, pool)),
                        })
                    }));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => req = unsent,
                    _ => return Err(Failure::Send(e.into_error())),
                },
            }
        }
    }

    fn checkout(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(i) = idle.pop() {
            if !i.sender.is_closed() {
                return Some(i.sender);
            }
        }
        None
    }

    fn give_back(&self, sender: SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.push(Idle {
            sender,
            since: Instant::now(),
        });
    }

    async fn connect(self: &Arc<Self>) -> Result<SendRequest<Body>, Failure> {
        self.start_reaper();
        let io = self
            .connector
            .clone()
            .oneshot(self.base.clone())
            .await
            .map_err(Failure::Connect)?;
        let (sender, conn) = http1::Builder::new()
            .writev(false)
            .handshake(io)
            .await
            .map_err(Failure::Send)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(sender)
    }

    /// Closes connections idle for longer than [`IDLE_TIMEOUT`] (the oldest are at the
    /// bottom of the stack), until the connections are dropped.
    fn start_reaper(self: &Arc<Self>) {
        if self.reaper_started.swap(true, Ordering::Relaxed) {
            return;
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(IDLE_TIMEOUT / 4);
            loop {
                tick.tick().await;
                let Some(pool) = weak.upgrade() else { return };
                let mut idle = pool.idle.lock().unwrap_or_else(|p| p.into_inner());
                idle.retain(|i| !i.sender.is_closed() && i.since.elapsed() < IDLE_TIMEOUT);
            }
        });
    }
}

type Response = axum::http::Response<Body>;

/// A response body that puts its connection back into the pool once read to its end (a
/// body dropped before its end leaves the connection to close).
struct Returning {
    inner: Incoming,
    finished: bool,
    home: Option<(SendRequest<Body>, Arc<Connections>)>,
}

impl Returning {
    fn finish(&mut self) {
        self.finished = true;
        if let Some((sender, pool)) = self.home.take() {
            pool.give_back(sender);
        }
    }
}

impl http_body::Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            None => this.finish(),
            Some(Ok(_)) if this.inner.is_end_stream() => this.finish(),
            Some(Err(_)) => this.home = None,
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.finished || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        // An empty body (a 204, a HEAD answer) is never polled: it is finished already.
        if !self.finished && http_body::Body::is_end_stream(&self.inner) {
            self.finish();
        }
    }
}
