//! Bad input beyond the conformance suite's tables (`conformance.rs`, every command): the
//! largest values at work, the order in which arguments are checked (before the key is
//! read, whatever it holds), non-ASCII options shown escaped, and `UPTO` refused by every
//! command that does not take it (RL.ALL, RL.REFUND, RL.THROTTLE among them).

use redis_rl_testkit::*;

const COUNT_MAX: &str = "1000000000000000";
const DURATION_MAX: &str = "1000000000000";
const COST: &str = "ERR cost must be an integer between 0 and 1000000000000000";
const PEEK_TWICE: &str = "ERR option PEEK given more than once";
const CAPACITY: &str = "ERR capacity must be an integer between 1 and 1000000000000000";
const REFILL_TOKENS: &str = "ERR refill_tokens must be an integer between 1 and 1000000000000000";
const REFILL_MS: &str = "ERR refill_ms must be an integer between 1 and 1000000000000";
const LIMIT: &str = "ERR limit must be an integer between 1 and 1000000000000000";
const WINDOW_MS: &str = "ERR window_ms must be an integer between 1 and 1000000000000";

#[test]
fn values_at_the_documented_maximum_are_accepted_and_work() {
    let server = Server::start();
    let mut c = server.client();
    let max = 1_000_000_000_000_000;
    assert_eq!(
        ints(
            &mut c,
            &[
                "RL.TOKENBUCKET",
                "tb",
                COUNT_MAX,
                COUNT_MAX,
                DURATION_MAX,
                "COST",
                COUNT_MAX
            ]
        ),
        [1, max, 0, 0, 1_000_000_000_000]
    );
    // 10^15 tokens every 10^12 ms is 1000 tokens per ms: the next call finds some.
    let r = ints(
        &mut c,
        &["RL.TOKENBUCKET", "tb", COUNT_MAX, COUNT_MAX, DURATION_MAX],
    );
    assert_eq!(r[..2], [1, max]);
    let r = ints(
        &mut c,
        &[
            "RL.SLIDING",
            "sw",
            COUNT_MAX,
            DURATION_MAX,
            "COST",
            COUNT_MAX,
        ],
    );
    assert_eq!(r[..4], [1, max, 0, 0]);
    let r = ints(&mut c, &["RL.SLIDING", "sw", COUNT_MAX, DURATION_MAX]);
    assert_eq!(r[..3], [0, max, 0]);
    // The smallest: one token per millisecond, a 1 ms window.
    assert_eq!(
        ints(&mut c, &["RL.TOKENBUCKET", "tb1", "1", "1", "1"]),
        [1, 1, 0, 0, 1]
    );
    assert_eq!(
        ints(&mut c, &["RL.SLIDING", "sw1", "1", "1"])[..3],
        [1, 1, 0]
    );
}

#[test]
fn arguments_are_checked_in_order_before_the_key_is_read() {
    let server = Server::start();
    let mut c = server.client();
    query::<i64>(&mut c, &["RPUSH", "list", "a"]);
    query::<()>(&mut c, &["SET", "text", "hello"]);
    ints(&mut c, &["RL.SLIDING", "sw", "10", "1000", "COST", "2"]);
    for key in ["list", "text", "sw", "missing"] {
        let before = frozen(&mut c, key);
        for (args, expected) in [
            (&["RL.TOKENBUCKET", key, "0", "0", "0"][..], CAPACITY),
            (&["RL.TOKENBUCKET", key, "10", "x", "0"], REFILL_TOKENS),
            (&["RL.TOKENBUCKET", key, "10", "10", "-5", "FOO"], REFILL_MS),
            (&["RL.TOKENBUCKET", key, "0", "10", "1000", "FOO"], CAPACITY),
            (
                &[
                    "RL.TOKENBUCKET",
                    key,
                    "10",
                    "10",
                    "1000",
                    "COST",
                    "x",
                    "FOO",
                ],
                COST,
            ),
            (&["RL.SLIDING", key, "x", "x"], LIMIT),
            (&["RL.SLIDING", key, "10", "0", "COST"], WINDOW_MS),
            (
                &["RL.SLIDING", key, "10", "10", "PEEK", "PEEK", "COST"],
                PEEK_TWICE,
            ),
        ] {
            assert_eq!(error(&mut c, args), expected, "{args:?}");
        }
        assert_eq!(frozen(&mut c, key), before, "{key} changed");
    }
}

