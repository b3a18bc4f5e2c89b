//! envoyproxy/ratelimit's process contract: started with that service's environment (and no
//! flag that picks another mode), rl-gateway reads the settings it documents and behaves as
//! it does. [`SETTINGS`] lists every setting of that service with what rl-gateway does with
//! it: honoured, accepted without effect (a tuning knob of that implementation, or a setting
//! that only matters with another one that is refused), or refused at start with its name
//! when set to a value rl-gateway cannot honour. A flag given on the command line (or as
//! `RL_GATEWAY_*`) wins over the setting it overlaps.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, ValueEnum};

use crate::cli::Args;

/// What rl-gateway does with one setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handling {
    /// Read and applied ([`EnvoyEnv::read`]).
    Honoured,
    /// Accepted whatever its value; the text says why it changes nothing here.
    NoEffect(&'static str),
    /// Only `accepted` (compared as the setting's type: a boolean, a number or a text,
    /// ignoring case) may be set; any other value is refused at start with the reason.
    Only {
        accepted: &'static str,
        reason: &'static str,
    },
}

/// One setting of envoyproxy/ratelimit (`src/settings/settings.go`): its name, its default
/// there, and its handling here.
pub struct Setting {
    pub name: &'static str,
    pub default: &'static str,
    pub handling: Handling,
}

const fn honoured(name: &'static str, default: &'static str) -> Setting {
    Setting {
        name,
        default,
        handling: Handling::Honoured,
    }
}

const fn no_effect(name: &'static str, default: &'static str, why: &'static str) -> Setting {
    Setting {
        name,
        default,
        handling: Handling::NoEffect(why),
    }
}

const fn only(
    name: &'static str,
    default: &'static str,
    accepted: &'static str,
    reason: &'static str,
) -> Setting {
    Setting {
        name,
        default,
        handling: Handling::Only { accepted, reason },
    }
}

const NO_MEMCACHE: &str = "only used with BACKEND_TYPE=memcache, which is refused";
const NO_PER_SECOND: &str = "only used with REDIS_PERSECOND=true, which is refused";
const NO_STATSD: &str = "only used with statsd output, which is refused";
const NO_TRACING: &str = "only used with TRACING_ENABLED=true, which is refused";
const PIPELINED: &str = "the commands of concurrent requests always share one pipelined connection";

