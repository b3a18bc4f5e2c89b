//! Command-line flags (each also readable from an `RL_GATEWAY_*` environment variable).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use ipnet::IpNet;
use redis_rl_middleware::Dimension;

/// `--version`: the release and the commit it was built from (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RL_GIT_COMMIT"),
    ")"
);

/// What to do when Redis is unavailable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Allow every request (availability first; over-admission during the outage).
    Open,
    /// Refuse every request with 503 (protection first; the outage becomes an API outage).
    Closed,
    /// Decide in process with the same algorithms, each limit divided by the live fleet
    /// size (or --instances); leases in hand are spent first.
    Local,
}

/// rl-gateway: an API gateway that rate-limits with the redis-rl module.
///
/// Without --config it enforces the design's limits: tiers free 100/min (unknown keys),
/// pro 1000/min, enterprise 10000/min per API key (X-API-Key, or api_key_header in the
/// config; tier from the Redis hash rl:tiers, e.g. `HSET rl:tiers KEY pro`); 100/min per
/// client IP (per /64 for IPv6); 100/min per API key and endpoint; 100000/min globally;
/// local fallback behind a circuit breaker when Redis fails.
/// GET /healthz, GET /metrics, GET /bans, DELETE /bans/<policy>?key=<key>, GET /top and
/// DELETE /limits?key=<key> are built in and never limited (on --admin-listen when given;
/// without it the admin calls answer only a loopback caller that forwards for nobody).
/// SIGHUP re-reads --config and --rls-config, and so does a change in their directory
/// (unless --no-watch); a bad file is refused and the running one kept.
#[derive(Clone, Debug, Parser)]
#[command(name = "rl-gateway", version = VERSION, about, long_about)]
pub struct Args {
    /// Address of the gateway's own listener (the proxy, or demo answers without
    /// --upstream; /healthz and /metrics unless --admin-listen) [default: 127.0.0.1:8080,
    /// and none with --auth-listen or --rls-listen: give it to serve both].
    #[arg(long, env = "RL_GATEWAY_LISTEN")]
    pub listen: Option<SocketAddr>,

    /// Serve /healthz, /metrics, /bans, /top and /limits on this address only (e.g.
    /// 127.0.0.1:9090); the public listener then forwards those paths like any other.
    #[arg(long, env = "RL_GATEWAY_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,

    /// A client must send a request's head (request line and headers) within this many
    /// milliseconds of starting it, else the connection is closed.
    #[arg(long, env = "RL_GATEWAY_HEADER_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,

    /// A connection with no request in flight and no byte sent either way for this many
    /// milliseconds is closed (idle keep-alive connections, and clients that connect and
    /// send nothing).
    #[arg(long, env = "RL_GATEWAY_IDLE_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,

    /// A request's body must arrive within this many milliseconds of its head, else the
    /// connection is closed.
    #[arg(long, env = "RL_GATEWAY_BODY_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout_ms: u64,

    /// Connections served at once on --listen (0: from the open-file limit, leaving room
    /// for Redis, the admin listener and upstream connections). Past the cap a small
    /// overflow pool still answers /healthz (when served on --listen) and 503 to anything
    /// else; the admin listener has a cap of its own.
    #[arg(long, env = "RL_GATEWAY_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,

