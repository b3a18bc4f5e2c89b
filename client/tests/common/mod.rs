//! Integration harness for the client: a real `redis-server` (or `$RL_SERVER`) with the
//! module, on a loopback port it keeps across restarts, so a limiter can watch it die and
//! come back. Modelled on the module's own harness (`tests/common/mod.rs` at the root);
//! the gateway's tests include this file too (`#[path]`).

#![allow(dead_code)] // each test file uses a different part of the harness

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server binary under test.
pub fn server_binary() -> String {
    std::env::var("RL_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// `$RL_MODULE`, else the release build in this target directory
/// (`cargo build --release -p redis-rl` first; `make test` does it).
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("RL_MODULE") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe.ancestors().nth(3).expect("target dir");
    let path = target.join("release").join("libredis_rl.so");
    assert!(
        path.exists(),
        "module not built: {} (run `cargo build --release -p redis-rl` or `make test`)",
        path.display()
    );
    path
}

/// A loopback port nobody listens on now (below 55000, like the module's harness).
pub fn free_port() -> u16 {
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().expect("local addr").port();
        if port < 55_000 {
            return port;
        }
    }
    panic!("no free port below 55000");
}

/// A server process; killed (SIGKILL) and its directory removed on drop.
pub struct Server {
    child: Option<Child>,
    /// The loopback port, the same across restarts.
    pub port: u16,
    dir: PathBuf,
    /// Extra `--name value` arguments, kept across restarts.
    extra: Vec<String>,
    /// Without the module (a server where modules cannot be loaded: the Lua twin decides).
    plain: bool,
}

impl Server {
    /// Starts a server with the module on a free port.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with the module and extra `--name value` arguments on a free port.
    pub fn start_with(extra: &[&str]) -> Server {
        Server::start_as(extra, false)
    }

    /// Starts a server without the module (as a managed service offers it).
    pub fn start_plain(extra: &[&str]) -> Server {
        Server::start_as(extra, true)
    }

    fn start_as(extra: &[&str], plain: bool) -> Server {
        let mut last = String::new();
        for _ in 0..5 {
            let mut server = Server::unstarted(free_port());
            server.extra = extra.iter().map(|a| a.to_string()).collect();
            server.plain = plain;
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last = e,
            }
        }
        panic!("server did not start: {last}");
    }

    /// A handle for `port` with no process yet (for cold-start tests); call `restart`.
    pub fn unstarted(port: u16) -> Server {
        let dir =
            std::env::temp_dir().join(format!("rl-client-test-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create server dir");
        Server {
            child: None,
            port,
            dir,
            extra: Vec::new(),
            plain: false,
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(server_binary());
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir);
        if !self.plain {
            cmd.arg("--loadmodule").arg(module_path());
        }
        let child = cmd
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start {}: {e}", server_binary()))?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let mut log = String::new();
                    if let Some(mut err) = child.stderr.take() {
                        use std::io::Read;
                        let _ = err.read_to_string(&mut log);
                    }
                    self.child = None;
                    return Err(format!("exited with {status}: {log}"));
                }
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

    /// Kills the server (SIGKILL), as in an outage.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, with an empty dataset.
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        // The port can stay busy for a moment after the kill.
        for _ in 0..50 {
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
    }

    /// Resumes a frozen server (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
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
}

impl Drop for Server {
    fn drop(&mut self) {
        self.thaw();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `f` every 20 ms until it returns true or 10 s pass (no timing assertions: only
/// an upper bound that a healthy machine never reaches).
pub async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not within 10 s: {what}");
}
