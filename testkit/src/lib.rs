//! The integration-test harness shared by the module's, the client's and rl-gateway's tests:
//! real `redis-server` / `valkey-server` processes with the module loaded, on free loopback
//! ports outside the kernel's ephemeral range, killed when dropped.
//!
//! The server binary is `$RL_SERVER` (default `redis-server`); `make test` runs every
//! integration test once with Redis 7.0 and once with Valkey 9.1, after building the module
//! in release. The module is `$RL_MODULE`, else `target/release/libredis_rl.so`.
//!
//! - [`server`]: [`Server`], one process (start, restart on the same port or files, kill,
//!   freeze, replicas).
//! - [`ports`]: listening ports outside the kernel's ephemeral range, unique across the
//!   test processes of the machine.
//! - [`cluster`]: [`Cluster`], three masters sharing the slots.
//! - [`cmd`]: running commands and reading replies, errors, keys, `INFO` and the clock.
//! - [`checks`]: assertions shared by the module's tests (refused calls change nothing,
//!   PEEK matches the real call, TTLs after a write).
//! - [`rng`]: [`Rng`], seeded and reproducible (splitmix64).
//! - [`tls`]: [`tls::TlsServer`], Debian's redis-server on a TLS port with ACL users (a
//!   managed service's stand-in), and a throwaway CA.
//! - [`conformance`]: the checks every algorithm's command must pass, read from the
//!   registry; [`golden`]: the command files of `testdata/commands`.
//! - [`tls_cluster`]: [`tls_cluster::TlsCluster`], three such masters with the cluster bus
//!   and replication over TLS.
//! - [`configs`]: configuration text the rules tests of the gateway and the middleware
//!   start from.
//! - [`ops`]: the operations tests' seeded random mix of RL.* calls and dataset snapshots.
//!
//! `use redis_rl_testkit::*;` brings in everything but [`ops`].

pub mod checks;
pub mod cluster;
pub mod cmd;
pub mod configs;
pub mod conformance;
pub mod golden;
pub mod ops;
pub mod ports;
pub mod rng;
pub mod server;
pub mod tls;
pub mod tls_cluster;
pub mod twin;

pub use checks::*;
pub use cluster::Cluster;
pub use cmd::*;
pub use rng::Rng;
pub use server::{
    aof_bytes, free_port, log_tail, module_path, server_binary, Server, MASTER_ARGS, PROTOCOLS,
};
