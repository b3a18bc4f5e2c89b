//! One TCP connection to a standalone server shared by every concurrent call, pipelined:
//! each call appends its command to the connection's output buffer and waits for its reply;
//! one driver task per connection writes whatever has gathered in one write and hands the
//! replies back in order. Concurrent decisions leave in one write and come back in one read.
//!
//! Why not the `redis` crate's multiplexed connection (which it replaces for plain
//! `redis://` servers; TLS, Unix sockets and RESP3 still go through it): that one packs each
//! command into its own buffer, sends it over a channel to its driver, and parses replies
//! with parser combinators; per decision that was about a quarter of the client's CPU time.
//!
//! Behaves as the crate's connection manager did with no retries: connected on first use
//! (bounded by the connect timeout), after an I/O error every call waiting fails as an I/O
//! error and the next call connects again. The handshake is the crate's, in one write:
//! `AUTH [user] password` (again without the user on a server without ACLs), `SELECT db`,
//! `CLIENT SETINFO` (its errors ignored).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{ErrorKind, RedisConnectionInfo, RedisError, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};

use crate::transport::resp::{self, Reply};

/// A standalone server over one pipelined TCP connection, (re)connected on demand.
pub(crate) struct Pipelined {
    host: String,
    port: u16,
    redis: RedisConnectionInfo,
    connect_timeout: Duration,
    /// The connection in use (`None` before the first call).
    current: Mutex<Option<Arc<Link>>>,
    /// One connection attempt at a time: callers arriving meanwhile use its connection.
    connecting: tokio::sync::Mutex<()>,
}

/// One connection: what its callers share with its driver task.
struct Link {
    queue: Mutex<Queue>,
    /// Wakes the driver: commands to write, or the connection is no longer wanted.
    wake: Notify,
}

type Waiter = oneshot::Sender<RedisResult<Value>>;

#[derive(Default)]
struct Queue {
    /// Commands not written yet.
    out: Vec<u8>,
    /// One per command written or to write, in order: the replies come back in that order.
    waiting: VecDeque<Waiter>,
    /// The connection failed: no more commands on it.
    broken: bool,
    /// Its owner let it go: the driver stops.
    closed: bool,
}

impl Link {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_broken(&self) -> bool {
        self.queue().broken
    }
}

/// The error of a call on a connection that failed (an I/O error: an outage).
fn dropped(kind: std::io::ErrorKind, why: &str) -> RedisError {
    std::io::Error::new(kind, format!("connection to redis lost: {why}")).into()
}

impl Pipelined {
    pub(crate) fn new(
        host: String,
        port: u16,
        redis: RedisConnectionInfo,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            host,
            port,
            redis,
            connect_timeout,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    fn current(&self) -> MutexGuard<'_, Option<Arc<Link>>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection in use if it is sound.
    fn live(&self) -> Option<Arc<Link>> {
        self.current()
            .as_ref()
            .filter(|link| !link.is_broken())
            .cloned()
    }

    /// Sends `cmd` and waits for its reply (an error reply as the error).
    pub(crate) async fn query(&self, cmd: &redis::Cmd) -> RedisResult<Value> {
        let link = match self.live() {
            Some(link) => link,
            None => self.connect().await?,
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut queue = link.queue();
            if queue.broken {
                return Err(dropped(std::io::ErrorKind::BrokenPipe, "broken"));
            }
            resp::encode(cmd, &mut queue.out);
            queue.waiting.push_back(tx);
        }
        link.wake.notify_one();
        // A dropped sender: the driver ended with the reply owed (the runtime shut down).
        rx.await
            .unwrap_or_else(|_| Err(dropped(std::io::ErrorKind::BrokenPipe, "closed")))
    }

    /// A new connection (one attempt, within the connect timeout), or the one another
    /// caller made while this one waited.
    async fn connect(&self) -> RedisResult<Arc<Link>> {
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(link) = self.live() {
            return Ok(link);
        }
        let stream = tokio::time::timeout(self.connect_timeout, self.handshake())
            .await
            .map_err(|_| RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))??;
        let link = Arc::new(Link {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
        });
        tokio::spawn(drive(Arc::clone(&link), stream));
        if let Some(old) = self.current().replace(Arc::clone(&link)) {
            close(&old);
        }
        Ok(link)
    }

    /// Connects and sets the connection up as the `redis` crate does.
    async fn handshake(&self) -> RedisResult<TcpStream> {
        let mut stream = TcpStream::connect((self.host.as_str(), self.port)).await?;
        // Commands leave at once (Nagle would hold a batch back while the previous one is
        // unacknowledged).
        stream.set_nodelay(true)?;
        let mut buf = Vec::new();
        if self.setup(&mut stream, &mut buf, true).await? == Setup::RetryWithoutUser {
            // A server without ACLs (before Redis 6) takes only the password.
            self.setup(&mut stream, &mut buf, false).await?;
        }
        Ok(stream)
    }

