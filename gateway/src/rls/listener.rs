//! The rate limit service's connections, bounded like the HTTP listeners' (see
//! `crate::limits`): at most `max_connections` at once (past it a connection is closed on
//! accept and counted in `rl_connections_refused_total{listener="rls"}`), the whole opening
//! (the HTTP/2 preface, the client's SETTINGS and its acknowledgement of the server's)
//! within `header_timeout` of the accept, then no connection without a call for
//! `idle_timeout` (PINGs, SETTINGS and a frame trickling in a byte at a time are not calls),
//! nor one whose client stops reading for `idle_timeout` (its answers would pile up). tonic's
//! server has per-connection and per-request bounds (set in `Bound::serve`) but no cap on
//! connections and no idle timeout, so a few thousand clients that connect and send nothing,
//! or a byte every few seconds, could hold every file descriptor.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tonic::transport::server::{Connected, TcpIncoming};

use super::budget;
use super::frames::{Frames, Opening, HEADERS};
use crate::limits::ListenerLimits;

/// Accepted connections, each holding one of `max_connections` slots until it closes.
pub struct CappedIncoming {
    inner: TcpIncoming,
    slots: Arc<Semaphore>,
    limits: ListenerLimits,
    warned: Option<Instant>,
}

impl CappedIncoming {
    pub fn new(inner: TcpIncoming, limits: ListenerLimits) -> Self {
        Self {
            inner,
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            limits,
            warned: None,
        }
    }
}

impl Stream for CappedIncoming {
    type Item = io::Result<Bounded>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let stream = match Pin::new(&mut self.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(s))) => s,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            };
            match self.slots.clone().try_acquire_owned() {
                Ok(permit) => {
                    let budget = Arc::new(Semaphore::new(budget::PER_CONNECTION_BYTES));
                    return Poll::Ready(Some(Ok(Bounded::new(
                        stream,
                        permit,
                        self.limits,
                        budget,
                    ))));
                }
                Err(_) => {
                    metrics::counter!("rl_connections_refused_total", "listener" => "rls")
                        .increment(1);
                    if self
                        .warned
                        .is_none_or(|w| w.elapsed() >= Duration::from_secs(10))
                    {
                        self.warned = Some(Instant::now());
                        tracing::warn!(
                            listener = "rls",
                            max_connections = self.limits.max_connections,
                            "connection cap reached: new connections are closed"
                        );
                    }
                    drop(stream);
                }
            }
        }
    }
}

/// One connection: its slot, its share of the bytes calls may buffer, and what its frames
/// say: whether the client finished opening it, how many calls are in flight, when a call
/// last moved and whether the server is waiting to write. The deadline is checked lazily:
/// when its timer fires, the connection is closed only if it really is past it.
pub struct Bounded {
    inner: TcpStream,
    _slot: OwnedSemaphorePermit,
    buffered: Arc<Semaphore>,
    limits: ListenerLimits,
    timer: Pin<Box<Sleep>>,
    accepted: Instant,
    from_client: Frames,
    from_server: Frames,
    opening: Opening,
    /// Calls the client started that the server has not ended (HEADERS from the client;
    /// END_STREAM from the server or a reset either way ends one).
    calls_open: usize,
    /// The last frame of a call (request or answer), either way.
    last_call: Instant,
    /// The last byte written, and whether the last write could not proceed.
    last_write: Instant,
    write_waiting: bool,
}

impl Bounded {
    fn new(
        inner: TcpStream,
        slot: OwnedSemaphorePermit,
        limits: ListenerLimits,
        buffered: Arc<Semaphore>,
    ) -> Self {
        let now = Instant::now();
        Self {
            inner,
            _slot: slot,
            buffered,
            limits,
            timer: Box::pin(tokio::time::sleep(limits.header_timeout)),
            accepted: now,
            from_client: Frames::from_client(),
            from_server: Frames::from_server(),
            opening: Opening::default(),
            calls_open: 0,
            last_call: now,
            last_write: now,
            write_waiting: false,
        }
    }

