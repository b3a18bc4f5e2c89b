//! A local stand-in for a managed Redis: Debian's `redis-server` (built with TLS; the Valkey
//! binary of the test suite is not) listening on a TLS port with ACL users, and a
//! throwaway CA made with `openssl` for it.
//!
//! The server also listens on a plain loopback port for the test itself (the `default`
//! user, no password), so the test can look at keys the limiter wrote.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::{free_port, module_path};

/// The ACL user with every permission the limiter needs (`limiter`, password `secret`).
pub const USER: &str = "limiter";
/// Its password.
pub const PASSWORD: &str = "secret";
/// A user that may only touch keys under `other:` (`narrow`, password `narrow`): the
/// limiter's commands on `rl:` keys get NOPERM.
pub const NARROW_USER: &str = "narrow";

/// A user with only what the limiter needs (`minimal`, password `minimal`): the ACL rules
/// of docs/src/security.md, [`BASE_RULES`] and then [`MODULE_RULES`] or [`TWIN_RULES`] as
/// the server has the module, then [`GATEWAY_RULES`].
pub const MINIMAL_USER: &str = "minimal";

/// The rules the limiter's user needs either way: its keys, connecting, the tier lookups,
/// the fleet's channel of forgotten refusals (`<prefix>:denials`).
pub const BASE_RULES: &[&str] = &[
    "resetkeys",
    "~rl:*",
    "resetchannels",
    "&rl:*",
    "-@all",
    "+ping",
    "+hello",
    "+auth",
    "+client",
    "+command|info",
    "+hget",
    "+hscan",
    "+publish",
    "+subscribe",
];

/// The rules of bans and top offenders (rl-gateway, the middleware), after the others:
/// their commands and those their scripts call.
pub const GATEWAY_RULES: &[&str] = &[
    "+eval",
    "+get",
    "+del",
    "+pttl",
    "+set",
    "+incr",
    "+pexpire",
    "+pexpireat",
    "+time",
    "+zadd",
    "+zincrby",
    "+zcard",
    "+zrange",
    "+zrangebyscore",
    "+zrem",
    "+zremrangebyrank",
    "+zremrangebyscore",
];

/// The rules the limiter's user needs with the module, after [`BASE_RULES`].
pub const MODULE_RULES: &[&str] = &[
    "+rl.tokenbucket",
    "+rl.sliding",
    "+rl.fixed",
    "+rl.gcra",
    "+rl.throttle",
    "+rl.log",
    "+rl.concurrency",
    "+rl.all",
    "+rl.refund",
    "+rl.state",
    "+set",
];

/// The rules the limiter's user needs without the module (the Lua twin), after
/// [`BASE_RULES`].
pub const TWIN_RULES: &[&str] = &[
    "+fcall",
    "+function|load",
    "+function|list",
    "+evalsha",
    "+eval",
    "+script|load",
    "+time",
    "+exists",
    "+getrange",
    "+set",
    "+del",
    "+pttl",
    "+setrange",
    "+append",
    "+pexpireat",
];

/// Certificates in a fresh directory: a CA, a server certificate for `127.0.0.1` only (no
/// DNS name: a client that connects to `localhost` must refuse it), and a client
/// certificate.
pub struct Certs {
    pub dir: PathBuf,
}

impl Certs {
    /// Makes them with `openssl` (P-256 keys, valid for a day).
    pub fn new() -> Certs {
        let dir =
            std::env::temp_dir().join(format!("rl-tls-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(
            dir.join("server.ext"),
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n\
             extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("client.ext"),
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n\
             extendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        let key = |name: &str| {
            run(&[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                name,
            ])
        };
        key("ca.key");
        run(&[
            "req",
            "-new",
            "-x509",
            "-key",
            "ca.key",
            "-subj",
            "/CN=rl test CA",
            "-days",
            "1",
            "-sha256",
            "-extensions",
            "v3_ca",
            "-out",
            "ca.pem",
        ]);
        for leaf in ["server", "client"] {
            key(&format!("{leaf}.key"));
            run(&[
                "req",
                "-new",
                "-key",
                &format!("{leaf}.key"),
                "-subj",
                &format!("/CN=rl test {leaf}"),
                "-out",
                &format!("{leaf}.csr"),
            ]);
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{leaf}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-sha256",
                "-extfile",
                &format!("{leaf}.ext"),
                "-out",
                &format!("{leaf}.pem"),
            ]);
        }
        Certs { dir }
    }

