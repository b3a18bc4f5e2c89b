//! The integration test harness: real `redis-server` / `valkey-server` processes with the
//! module loaded, on free loopback ports, killed when dropped.
//!
//! The server binary is `$RL_SERVER` (default `redis-server`); `make test` runs the suite
//! once with Redis 7.0 and once with Valkey 9.1, after building the module in release.

#![allow(dead_code)] // each test file uses a different part of the harness

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server, stopped (SIGKILL) and its directory removed on drop.
pub struct Server {
    child: Child,
    /// The loopback port it listens on.
    pub port: u16,
    /// Its working directory (RDB and AOF files land here).
    pub dir: PathBuf,
}

/// The server binary under test.
pub fn server_binary() -> String {
    std::env::var("RL_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// The module under test: `$RL_MODULE`, else the release build in this target directory
/// (`make test` builds it first; by hand, run `cargo build --release` before `cargo test`).
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("RL_MODULE") {
        return PathBuf::from(path);
    }
    // target/<profile>/deps/<test binary> -> target/release/libredis_rl.so
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe.ancestors().nth(3).expect("target dir");
    let path = target.join("release").join("libredis_rl.so");
    assert!(
        path.exists(),
        "module not built: {} (run `cargo build --release` or `make test`)",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    // Cluster nodes also listen on port + 10000, so stay below 55536.
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().expect("local addr").port();
        if port < 55_000 {
            return port;
        }
    }
    panic!("no free port below 55000");
}

impl Server {
    /// Starts a server with the module loaded and default settings.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with extra `--name value` arguments.
    pub fn start_with(extra: &[&str]) -> Server {
        Server::start_in(None, extra)
    }

    /// Starts a server in `dir` (to restart on the same files), or a fresh directory.
    pub fn start_in(dir: Option<PathBuf>, extra: &[&str]) -> Server {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = dir.clone().unwrap_or_else(|| {
                let d = std::env::temp_dir().join(format!("rl-test-{}-{port}", std::process::id()));
                std::fs::create_dir_all(&d).expect("create server dir");
                d
            });
            let module = module_path();
            let mut cmd = Command::new(server_binary());
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(&dir)
                .arg("--loadmodule")
                .arg(&module)
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("start {}: {e}", server_binary()));
            let mut server = Server { child, port, dir };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("server did not start: {last_error}");
    }

    /// Waits until the server answers PING, or it exits, or 10 s pass.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut log = String::new();
                if let Some(mut err) = self.child.stderr.take() {
                    use std::io::Read;
                    let _ = err.read_to_string(&mut log);
                }
                return Err(format!("exited with {status}: {log}"));
            }
            if let Ok(mut c) = self.try_connect() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("no answer within 10 s".to_string())
    }

    fn try_connect(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A new connection.
    pub fn client(&self) -> redis::Connection {
        self.try_connect().expect("connect to test server")
    }

    /// Kills the server now (SIGKILL), keeping its directory.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs a command that replies with an array of integers (every limiter reply).
pub fn ints(conn: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(conn)
        .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
}

/// Runs a command that must fail, and returns the full error text as the client saw it
/// (`ERR ...` or `WRONGTYPE ...`).
pub fn error(conn: &mut redis::Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    match cmd.query::<redis::Value>(conn) {
        Ok(v) => panic!("{args:?} should fail, replied {v:?}"),
        Err(e) => error_text(&e),
    }
}

/// The server's error line, `CODE message`, from a client error.
pub fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// The raw bytes of a key (`None` if missing), and its PTTL.
pub fn snapshot(conn: &mut redis::Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    let value: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(conn).expect("DUMP");
    let ttl: i64 = redis::cmd("PTTL").arg(key).query(conn).expect("PTTL");
    (value, ttl)
}

/// Builds a command from its words, text or bytes (`&["SET", "k", "v"]`).
pub fn command<A: redis::ToRedisArgs>(args: &[A]) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(a);
    }
    cmd
}

/// Runs a command and converts its reply, panicking with the command on failure.
pub fn query<T: redis::FromRedisValue>(conn: &mut redis::Connection, args: &[&str]) -> T {
    command(args)
        .query(conn)
        .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
}

/// The raw bytes of a key (`None` if missing) and its absolute expiry in Unix ms
/// (`PEXPIRETIME`: -1 without expiry, -2 missing). Unlike [`snapshot`] it does not change as
/// time passes, so "before == after" is an exact check that a call wrote nothing.
pub fn frozen(conn: &mut redis::Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    let value: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(conn).expect("DUMP");
    let expiry: i64 = redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(conn)
        .expect("PEXPIRETIME");
    (value, expiry)
}

