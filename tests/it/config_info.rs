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
    }
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
