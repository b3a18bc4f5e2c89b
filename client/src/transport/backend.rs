//! The connection to Redis: standalone (connection manager) or cluster, connected lazily.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ConnectionAddr, ProtocolVersion, RedisResult, Value};
use tokio::sync::OnceCell;

use crate::transport::pipelined::Pipelined;

/// TLS material for `rediss://` servers, PEM-encoded (read from files by the caller).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificates the server's certificate must chain to (None: the system's roots).
    pub ca: Option<Vec<u8>>,
    /// A client certificate chain and its private key, for servers that check clients.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsFiles {
    fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        }
    }
}

/// A client for `url`: with `tls` material when given (the URL must be `rediss://`).
pub(crate) fn open_client(url: &str, tls: Option<&TlsFiles>) -> RedisResult<redis::Client> {
    match tls {
        Some(files) => redis::Client::build_with_tls(url, files.certificates()),
        None => redis::Client::open(url),
    }
}

/// A boxed, sendable future (the shape of [`Backend`]'s method).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Sends one command to Redis. The limiter wraps every call in its timeout and circuit
/// breaker, so implementations need neither.
///
/// Implemented by [`Standalone`] and [`Cluster`]; tests implement it to inject faults.
pub trait Backend: Send + Sync + 'static {
    /// Runs `cmd`. `slot` is the hash slot of its keys, for routing on a cluster
    /// (`None` on a standalone server, or for keyless commands).
    fn query<'a>(&'a self, cmd: &'a Cmd, slot: Option<u16>) -> BoxFuture<'a, RedisResult<Value>>;

    /// True when keys are spread over hash slots, so a multi-key call must be split by slot.
    fn is_cluster(&self) -> bool {
        false
    }
}

/// A server that is never reachable: every call fails as a refused connection. For tests of
/// what a limiter does without Redis (its failure modes, the local fallback), and for a
/// limiter that must only ever decide locally.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unreachable;

impl Backend for Unreachable {
    fn query<'a>(&'a self, _: &'a Cmd, _: Option<u16>) -> BoxFuture<'a, RedisResult<Value>> {
        Box::pin(async { Err(refused()) })
    }
}

/// The error of a connection the server refused.
pub(crate) fn refused() -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "down").into()
}

/// A standalone server (or a proxy that looks like one). A plain `redis://` server over
/// one pipelined connection of this crate (`pipelined.rs`: the commands of concurrent calls
/// leave in one write); TLS, Unix sockets and RESP3 through the `redis` crate's connection
/// manager (one multiplexed connection). Either is reconnected after an I/O error, and makes
/// its first connection on the first call, so a gateway that starts while Redis is down works
/// (on its failure mode) and switches to Redis when it appears.
pub struct Standalone {
    connection: Connection,
}

enum Connection {
    Pipelined(Pipelined),
    Managed(Box<Managed>),
}

struct Managed {
    client: redis::Client,
    config: redis::aio::ConnectionManagerConfig,
    conn: OnceCell<ConnectionManager>,
}

impl Standalone {
    /// A backend for `url` (`redis://host:port/db`); nothing is connected yet.
    /// `connect_timeout` bounds each connection attempt.
    pub fn new(url: &str, connect_timeout: Duration) -> RedisResult<Self> {
        Self::with_tls(url, connect_timeout, None)
    }

    /// [`new`](Self::new) with TLS material for a `rediss://` URL.
    pub fn with_tls(
        url: &str,
        connect_timeout: Duration,
        tls: Option<TlsFiles>,
    ) -> RedisResult<Self> {
        let client = open_client(url, tls.as_ref())?;
        let info = client.get_connection_info();
        if let (ConnectionAddr::Tcp(host, port), ProtocolVersion::RESP2) =
            (&info.addr, info.redis.protocol)
        {
            let pipelined =
                Pipelined::new(host.clone(), *port, info.redis.clone(), connect_timeout);
            return Ok(Self {
                connection: Connection::Pipelined(pipelined),
            });
        }
        // No retry inside a (re)connection attempt: the breaker, not the connection
        // manager, decides when to try again. (redis 0.27 builds its backoff on backon,
        // whose first retry waits the default minimum delay of 1 s plus up to 100 % jitter
        // whatever factor and max_delay say: with one retry, commands queued behind a
        // reconnect waited 1-2 s after Redis was back. Found by `make gameday`.)
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_factor(10)
            .set_max_delay(100)
            .set_connection_timeout(connect_timeout);
        Ok(Self {
            connection: Connection::Managed(Box::new(Managed {
                client,
                config,
                conn: OnceCell::new(),
            })),
        })
    }
}