/// Every setting envoyproxy/ratelimit reads, in the order of its settings file.
pub const SETTINGS: &[Setting] = &[
    honoured("HOST", "0.0.0.0"),
    honoured("PORT", "8080"),
    honoured("DEBUG_HOST", "0.0.0.0"),
    honoured("DEBUG_PORT", "6070"),
    only("GRPC_UDS", "", "", "the rate limit service listens on TCP only"),
    honoured("GRPC_HOST", "0.0.0.0"),
    honoured("GRPC_PORT", "8081"),
    honoured("GRPC_MAX_CONNECTION_AGE", "24h"),
    honoured("GRPC_MAX_CONNECTION_AGE_GRACE", "1h"),
    honoured("GRPC_SERVER_USE_TLS", "false"),
    honoured("GRPC_SERVER_TLS_CERT", ""),
    honoured("GRPC_SERVER_TLS_KEY", ""),
    honoured("GRPC_CLIENT_TLS_CACERT", ""),
    only(
        "GRPC_CLIENT_TLS_SAN",
        "",
        "",
        "client certificates are checked against GRPC_CLIENT_TLS_CACERT only, not a SAN",
    ),
    honoured("LOG_LEVEL", "WARN"),
    honoured("LOG_FORMAT", "text"),
    honoured("CONFIG_TYPE", "FILE"),
    honoured("FORCE_START_WITHOUT_INITIAL_CONFIG", "false"),
    honoured("CONFIG_GRPC_XDS_NODE_ID", "default"),
    honoured("CONFIG_GRPC_XDS_NODE_METADATA", ""),
    honoured("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
    honoured("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s"),
    honoured("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ""),
    honoured("CONFIG_GRPC_XDS_SERVER_USE_TLS", "false"),
    honoured("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""),
    honoured("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""),
    honoured("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""),
    honoured("CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""),
    honoured("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s"),
    honoured("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s"),
    honoured("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5"),
    honoured("XDS_CLIENT_BACKOFF_JITTER", "true"),
    honoured("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", ""),
    only(
        "USE_DOG_STATSD",
        "false",
        "false",
        "no statsd output: metrics are on /metrics (Prometheus)",
    ),
    no_effect("USE_DOG_STATSD_MOGRIFIERS", "", NO_STATSD),
    // Checked apart: its default there is true (see `EnvoyEnv::read`).
    only(
        "USE_STATSD",
        "true",
        "false",
        "no statsd output: metrics are on /metrics (Prometheus)",
    ),
    no_effect("STATSD_HOST", "localhost", NO_STATSD),
    no_effect("STATSD_PORT", "8125", NO_STATSD),
    no_effect("EXTRA_TAGS", "", NO_STATSD),
    no_effect("STATS_FLUSH_INTERVAL", "10s", NO_STATSD),
    no_effect(
        "DISABLE_STATS",
        "false",
        "nothing is sent anywhere: metrics are only read from /metrics",
    ),
    honoured("USE_PROMETHEUS", "false"),
    honoured("PROMETHEUS_ADDR", ":9090"),
    honoured("PROMETHEUS_PATH", "/metrics"),
    only(
        "PROMETHEUS_MAPPER_YAML",
        "",
        "",
        "the metric names are fixed (the book's Behind Envoy, Metrics)",
    ),
    only(
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "false",
        "false",
        "durations are histograms in seconds",
    ),
    honoured("RUNTIME_ROOT", "/srv/runtime_data/current"),
    honoured("RUNTIME_SUBDIRECTORY", ""),
    honoured("RUNTIME_APPDIRECTORY", "config"),
    honoured("RUNTIME_IGNOREDOTFILES", "false"),
    honoured("RUNTIME_WATCH_ROOT", "true"),
    no_effect(
        "EXPIRATION_JITTER_MAX_SECONDS",
        "300",
        "a counter expires when its window ends",
    ),
    no_effect(
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "0",
        "the deny cache (--deny-cache, on by default) keeps over-limit counters in process",
    ),
    only(
        "NEAR_LIMIT_RATIO",
        "0.8",
        "0.8",
        "the near_limit metric counts past 80% of the limit",
    ),
    honoured("CACHE_KEY_PREFIX", ""),
    only(
        "BACKEND_TYPE",
        "redis",
        "redis",
        "Redis (or Valkey) is the only backend",
    ),
    honoured("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
    honoured("LIMIT_RESPONSE_HEADERS_ENABLED", "false"),
    honoured("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
    honoured("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
    honoured("LIMIT_RESET_HEADER", "RateLimit-Reset"),
    honoured("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false"),
    honoured("REDIS_SOCKET_TYPE", "unix"),
    honoured("REDIS_TYPE", "SINGLE"),
    honoured("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
    no_effect("REDIS_POOL_SIZE", "10", PIPELINED),
    honoured("REDIS_AUTH", ""),
    honoured("REDIS_TLS", "false"),
    honoured("REDIS_TLS_CLIENT_CERT", ""),
    honoured("REDIS_TLS_CLIENT_KEY", ""),
    honoured("REDIS_TLS_CACERT", ""),
    only(
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        "false",
        "false",
        "the server's name is always checked",
    ),
    no_effect("REDIS_PIPELINE_WINDOW", "0", PIPELINED),
    no_effect("REDIS_PIPELINE_LIMIT", "0", PIPELINED),
    no_effect("REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", PIPELINED),
    only(
        "REDIS_PERSECOND",
        "false",
        "false",
        "per-second limits are kept in the same Redis as the others",
    ),
    no_effect("REDIS_PERSECOND_SOCKET_TYPE", "unix", NO_PER_SECOND),
    no_effect("REDIS_PERSECOND_TYPE", "SINGLE", NO_PER_SECOND),
    no_effect(
        "REDIS_PERSECOND_URL",
        "/var/run/nutcracker/ratelimitpersecond.sock",
        NO_PER_SECOND,
    ),
    no_effect("REDIS_PERSECOND_POOL_SIZE", "10", NO_PER_SECOND),
    no_effect("REDIS_PERSECOND_AUTH", "", NO_PER_SECOND),
    no_effect("REDIS_PERSECOND_TLS", "false", NO_PER_SECOND),
    no_effect(
        "REDIS_SENTINEL_AUTH",
        "",
        "only used with REDIS_TYPE=sentinel, which is refused",
    ),
    no_effect("REDIS_PERSECOND_SENTINEL_AUTH", "", NO_PER_SECOND),
    no_effect("REDIS_PERSECOND_PIPELINE_WINDOW", "0", NO_PER_SECOND),
    no_effect("REDIS_PERSECOND_PIPELINE_LIMIT", "0", NO_PER_SECOND),
    no_effect("REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", NO_PER_SECOND),
    honoured("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false"),
    honoured("REDIS_TIMEOUT", "10s"),
    no_effect("REDIS_PERSECOND_TIMEOUT", "10s", NO_PER_SECOND),
    no_effect(
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "WAIT",
        "there is no pool to run empty: one multiplexed connection",
    ),
    no_effect("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", NO_PER_SECOND),
    no_effect(
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "1s",
        "rl-gateway starts without waiting for Redis: the failure mode answers until it is reachable",
    ),
    no_effect(
        "REDIS_STARTUP_MAX_INTERVAL",
        "30s",
        "rl-gateway starts without waiting for Redis: the failure mode answers until it is reachable",
    ),
    no_effect(
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "0",
        "rl-gateway starts without waiting for Redis: the failure mode answers until it is reachable",
    ),
    no_effect("MEMCACHE_HOST_PORT", "", NO_MEMCACHE),
    no_effect("MEMCACHE_MAX_IDLE_CONNS", "2", NO_MEMCACHE),
    no_effect("MEMCACHE_SRV", "", NO_MEMCACHE),
    no_effect("MEMCACHE_SRV_REFRESH", "0", NO_MEMCACHE),
    no_effect("MEMCACHE_TLS", "false", NO_MEMCACHE),
    no_effect("MEMCACHE_TLS_CLIENT_CERT", "", NO_MEMCACHE),
    no_effect("MEMCACHE_TLS_CLIENT_KEY", "", NO_MEMCACHE),
    no_effect("MEMCACHE_TLS_CACERT", "", NO_MEMCACHE),
    no_effect("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", NO_MEMCACHE),
    honoured("SHADOW_MODE", "false"),
    only(
        "QUOTA_MODE",
        "false",
        "false",
        "quota mode is not provided (quota_mode in a file is accepted and ignored)",
    ),
    only(
        "RESPONSE_DYNAMIC_METADATA",
        "false",
        "false",
        "no dynamic metadata is returned",
    ),
    honoured("MERGE_DOMAIN_CONFIG", "false"),
    only(
        "TRACING_ENABLED",
        "false",
        "false",
        "no OpenTelemetry tracing",
    ),
    no_effect("TRACING_SERVICE_NAME", "RateLimit", NO_TRACING),
    no_effect("TRACING_SERVICE_NAMESPACE", "", NO_TRACING),
    no_effect("TRACING_SERVICE_INSTANCE_ID", "", NO_TRACING),
    no_effect("TRACING_EXPORTER_PROTOCOL", "http", NO_TRACING),
    no_effect("TRACING_SAMPLING_RATE", "1", NO_TRACING),
];

/// Settings whose presence says the process was started as envoyproxy/ratelimit (names
/// only that service uses; `PORT`, `HOST` or `REDIS_URL` alone are too common to tell).
const MARKERS: &[&str] = &[
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "CONFIG_TYPE",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "GRPC_PORT",
    "GRPC_HOST",
    "REDIS_SOCKET_TYPE",
    "USE_STATSD",
    "BACKEND_TYPE",
];

/// Flags (or their `RL_GATEWAY_*` variables) that pick rl-gateway's own mode: with any of
/// them, `--envoy-env auto` leaves the environment alone.
const MODE_FLAGS: &[&str] = &[
    "config",
    "check_config",
    "rls_config",
    "rls_listen",
    "upstream",
    "auth_listen",
];

/// `--envoy-env`: whether envoyproxy/ratelimit's environment configures the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EnvoyEnvMode {
    /// When one of its distinctive settings (RUNTIME_ROOT, CONFIG_TYPE, GRPC_PORT,
    /// REDIS_SOCKET_TYPE, USE_STATSD...) is set and no flag picks another mode.
    Auto,
    /// Always (its defaults for anything not set).
    On,
    /// Never.
    Off,
}

/// Where the rate limit service's configuration comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigSource {
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
    Files { dir: PathBuf, watch_root: bool },
    /// An ADS state-of-the-world stream (`CONFIG_TYPE=GRPC_XDS_SOTW`).
    Xds(Box<XdsSettings>),
}

/// The xDS client's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct XdsSettings {
    /// `host:port` of the management server.
    pub server: String,
    pub node_id: String,
    /// `key=value` pairs of CONFIG_GRPC_XDS_NODE_METADATA.
    pub node_metadata: BTreeMap<String, String>,
    /// gRPC metadata sent with the stream.
    pub headers: BTreeMap<String, String>,
    pub tls: Option<XdsTls>,
    pub connect_retry: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Each wait is varied by up to this share either way (with jitter on).
    pub backoff_random_factor: f64,
    pub backoff_jitter: bool,
    pub max_message_bytes: Option<usize>,
    /// Serve before the first configuration arrives (else wait for it).
    pub force_start: bool,
}

/// TLS towards the management server.
#[derive(Clone, Debug, PartialEq)]
pub struct XdsTls {
    /// Client certificate and key (PEM files), when the server asks for one.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// CA certificates (PEM) the server's chain must lead to (else the system's roots).
    pub ca: Option<PathBuf>,
    /// The name to check in the server's certificate (else the URL's host).
    pub server_name: Option<String>,
}

/// TLS on the rate limit service's listener.
#[derive(Clone, Debug, PartialEq)]
pub struct GrpcServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate signed by these CAs.
    pub client_ca: Option<PathBuf>,
}

/// envoyproxy/ratelimit's response header names (`LIMIT_*_HEADER`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

/// Everything read from the environment that has no flag of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvoyEnv {
    /// `HOST:PORT`: `/healthcheck` and `/json`.
    pub http: SocketAddr,
    /// `DEBUG_HOST:DEBUG_PORT`: the gateway's operations endpoints.
    pub debug: SocketAddr,
    /// `PROMETHEUS_ADDR` and `PROMETHEUS_PATH` (with USE_PROMETHEUS=true).
    pub prometheus: Option<(SocketAddr, String)>,
    /// `GRPC_HOST:GRPC_PORT`.
    pub grpc: SocketAddr,
    pub grpc_tls: Option<GrpcServerTls>,
    /// GRPC_MAX_CONNECTION_AGE and its grace.
    pub max_connection_age: (Duration, Duration),
    pub config: ConfigSource,
    /// MERGE_DOMAIN_CONFIG.
    pub merge_domains: bool,
    /// RUNTIME_IGNOREDOTFILES.
    pub ignore_dot_files: bool,
    /// LIMIT_RESPONSE_HEADERS_ENABLED: the header names.
    pub headers: Option<HeaderNames>,
    /// SHADOW_MODE: every answer OK, counters kept.
    pub shadow_mode: bool,
    /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
    pub healthy_needs_config: bool,
    /// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION.
    pub healthy_needs_redis: bool,
    /// LOG_FORMAT=json.
    pub json_logs: bool,
    /// CACHE_KEY_PREFIX as the configuration's `key_prefix` (see [`key_prefix`]).
    pub key_prefix: Option<String>,
    /// Said at start: accepted settings without effect, statsd on by default there.
    pub notes: Vec<String>,
    // What the flags also set (applied by `apply` unless the flag was given).
    redis: String,
    cluster: bool,
    redis_tls_files: (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>),
    log: tracing::Level,
    redis_timeout: Option<Duration>,
}

impl EnvoyEnv {
    /// Whether the environment configures this process (`--envoy-env` and the flags given).
    pub fn wanted(
        mode: EnvoyEnvMode,
        matches: &ArgMatches,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> bool {
        match mode {
            EnvoyEnvMode::On => true,
            EnvoyEnvMode::Off => false,
            EnvoyEnvMode::Auto => {
                !MODE_FLAGS.iter().any(|id| given(matches, id))
                    && MARKERS.iter().any(|name| env(name).is_some())
            }
        }
    }

    /// Reads every setting of [`SETTINGS`] from `env`: the first one that cannot be honoured
    /// (or does not parse) is the error, naming it.
    pub fn read(env: &dyn Fn(&str) -> Option<String>) -> Result<EnvoyEnv, String> {
        let s = Reader { env };
        let mut notes = Vec::new();
        for setting in SETTINGS {
            let Some(value) = env(setting.name) else {
                continue;
            };
            match setting.handling {
                Handling::Honoured => {}
                Handling::NoEffect(why) => {
                    notes.push(format!("{}={value} has no effect: {why}", setting.name));
                }
                Handling::Only { accepted, reason } => {
                    if !same_value(&value, accepted) {
                        return Err(format!(
                            "{}={value} is not supported by rl-gateway: {reason}",
                            setting.name
                        ));
                    }
                }
            }
        }
        if env("USE_STATSD").is_none() {
            notes.push(
                "USE_STATSD is not set (envoyproxy/ratelimit's default is true): no statsd output, metrics are on /metrics".to_string(),
            );
        }
        let http = s.address("HOST", "PORT")?;
        let debug = s.address("DEBUG_HOST", "DEBUG_PORT")?;
        let grpc = s.address("GRPC_HOST", "GRPC_PORT")?;
        let prometheus = if s.boolean("USE_PROMETHEUS")? {
            let addr = s.text("PROMETHEUS_ADDR");
            let path = s.text("PROMETHEUS_PATH");
            if !path.starts_with('/') {
                return Err(format!("PROMETHEUS_PATH={path}: must start with /"));
            }
            Some((listen_address("PROMETHEUS_ADDR", &addr)?, path))
        } else {
            None
        };
        let grpc_tls = if s.boolean("GRPC_SERVER_USE_TLS")? {
            Some(GrpcServerTls {
                cert: s.required_path("GRPC_SERVER_TLS_CERT", "GRPC_SERVER_USE_TLS=true")?,
                key: s.required_path("GRPC_SERVER_TLS_KEY", "GRPC_SERVER_USE_TLS=true")?,
                client_ca: s.path("GRPC_CLIENT_TLS_CACERT"),
            })
        } else {
            None
        };
        let max_connection_age = (
            s.duration("GRPC_MAX_CONNECTION_AGE")?,
            s.duration("GRPC_MAX_CONNECTION_AGE_GRACE")?,
        );
        let config = match s.text("CONFIG_TYPE").as_str() {
            "FILE" => ConfigSource::Files {
                dir: [
                    s.text("RUNTIME_ROOT"),
                    s.text("RUNTIME_SUBDIRECTORY"),
                    s.text("RUNTIME_APPDIRECTORY"),
                ]
                .iter()
                .filter(|p| !p.is_empty())
                .collect(),
                watch_root: s.boolean("RUNTIME_WATCH_ROOT")?,
            },
            "GRPC_XDS_SOTW" => ConfigSource::Xds(Box::new(s.xds()?)),
            other => {
                return Err(format!(
                    "CONFIG_TYPE={other}: expected FILE or GRPC_XDS_SOTW"
                ))
            }
        };
        let headers = s
            .boolean("LIMIT_RESPONSE_HEADERS_ENABLED")?
            .then(|| HeaderNames {
                limit: s.text("LIMIT_LIMIT_HEADER"),
                remaining: s.text("LIMIT_REMAINING_HEADER"),
                reset: s.text("LIMIT_RESET_HEADER"),
            });
        // A refused request counts nothing here whatever this says (one decision per
        // request): STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true is always the behaviour.
        s.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")?;
        let (redis, cluster, redis_tls_files) = s.redis()?;
        let log = log_level(&s.text("LOG_LEVEL"))?;
        let redis_timeout = match env("REDIS_TIMEOUT") {
            Some(_) => Some(s.duration("REDIS_TIMEOUT")?),
            None => None,
        };
        Ok(EnvoyEnv {
            http,
            debug,
            prometheus,
            grpc,
            grpc_tls,
            max_connection_age,
            config,
            merge_domains: s.boolean("MERGE_DOMAIN_CONFIG")?,
            ignore_dot_files: s.boolean("RUNTIME_IGNOREDOTFILES")?,
            headers,
            shadow_mode: s.boolean("SHADOW_MODE")?,
            healthy_needs_config: s.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")?,
            healthy_needs_redis: s.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")?,
            json_logs: s.text("LOG_FORMAT").eq_ignore_ascii_case("json"),
            key_prefix: key_prefix(&s.text("CACHE_KEY_PREFIX"))?,
            notes,
            redis,
            cluster,
            redis_tls_files,
            log,
            redis_timeout,
        })
    }

    /// Sets the flags' values from the environment, each unless the flag was given (a
    /// setting the flags override is added to the notes).
    pub fn apply(&mut self, args: &mut Args, matches: &ArgMatches) {
        let free = |id: &str| !given(matches, id);
        if let Some(prefix) = &self.key_prefix {
            if free("config") {
                args.key_prefix = Some(prefix.clone());
                // The tier hash under the same prefix: one ACL pattern covers every key.
                if free("tier_hash") {
                    args.tier_hash = format!("{prefix}:tiers");
                }
            } else {
                self.notes.push(
                    "CACHE_KEY_PREFIX has no effect: the key_prefix of --config wins".to_string(),
                );
            }
        }
        if free("listen") {
            args.listen = Some(self.http);
        }
        if free("rls_merge_domains") && self.merge_domains {
            args.rls_merge_domains = true;
        }
        if free("admin_listen") {
            args.admin_listen = Some(self.debug);
        }
        if free("rls_listen") {
            args.rls_listen = Some(self.grpc);
        }
        if free("rls_config") {
            args.rls_config = match &self.config {
                ConfigSource::Files { dir, .. } => Some(dir.clone()),
                ConfigSource::Xds(_) => None,
            };
        }
        if free("rls_response_headers") && self.headers.is_some() {
            args.rls_response_headers = true;
        }
        if free("redis") && free("cluster") {
            args.redis = self.redis.clone();
            args.cluster = self.cluster;
        }
        let (ca, cert, key) = &self.redis_tls_files;
        if free("redis_ca") && ca.is_some() {
            args.redis_ca = ca.clone();
        }
        if free("redis_cert") && free("redis_key") && cert.is_some() {
            args.redis_cert = cert.clone();
            args.redis_key = key.clone();
        }
        if free("log") {
            args.log = self.log;
        }
        if let (true, Some(t)) = (free("timeout_ms"), self.redis_timeout) {
            args.timeout_ms = u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1);
        }
    }
}

/// Whether the flag `id` was given on the command line or as its `RL_GATEWAY_*` variable.
fn given(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// Whether `value` is `accepted` as the setting's type reads it.
fn same_value(value: &str, accepted: &str) -> bool {
    if let (Ok(a), Ok(b)) = (go_bool(value), go_bool(accepted)) {
        return a == b;
    }
    if let (Ok(a), Ok(b)) = (value.trim().parse::<f64>(), accepted.parse::<f64>()) {
        return a == b;
    }
    value.trim().eq_ignore_ascii_case(accepted)
}

/// The settings, read with envoyproxy/ratelimit's defaults.
struct Reader<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Reader<'_> {
    /// The setting's value, else its default there.
    fn text(&self, name: &str) -> String {
        (self.env)(name).unwrap_or_else(|| default_of(name).to_string())
    }

    fn path(&self, name: &str) -> Option<PathBuf> {
        (self.env)(name)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    }

    fn required_path(&self, name: &str, because: &str) -> Result<PathBuf, String> {
        self.path(name)
            .ok_or_else(|| format!("{name} must be set with {because}"))
    }

    fn boolean(&self, name: &str) -> Result<bool, String> {
        let v = self.text(name);
        go_bool(&v).map_err(|()| format!("{name}={v}: expected true or false"))
    }

    fn duration(&self, name: &str) -> Result<Duration, String> {
        let v = self.text(name);
        go_duration(&v)
            .ok_or_else(|| format!("{name}={v}: expected a duration such as 500ms, 3s or 1m"))
    }

    /// A number (an empty default reads as 0, as envconfig leaves it).
    fn number<T: std::str::FromStr>(&self, name: &str) -> Result<T, String> {
        let v = self.text(name);
        let digits = if v.trim().is_empty() { "0" } else { v.trim() };
        digits
            .parse()
            .map_err(|_| format!("{name}={v}: expected a number"))
    }

    /// `HOST`-like and `PORT`-like settings as one listening address.
    fn address(&self, host: &str, port: &str) -> Result<SocketAddr, String> {
        let h = self.text(host);
        let p: u16 = self.number(port)?;
        let h = if h.is_empty() {
            "0.0.0.0".to_string()
        } else {
            h
        };
        resolve(&h, p).map_err(|e| format!("{host}={h} {port}={p}: {e}"))
    }

    fn xds(&self) -> Result<XdsSettings, String> {
        let tls = if self.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS")? {
            let cert = self.path("CONFIG_GRPC_XDS_CLIENT_TLS_CERT");
            let key = self.path("CONFIG_GRPC_XDS_CLIENT_TLS_KEY");
            let identity = match (cert, key) {
                (Some(c), Some(k)) => Some((c, k)),
                (None, None) => None,
                _ => {
                    return Err("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY must be set together".to_string())
                }
            };
            Some(XdsTls {
                identity,
                ca: self.path("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
                server_name: (self.env)("CONFIG_GRPC_XDS_SERVER_TLS_SAN").filter(|s| !s.is_empty()),
            })
        } else {
            None
        };
        let max = self.number::<i64>("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")?;
        let random = self.number::<f64>("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")?;
        if !(0.0..=1.0).contains(&random) {
            return Err(format!(
                "XDS_CLIENT_BACKOFF_RANDOM_FACTOR={random}: expected a share from 0 to 1"
            ));
        }
        Ok(XdsSettings {
            server: self.text("CONFIG_GRPC_XDS_SERVER_URL"),
            node_id: self.text("CONFIG_GRPC_XDS_NODE_ID"),
            node_metadata: pairs(&self.text("CONFIG_GRPC_XDS_NODE_METADATA"), '='),
            headers: pairs(&self.text("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"), ':'),
            tls,
            connect_retry: self.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")?,
            backoff_initial: self.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")?,
            backoff_max: self.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL")?,
            backoff_random_factor: random,
            backoff_jitter: self.boolean("XDS_CLIENT_BACKOFF_JITTER")?,
            max_message_bytes: usize::try_from(max).ok().filter(|&n| n > 0),
            force_start: self.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG")?,
        })
    }

    /// The Redis URL(s), cluster or not, and the TLS files (CA, certificate, key).
    #[allow(clippy::type_complexity)]
    fn redis(
        &self,
    ) -> Result<
        (
            String,
            bool,
            (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>),
        ),
        String,
    > {
        let socket = self.text("REDIS_SOCKET_TYPE").to_ascii_lowercase();
        let kind = self.text("REDIS_TYPE").to_ascii_lowercase();
        let url = self.text("REDIS_URL");
        let auth = self.text("REDIS_AUTH");
        let tls = self.boolean("REDIS_TLS")?;
        let cluster = match kind.as_str() {
            "single" => false,
            "cluster" => true,
            "sentinel" => {
                return Err(
                    "REDIS_TYPE=sentinel is not supported by rl-gateway: give the primary's address with REDIS_TYPE=single".to_string(),
                )
            }
            _ => {
                return Err(format!(
                    "REDIS_TYPE={kind}: expected single, cluster or sentinel"
                ))
            }
        };
        let files = (
            self.path("REDIS_TLS_CACERT"),
            self.path("REDIS_TLS_CLIENT_CERT"),
            self.path("REDIS_TLS_CLIENT_KEY"),
        );
        if files.1.is_some() != files.2.is_some() {
            return Err(
                "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY must be set together".to_string(),
            );
        }
        let urls = match socket.as_str() {
            "tcp" => url
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(|u| tcp_url(u, &auth, tls))
                .collect::<Vec<_>>()
                .join(","),
            "unix" => {
                if tls || cluster {
                    return Err(
                        "REDIS_SOCKET_TYPE=unix: REDIS_TLS and REDIS_TYPE=cluster need tcp"
                            .to_string(),
                    );
                }
                unix_url(&url, &auth)
            }
            other => return Err(format!("REDIS_SOCKET_TYPE={other}: expected tcp or unix")),
        };
        if urls.is_empty() {
            return Err("REDIS_URL is empty".to_string());
        }
        Ok((urls, cluster, if tls { files } else { (None, None, None) }))
    }
}

/// The default of a setting of [`SETTINGS`] (empty for a name not listed: a mistake caught
/// by the tests).
fn default_of(name: &str) -> &'static str {
    SETTINGS
        .iter()
        .find(|s| s.name == name)
        .map_or("", |s| s.default)
}

/// A listening address: `host:port`, `:port` (every interface) or a name resolved once.
fn listen_address(name: &str, text: &str) -> Result<SocketAddr, String> {
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("{name}={text}: expected host:port or :port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{name}={text}: expected host:port or :port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    resolve(host, port).map_err(|e| format!("{name}={text}: {e}"))
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| format!("{host}: no address"))
}

/// A `host:port` of REDIS_URL as a redis URL (a URL given whole is kept, REDIS_AUTH added
/// when it has no user part).
fn tcp_url(addr: &str, auth: &str, tls: bool) -> String {
    let scheme = if tls { "rediss" } else { "redis" };
    let (rest, path) = match addr.split_once("://") {
        Some((_, rest)) => match rest.split_once('/') {
            Some((host, path)) => (host.to_string(), format!("/{path}")),
            None => (rest.to_string(), "/".to_string()),
        },
        None => (addr.to_string(), "/".to_string()),
    };
    if rest.contains('@') || auth.is_empty() {
        return format!("{scheme}://{rest}{path}");
    }
    format!("{scheme}://{}@{rest}{path}", userinfo(auth))
}

/// A Unix socket path as a redis URL.
fn unix_url(path: &str, auth: &str) -> String {
    let mut url = format!("redis+unix://{path}");
    if !auth.is_empty() {
        let (user, pass) = split_auth(auth);
        url.push_str(&format!("?pass={}", encode(pass)));
        if let Some(u) = user {
            url.push_str(&format!("&user={}", encode(u)));
        }
    }
    url
}

/// REDIS_AUTH: `password` or `user:password`, as that service reads it.
fn split_auth(auth: &str) -> (Option<&str>, &str) {
    match auth.split_once(':') {
        Some((user, pass)) => (Some(user), pass),
        None => (None, auth),
    }
}

fn userinfo(auth: &str) -> String {
    match split_auth(auth) {
        (Some(user), pass) => format!("{}:{}", encode(user), encode(pass)),
        (None, pass) => format!(":{}", encode(pass)),
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `k1=v1,k2=v2` (or with `:`): the pairs, entries without the separator skipped as that
/// service does.
fn pairs(text: &str, sep: char) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|e| e.split_once(sep))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// LOG_LEVEL as logrus reads it (any case); panic and fatal log errors here.
fn log_level(text: &str) -> Result<tracing::Level, String> {
    Ok(match text.to_ascii_lowercase().as_str() {
        "trace" => tracing::Level::TRACE,
        "debug" => tracing::Level::DEBUG,
        "info" => tracing::Level::INFO,
        "warn" | "warning" => tracing::Level::WARN,
        "error" | "fatal" | "panic" => tracing::Level::ERROR,
        _ => {
            return Err(format!(
                "LOG_LEVEL={text}: expected trace, debug, info, warn, error, fatal or panic"
            ))
        }
    })
}

/// CACHE_KEY_PREFIX as the configuration's `key_prefix`, which rl-gateway follows with `:`
/// (`<key_prefix>:rls:...`): one trailing `:` is dropped, so `ratelimit:` gives
/// `ratelimit:rls:...` and `app` gives `app:rls:...`. Every key then begins with the value
/// given, as there (an ACL pattern `~<CACHE_KEY_PREFIX>*` written for that service still
/// covers them), and `~<key_prefix>:*` is the gateway's own pattern. Empty: the
/// configuration's prefix (`rl`).
fn key_prefix(text: &str) -> Result<Option<String>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    let prefix = text.strip_suffix(':').unwrap_or(text);
    if prefix.is_empty() || prefix.contains(['{', '}']) {
        return Err(format!(
            "CACHE_KEY_PREFIX={text}: must have something before its last `:` and no braces (they would change the hash slot)"
        ));
    }
    Ok(Some(prefix.to_string()))
}

/// A boolean as Go's strconv.ParseBool reads it.
fn go_bool(text: &str) -> Result<bool, ()> {
    match text.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(()),
    }
}

/// A duration as Go's time.ParseDuration reads it: `300ms`, `1.5h`, `2h45m`, `0`.
pub fn go_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    rest = rest.strip_prefix('+').unwrap_or(rest);
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest.get(..end)?.parse().ok()?;
        rest = rest.get(end..)?;
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match rest.get(..unit_end)? {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * seconds;
        rest = rest.get(unit_end..)?;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    fn read(pairs: &[(&str, &str)]) -> Result<EnvoyEnv, String> {
        EnvoyEnv::read(&env_of(pairs))
    }

    /// The arguments after applying `pairs` to a command line of `argv`.
    fn applied(argv: &[&str], pairs: &[(&str, &str)]) -> Args {
        let matches = Args::command().get_matches_from(argv);
        let mut args = Args::from_arg_matches(&matches).unwrap();
        read(pairs).unwrap().apply(&mut args, &matches);
        args
    }

    #[test]
    fn every_setting_is_listed_once() {
        let mut names: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a setting is listed twice");
        for m in MARKERS {
            assert!(names.contains(m), "marker {m} is not a setting");
        }
    }

    #[test]
    fn the_book_lists_every_setting_with_its_default() {
        let book = include_str!("../../docs/src/envoy-swap.md");
        for s in SETTINGS {
            let default = if s.default.is_empty() {
                "empty".to_string()
            } else {
                format!("`{}`", s.default)
            };
            let row = format!("| `{}` | {default} |", s.name);
            assert!(
                book.contains(&row),
                "docs/src/envoy-swap.md has no row {row}"
            );
        }
    }

    #[test]
    fn every_name_read_is_a_listed_setting() {
        // Reads through a recording environment: a name outside the table would have no
        // default and no line in the book.
        let asked = std::sync::Mutex::new(Vec::new());
        let env = |name: &str| {
            asked.lock().unwrap().push(name.to_string());
            match name {
                "CONFIG_TYPE" => Some("GRPC_XDS_SOTW".to_string()),
                "USE_PROMETHEUS"
                | "GRPC_SERVER_USE_TLS"
                | "CONFIG_GRPC_XDS_SERVER_USE_TLS"
                | "LIMIT_RESPONSE_HEADERS_ENABLED" => Some("true".to_string()),
                "GRPC_SERVER_TLS_CERT" | "GRPC_SERVER_TLS_KEY" => Some("/x".to_string()),
                _ => None,
            }
        };
        EnvoyEnv::read(&env).unwrap();
        for name in asked.lock().unwrap().iter() {
            assert!(
                SETTINGS.iter().any(|s| s.name == name),
                "{name} is read but not in SETTINGS"
            );
        }
    }

    #[test]
    fn the_docker_compose_example_maps_to_the_flags() {
        let args = applied(
            &["rl-gateway"],
            &[
                ("USE_STATSD", "false"),
                ("LOG_LEVEL", "debug"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "redis:6379"),
                ("RUNTIME_ROOT", "/data"),
                ("RUNTIME_SUBDIRECTORY", "ratelimit"),
                ("MEMCACHE_HOST_PORT", "memcached:11211"),
            ],
        );
        assert_eq!(args.redis, "redis://redis:6379/");
        assert!(!args.cluster);
        assert_eq!(
            args.rls_config.as_deref(),
            Some(std::path::Path::new("/data/ratelimit/config"))
        );
        assert_eq!(args.rls_listen, Some("0.0.0.0:8081".parse().unwrap()));
        assert_eq!(args.listen, Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(args.admin_listen, Some("0.0.0.0:6070".parse().unwrap()));
        assert_eq!(args.log, tracing::Level::DEBUG);
    }

    #[test]
    fn flags_win_over_the_environment() {
        let args = applied(
            &[
                "rl-gateway",
                "--redis",
                "redis://10.0.0.1:6380/",
                "--log",
                "error",
                "--listen",
                "127.0.0.1:9999",
            ],
            &[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "redis:6379"),
                ("LOG_LEVEL", "debug"),
                ("PORT", "8000"),
                ("GRPC_PORT", "9000"),
            ],
        );
        assert_eq!(args.redis, "redis://10.0.0.1:6380/");
        assert_eq!(args.log, tracing::Level::ERROR);
        assert_eq!(args.listen, Some("127.0.0.1:9999".parse().unwrap()));
        assert_eq!(args.rls_listen, Some("0.0.0.0:9000".parse().unwrap()));
    }

    #[test]
    fn auto_needs_a_marker_and_no_mode_flag() {
        let env = env_of(&[("RUNTIME_ROOT", "/data")]);
        let plain = Args::command().get_matches_from(["rl-gateway"]);
        assert!(EnvoyEnv::wanted(EnvoyEnvMode::Auto, &plain, &env));
        let own = Args::command().get_matches_from(["rl-gateway", "--config", "g.toml"]);
        assert!(!EnvoyEnv::wanted(EnvoyEnvMode::Auto, &own, &env));
        assert!(EnvoyEnv::wanted(EnvoyEnvMode::On, &own, &env));
        let generic = env_of(&[("PORT", "80"), ("REDIS_URL", "x:1"), ("HOST", "h")]);
        assert!(!EnvoyEnv::wanted(EnvoyEnvMode::Auto, &plain, &generic));
        assert!(!EnvoyEnv::wanted(EnvoyEnvMode::Off, &plain, &env));
    }

    #[test]
    fn refusals_name_the_setting() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("BACKEND_TYPE", "memcache")],
                "BACKEND_TYPE=memcache is not supported",
            ),
            (
                &[("USE_STATSD", "true")],
                "USE_STATSD=true is not supported",
            ),
            (&[("USE_STATSD", "1")], "USE_STATSD=1 is not supported"),
            (
                &[("USE_DOG_STATSD", "true")],
                "USE_DOG_STATSD=true is not supported",
            ),
            (
                &[("GRPC_UDS", "/tmp/rl.sock")],
                "GRPC_UDS=/tmp/rl.sock is not supported",
            ),
            (
                &[("REDIS_PERSECOND", "true")],
                "REDIS_PERSECOND=true is not supported",
            ),
            (
                &[("QUOTA_MODE", "true")],
                "QUOTA_MODE=true is not supported",
            ),
            (
                &[("TRACING_ENABLED", "true")],
                "TRACING_ENABLED=true is not supported",
            ),
            (
                &[("NEAR_LIMIT_RATIO", "0.9")],
                "NEAR_LIMIT_RATIO=0.9 is not supported",
            ),
            (
                &[("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true")],
                "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true is not supported",
            ),
            (
                &[("REDIS_TYPE", "sentinel")],
                "REDIS_TYPE=sentinel is not supported",
            ),
            (&[("REDIS_TYPE", "ring")], "REDIS_TYPE=ring: expected"),
            (
                &[("REDIS_SOCKET_TYPE", "udp")],
                "REDIS_SOCKET_TYPE=udp: expected",
            ),
            (
                &[("CONFIG_TYPE", "GRPC_XDS_DELTA")],
                "CONFIG_TYPE=GRPC_XDS_DELTA: expected",
            ),
            (&[("LOG_LEVEL", "loud")], "LOG_LEVEL=loud: expected"),
            (
                &[("SHADOW_MODE", "yes")],
                "SHADOW_MODE=yes: expected true or false",
            ),
            (
                &[("GRPC_PORT", "http")],
                "GRPC_PORT=http: expected a number",
            ),
            (
                &[("GRPC_MAX_CONNECTION_AGE", "1 day")],
                "GRPC_MAX_CONNECTION_AGE=1 day: expected a duration",
            ),
            (
                &[("GRPC_SERVER_USE_TLS", "true")],
                "GRPC_SERVER_TLS_CERT must be set with GRPC_SERVER_USE_TLS=true",
            ),
            (
                &[("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", "9090")],
                "PROMETHEUS_ADDR=9090: expected host:port",
            ),
        ];
        for (pairs, expected) in cases {
            let err = read(pairs).expect_err(expected);
            assert!(err.starts_with(expected), "got {err:?}, want {expected:?}");
        }
    }

    #[test]
    fn accepted_values_of_refusable_settings_pass() {
        let e = read(&[
            ("BACKEND_TYPE", "REDIS"),
            ("USE_STATSD", "False"),
            ("NEAR_LIMIT_RATIO", "0.80"),
            ("QUOTA_MODE", "0"),
            ("REDIS_POOL_SIZE", "50"),
            ("MEMCACHE_HOST_PORT", "memcached:11211"),
        ])
        .unwrap();
        assert!(e
            .notes
            .iter()
            .any(|n| n.starts_with("REDIS_POOL_SIZE=50 has no effect")));
        assert!(!e.notes.iter().any(|n| n.starts_with("USE_STATSD")));
        let unset = read(&[]).unwrap();
        assert!(unset
            .notes
            .iter()
            .any(|n| n.starts_with("USE_STATSD is not set")));
    }

    #[test]
    fn redis_urls_follow_socket_type_type_auth_and_tls() {
        let url = |pairs: &[(&str, &str)]| read(pairs).map(|e| (e.redis, e.cluster));
        assert_eq!(
            url(&[]).unwrap(),
            (
                "redis+unix:///var/run/nutcracker/ratelimit.sock".into(),
                false
            )
        );
        assert_eq!(
            url(&[("REDIS_URL", "/run/r.sock"), ("REDIS_AUTH", "p@ss")])
                .unwrap()
                .0,
            "redis+unix:///run/r.sock?pass=p%40ss"
        );
        let tcp = [("REDIS_SOCKET_TYPE", "tcp")];
        assert_eq!(
            url(&[tcp[0], ("REDIS_URL", "r:6379"), ("REDIS_AUTH", "u:p w")])
                .unwrap()
                .0,
            "redis://u:p%20w@r:6379/"
        );
        assert_eq!(
            url(&[
                tcp[0],
                ("REDIS_URL", "r:6379"),
                ("REDIS_AUTH", "pw"),
                ("REDIS_TLS", "true")
            ])
            .unwrap()
            .0,
            "rediss://:pw@r:6379/"
        );
        assert_eq!(
            url(&[tcp[0], ("REDIS_URL", "redis://10.1.1.1:9489/11")])
                .unwrap()
                .0,
            "redis://10.1.1.1:9489/11"
        );
        assert_eq!(
            url(&[tcp[0], ("REDIS_TYPE", "CLUSTER"), ("REDIS_URL", "a:1, b:2")]).unwrap(),
            ("redis://a:1/,redis://b:2/".into(), true)
        );
        assert!(
            url(&[("REDIS_TLS", "true")]).is_err(),
            "tls over a unix socket"
        );
    }

    #[test]
    fn xds_settings_are_read_with_their_defaults() {
        let e = read(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "a=1,b=x=y,bad"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token:abc"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "250ms"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ])
        .unwrap();
        let ConfigSource::Xds(x) = e.config else {
            panic!("not xds")
        };
        assert_eq!(x.server, "localhost:18000");
        assert_eq!(x.node_id, "default");
        assert_eq!(x.node_metadata.get("a").map(String::as_str), Some("1"));
        assert_eq!(x.node_metadata.get("b").map(String::as_str), Some("x=y"));
        assert_eq!(x.node_metadata.len(), 2);
        assert_eq!(x.headers.get("x-token").map(String::as_str), Some("abc"));
        let tls = x.tls.unwrap();
        assert_eq!(tls.ca, Some(PathBuf::from("/certs/ca.crt")));
        assert!(tls.identity.is_some());
        assert_eq!(x.backoff_initial, Duration::from_millis(250));
        assert_eq!(x.backoff_max, Duration::from_secs(60));
        assert_eq!(x.connect_retry, Duration::from_secs(3));
        assert!(x.force_start);
        assert_eq!(x.max_message_bytes, None);
    }

    #[test]
    fn listen_addresses_and_headers() {
        let e = read(&[
            ("HOST", "127.0.0.1"),
            ("PORT", "18080"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", ":19001"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_REMAINING_HEADER", "X-Left"),
        ])
        .unwrap();
        assert_eq!(e.http, "127.0.0.1:18080".parse().unwrap());
        assert_eq!(
            e.prometheus,
            Some(("0.0.0.0:19001".parse().unwrap(), "/metrics".to_string()))
        );
        let h = e.headers.unwrap();
        assert_eq!(
            (h.limit.as_str(), h.remaining.as_str()),
            ("RateLimit-Limit", "X-Left")
        );
    }

    #[test]
    fn cache_key_prefix_is_the_key_prefix_without_its_last_colon() {
        let prefix = |v: &str| read(&[("CACHE_KEY_PREFIX", v)]).map(|e| e.key_prefix);
        assert_eq!(prefix(""), Ok(None));
        assert_eq!(prefix("ratelimit:"), Ok(Some("ratelimit".into())));
        assert_eq!(prefix("app"), Ok(Some("app".into())));
        assert_eq!(prefix("app_"), Ok(Some("app_".into())));
        assert_eq!(prefix("a::"), Ok(Some("a:".into())));
        for bad in [":", "{tenant}:", "a}"] {
            let err = prefix(bad).expect_err(bad);
            assert!(
                err.starts_with(&format!("CACHE_KEY_PREFIX={bad}: ")),
                "{err}"
            );
        }
        let env = [("CACHE_KEY_PREFIX", "ratelimit:")];
        let args = applied(&["rl-gateway"], &env);
        assert_eq!(args.key_prefix.as_deref(), Some("ratelimit"));
        assert_eq!(args.tier_hash, "ratelimit:tiers");
        assert_eq!(crate::config(&args).unwrap().key_prefix, "ratelimit");
        // The configuration file's key_prefix wins, said in a warning.
        let matches = Args::command().get_matches_from(["rl-gateway", "--config", "g.toml"]);
        let mut args = Args::from_arg_matches(&matches).unwrap();
        let mut e = read(&env).unwrap();
        e.apply(&mut args, &matches);
        assert_eq!(args.key_prefix, None);
        assert!(e
            .notes
            .iter()
            .any(|n| n.starts_with("CACHE_KEY_PREFIX has no effect")));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("24h"), Some(Duration::from_secs(86_400)));
        assert_eq!(go_duration("1h30m"), Some(Duration::from_secs(5_400)));
        assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1_500)));
        assert_eq!(go_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        assert_eq!(go_duration("10"), None);
        assert_eq!(go_duration("-1s"), None);
        assert_eq!(go_duration("1d"), None);
    }
}