/// The server's clock (`TIME`) in microseconds since the epoch: the clock the limiters use.
pub fn server_time_us(conn: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(conn).expect("TIME");
    secs * 1_000_000 + micros
}

/// Checks `PTTL key` after a write that replied `reset_after` ms and was made at server time
/// `since_us` (µs, read before the call) or later: the key expires `reset_after` + 1000 ms
/// (the default TTL slack) after the call's instant rounded up to the ms, so PTTL is at most
/// that (+1 for the rounding), and at least that less the ms that may have passed since
/// `since_us` (measured, not assumed: a loaded machine can stall between two calls). A key
/// that already expired (PTTL -2) passes only if that much time did pass.
pub fn assert_pttl_after_call(
    conn: &mut redis::Connection,
    key: &str,
    reset_after: i64,
    since_us: u64,
) {
    let pttl: i64 = query(conn, &["PTTL", key]);
    let waited = i64::try_from((server_time_us(conn) - since_us).div_ceil(1000)).unwrap();
    let ttl = reset_after + 1000;
    assert!(
        pttl <= ttl + 1,
        "{key}: PTTL {pttl} above reset_after {reset_after} + 1000 ms of slack"
    );
    assert!(
        pttl >= ttl - waited || (pttl == -2 && waited > ttl),
        "{key}: PTTL {pttl} below reset_after {reset_after} + 1000 ms of slack, \
         {waited} ms after the call"
    );
}

/// Checks a `PEEK` reply against the real call made just after it: the same decision, limit
/// and remaining; the waits (`retry_after_ms`, `reset_after_ms`) may only have shrunk by the
/// time that passed in between (a millisecond later a wait may be a millisecond shorter).
pub fn assert_peek_then_real(peeked: &[i64], real: &[i64], what: &str) {
    assert_eq!(peeked[..3], real[..3], "{what}");
    let (peek_wait, real_wait) = (peeked[3], real[3]);
    assert!(
        peek_wait == real_wait
            || (real_wait > 0 && (real_wait..real_wait + 1000).contains(&peek_wait)),
        "{what}: waits {peek_wait} then {real_wait}"
    );
    assert!(
        real[4] <= peeked[4] && peeked[4] - real[4] < 60_000,
        "{what}: reset_after {} then {}",
        peeked[4],
        real[4]
    );
}

/// Polls `done` every few milliseconds until it returns true; panics after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The value of `field` in `INFO section` (`None` if the server does not report it).
pub fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn).expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// Extra arguments for a master that syncs a new replica at once (no diskless-sync delay)
/// and sends no periodic PINGs down the replication stream (so its offset only moves on
/// writes).
pub const MASTER_ARGS: [&str; 4] = [
    "--repl-diskless-sync-delay",
    "0",
    "--repl-ping-replica-period",
    "3600",
];

impl Server {
    /// Starts a replica of `master` (best started with [`MASTER_ARGS`]) and waits until its
    /// link to the master is up.
    pub fn start_replica_of(master: &Server) -> Server {
        let port = master.port.to_string();
        let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
        let mut c = replica.client();
        wait_until("the replica to sync", Duration::from_secs(30), || {
            info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up")
        });
        replica
    }
}

/// Arguments that are not plain decimal integers, or beyond every documented range: each is
/// refused with the range error of the argument it stands for.
pub const NOT_DECIMAL_INTEGERS: &[&str] = &[
    "",
    "abc",
    "1.5",
    "1e3",
    "0x10",
    "-1",
    "-0",
    "+1",
    " 1",
    "1 ",
    "1_000",
    "\u{0663}",             // ARABIC-INDIC DIGIT THREE
    "18446744073709551616", // u64::MAX + 1
    "18446744073709551615", // u64::MAX
    "99999999999999999999999",
];

/// Runs `args` (the key is `args[1]`), which must fail with exactly `expected`, and checks
/// that the key kept its bytes and absolute expiry (or stayed missing).
pub fn refused_untouched(conn: &mut redis::Connection, args: &[&str], expected: &str) {
    let before = frozen(conn, args[1]);
    assert_eq!(error(conn, args), expected, "{args:?}");
    assert_eq!(frozen(conn, args[1]), before, "{args:?} changed the key");
}

/// Runs `client(i, conn)` on `clients` threads, each with its own connection, started
/// together; returns everything they collected.
pub fn hammer_with<T: Send>(
    server: &Server,
    clients: usize,
    client: impl Fn(usize, &mut redis::Connection) -> Vec<T> + Sync,
) -> Vec<T> {
    let start = std::sync::Barrier::new(clients);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|i| {
                let (start, client) = (&start, &client);
                let mut conn = server.client();
                s.spawn(move || {
                    start.wait();
                    client(i, &mut conn)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client thread"))
            .collect()
    })
}
