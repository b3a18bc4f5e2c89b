//! A Redis Cluster on loopback: masters with the module, sharing the slots.

use crate::cmd::{query, wait_until};
use crate::server::Server;
use std::time::Duration;

/// Masters sharing the 16384 slots in equal ranges, each with the module loaded.
pub struct Cluster {
    /// The masters, in slot order (the first serves slot 0).
    pub nodes: Vec<Server>,
}

const SLOTS: u16 = 16384;

impl Cluster {
    /// Starts three masters, splits the 16384 slots evenly between them in order and waits
    /// until every node sees the cluster formed.
    pub fn start() -> Cluster {
        Cluster::start_nodes(3)
    }

    /// Starts `n` masters the same way.
    pub fn start_nodes(n: u16) -> Cluster {
        Cluster::form(
            (0..n)
                .map(|_| Server::start_with(&Cluster::NODE_ARGS))
                .collect(),
        )
    }

    /// Starts three masters without the module (as a managed service offers them).
    pub fn start_plain() -> Cluster {
        Cluster::form(
            (0..3)
                .map(|_| Server::start_plain(&Cluster::NODE_ARGS))
                .collect(),
        )
    }

    const NODE_ARGS: [&str; 6] = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "5000",
    ];

    fn form(nodes: Vec<Server>) -> Cluster {
        let n = u16::try_from(nodes.len()).expect("a few nodes");
        let per_node = SLOTS / n + 1;
        for (i, node) in nodes.iter().enumerate() {
            let mut c = node.client();
            let first = i as u16 * per_node;
            let last = ((i as u16 + 1) * per_node).min(SLOTS) - 1;
            let _: () = query(
                &mut c,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            );
        }
        let mut first = nodes[0].client();
        for node in &nodes[1..] {
            let _: () = query(
                &mut first,
                &["CLUSTER", "MEET", "127.0.0.1", &node.port.to_string()],
            );
        }
        for node in &nodes {
            let mut c = node.client();
            wait_until("the cluster to form", Duration::from_secs(30), || {
                let info: String = query(&mut c, &["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{n}"))
            });
        }
        Cluster { nodes }
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn slot(&self, key: &str) -> i64 {
        let mut c = self.nodes[0].client();
        query(&mut c, &["CLUSTER", "KEYSLOT", key])
    }

    /// The node serving `key`'s slot, by the layout made in `start`.
    pub fn owner(&self, key: &str) -> &Server {
        let n = u16::try_from(self.nodes.len()).unwrap();
        let per_node = i64::from(SLOTS / n + 1);
        &self.nodes[(self.slot(key) / per_node) as usize]
    }

    /// A node other than `node`.
    pub fn other_than(&self, node: &Server) -> &Server {
        self.nodes.iter().find(|n| n.port != node.port).unwrap()
    }

    /// `CLUSTER MYID` of `node`.
    pub fn node_id(node: &Server) -> String {
        query(&mut node.client(), &["CLUSTER", "MYID"])
    }
}