impl Backend for Standalone {
    fn query<'a>(&'a self, cmd: &'a Cmd, _slot: Option<u16>) -> BoxFuture<'a, RedisResult<Value>> {
        match &self.connection {
            Connection::Pipelined(pipelined) => Box::pin(pipelined.query(cmd)),
            Connection::Managed(managed) => Box::pin(async move {
                let Managed {
                    client,
                    config,
                    conn,
                } = &**managed;
                let mut conn = conn
                    .get_or_try_init(|| {
                        ConnectionManager::new_with_config(client.clone(), config.clone())
                    })
                    .await?
                    .clone();
                cmd.query_async(&mut conn).await
            }),
        }
    }
}

/// A Redis Cluster, through the `redis` crate's async cluster connection. Commands go
/// straight to the primary of their keys' slot (module commands such as `RL.ALL` do not
/// have their key first, so the default routing would guess wrong).
pub struct Cluster {
    client: redis::cluster::ClusterClient,
    conn: OnceCell<redis::cluster_async::ClusterConnection>,
}

impl Cluster {
    /// A backend for the cluster reachable through `nodes` (seed URLs); nothing is
    /// connected yet.
    pub fn new(nodes: &[String], connect_timeout: Duration) -> RedisResult<Self> {
        Self::with_tls(nodes, connect_timeout, None)
    }

    /// [`new`](Self::new) with TLS material for `rediss://` seed URLs (the same for every
    /// node of the cluster).
    pub fn with_tls(
        nodes: &[String],
        connect_timeout: Duration,
        tls: Option<TlsFiles>,
    ) -> RedisResult<Self> {
        let mut builder = redis::cluster::ClusterClient::builder(nodes.to_vec())
            .connection_timeout(connect_timeout)
            .retries(1);
        if let Some(files) = &tls {
            builder = builder.certs(files.certificates());
        }
        let client = builder.build()?;
        Ok(Self {
            client,
            conn: OnceCell::new(),
        })
    }
}

impl Backend for Cluster {
    fn query<'a>(&'a self, cmd: &'a Cmd, slot: Option<u16>) -> BoxFuture<'a, RedisResult<Value>> {
        Box::pin(async move {
            let mut conn = self
                .conn
                .get_or_try_init(|| self.client.get_async_connection())
                .await?
                .clone();
            match slot {
                Some(slot) => {
                    let route =
                        SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
                    conn.route_command(cmd, RoutingInfo::SingleNode(route))
                        .await
                }
                None => cmd.query_async(&mut conn).await,
            }
        })
    }

    fn is_cluster(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_material_needs_rediss_urls_standalone_and_cluster() {
        let tls = Some(TlsFiles::default());
        let t = Duration::from_secs(1);
        let err = Standalone::with_tls("redis://127.0.0.1:1/", t, tls.clone())
            .err()
            .unwrap();
        assert!(err.to_string().contains("rediss://"), "{err}");
        assert!(Standalone::with_tls("rediss://u:p@127.0.0.1:1/", t, tls.clone()).is_ok());
        let nodes = ["rediss://u:p@127.0.0.1:1/".to_string()];
        assert!(Cluster::with_tls(&nodes, t, tls).is_ok());
        // Without material, rediss:// checks the server against the system's roots.
        assert!(Standalone::new("rediss://127.0.0.1:1/", t).is_ok());
    }
}
