//! The listeners' own accept loop: hyper's HTTP/1 server with bounds on what one client can
//! hold. axum's `serve` has none (no header timeout, no idle timeout, no connection cap), so
//! a few hundred clients that connect and send nothing, or a header byte every few seconds,
//! used to hold every file descriptor and starve `/healthz`.
//!
//! - A request head must arrive within `header_timeout` (hyper's header read timer).
//! - A connection with no request in flight and no byte read or written for `idle_timeout`
//!   is closed (keep-alive connections included; checked four times per timeout, at least
//!   once a second).
//! - A request body must arrive within `body_timeout` of its head, else the connection is
//!   closed (the handler reading the body gets an error).
//! - At most `max_connections` are served; past that, a small overflow pool answers
//!   `/healthz` (when it is on this listener) and 503 to anything else, one request per
//!   connection with a short head timeout, and beyond the overflow pool connections are
//!   closed at once. The admin listener has its own cap, so it keeps answering.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, Response, StatusCode};
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tower::ServiceExt;

/// Connections of the overflow pool (past `max_connections`): enough for health checks
/// and a 503 to a few clients, small enough to stay inside the file descriptors kept free.
const OVERFLOW_CONNECTIONS: usize = 64;
/// How long an overflow connection may take to send its request head.
const OVERFLOW_HEADER_TIMEOUT: Duration = Duration::from_secs(1);
/// File descriptors kept out of the automatic connection cap: Redis connections, the
/// admin listener, the overflow pool, config and certificate files.
const RESERVED_FDS: u64 = 64 + OVERFLOW_CONNECTIONS as u64;

/// Bounds on one listener.
#[derive(Clone, Copy, Debug)]
pub struct ListenerLimits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
}

/// The connection cap when `--max-connections` is 0: what the process's file limit leaves
/// after the reserve, halved when each client connection may need an upstream connection
/// too; at least 16.
pub fn automatic_max_connections(with_upstream: bool) -> usize {
    let soft = open_files_limit().unwrap_or(1024);
    let usable = soft.saturating_sub(RESERVED_FDS);
    let per_client = if with_upstream { 2 } else { 1 };
    usize::try_from(usable / per_client)
        .unwrap_or(usize::MAX)
        .clamp(16, 100_000)
}

/// The soft limit on open files (RLIMIT_NOFILE), read from /proc (no libc binding needed).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

/// What a listener serves: `router` (an axum router, or any service of the same requests
/// and responses, whose handlers read `ConnectInfo<SocketAddr>`) within `limits`; `overflow`
/// answers requests on connections past the cap.
pub struct Listener<S = Router> {
    pub listener: TcpListener,
    pub router: S,
    pub overflow: Router,
    pub limits: ListenerLimits,
    pub name: &'static str,
}

