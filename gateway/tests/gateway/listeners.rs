//! Which listeners a mode opens: forward auth or the rate limit service alone open only
//! their own (and --admin-listen), not the proxy's 127.0.0.1:8080 with demo answers, unless
//! --listen is given.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};

use redis_rl_testkit::{eventually, free_port, Server};

use super::get_from;

/// The TCP ports process `pid` listens on (its sockets in LISTEN state, from /proc).
fn listening_ports(pid: u32) -> BTreeSet<u16> {
    let inodes: BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut ports = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is f[1] (ADDR:PORT in hex), st f[3] (0A: LISTEN), inode f[9].
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                let port = f[1].rsplit(':').next().unwrap();
                ports.insert(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn auth_and_rls_modes_open_no_proxy_listener_without_listen() {
    let server = Server::start();
    let dir = super::test_dir("listeners", server.port);
    let rls_config = dir.join("rls.yaml");
    std::fs::write(&rls_config, "domain: d\n").unwrap();
    let rls_config = rls_config.to_str().unwrap().to_string();
    for mode in ["--auth-listen", "--rls-listen"] {
        let (own, admin) = (free_port(), free_port());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rl-gateway"));
        cmd.args(["--redis", &server.url(), "--log", "warn"])
            .args([mode, &format!("127.0.0.1:{own}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .env_remove("RL_GATEWAY_LISTEN")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if mode == "--rls-listen" {
            cmd.args(["--rls-config", &rls_config]);
        }
        let mut gw = Killed(cmd.spawn().unwrap());
        eventually("the admin listener answers", async || {
            assert!(
                matches!(gw.0.try_wait(), Ok(None)),
                "{mode}: the gateway exited"
            );
            get_from(admin, "/healthz", &[]).await.is_some()
        })
        .await;
        eventually("its own listener is open", async || {
            listening_ports(gw.0.id()).contains(&own)
        })
        .await;
        assert_eq!(
            listening_ports(gw.0.id()),
            BTreeSet::from([own, admin]),
            "{mode}: only its own listener and the admin one"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
