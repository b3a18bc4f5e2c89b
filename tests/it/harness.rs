//! The harness itself under the conditions that broke it: restarts while clients keep
//! opening connections (each takes an ephemeral local port), and a start that fails.

use redis_rl_testkit::*;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server killed and restarted 25 times on its port while a client connects to it in a
/// loop: every restart binds, and the port lies outside the kernel's ephemeral range, where
/// no outgoing connection can take it while the server is down.
#[test]
fn restarts_while_clients_connect() {
    let mut server = Server::start();
    let port = server.port;
    let ephemeral = redis_rl_testkit::ports::ephemeral_range();
    assert!(
        !ephemeral.contains(&port),
        "port {port} lies in the ephemeral range {ephemeral:?}"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let connects = Arc::new(AtomicU64::new(0));
    let client = {
        let (stop, connects) = (stop.clone(), connects.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let addr = ([127, 0, 0, 1], port).into();
            while !stop.load(Ordering::Relaxed)
                && Instant::now() < deadline
                && connects.load(Ordering::Relaxed) < 200_000
            {
                let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(200));
                connects.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    for round in 0..25 {
        server.restart();
        let pong: String = query(&mut server.client(), &["PING"]);
        assert_eq!(pong, "PONG", "round {round}");
        assert_eq!(server.port, port);
    }
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    assert!(connects.load(Ordering::Relaxed) > 0);
}

/// A restart that cannot bind says why, from the server's own log.
#[test]
fn a_failed_restart_shows_the_end_of_the_log() {
    let mut server = Server::start();
    server.kill();
    // Something else takes the port meanwhile; it closes every connection at once, so the
    // harness's readiness check sees no server there.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", server.port)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let closer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            for stream in squatter.incoming() {
                drop(stream);
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
        })
    };
    let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.restart()))
        .expect_err("the restart should fail while the port is taken");
    stop.store(true, Ordering::Relaxed);
    let _ = TcpStream::connect(("127.0.0.1", server.port));
    closer.join().unwrap();
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("Address already in use"),
        "no log lines in: {message}"
    );
}