/// Serves until `stop` turns true, then lets the open connections finish their request.
pub async fn serve<S: Routes>(l: Listener<S>, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(l.limits.max_connections.max(1)));
    let overflow_slots = Arc::new(Semaphore::new(OVERFLOW_CONNECTIONS));
    let open = Arc::new(AtomicUsize::new(0));
    let mut warned_full = Instant::now() - Duration::from_secs(60);
    loop {
        let accepted = tokio::select! {
            a = l.listener.accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors (or another transient error): accepting again at
                // once would spin; the descriptors come back as connections close.
                tracing::warn!(listener = l.name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let spawned = Spawned {
            stop: stop.clone(),
            open: open.clone(),
        };
        match slots.clone().try_acquire_owned() {
            Ok(p) => spawned.spawn(stream, peer, l.router.clone(), l.limits, p),
            Err(_) => {
                if warned_full.elapsed() >= Duration::from_secs(10) {
                    warned_full = Instant::now();
                    tracing::warn!(
                        listener = l.name,
                        max_connections = l.limits.max_connections,
                        "connection cap reached: new connections get the overflow answer"
                    );
                }
                metrics::counter!("rl_connections_refused_total", "listener" => l.name)
                    .increment(1);
                let Ok(p) = overflow_slots.clone().try_acquire_owned() else {
                    drop(stream);
                    continue;
                };
                let limits = ListenerLimits {
                    header_timeout: OVERFLOW_HEADER_TIMEOUT,
                    idle_timeout: OVERFLOW_HEADER_TIMEOUT,
                    ..l.limits
                };
                spawned.spawn(stream, peer, l.overflow.clone(), limits, p);
            }
        }
    }
    // Let the connections answer what they are serving (each closes after its response).
    let deadline = Instant::now() + Duration::from_secs(10);
    while open.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the watchdog of one connection sees.
struct Activity {
    /// Bumped on each read, write and finished response: the watchdog compares it between
    /// its ticks (a clock read per socket call was a visible cost of a proxied request).
    events: AtomicU64,
    /// Requests whose response body is not finished.
    in_flight: AtomicUsize,
    /// A request body missed its deadline: close the connection.
    kill: Notify,
}

impl Activity {
    fn touch(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

/// The watchdog's view of idleness: when it last saw the activity counter move.
struct IdleClock {
    seen: u64,
    since: Instant,
}

impl IdleClock {
    /// How long the connection has been idle, as of now.
    fn idle_for(&mut self, activity: &Activity) -> Duration {
        let events = activity.events.load(Ordering::Relaxed);
        if events != self.seen {
            self.seen = events;
            self.since = Instant::now();
        }
        self.since.elapsed()
    }
}

/// The services a listener can serve: what hyper's connection needs of them.
pub trait Routes:
    tower::Service<
        Request<Body>,
        Response = Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> Routes for S where
    S: tower::Service<
            Request<Body>,
            Response = Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// What a spawned connection shares with the accept loop.
struct Spawned {
    stop: watch::Receiver<bool>,
    open: Arc<AtomicUsize>,
}

impl Spawned {
    fn spawn<S: Routes>(
        self,
        stream: TcpStream,
        peer: SocketAddr,
        router: S,
        limits: ListenerLimits,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let Self { stop, open } = self;
        open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            connection(stream, peer, router, limits, stop).await;
            open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

async fn connection<S: Routes>(
    stream: TcpStream,
    peer: SocketAddr,
    router: S,
    limits: ListenerLimits,
    mut stop: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity {
        events: AtomicU64::new(0),
        in_flight: AtomicUsize::new(0),
        kill: Notify::new(),
    });
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let svc_activity = activity.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let router = router.clone();
        let activity = svc_activity.clone();
        async move {
            let guard = InFlight::new(activity.clone());
            req.extensions_mut().insert(ConnectInfo(peer));
            // No timer for a request without a body (most of them): nothing to wait for.
            let deadline = (!http_body::Body::is_end_stream(req.body()))
                .then(|| Box::pin(tokio::time::sleep(limits.body_timeout)));
            let req = req.map(|body| {
                Body::new(Bounded {
                    inner: body,
                    deadline,
                    activity: Some(activity),
                    _in_flight: None,
                })
            });
            let resp = match router.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            // HTTP/1.1 to the client whatever the handler (or the upstream) answered in:
            // an HTTP/1.0 status line would make the client drop its keep-alive connection.
            let (mut parts, body) = resp.into_parts();
            parts.version = axum::http::Version::HTTP_11;
            let body = Body::new(Bounded {
                inner: body,
                deadline: None,
                activity: None,
                _in_flight: Some(guard),
            });
            Ok::<_, Infallible>(Response::from_parts(parts, body))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true)
        .writev(false);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let check_every =
        (limits.idle_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut ticker = tokio::time::interval(check_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing = false;
    let mut idle = IdleClock {
        seen: 0,
        since: Instant::now(),
    };
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = activity.kill.notified() => return,
            _ = stop.wait_for(|s| *s), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = ticker.tick() => {
                if activity.in_flight.load(Ordering::Relaxed) == 0
                    && idle.idle_for(&activity) >= limits.idle_timeout
                {
                    return;
                }
            }
        }
    }
}

/// Counts a request from its head until its response body is finished (or dropped).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A body with an optional deadline (request bodies: past it, an error for the reader and
/// the connection closed) and an optional in-flight guard (response bodies).
struct Bounded<B> {
    inner: B,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    activity: Option<Arc<Activity>>,
    _in_flight: Option<InFlight>,
}

impl<B> http_body::Body for Bounded<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = B::Data;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if matches!(frame, None | Some(Err(_))) {
                    this.deadline = None;
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if let Some(deadline) = this.deadline.as_mut() {
                    if deadline.as_mut().poll(cx).is_ready() {
                        this.deadline = None;
                        if let Some(a) = &this.activity {
                            a.kill.notify_one();
                        }
                        metrics::counter!("rl_body_timeouts_total").increment(1);
                        return Poll::Ready(Some(Err("request body timed out".into())));
                    }
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The socket, counting each read or write that moved bytes.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The overflow router: `/healthz` from `ops` when it is served on this listener, else 503.
pub fn overflow(ops: Option<Router>) -> Router {
    let full = || async {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [
                (header::CONTENT_TYPE, "application/problem+json"),
                (header::CONNECTION, "close"),
                (header::RETRY_AFTER, "1"),
            ],
            r#"{"type":"about:blank","title":"too many connections","status":503}"#,
        )
    };
    let fallback = Router::new().fallback(full);
    match ops {
        Some(ops) => ops.merge(fallback),
        None => fallback,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_automatic_cap_leaves_descriptors_for_redis_admin_and_the_upstream() {
        let limit = open_files_limit().unwrap();
        let plain = automatic_max_connections(false);
        let proxied = automatic_max_connections(true);
        assert!(proxied <= plain);
        if limit < 100_000 {
            assert!((plain as u64) < limit, "{plain} of {limit}");
        }
    }
}