    /// A file of the directory (`ca.pem`, `server.pem`, `client.pem`, `client.key`, ...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Default for Certs {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-server` listening on plain `port` (for the test itself) and on `tls_port` with
/// the certificates of `certs` and the users above, with the module or not; `client_certs`:
/// clients must present a certificate signed by the CA. Its output is piped (see
/// [`wait_ready`]).
pub(crate) fn server_command(
    certs: &Certs,
    port: u16,
    tls_port: u16,
    module: bool,
    client_certs: bool,
) -> Command {
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--tls-port", &tls_port.to_string()])
        .arg("--tls-cert-file")
        .arg(certs.path("server.pem"))
        .arg("--tls-key-file")
        .arg(certs.path("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(certs.path("ca.pem"))
        .args([
            "--tls-auth-clients",
            if client_certs { "yes" } else { "no" },
        ])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        // One word per argument: redis-server quotes an argument with spaces whole.
        .args([
            "--user",
            USER,
            "on",
            &format!(">{PASSWORD}"),
            "~*",
            "&*",
            "+@all",
        ])
        .args(["--user", MINIMAL_USER, "on", &format!(">{MINIMAL_USER}")])
        .args(BASE_RULES)
        .args(if module { MODULE_RULES } else { TWIN_RULES })
        .args(GATEWAY_RULES)
        .args([
            "--user",
            NARROW_USER,
            "on",
            &format!(">{NARROW_USER}"),
            "~other:*",
            "&*",
            "+@all",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if module {
        cmd.arg("--loadmodule").arg(module_path());
    }
    cmd
}

/// Waits until the server answers PING on its plain `port`, or exits, or 10 s pass.
pub(crate) fn wait_ready(child: &mut Child, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            // redis-server writes its log, the reason included, to stdout.
            use std::io::Read;
            let mut log = String::new();
            if let Some(mut out) = child.stdout.take() {
                let _ = out.read_to_string(&mut log);
            }
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_string(&mut log);
            }
            let reason: Vec<&str> = log
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.contains("overcommit"))
                .collect();
            return Err(format!("exited with {status}: {}", reason.join(" / ")));
        }
        let url = format!("redis://127.0.0.1:{port}/");
        if let Ok(mut c) = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                // Nobody reads the log from now on (redis-server ignores SIGPIPE).
                drop(child.stdout.take());
                drop(child.stderr.take());
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err("no answer within 10 s".to_string())
}

/// `redis-server` on a TLS port, with the users above; killed on drop.
pub struct TlsServer {
    child: Child,
    /// The plain port (user `default`, for the test's own look at the data).
    pub port: u16,
    /// The TLS port.
    pub tls_port: u16,
    pub certs: Certs,
}

impl TlsServer {
    /// Starts it with the module (`module`) or without (the Lua twin decides);
    /// `client_certs`: clients must present a certificate signed by the CA.
    pub fn start(module: bool, client_certs: bool) -> TlsServer {
        let certs = Certs::new();
        let mut last = String::new();
        for _ in 0..5 {
            let (port, tls_port) = (free_port(), free_port());
            let mut cmd = server_command(&certs, port, tls_port, module, client_certs);
            cmd.arg("--dir").arg(&certs.dir);
            let mut child = cmd.spawn().expect("start redis-server");
            match wait_ready(&mut child, port) {
                Ok(()) => {
                    return TlsServer {
                        child,
                        port,
                        tls_port,
                        certs,
                    }
                }
                Err(e) => {
                    last = e;
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        panic!("redis-server with TLS did not start: {last}");
    }

    /// `redis://127.0.0.1:<port>/` (plain, user `default`).
    pub fn plain_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `rediss://user:password@127.0.0.1:<tls_port>/`.
    pub fn tls_url(&self, user: &str, password: &str) -> String {
        format!("rediss://{user}:{password}@127.0.0.1:{}/", self.tls_port)
    }

    /// A synchronous plain connection as `default`.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.plain_url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// The CA file clients must trust.
    pub fn ca(&self) -> PathBuf {
        self.certs.path("ca.pem")
    }

    /// The client certificate and key files.
    pub fn client_cert(&self) -> (PathBuf, PathBuf) {
        (self.certs.path("client.pem"), self.certs.path("client.key"))
    }

    /// The directory of the certificates.
    pub fn dir(&self) -> &Path {
        &self.certs.dir
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
