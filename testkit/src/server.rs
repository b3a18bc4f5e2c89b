//! One server process with the module loaded, on a loopback port.

use crate::cmd::{info_field, wait_until};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The server binary under test: `$RL_SERVER`, else `redis-server`.
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

/// Both protocols a client may speak: every reply the limiter sends is checked under each.
pub const PROTOCOLS: [redis::ProtocolVersion; 2] =
    [redis::ProtocolVersion::RESP2, redis::ProtocolVersion::RESP3];

/// A loopback port to listen on, outside the kernel's ephemeral range and unique among
/// every test process on the machine (see [`crate::ports`]): a server restarted on it later
/// finds it still free.
pub fn free_port() -> u16 {
    crate::ports::listen_port()
}

/// A fresh working directory, unique in this process (two servers racing for the same port
/// must not share, and then remove, one directory).
fn fresh_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rl-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create server dir");
    dir
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

/// A server process with the module; killed (SIGKILL) and its directory removed on drop.
pub struct Server {
    child: Option<Child>,
    /// The loopback port it listens on (the same across [`Server::restart`]).
    pub port: u16,
    /// Its working directory (RDB and AOF files land here).
    pub dir: PathBuf,
    /// Extra `--name value` arguments, kept across restarts.
    extra: Vec<String>,
    /// Without the module (a server where modules cannot be loaded: the Lua twin decides).
    plain: bool,
    /// Stopped with SIGSTOP and not resumed yet.
    frozen: AtomicBool,
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

    /// Starts a server in `dir` (to restart on the same files), or a fresh directory, on a
    /// free port (another one if that was taken before the server could bind it).
    pub fn start_in(dir: Option<PathBuf>, extra: &[&str]) -> Server {
        Server::start_as(dir, extra, false)
    }

    /// Starts a server without the module (as a managed service offers it).
    pub fn start_plain(extra: &[&str]) -> Server {
        Server::start_as(None, extra, true)
    }

    fn start_as(dir: Option<PathBuf>, extra: &[&str], plain: bool) -> Server {
        // A cluster node listens on its bus port (+10000) too.
        let node = extra.contains(&"--cluster-enabled");
        let port = || {
            if node {
                crate::ports::cluster_port()
            } else {
                free_port()
            }
        };
        let mut server = Server {
            child: None,
            port: port(),
            dir: dir.unwrap_or_else(fresh_dir),
            extra: extra.iter().map(|a| a.to_string()).collect(),
            plain,
            frozen: AtomicBool::new(false),
        };
        let mut last_error = String::new();
        for _ in 0..5 {
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
            server.port = port();
        }
        panic!("server did not start: {last_error}");
    }

    /// A handle for `port` with no process yet (for cold-start tests); call
    /// [`Server::restart`] to start it.
    pub fn unstarted(port: u16) -> Server {
        Server {
            child: None,
            port,
            dir: fresh_dir(),
            extra: Vec::new(),
            plain: false,
            frozen: AtomicBool::new(false),
        }
    }

    /// The server's output (stdout and stderr, appended across restarts), unless a test
    /// sends the log elsewhere with `--logfile`.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Starts the process and waits until it answers; on failure nothing is left running and
    /// the error carries the end of what this start wrote to the log.
    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("open {}: {e}", log_path.display()));
        let log_start = log.metadata().map_or(0, |m| m.len());
        let mut cmd = Command::new(server_binary());
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir);
        if !self.plain {
            cmd.arg("--loadmodule").arg(module_path());
        }
        let stderr = log.try_clone().expect("clone the log file handle");
        let child = cmd
            .args(&self.extra)
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", server_binary()));
        self.child = Some(child);
        let ready = self.wait_ready();
        if ready.is_err() {
            self.kill();
        }
        ready.map_err(|e| {
            format!(
                "{} on port {}: {e}; the end of its log ({}):\n{}",
                server_binary(),
                self.port,
                log_path.display(),
                log_tail(&log_path, log_start, 20)
            )
        })
    }

    /// Waits until the server answers PING, or it exits, or 10 s pass.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("exited with {status}"));
                }
            }
            if let Ok(mut c) = self.try_connect() {
                // Something else on the port (a squatter that accepts and never answers)
                // must not hold the wait forever; a slow start just takes another round.
                let _ = c.set_read_timeout(Some(Duration::from_millis(250)));
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("no answer within 10 s".to_string())
    }

    fn try_connect(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A new synchronous connection.
    pub fn client(&self) -> redis::Connection {
        self.try_connect().expect("connect to test server")
    }

    /// A new synchronous connection speaking `protocol` (RESP3: the crate sends `HELLO 3`
    /// first, as redis-py 8 and go-redis v9 do by default).
    pub fn client_speaking(&self, protocol: redis::ProtocolVersion) -> redis::Connection {
        redis::Client::open(self.url_speaking(protocol))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .expect("connect to test server")
    }

    /// [`Server::url`] with the protocol to speak (`?protocol=resp3`).
    pub fn url_speaking(&self, protocol: redis::ProtocolVersion) -> String {
        match protocol {
            redis::ProtocolVersion::RESP2 => self.url(),
            redis::ProtocolVersion::RESP3 => format!("{}?protocol=resp3", self.url()),
        }
    }

    /// Kills the server now (SIGKILL), as in an outage, keeping its directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.frozen.store(false, Ordering::Relaxed);
    }

    /// Starts the server again on the same port, in the same directory (with the default
    /// `--save "" --appendonly no`, an empty dataset).
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        // The port can stay busy for a moment after the kill.
        for _ in 0..5 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("server did not restart on port {}: {last}", self.port);
    }

    fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .args([sig, &child.id().to_string()])
                .status()
                .expect("run kill");
            assert!(status.success(), "kill {sig}");
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    pub fn freeze(&self) {
        self.signal("-STOP");
        self.frozen.store(true, Ordering::Relaxed);
    }

    /// Resumes a frozen server (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
        self.frozen.store(false, Ordering::Relaxed);
    }

    /// How many times `command` ran (`INFO commandstats`; any case).
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.client())
            .expect("INFO commandstats");
        let prefix = format!("cmdstat_{}:calls=", command.to_ascii_lowercase());
        // Module commands keep their registered case (cmdstat_RL.ALL).
        info.lines()
            .map(str::to_ascii_lowercase)
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
            .and_then(|rest| rest.split(',').next().and_then(|n| n.parse().ok()))
            .unwrap_or(0)
    }

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

/// The last `lines` lines `path` got from byte `from` on (what one start of a server wrote).
pub fn log_tail(path: &std::path::Path, from: u64, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.seek(SeekFrom::Start(from));
        let _ = file.read_to_string(&mut text);
    }
    let all: Vec<&str> = text.lines().collect();
    let tail = all[all.len().saturating_sub(lines)..].join("\n");
    if tail.is_empty() {
        "(empty)".to_string()
    } else {
        tail
    }
}

/// The files of `server`'s append-only directory, concatenated.
pub fn aof_bytes(server: &Server) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(server.dir.join("appendonlydir")).expect("appendonlydir") {
        out.extend(std::fs::read(entry.expect("entry").path()).expect("read AOF"));
    }
    out
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.frozen.load(Ordering::Relaxed) {
            self.thaw();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
