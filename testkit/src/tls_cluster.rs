//! A managed Redis Cluster's stand-in: three masters of Debian's `redis-server` sharing the
//! slots, clients and the cluster bus and replication over TLS (`tls-cluster yes`,
//! `tls-replication yes`), with the ACL users of [`crate::tls`].
//!
//! The cluster bus always asks the connecting node for a certificate (whatever
//! `tls-auth-clients` says), and a node presents `tls-client-cert-file`, else its server
//! certificate: that one is for server authentication only, so without the client
//! certificate every node refuses the others and the cluster stays in handshake.

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use crate::cmd::{query, wait_until};
use crate::server::free_port;
use crate::tls::{server_command, wait_ready, Certs};

/// One master: its plain port (the test's own look, user `default`) and its TLS port (what
/// CLUSTER SLOTS tells a TLS client).
pub struct TlsNode {
    child: Child,
    pub port: u16,
    pub tls_port: u16,
}

impl TlsNode {
    /// A synchronous plain connection as `default`.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// `rediss://user:password@127.0.0.1:<tls_port>/`.
    pub fn tls_url(&self, user: &str, password: &str) -> String {
        format!("rediss://{user}:{password}@127.0.0.1:{}/", self.tls_port)
    }
}

impl Drop for TlsNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three TLS masters in slot order (the first serves slot 0); killed on drop.
pub struct TlsCluster {
    pub nodes: Vec<TlsNode>,
    pub certs: Certs,
}

impl TlsCluster {
    /// Starts the masters with the module (`module`) or without (the Lua twin decides),
    /// clients without certificates, and waits until every node sees the cluster formed
    /// over its TLS bus.
    pub fn start(module: bool) -> TlsCluster {
        let certs = Certs::new();
        let nodes: Vec<TlsNode> = (0..3).map(|i| start_node(&certs, i, module)).collect();
        const SLOTS: u16 = 16384;
        let per_node = SLOTS / 3 + 1;
        for (i, node) in nodes.iter().enumerate() {
            let first = i as u16 * per_node;
            let last = ((i as u16 + 1) * per_node).min(SLOTS) - 1;
            let (first, last) = (first.to_string(), last.to_string());
            let _: () = query(
                &mut node.client(),
                &["CLUSTER", "ADDSLOTSRANGE", &first, &last],
            );
        }
        let mut first = nodes[0].client();
        for node in &nodes[1..] {
            // With tls-cluster the node's port is its TLS port; the bus port is given.
            let bus = cluster_bus_port(node);
            let _: () = query(
                &mut first,
                &[
                    "CLUSTER",
                    "MEET",
                    "127.0.0.1",
                    &node.tls_port.to_string(),
                    &bus.to_string(),
                ],
            );
        }
        for node in &nodes {
            let mut c = node.client();
            wait_until("the TLS cluster to form", Duration::from_secs(30), || {
                let info: String = query(&mut c, &["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
            });
        }
        TlsCluster { nodes, certs }
    }

    /// The CA file clients must trust.
    pub fn ca(&self) -> PathBuf {
        self.certs.path("ca.pem")
    }

    /// Every node's `rediss://` URL for `user`.
    pub fn tls_urls(&self, user: &str, password: &str) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.tls_url(user, password))
            .collect()
    }
}

fn cluster_bus_port(node: &TlsNode) -> u16 {
    let config: Vec<String> = query(&mut node.client(), &["CONFIG", "GET", "cluster-port"]);
    config[1].parse().expect("cluster-port")
}

fn start_node(certs: &Certs, i: usize, module: bool) -> TlsNode {
    let dir = certs.path(&format!("node{i}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut last = String::new();
    for _ in 0..5 {
        let (port, tls_port, bus) = (free_port(), free_port(), free_port());
        let mut cmd = server_command(certs, port, tls_port, module, false);
        cmd.arg("--dir")
            .arg(&dir)
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", "5000"])
            .args(["--cluster-port", &bus.to_string()])
            .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
            .arg("--tls-client-cert-file")
            .arg(certs.path("client.pem"))
            .arg("--tls-client-key-file")
            .arg(certs.path("client.key"));
        let mut child = cmd.spawn().expect("start redis-server");
        match wait_ready(&mut child, port) {
            Ok(()) => {
                return TlsNode {
                    child,
                    port,
                    tls_port,
                }
            }
            Err(e) => {
                last = e;
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
    panic!("redis-server cluster node with TLS did not start: {last}");
}
