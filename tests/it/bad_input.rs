//! The bad-input table for every argument of RL.TOKENBUCKET and RL.SLIDING (and `UPTO`
//! wherever it is and is not an option): each bad
//! argument gets its exact documented `ERR` text and changes nothing (an existing key keeps
//! its bytes and expiry, a missing key stays missing, the dataset is not dirtied); each value
//! at the edge of its documented range is accepted.

use redis_rl_testkit::*;

const COUNT_MAX: &str = "1000000000000000";
const COUNT_ABOVE: &str = "1000000000000001";
const DURATION_MAX: &str = "1000000000000";
const DURATION_ABOVE: &str = "1000000000001";

const CAPACITY: &str = "ERR capacity must be an integer between 1 and 1000000000000000";
const REFILL_TOKENS: &str = "ERR refill_tokens must be an integer between 1 and 1000000000000000";
const REFILL_MS: &str = "ERR refill_ms must be an integer between 1 and 1000000000000";
const LIMIT: &str = "ERR limit must be an integer between 1 and 1000000000000000";
const WINDOW_MS: &str = "ERR window_ms must be an integer between 1 and 1000000000000";
const COST: &str = "ERR cost must be an integer between 0 and 1000000000000000";
const COST_MISSING: &str =
    "ERR option COST needs a value: cost must be an integer between 0 and 1000000000000000";
const COST_TWICE: &str = "ERR option COST given more than once";
const PEEK_TWICE: &str = "ERR option PEEK given more than once";
const UPTO_TWICE: &str = "ERR option UPTO given more than once";
const FORCE_TWICE: &str = "ERR option FORCE given more than once";
const UPTO_AND_FORCE: &str = "ERR options UPTO and FORCE cannot be combined";

/// Beyond [`NOT_DECIMAL_INTEGERS`], more that are not a decimal integer at all, or far
/// outside every range: the range error for any parameter.
const MORE_NOT_INTEGERS: &[&str] = &[
    "ten",
    "1.0",
    "1,000",
    "9223372036854775808", // i64::MAX + 1
    "-9223372036854775808",
];

/// One command: its name, valid positional arguments (after the key), and for each of them
/// its error text, its smallest and largest accepted value and the values just outside.
struct Command {
    name: &'static str,
    base: &'static [&'static str],
    params: &'static [Param],
}

struct Param {
    error: &'static str,
    min: &'static str,
    below: &'static str,
    max: &'static str,
    above: &'static str,
}

const fn count(error: &'static str) -> Param {
    Param {
        error,
        min: "1",
        below: "0",
        max: COUNT_MAX,
        above: COUNT_ABOVE,
    }
}

const fn duration(error: &'static str) -> Param {
    Param {
        error,
        min: "1",
        below: "0",
        max: DURATION_MAX,
        above: DURATION_ABOVE,
    }
}

const COMMANDS: [Command; 2] = [
    Command {
        name: "RL.TOKENBUCKET",
        base: &["10", "10", "1000000000"],
        params: &[count(CAPACITY), count(REFILL_TOKENS), duration(REFILL_MS)],
    },
    Command {
        name: "RL.SLIDING",
        base: &["10", DURATION_MAX],
        params: &[count(LIMIT), duration(WINDOW_MS)],
    },
];

/// The arguments after the key, and the error expected (`None`: accepted).
type Case = (Vec<String>, Option<String>);

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Every bad (and edge-but-good) value of every positional argument and of COST.
fn value_cases(cmd: &Command) -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, p) in cmd.params.iter().enumerate() {
        let with = |v: &str| {
            let mut args = strings(cmd.base);
            args[i] = v.to_string();
            args
        };
        for v in NOT_DECIMAL_INTEGERS
            .iter()
            .chain(MORE_NOT_INTEGERS)
            .chain(&[p.below, p.above])
        {
            cases.push((with(v), Some(p.error.to_string())));
        }
        for v in [p.min, p.max] {
            cases.push((with(v), None));
        }
    }
    let with_cost = |v: &str| {
        let mut args = strings(cmd.base);
        args.extend(strings(&["COST", v]));
        args
    };
    for v in NOT_DECIMAL_INTEGERS
        .iter()
        .chain(MORE_NOT_INTEGERS)
        .chain(&[COUNT_ABOVE])
    {
        cases.push((with_cost(v), Some(COST.to_string())));
    }
    for v in ["0", "1", COUNT_MAX] {
        cases.push((with_cost(v), None));
    }
    cases
}

