//! Listening ports for test servers, outside the kernel's ephemeral range.
//!
//! Asking the kernel for a free port (`bind 127.0.0.1:0`) always yields an ephemeral one: the
//! range the kernel also picks local ports of outgoing connections from. A server stopped for
//! a restart then races every client, replica and gateway that opens a connection meanwhile:
//! one of them can get the server's port as its local port, and the restart fails to bind.
//! Ports handed out here lie outside `/proc/sys/net/ipv4/ip_local_port_range`, and for a
//! cluster node its bus port (port + 10000) too, so no outgoing connection can take them.
//!
//! Several test processes run at once on one machine (two suites, eight engineers): each
//! process starts at a random point of the candidate list, checks that the port binds now,
//! and holds a lock file per port (`$TMPDIR/redis-rl-ports/<port>`, `flock`) until it exits,
//! which the kernel releases even when the process is killed. `scripts/ports.py` follows the
//! same rules and the same lock files, so the scripts and the Python tests take part too.

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Mutex;

/// The lowest port handed out: below are well-known and commonly configured service ports
/// (Redis's own 6379 among them).
pub const LOWEST_PORT: u16 = 10_000;

/// A cluster node also listens on its port + 10000 (the cluster bus).
pub const BUS_OFFSET: u16 = 10_000;

/// The range Linux uses when `/proc/sys/net/ipv4/ip_local_port_range` cannot be read.
const DEFAULT_EPHEMERAL: RangeInclusive<u16> = 32_768..=60_999;

/// The kernel's ephemeral port range (`/proc/sys/net/ipv4/ip_local_port_range`).
pub fn ephemeral_range() -> RangeInclusive<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| parse_range(&text))
        .unwrap_or(DEFAULT_EPHEMERAL)
}

/// `"32768\t60999\n"` -> `32768..=60999`.
fn parse_range(text: &str) -> Option<RangeInclusive<u16>> {
    let mut fields = text.split_whitespace().map(str::parse::<u16>);
    let (lo, hi) = (fields.next()?.ok()?, fields.next()?.ok()?);
    (lo <= hi).then_some(lo..=hi)
}

/// Every port this allocator may hand out, given the ephemeral range: at least
/// [`LOWEST_PORT`], outside `ephemeral`, and with `bus` its port + [`BUS_OFFSET`] too.
pub fn candidates(ephemeral: &RangeInclusive<u16>, bus: bool) -> Vec<u16> {
    let usable = |p: u16| p >= LOWEST_PORT && !ephemeral.contains(&p);
    (LOWEST_PORT..=u16::MAX)
        .filter(|&p| usable(p))
        .filter(|&p| !bus || p.checked_add(BUS_OFFSET).is_some_and(usable))
        .collect()
}

/// A loopback port to listen on: outside the ephemeral range, free now, and handed to no
/// other caller in this or another process using this allocator while this process lives.
pub fn listen_port() -> u16 {
    ALLOCATOR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take(false)
}

/// A port for a cluster node: the port and its bus port (+10000) both as [`listen_port`]
/// promises.
pub fn cluster_port() -> u16 {
    ALLOCATOR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take(true)
}

static ALLOCATOR: Mutex<Allocator> = Mutex::new(Allocator {
    cursor: None,
    held: Vec::new(),
});

struct Allocator {
    /// Where the next search starts in the candidate list (random on first use).
    cursor: Option<usize>,
    /// The lock files of the ports handed out, open for the life of the process.
    held: Vec<File>,
}

impl Allocator {
    fn take(&mut self, bus: bool) -> u16 {
        let ephemeral = ephemeral_range();
        let list = candidates(&ephemeral, bus);
        assert!(
            !list.is_empty(),
            "no port from {LOWEST_PORT} up lies outside the ephemeral range {}-{} \
             (/proc/sys/net/ipv4/ip_local_port_range): narrow it to run servers in tests",
            ephemeral.start(),
            ephemeral.end()
        );
        let start = *self.cursor.get_or_insert_with(random_start);
        for step in 0..list.len() {
            let i = (start + step) % list.len();
            let port = list[i];
            let ports: &[u16] = if bus {
                &[port, port + BUS_OFFSET]
            } else {
                &[port]
            };
            if let Some(locks) = claim(ports) {
                self.held.extend(locks);
                self.cursor = Some(i + 1);
                return port;
            }
        }
        panic!(
            "no free port outside the ephemeral range {}-{}",
            ephemeral.start(),
            ephemeral.end()
        );
    }
}

/// A starting point that differs between processes started at the same moment.
fn random_start() -> usize {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut rng = crate::Rng::new(u64::from(nanos) ^ (u64::from(std::process::id()) << 32));
    rng.next_u64() as usize
}