    /// Redis URL: redis://[user:password@]host:port/db, or rediss:// for TLS (with
    /// --cluster: a comma-separated list of seed node URLs).
    #[arg(
        long,
        env = "RL_GATEWAY_REDIS",
        default_value = "redis://127.0.0.1:6379/"
    )]
    pub redis: String,

    /// PEM file of the CA certificates a rediss:// server must present a chain to, instead
    /// of the system's trusted roots. The server's name (the URL's host) is checked.
    #[arg(long, env = "RL_GATEWAY_REDIS_CA")]
    pub redis_ca: Option<PathBuf>,

    /// PEM client certificate for rediss:// servers that authenticate clients by
    /// certificate (with --redis-key).
    #[arg(long, env = "RL_GATEWAY_REDIS_CERT", requires = "redis_key")]
    pub redis_cert: Option<PathBuf>,

    /// PEM private key of --redis-cert.
    #[arg(long, env = "RL_GATEWAY_REDIS_KEY", requires = "redis_cert")]
    pub redis_key: Option<PathBuf>,

    /// Talk to a Redis Cluster (keys are routed by hash slot; RL.ALL per slot).
    #[arg(long, env = "RL_GATEWAY_CLUSTER")]
    pub cluster: bool,

    /// TOML file with tiers (and their per-dimension overrides), dimension limits, rules,
    /// several windows per rate, API key header, IPv6 prefix, access lists, trusted proxies
    /// and failure mode (the book's "Rules and gateway configuration"). Flags below override
    /// it. Re-read on SIGHUP and when it changes.
    #[arg(long, env = "RL_GATEWAY_CONFIG")]
    pub config: Option<PathBuf>,

    /// Do not watch the directories of --config and --rls-config: reload on SIGHUP only.
    /// Without it a change in them (a file written or renamed, a Kubernetes ConfigMap's
    /// `..data` swap) reloads the configuration a moment after the last change.
    #[arg(long, env = "RL_GATEWAY_NO_WATCH")]
    pub no_watch: bool,

    /// Check a configuration file and exit: print the effective plan (dimensions, tiers,
    /// rules, windows, keys, which requests they match) and exit 0, or the error naming the
    /// file, line and field and exit 1. Nothing is started. A `.yaml`/`.yml` file or a
    /// directory is checked as --rls-config (envoyproxy/ratelimit's YAML, with
    /// --rls-merge-domains if given): its rules, or the error with file, line and column.
    #[arg(long, value_name = "FILE")]
    pub check_config: Option<PathBuf>,

    /// Forward allowed requests to this base URL (http:// or https://, HTTP/1.1 with
    /// pooled keep-alive connections), instead of answering them with a small demo JSON
    /// response.
    #[arg(long, env = "RL_GATEWAY_UPSTREAM")]
    pub upstream: Option<String>,

    /// PEM file of the CA certificates an https upstream must present a chain to, instead
    /// of the system's trusted roots.
    #[arg(long, env = "RL_GATEWAY_UPSTREAM_CA")]
    pub upstream_ca: Option<PathBuf>,

    /// Timeout for connecting to the upstream (TCP and TLS), in milliseconds (504 after).
    #[arg(
        long,
        env = "RL_GATEWAY_UPSTREAM_CONNECT_TIMEOUT_MS",
        default_value_t = 5_000
    )]
    pub upstream_connect_timeout_ms: u64,

    /// Timeout for the upstream's response head, connecting included, in milliseconds
    /// (504 after). The body then streams without a limit.
    #[arg(long, env = "RL_GATEWAY_UPSTREAM_TIMEOUT_MS", default_value_t = 30_000)]
    pub upstream_timeout_ms: u64,

    /// A proxy whose X-Forwarded-For is believed (CIDR; repeat for several).
    #[arg(
        long = "trusted-proxy",
        env = "RL_GATEWAY_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<IpNet>,

    /// Failure mode when Redis is unavailable [default: from the config, else local].
    #[arg(long, env = "RL_GATEWAY_FAILURE_MODE", value_enum)]
    pub failure_mode: Option<Mode>,

    /// A static fleet size: the local fallback enforces limit / instances, overriding the
    /// live fleet size [default: from the config, else the live fleet size (1 until known,
    /// or with --no-fleet)].
    #[arg(long, env = "RL_GATEWAY_INSTANCES")]
    pub instances: Option<u32>,

    /// Do not join the fleet: no membership heartbeat in Redis, no live fleet size (the
    /// local fallback divides by --instances, else 1).
    #[arg(long, env = "RL_GATEWAY_NO_FLEET")]
    pub no_fleet: bool,

    /// Dimensions served from leases (batches taken with UPTO, spent in process; repeat or
    /// comma-separate: api_key, ip, endpoint, global) [default: from the config, else
    /// global].
    #[arg(long, env = "RL_GATEWAY_HOT", value_delimiter = ',', value_parser = dimension)]
    pub hot: Vec<Dimension>,

    /// No leases: every dimension is decided by Redis on every request.
    #[arg(long, env = "RL_GATEWAY_NO_LEASES", conflicts_with = "hot")]
    pub no_leases: bool,

    /// Timeout of each Redis call, in milliseconds.
    #[arg(long, env = "RL_GATEWAY_TIMEOUT_MS", default_value_t = 50)]
    pub timeout_ms: u64,

    /// Consecutive Redis failures that open the circuit breaker.
    #[arg(long, env = "RL_GATEWAY_BREAKER_FAILURES", default_value_t = 5)]
    pub breaker_failures: u32,

    /// How long the open breaker skips Redis before one probe, in milliseconds.
    #[arg(long, env = "RL_GATEWAY_BREAKER_OPEN_MS", default_value_t = 1_000)]
    pub breaker_open_ms: u64,

    /// How Redis decides: `auto` (the module where its commands exist, else the Lua twin
    /// for servers that cannot load modules), `module` or `lua`.
    #[arg(long, env = "RL_GATEWAY_ENGINE", default_value = "auto")]
    pub engine: redis_rl_client::ServerImpl,

    /// Keys held by the hot-key deny cache (0 turns it off).
    #[arg(long, env = "RL_GATEWAY_DENY_CACHE", default_value_t = 10_000)]
    pub deny_cache: usize,

    /// Redis hash mapping API keys to tier names.
    #[arg(long, env = "RL_GATEWAY_TIER_HASH", default_value = "rl:tiers")]
    pub tier_hash: String,

    /// How long a key's tier is cached locally, in milliseconds (also how often the
    /// snapshot of the hash's keys, which answers unknown keys without a round trip, is
    /// refreshed).
    #[arg(long, env = "RL_GATEWAY_TIER_CACHE_MS", default_value_t = 10_000)]
    pub tier_cache_ms: u64,

    /// Route patterns for the endpoint dimension (axum syntax, e.g. /users/{id}; repeat or
    /// comma-separate). Other paths share the pattern /{*path}.
    #[arg(
        long = "route",
        env = "RL_GATEWAY_ROUTES",
        value_delimiter = ',',
        default_value = "/api/items/{id},/api/search,/api/users/{id}"
    )]
    pub routes: Vec<String>,

    /// Serve Envoy's rate limit service (gRPC, HTTP/2 without TLS) on this address:
    /// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit and grpc.health.v1.Health.
    /// Needs --rls-config.
    #[arg(long, env = "RL_GATEWAY_RLS_LISTEN", requires = "rls_config")]
    pub rls_listen: Option<SocketAddr>,

    /// envoyproxy/ratelimit's configuration for --rls-listen: a YAML file or a directory of
    /// them (several domains). Re-read on SIGHUP and when it changes.
    #[arg(long, env = "RL_GATEWAY_RLS_CONFIG", requires = "rls_listen")]
    pub rls_config: Option<PathBuf>,

    /// Several files of --rls-config may define one domain: their descriptors are merged
    /// into it (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); the same descriptor in two
    /// files is still refused. Without it a domain defined twice is refused.
    #[arg(long, env = "RL_GATEWAY_RLS_MERGE_DOMAINS")]
    pub rls_merge_domains: bool,

    /// Answer ShouldRateLimit with response_headers_to_add: RateLimit, RateLimit-Policy and
    /// X-RateLimit-Limit/Remaining/Reset.
    #[arg(long, env = "RL_GATEWAY_RLS_RESPONSE_HEADERS")]
    pub rls_response_headers: bool,

    /// Rate limit service rules of at least this many requests per second are served from
    /// leases (batches taken ahead, spent in process); 0: none.
    #[arg(long, env = "RL_GATEWAY_RLS_HOT_RATE", default_value_t = 0)]
    pub rls_hot_rate: u64,

    /// The most descriptors one ShouldRateLimit call may carry; a call with more is refused
    /// (INVALID_ARGUMENT naming this flag) before any work.
    #[arg(long, env = "RL_GATEWAY_RLS_MAX_DESCRIPTORS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rls_max_descriptors: u32,

    /// The most entries one descriptor of a ShouldRateLimit call may carry; a call with more
    /// is refused (INVALID_ARGUMENT naming this flag) before any work.
    #[arg(long, env = "RL_GATEWAY_RLS_MAX_ENTRIES", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub rls_max_entries: u32,

    /// Answer forward-auth checks on this address (nginx auth_request, Traefik ForwardAuth,
    /// Caddy forward_auth): the original request described by X-Forwarded-Method/Uri/Host/For
    /// or X-Original-Method/URI, decided with the configuration's limits: 200, 429 or 403.
    #[arg(long, env = "RL_GATEWAY_AUTH_LISTEN")]
    pub auth_listen: Option<SocketAddr>,

    /// File holding the gateway's secret (at least 32 bytes; keep it like a password): it
    /// signs the rl-settle-token of forward-auth checks and keys the API-key digests in key
    /// names, /top and /bans (a key derived for each use; the configuration's
    /// api_key_digest_secret_file, if set, keys the digests instead). Without it, a token
    /// secret is made up at each start (only that process then accepts its own tokens, so a
    /// fleet behind one load balancer shares a file) and digests are unkeyed.
    #[arg(long, env = "RL_GATEWAY_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,

    /// How long, in milliseconds, a forward-auth check's rl-settle-token can be spent by a
    /// `POST /.rl/settle` report (once).
    #[arg(long, env = "RL_GATEWAY_SETTLE_TOKEN_TTL_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub settle_token_ttl_ms: u64,

    /// Threads that serve the listeners; 0: one per CPU the process may run on. With one,
    /// a single-threaded scheduler runs everything: tasks woken meanwhile wait behind the
    /// ready ones, so Redis commands and socket writes of concurrent requests leave in
    /// batches.
    #[arg(long, env = "RL_GATEWAY_WORKERS", default_value_t = 0)]
    pub workers: usize,

    /// Log level: error, warn, info, debug or trace.
    #[arg(long, env = "RL_GATEWAY_LOG", default_value = "info")]
    pub log: tracing::Level,

    /// Read envoyproxy/ratelimit's environment (GRPC_PORT, PORT, RUNTIME_ROOT, REDIS_URL,
    /// CONFIG_TYPE=GRPC_XDS_SOTW...) and serve as that service: `auto` when one of its
    /// distinctive settings is set and no flag picks another mode (--config, --rls-config,
    /// --rls-listen, --upstream, --auth-listen); `on`; `off`. Flags given win over it; a
    /// setting that cannot be honoured stops the start, named (the book's "Swapping the
    /// image").
    #[arg(long, env = "RL_GATEWAY_ENVOY_ENV", value_enum, default_value = "auto")]
    pub envoy_env: crate::envoy_env::EnvoyEnvMode,

    /// The `key_prefix` put over the configuration's (envoyproxy/ratelimit's
    /// CACHE_KEY_PREFIX): no flag of its own, kept here so each reload applies it again.
    #[arg(skip)]
    pub key_prefix: Option<String>,
}

/// `--listen` when not given, and no other listener is asked for.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    8080,
));

impl Args {
    /// The gateway's own listener: `--listen`, else 127.0.0.1:8080 unless the gateway was
    /// started for forward auth or the rate limit service only.
    pub fn public_listen(&self) -> Option<SocketAddr> {
        let other = self.auth_listen.is_some() || self.rls_listen.is_some();
        self.listen.or((!other).then_some(DEFAULT_LISTEN))
    }
}

/// A dimension by its configuration name.
fn dimension(name: &str) -> Result<Dimension, String> {
    Dimension::from_name(name).ok_or_else(|| {
        format!("unknown dimension {name:?}, expected api_key, ip, endpoint or global")
    })
}