/// Unknown, repeated, incomplete and misordered options.
fn option_cases(cmd: &Command) -> Vec<Case> {
    let unknown = |shown: &str| {
        Some(format!(
            "ERR unknown option '{shown}', expected COST n, UPTO, FORCE or PEEK"
        ))
    };
    let long = "X".repeat(41);
    let forty = "X".repeat(40);
    let table: Vec<(Vec<&str>, Option<String>)> = vec![
        (vec!["FOO"], unknown("FOO")),
        (vec!["PEEKS"], unknown("PEEKS")),
        (vec!["COSTS", "1"], unknown("COSTS")),
        (vec![""], unknown("")),
        (vec!["1"], unknown("1")),
        (vec![&forty], unknown(&forty)),
        (vec![&long], unknown(&format!("{forty}..."))),
        (vec!["COST"], Some(COST_MISSING.into())),
        (vec!["cost"], Some(COST_MISSING.into())),
        (vec!["PEEK", "COST"], Some(COST_MISSING.into())),
        (vec!["COST", "PEEK"], Some(COST.into())),
        (vec!["COST", "1", "COST", "1"], Some(COST_TWICE.into())),
        (vec!["COST", "1", "cost", "2"], Some(COST_TWICE.into())),
        (vec!["COST", "1", "PEEK", "COST"], Some(COST_TWICE.into())),
        (vec!["PEEK", "PEEK"], Some(PEEK_TWICE.into())),
        (vec!["peek", "PEEK"], Some(PEEK_TWICE.into())),
        (vec!["PEEK", "COST", "1", "PEEK"], Some(PEEK_TWICE.into())),
        (vec!["COST", "1", "PEEK", "EXTRA"], unknown("EXTRA")),
        (vec!["FOO", "COST"], unknown("FOO")),
        (vec!["COST", "x", "FOO"], Some(COST.into())),
        (vec!["UPTOS"], unknown("UPTOS")),
        (vec!["UP", "TO"], unknown("UP")),
        (vec!["UPTO", "5"], unknown("5")),
        (vec!["COST", "UPTO"], Some(COST.into())),
        (vec!["UPTO", "COST"], Some(COST_MISSING.into())),
        (vec!["UPTO", "UPTO"], Some(UPTO_TWICE.into())),
        (vec!["upto", "COST", "2", "Upto"], Some(UPTO_TWICE.into())),
        (vec!["UPTO", "PEEK", "UPTO"], Some(UPTO_TWICE.into())),
        (vec!["UPTO", "COST", COUNT_ABOVE], Some(COST.into())),
        (vec!["FORCES"], unknown("FORCES")),
        (vec!["FORCE", "1"], unknown("1")),
        (vec!["FORCE", "FORCE"], Some(FORCE_TWICE.into())),
        (
            vec!["force", "COST", "2", "Force"],
            Some(FORCE_TWICE.into()),
        ),
        (vec!["FORCE", "UPTO"], Some(UPTO_AND_FORCE.into())),
        (
            vec!["UPTO", "COST", "3", "FORCE"],
            Some(UPTO_AND_FORCE.into()),
        ),
        (vec!["FORCE", "COST", "x"], Some(COST.into())),
        // Accepted: any order, any case.
        (vec!["PEEK"], None),
        (vec!["peek"], None),
        (vec!["PEEK", "COST", "2"], None),
        (vec!["Cost", "2", "pEeK"], None),
        (vec!["UPTO"], None),
        (vec!["COST", "5", "UPTO"], None),
        (vec!["upto", "peek", "cost", "0"], None),
        (vec!["UPTO", "COST", COUNT_MAX, "PEEK"], None),
        (vec!["FORCE"], None),
        (vec!["COST", COUNT_MAX, "force", "PEEK"], None),
    ];
    table
        .into_iter()
        .map(|(opts, expected)| {
            let mut args = strings(cmd.base);
            args.extend(strings(&opts));
            (args, expected)
        })
        .collect()
}