/// Locks every one of `ports` and checks each binds now; on any failure releases them all.
fn claim(ports: &[u16]) -> Option<Vec<File>> {
    let mut locks = Vec::new();
    for &port in ports {
        locks.push(lock(port)?);
        // std's listener sets SO_REUSEADDR, as redis-server does: a port whose old
        // connections linger in TIME_WAIT still counts as free.
        TcpListener::bind(("127.0.0.1", port)).ok()?;
    }
    Some(locks)
}

/// The lock on `port`'s file, or `None` when another holder has it. Without a usable lock
/// directory every port counts as unlocked (the bind check and the random start remain).
fn lock(port: u16) -> Option<File> {
    let Some(dir) = lock_dir() else {
        return File::open("/dev/null").ok();
    };
    let path = dir.join(port.to_string());
    let file = File::open(&path)
        .or_else(|_| OpenOptions::new().append(true).create(true).open(&path))
        .ok()?;
    file.try_lock().ok()?;
    Some(file)
}

/// `$TMPDIR/redis-rl-ports`, shared by every user of the machine (mode 1777, like /tmp).
fn lock_dir() -> Option<PathBuf> {
    let dir = std::env::temp_dir().join("redis-rl-ports");
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir).ok()?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
    }
    Some(dir)
}

/// The lock file of `port` is held by someone (another process, or this one through another
/// open file): what a concurrent test process would see.
pub fn is_claimed(port: u16) -> bool {
    lock_dir().is_some_and(|dir| {
        File::open(dir.join(port.to_string())).is_ok_and(|f| f.try_lock().is_err())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn reads_the_kernel_format() {
        assert_eq!(parse_range("32768\t60999\n"), Some(32_768..=60_999));
        assert_eq!(parse_range("1024 65535"), Some(1024..=65_535));
        assert_eq!(parse_range("60999 32768"), None);
        assert_eq!(parse_range("garbage"), None);
    }

    #[test]
    fn candidates_avoid_the_ephemeral_range_and_so_do_their_bus_ports() {
        let ephemeral = 32_768..=60_999;
        let plain = candidates(&ephemeral, false);
        assert!(plain
            .iter()
            .all(|p| !ephemeral.contains(p) && *p >= LOWEST_PORT));
        assert!(plain.contains(&32_767) && plain.contains(&61_000) && plain.contains(&65_535));
        let bus = candidates(&ephemeral, true);
        assert!(!bus.is_empty());
        for p in &bus {
            assert!(!ephemeral.contains(p) && !ephemeral.contains(&(p + BUS_OFFSET)));
        }
        assert_eq!(bus.first(), Some(&10_000));
        assert_eq!(bus.last(), Some(&22_767));
        // A range reaching the top leaves only the ports below it.
        assert_eq!(
            candidates(&(15_000..=65_535), false),
            (10_000..15_000).collect::<Vec<_>>()
        );
        assert!(candidates(&(1024..=65_535), false).is_empty());
    }

    #[test]
    fn ports_are_outside_the_kernels_range_unique_and_claimed() {
        let ephemeral = ephemeral_range();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let mut got: Vec<u16> = (0..40).map(|_| listen_port()).collect();
                    got.extend((0..10).map(|_| cluster_port()));
                    got
                })
            })
            .collect();
        let mut seen = HashSet::new();
        for handle in handles {
            for port in handle.join().unwrap() {
                assert!(!ephemeral.contains(&port), "{port} is ephemeral");
                assert!(seen.insert(port), "{port} handed out twice");
                assert!(
                    is_claimed(port),
                    "{port} is not locked against other processes"
                );
            }
        }
    }

    #[test]
    fn a_cluster_port_claims_its_bus_port() {
        let port = cluster_port();
        let ephemeral = ephemeral_range();
        assert!(!ephemeral.contains(&(port + BUS_OFFSET)));
        assert!(is_claimed(port + BUS_OFFSET));
        for _ in 0..50 {
            assert_ne!(listen_port(), port + BUS_OFFSET);
        }
    }

    /// The first candidate nobody holds and nothing listens on now, and its index.
    fn a_free_candidate() -> (usize, u16) {
        let list = candidates(&ephemeral_range(), false);
        list.iter()
            .enumerate()
            .map(|(i, &p)| (i, p))
            .find(|&(_, p)| !is_claimed(p) && TcpListener::bind(("127.0.0.1", p)).is_ok())
            .expect("a free candidate")
    }

    #[test]
    fn a_port_claimed_by_another_process_is_skipped() {
        let (i, port) = a_free_candidate();
        // Another process's claim: the same lock taken through another open file.
        let held = lock(port).expect("lock the port's file");
        let mut allocator = Allocator {
            cursor: Some(i),
            held: Vec::new(),
        };
        assert_ne!(allocator.take(false), port);
        drop(held);
    }

    #[test]
    fn a_port_something_listens_on_is_skipped() {
        let (i, port) = a_free_candidate();
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("listen");
        let mut allocator = Allocator {
            cursor: Some(i),
            held: Vec::new(),
        };
        assert_ne!(allocator.take(false), port);
        drop(listener);
    }
}
