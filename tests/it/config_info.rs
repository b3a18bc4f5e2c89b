//! Module configuration (`loadmodule ... name value`, `CONFIG GET/SET rl.*`) and the
//! `INFO rl` counters.

use redis_rl_testkit::*;

#[test]
fn load_arguments_and_config_set_change_the_limits() {
    let server = Server::start_with(&["max-cost", "5", "ttl-slack-ms", "250"]);
    let mut c = server.client();
    let got: Vec<String> = query(&mut c, &["CONFIG", "GET", "rl.max-cost"]);
    assert_eq!(got, ["rl.max-cost", "5"]);
    assert_eq!(
        error(
            &mut c,
            &["RL.TOKENBUCKET", "k", "10", "10", "1000", "COST", "6"]
        ),
        "ERR cost must be an integer between 0 and 5"
    );
    // 9 tokens left, one token per 100 ms: idle after 100 ms, then 250 ms of slack. The
    // absolute expiry is checked against the server's clock around the call (a PTTL read
    // afterwards would depend on how long the machine took to send it).
    let t0 = server_time_us(&mut c);
    let r = ints(&mut c, &["RL.TOKENBUCKET", "k", "10", "10", "1000"]);
    let t1 = server_time_us(&mut c);
    assert_eq!(r, [1, 10, 9, 0, 100]);
    let (_, expire_at) = frozen(&mut c, "k");
    let call_ms = expire_at - 100 - 250;
    let range = t0.div_ceil(1000) as i64..=t1.div_ceil(1000) as i64;
    assert!(
        range.contains(&call_ms),
        "expiry {expire_at}: slack is not 250 ms (call in {range:?})"
    );

    let _: () = query(&mut c, &["CONFIG", "SET", "rl.max-all-keys", "2"]);
    assert_eq!(
        error(
            &mut c,
            &[
                "RL.ALL", "3", "a", "b", "c", "SLIDING", "1", "1", "SLIDING", "1", "1", "SLIDING",
                "1", "1"
            ]
        ),
        "ERR numkeys must be an integer between 1 and 2"
    );
    let _: () = query(&mut c, &["CONFIG", "SET", "rl.max-log-entries", "50"]);
    assert_eq!(
        error(&mut c, &["RL.LOG", "l", "51", "1000"]),
        "ERR limit must be an integer between 1 and 50"
    );
    for (name, bad) in [
        ("rl.max-cost", "-1"),
        ("rl.max-cost", "1000000000000001"),
        ("rl.max-all-keys", "0"),
        ("rl.max-all-keys", "257"),
        ("rl.max-log-entries", "10001"),
        ("rl.ttl-slack-ms", "-5"),
        ("rl.ttl-slack-ms", "abc"),
    ] {
        let e = error(&mut c, &["CONFIG", "SET", name, bad]);
        assert!(e.starts_with("ERR CONFIG SET failed"), "{name} {bad}: {e}");
        assert!(e.contains(&format!("'{name}'")), "{name} {bad}: {e}");
    }
    // Out of range: the server's text names the accepted range (a value that is not an
    // integer at all gets the server's parse error, which a numeric config cannot change).
    assert_eq!(
        error(&mut c, &["CONFIG", "SET", "rl.max-all-keys", "257"]),
        "ERR CONFIG SET failed (possibly related to argument 'rl.max-all-keys') - argument \
         must be between 1 and 256 inclusive"
    );
    let got: Vec<String> = query(&mut c, &["CONFIG", "GET", "rl.max-all-keys"]);
    assert_eq!(
        got,
        ["rl.max-all-keys", "2"],
        "a refused CONFIG SET keeps the value"
    );
}

#[test]
fn info_counts_calls_decisions_and_errors_per_command() {
    let server = Server::start();
    let mut c = server.client();
    for _ in 0..3 {
        ints(&mut c, &["RL.SLIDING", "s", "2", "60000"]);
    }
    ints(&mut c, &["RL.SLIDING", "s", "2", "60000", "PEEK"]);
    error(&mut c, &["RL.SLIDING", "s", "0", "60000"]);
    let field = |c: &mut redis::Connection, f: &str| info_field(c, "rl", f).unwrap_or_default();
    assert_eq!(field(&mut c, "rl_sliding_calls"), "5");
    assert_eq!(field(&mut c, "rl_sliding_allowed"), "2");
    assert_eq!(field(&mut c, "rl_sliding_denied"), "1");
    assert_eq!(field(&mut c, "rl_sliding_errors"), "1");
    assert_eq!(field(&mut c, "rl_tokenbucket_calls"), "0");
}

/// `INFO rl` names the release and the commit the module was built from (build.rs), and
/// `MODULE LIST` shows the release as major * 10000 + minor * 100 + patch.
#[test]
fn info_and_module_list_report_the_release_and_the_commit() {
    let server = Server::start();
    let mut c = server.client();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        info_field(&mut c, "rl", "rl_version").as_deref(),
        Some(version)
    );
    let commit = info_field(&mut c, "rl", "rl_git_commit").unwrap_or_default();
    assert_eq!(commit, env!("RL_GIT_COMMIT"));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success());
    if let Some(head) = head {
        assert_eq!(
            commit,
            String::from_utf8_lossy(&head.stdout).trim(),
            "built from HEAD"
        );
    }
    let numbers: Vec<i64> = version.split('.').map(|n| n.parse().unwrap()).collect();
    let expected = numbers[0] * 10_000 + numbers[1] * 100 + numbers[2];
    let modules: Vec<std::collections::HashMap<String, redis::Value>> =
        query(&mut c, &["MODULE", "LIST"]);
    let rl = modules
        .iter()
        .find(|m| m.get("name") == Some(&redis::Value::BulkString(b"rl".to_vec())))
        .expect("rl in MODULE LIST");
    assert_eq!(rl.get("ver"), Some(&redis::Value::Int(expected)));
}

/// Starts the server with the module and `args`, listening on a unix socket only, and returns
/// its exit status and log once it exits (killed after 10 s: a server that loaded the module
/// keeps running).
fn load_with(args: &[&str]) -> (Option<i32>, String) {
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rl-load-args-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("server.sock");
    let log = dir.join("server.log");
    let module = module_path();
    let mut command = Command::new(server_binary());
    command
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .arg("--unixsocket")
        .arg(&socket)
        .arg("--logfile")
        .arg(&log)
        .arg("--dir")
        .arg(&dir)
        .arg("--loadmodule")
        .arg(&module)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (status, text)
}

#[test]
fn bad_load_arguments_refuse_to_load_naming_the_argument_and_range() {
    for (args, message) in [
        (
            &["maxcost", "10"][..],
            "redis-rl: unknown load argument 'maxcost', expected max-cost, max-all-keys, \
             max-log-entries or ttl-slack-ms (each followed by its value)",
        ),
        (
            &["max-cost", "abc"][..],
            "redis-rl: load argument max-cost must be an integer between 0 and \
             1000000000000000, got 'abc'",
        ),
        (
            &["ttl-slack-ms", "5", "max-all-keys", "257"][..],
            "redis-rl: load argument max-all-keys must be an integer between 1 and 256, got '257'",
        ),
        (
            &["max-log-entries"][..],
            "redis-rl: load argument max-log-entries needs a value: an integer between 1 and 10000",
        ),
    ] {
        let (status, log) = load_with(args);
        assert!(status.is_some(), "{args:?}: the server kept running");
        assert_ne!(status, Some(0), "{args:?}: {log}");
        assert!(log.contains(message), "{args:?}: no {message:?} in\n{log}");
    }
}