#[test]
/// Bytes outside printable ASCII are escaped: redis-module would send each char of a
/// non-ASCII text as one byte, which is not valid UTF-8 and breaks clients.
fn an_option_that_is_not_ascii_is_shown_escaped_in_the_error() {
    let server = Server::start();
    let mut c = server.client();
    for (option, shown) in [
        (&b"\xff\xfeX"[..], "\\xff\\xfeX"),
        ("é".as_bytes(), "\\xc3\\xa9"),
    ] {
        let err = redis::cmd("RL.TOKENBUCKET")
            .arg(&["k", "10", "10", "1000"])
            .arg(option)
            .query::<redis::Value>(&mut c)
            .expect_err("an unknown option is refused");
        assert_eq!(
            error_text(&err),
            format!("ERR unknown option '{shown}', expected COST n, UPTO, FORCE or PEEK")
        );
    }
    assert_eq!(query::<i64>(&mut c, &["EXISTS", "k"]), 0);
}

/// `UPTO` is refused, like any option a command does not have, by every command that does
/// not take it (RL.LOG, RL.ALL, RL.REFUND, RL.CONCURRENCY, RL.THROTTLE), with nothing
/// changed; `rl.max-cost` bounds an `UPTO` call's cost as any other.
#[test]
fn upto_is_refused_where_it_is_not_an_option() {
    let server = Server::start();
    let mut c = server.client();
    ints(&mut c, &["RL.LOG", "log", "10", "1000"]);
    ints(&mut c, &["RL.SLIDING", "sw", "10", "1000"]);
    let unknown = |expected: &str| format!("ERR unknown option 'UPTO', expected {expected}");
    for key in ["log", "sw", "missing"] {
        let before = frozen(&mut c, key);
        let refund = ["RL.REFUND", key, "SLIDING", "10", "1000"];
        let cost_then_upto = [&refund[..], &["COST", "1", "UPTO"]].concat();
        let upto_then_cost = [&refund[..], &["UPTO", "COST", "1"]].concat();
        for (args, expected) in [
            (
                vec!["RL.LOG", key, "10", "1000", "UPTO"],
                unknown("COST n, FORCE or PEEK"),
            ),
            (
                vec!["RL.LOG", key, "10", "1000", "COST", "3", "UPTO"],
                unknown("COST n, FORCE or PEEK"),
            ),
            (
                vec![
                    "RL.ALL", "1", key, "SLIDING", "10", "1000", "COST", "2", "UPTO",
                ],
                unknown("COST n, FORCE or PEEK"),
            ),
            (
                cost_then_upto.to_vec(),
                "ERR option COST given more than once".to_string(),
            ),
            (
                upto_then_cost.to_vec(),
                "ERR unknown option 'UPTO', expected COST n".to_string(),
            ),
            (
                vec!["RL.CONCURRENCY", key, "10", "1000", "ACQUIRE", "id", "UPTO"],
                unknown("PEEK"),
            ),
            (
                vec!["RL.THROTTLE", key, "10", "10", "60", "UPTO"],
                "ERR quantity must be an integer between 0 and 1000000000000000".to_string(),
            ),
        ] {
            assert_eq!(error(&mut c, &args), expected, "{args:?}");
        }
        assert_eq!(frozen(&mut c, key), before, "{key} changed");
    }
    query::<()>(&mut c, &["CONFIG", "SET", "rl.max-cost", "5"]);
    assert_eq!(
        error(
            &mut c,
            &["RL.SLIDING", "sw", "10", "1000", "COST", "6", "UPTO"]
        ),
        "ERR cost must be an integer between 0 and 5"
    );
    let r = ints(
        &mut c,
        &["RL.FIXED", "f", "10", "1000000000", "COST", "5", "UPTO"],
    );
    assert_eq!((r[..4].to_vec(), r[5]), (vec![1, 10, 5, 0], 5));
}
