//! The rate limit service's connections, bounded like the HTTP listeners' (see
//! `crate::limits`): at most `max_connections` at once (past it a connection is closed on
//! accept and counted in `rl_connections_refused_total{listener="rls"}`), the first bytes
//! (the HTTP/2 preface) within `header_timeout`, then no connection silent both ways for
//! `idle_timeout`. tonic's server has per-connection and per-request bounds (set in
//! `Bound::serve`) but no cap on connections and no idle timeout, so a few thousand clients
//! that connect and send nothing could hold every file descriptor.

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
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};

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
                    return Poll::Ready(Some(Ok(Bounded::new(stream, permit, self.limits))))
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

/// One connection: its slot, and the time of its last byte either way. The deadline is
/// checked lazily: when its timer fires, the connection is closed only if it really was
/// silent that long (no timer reset per read or write).
pub struct Bounded {
    inner: TcpStream,
    _slot: OwnedSemaphorePermit,
    last: Instant,
    spoke: bool,
    limits: ListenerLimits,
    timer: Pin<Box<Sleep>>,
}

impl Bounded {
    fn new(inner: TcpStream, slot: OwnedSemaphorePermit, limits: ListenerLimits) -> Self {
        let now = Instant::now();
        Self {
            inner,
            _slot: slot,
            last: now,
            spoke: false,
            limits,
            timer: Box::pin(tokio::time::sleep(limits.header_timeout)),
        }
    }

    /// Pending while the connection is within its deadline; an error once it is past.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let (limit, what) = if self.spoke {
                (self.limits.idle_timeout, "idle")
            } else {
                (self.limits.header_timeout, "no preface")
            };
            let due = self.last + limit;
            if Instant::now() >= due {
                metrics::counter!("rl_connections_timed_out_total", "listener" => "rls", "reason" => what)
                    .increment(1);
                return Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, what));
            }
            self.timer.as_mut().reset(due.into());
        }
    }
}

impl Connected for Bounded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
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
                if buf.filled().len() > before {
                    self.last = Instant::now();
                    self.spoke = true;
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
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.last = Instant::now();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.last = Instant::now();
        }
        r
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