    /// When the connection is next due to close and why: the whole opening (preface,
    /// SETTINGS and the acknowledgement) within `header_timeout` of the accept, however it
    /// trickles in; then `idle_timeout` after the last frame of a call when none is in
    /// flight, and `idle_timeout` after the last byte written while the client does not
    /// read (its answers would pile up in memory). `None`: nothing due yet.
    fn due(&self) -> Option<(Instant, &'static str)> {
        if !self.opening.done() {
            return Some((self.accepted + self.limits.header_timeout, "no preface"));
        }
        let idle =
            (self.calls_open == 0).then(|| (self.last_call + self.limits.idle_timeout, "idle"));
        let stalled = self
            .write_waiting
            .then(|| (self.last_write + self.limits.idle_timeout, "not reading"));
        match (idle, stalled) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// Pending while the connection is within its deadline; an error once it is past.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            let Some((due, what)) = self.due() else {
                // A call in flight (bounded by the call timeout): look again later.
                self.timer
                    .as_mut()
                    .reset((now + self.limits.idle_timeout).into());
                continue;
            };
            if now >= due {
                metrics::counter!("rl_connections_timed_out_total", "listener" => "rls", "reason" => what)
                    .increment(1);
                return Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, what));
            }
            self.timer.as_mut().reset(due.into());
        }
    }

    fn read_frames(&mut self, data: &[u8]) {
        let (mut started, mut reset, mut moved) = (0usize, 0usize, false);
        // The idle time counts from the end of the opening, not from the accept.
        moved |= !self.opening.done();
        let opening = &mut self.opening;
        self.from_client.feed(data, |f| {
            opening.see(f);
            started += usize::from(f.kind == HEADERS);
            reset += usize::from(f.kind == RST_STREAM);
            moved |= f.is_call();
        });
        self.calls_open = self
            .calls_open
            .saturating_add(started)
            .saturating_sub(reset);
        if moved {
            self.last_call = Instant::now();
        }
    }

    /// A write that cannot proceed (the client does not read): the server may stop reading
    /// meanwhile, so the deadline is watched here too.
    fn write_pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if !self.write_waiting {
            self.write_waiting = true;
        }
        self.poll_deadline(cx).map(Err)
    }

    fn wrote(&mut self, data: &[u8]) {
        let now = Instant::now();
        self.last_write = now;
        self.write_waiting = false;
        let (mut ended, mut moved) = (0usize, false);
        self.from_server.feed(data, |f| {
            if (f.is_call() && f.flags & END_STREAM != 0) || f.kind == RST_STREAM {
                ended += 1;
            }
            moved |= f.is_call();
        });
        self.calls_open = self.calls_open.saturating_sub(ended);
        if moved {
            self.last_call = now;
        }
    }
}

/// The flag of a HEADERS or DATA frame that ends its stream.
const END_STREAM: u8 = 0x1;
const RST_STREAM: u8 = 0x3;

/// What a call knows of its connection: the connection's byte budget.
#[derive(Clone, Debug)]
pub struct RlsConnectInfo {
    pub buffered: Arc<Semaphore>,
}

impl Connected for Bounded {
    type ConnectInfo = RlsConnectInfo;

    fn connect_info(&self) -> RlsConnectInfo {
        RlsConnectInfo {
            buffered: self.buffered.clone(),
        }
    }
}

impl AsyncRead for Bounded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if let Some(read) = buf.filled().get(before..) {
                    self.read_frames(read);
                }
                Poll::Ready(r)
            }
            // The server always has a read pending: the deadline is watched here.
            Poll::Pending => self.poll_deadline(cx).map(Err),
        }
    }
}

impl AsyncWrite for Bounded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, data) {
            Poll::Ready(Ok(n)) => {
                self.wrote(data.get(..n).unwrap_or_default());
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.write_pending(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(Ok(n)) => {
                let mut left = n;
                for b in bufs {
                    let take = left.min(b.len());
                    self.wrote(b.get(..take).unwrap_or_default());
                    left -= take;
                    if left == 0 {
                        break;
                    }
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.write_pending(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