/// Runs one case against an existing key and a missing one: the exact error and nothing
/// written, or (for an accepted case, made a PEEK) a reply and nothing written.
fn check(c: &mut redis::Connection, cmd: &Command, (args, expected): &Case) {
    let mut args = args.clone();
    if expected.is_none() && !args.iter().any(|a| a.eq_ignore_ascii_case("PEEK")) {
        args.push("PEEK".to_string());
    }
    for key in ["k", "missing"] {
        let before = frozen(c, key);
        let mut full = vec![cmd.name, key];
        full.extend(args.iter().map(String::as_str));
        match expected {
            Some(text) => assert_eq!(&error(c, &full), text, "{full:?}"),
            None => {
                let upto = args.iter().any(|a| a.eq_ignore_ascii_case("UPTO"));
                let len = if upto { 6 } else { 5 };
                assert_eq!(ints(c, &full).len(), len, "{full:?}");
            }
        }
        assert_eq!(frozen(c, key), before, "{full:?} changed {key}");
    }
}

fn with_existing_key(cmd: &Command, cases: &[Case]) {
    let server = Server::start();
    let mut c = server.client();
    let mut setup = vec![cmd.name, "k"];
    setup.extend_from_slice(cmd.base);
    setup.extend_from_slice(&["COST", "3"]);
    assert_eq!(ints(&mut c, &setup)[0], 1);
    let dirty = info_field(&mut c, "persistence", "rdb_changes_since_last_save");
    for case in cases {
        check(&mut c, cmd, case);
    }
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_changes_since_last_save"),
        dirty,
        "{}: some rejected call dirtied the dataset",
        cmd.name
    );
    assert_eq!(query::<i64>(&mut c, &["DBSIZE"]), 1);
}

#[test]
fn every_bad_value_of_every_argument_is_refused_with_its_text() {
    for cmd in &COMMANDS {
        let cases = value_cases(cmd);
        assert!(cases.len() > 50);
        with_existing_key(cmd, &cases);
    }
}

#[test]
fn bad_options_are_refused_with_their_text() {
    for cmd in &COMMANDS {
        with_existing_key(cmd, &option_cases(cmd));
    }
}

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
fn wrong_arity_is_the_servers_usual_error() {
    let server = Server::start();
    let mut c = server.client();
    ints(&mut c, &["RL.TOKENBUCKET", "k", "10", "10", "1000"]);
    let before = frozen(&mut c, "k");
    for (name, args) in [
        ("RL.TOKENBUCKET", &[][..]),
        ("RL.TOKENBUCKET", &["k"]),
        ("RL.TOKENBUCKET", &["k", "10"]),
        ("RL.TOKENBUCKET", &["k", "10", "10"]),
        ("rl.tokenbucket", &["k", "10", "10"]),
        ("RL.SLIDING", &[]),
        ("RL.SLIDING", &["k"]),
        ("RL.SLIDING", &["k", "10"]),
        ("rl.sliding", &["k", "10"]),
    ] {
        let mut full = vec![name];
        full.extend_from_slice(args);
        let expected = format!(
            "ERR wrong number of arguments for '{}' command",
            name.to_ascii_uppercase()
        );
        assert_eq!(error(&mut c, &full), expected, "{full:?}");
    }
    assert_eq!(frozen(&mut c, "k"), before);
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
                vec![
                    "RL.REFUND",
                    key,
                    "SLIDING",
                    "10",
                    "1000",
                    "COST",
                    "1",
                    "UPTO",
                ],
                "ERR option COST given more than once".to_string(),
            ),
            (
                vec![
                    "RL.REFUND",
                    key,
                    "SLIDING",
                    "10",
                    "1000",
                    "UPTO",
                    "COST",
                    "1",
                ],
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