    /// The setup commands in one write (one round trip, as the `redis` crate sends them):
    /// `AUTH [user] password`, `SELECT db`, and `CLIENT SETINFO` (which servers before 7.2
    /// refuse: its replies are ignored).
    async fn setup(
        &self,
        stream: &mut TcpStream,
        buf: &mut Vec<u8>,
        with_user: bool,
    ) -> RedisResult<Setup> {
        let mut cmds = Vec::new();
        if let Some(password) = &self.redis.password {
            let mut auth = redis::cmd("AUTH");
            if let (true, Some(user)) = (with_user, &self.redis.username) {
                auth.arg(user);
            }
            auth.arg(password);
            cmds.push(auth);
        }
        if self.redis.db != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(self.redis.db);
            cmds.push(select);
        }
        for (attr, value) in [
            ("LIB-NAME", "redis-rl"),
            ("LIB-VER", env!("CARGO_PKG_VERSION")),
        ] {
            let mut setinfo = redis::cmd("CLIENT");
            setinfo.arg("SETINFO").arg(attr).arg(value);
            cmds.push(setinfo);
        }
        let mut out = Vec::new();
        for cmd in &cmds {
            resp::encode(cmd, &mut out);
        }
        stream.write_all(&out).await?;
        let mut replies = Vec::with_capacity(cmds.len());
        for _ in &cmds {
            replies.push(read_reply(stream, buf).await?);
        }
        let mut replies = replies.into_iter();
        if self.redis.password.is_some() {
            match replies.next() {
                Some(Ok(Value::Okay)) => {}
                Some(Err(e))
                    if with_user
                        && self.redis.username.is_some()
                        && e.detail().is_some_and(|d| {
                            d.contains("wrong number of arguments for 'auth'")
                        }) =>
                {
                    return Ok(Setup::RetryWithoutUser);
                }
                _ => {
                    return Err((
                        ErrorKind::AuthenticationFailed,
                        "Password authentication failed",
                    )
                        .into())
                }
            }
        }
        if self.redis.db != 0 {
            if let Some(Err(e)) = replies.next() {
                let detail = e.detail().unwrap_or_default().to_string();
                return Err((
                    ErrorKind::ResponseError,
                    "Redis server refused to switch database",
                    detail,
                )
                    .into());
            }
        }
        Ok(Setup::Done)
    }
}

/// How a setup ended.
#[derive(Debug, PartialEq, Eq)]
enum Setup {
    Done,
    /// The server refused `AUTH user password` for its number of arguments.
    RetryWithoutUser,
}

impl Drop for Pipelined {
    fn drop(&mut self) {
        if let Some(link) = self.current().take() {
            close(&link);
        }
    }
}

/// Lets a connection go: its driver stops (at once if idle).
fn close(link: &Link) {
    link.queue().closed = true;
    link.wake.notify_one();
}

/// One reply during the handshake (the outer error: the connection failed; the inner one:
/// the server's error reply).
async fn read_reply(stream: &mut TcpStream, buf: &mut Vec<u8>) -> RedisResult<RedisResult<Value>> {
    loop {
        if let Reply::Complete(reply, len) = resp::decode(buf)? {
            buf.drain(..len);
            return Ok(reply);
        }
        buf.reserve(512);
        if stream.read_buf(buf).await? == 0 {
            return Err(dropped(
                std::io::ErrorKind::UnexpectedEof,
                "closed by the server",
            ));
        }
    }
}

/// The connection's driver: writes what callers queued, reads replies and hands each to the
/// oldest caller waiting. Ends when the connection fails (failing every caller waiting) or
/// when its owner lets it go.
async fn drive(link: Arc<Link>, stream: TcpStream) {
    // Whatever ends the driver (a failure, its owner, or its runtime dropping the task),
    // the connection is marked broken and its callers answered.
    let mut ended = Ended {
        link: Arc::clone(&link),
        why: (
            std::io::ErrorKind::BrokenPipe,
            "the connection's task ended".into(),
        ),
    };
    let (mut reader, mut writer) = stream.into_split();
    let mut input: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut output: Vec<u8> = Vec::new();
    let failure: Option<(std::io::ErrorKind, String)> = loop {
        tokio::select! {
            biased;
            read = reader.read_buf(&mut input) => {
                match read {
                    Ok(0) => break Some((std::io::ErrorKind::UnexpectedEof, "closed by the server".into())),
                    Err(e) => break Some((e.kind(), e.to_string())),
                    Ok(_) => {}
                }
                if let Err(e) = hand_back(&link, &mut input) {
                    break Some((std::io::ErrorKind::InvalidData, e.to_string()));
                }
                if input.capacity() - input.len() < 4096 {
                    input.reserve(16 * 1024);
                }
            }
            () = link.wake.notified() => {
                {
                    let mut queue = link.queue();
                    if queue.closed {
                        break None;
                    }
                    std::mem::swap(&mut queue.out, &mut output);
                }
                if !output.is_empty() {
                    if let Err(e) = writer.write_all(&output).await {
                        break Some((e.kind(), e.to_string()));
                    }
                    output.clear();
                }
            }
        }
    };
    if let Some(failure) = failure {
        ended.why = failure;
    }
}

/// Marks a connection broken when its driver ends, failing every caller still waiting.
struct Ended {
    link: Arc<Link>,
    why: (std::io::ErrorKind, String),
}

impl Drop for Ended {
    fn drop(&mut self) {
        let waiting = {
            let mut queue = self.link.queue();
            queue.broken = true;
            queue.out.clear();
            std::mem::take(&mut queue.waiting)
        };
        let (kind, why) = &self.why;
        for waiter in waiting {
            let _gone = waiter.send(Err(dropped(*kind, why)));
        }
    }
}

/// Decodes every complete reply in `input` and hands each to its caller (a caller that
/// stopped waiting, on its timeout, is skipped: the reply is consumed all the same).
fn hand_back(link: &Link, input: &mut Vec<u8>) -> Result<(), RedisError> {
    let mut used = 0;
    while let Reply::Complete(reply, len) = resp::decode(input.get(used..).unwrap_or_default())? {
        used += len;
        let waiter = link.queue().waiting.pop_front();
        if let Some(waiter) = waiter {
            let _gone = waiter.send(reply);
        }
    }
    input.drain(..used);
    Ok(())
}
