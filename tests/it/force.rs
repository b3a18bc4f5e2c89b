//! `FORCE`: every rate limiter takes the cost even over the limit, replies allowed, and
//! later calls wait for the debt; `PEEK FORCE` writes nothing; RL.ALL with `FORCE` takes the
//! cost on every key, all of them.

use redis_rl_testkit::*;

/// Each rate limiter's command with parameters of 10 units per period far too long to refill or roll over during the test.
const LIMITERS: [(&str, &[&str]); 5] = [
    ("RL.TOKENBUCKET", &["10", "10", "1000000000000"]),
    ("RL.SLIDING", &["10", "1000000000000"]),
    ("RL.FIXED", &["10", "1000000000000"]),
    ("RL.GCRA", &["10", "1000000000000"]),
    ("RL.LOG", &["10", "1000000000000"]),
];

fn call(
    c: &mut redis::Connection,
    name: &str,
    key: &str,
    params: &[&str],
    rest: &[&str],
) -> Vec<i64> {
    let mut args = vec![name, key];
    args.extend_from_slice(params);
    args.extend_from_slice(rest);
    ints(c, &args)
}

#[test]
fn a_forced_cost_is_taken_over_the_limit_and_later_calls_wait() {
    let server = Server::start();
    let mut c = server.client();
    for (name, params) in LIMITERS {
        let key = format!("force:{name}");
        assert_eq!(
            call(&mut c, name, &key, params, &["COST", "8"])[0],
            1,
            "{name}"
        );
        // Over the limit: refused without FORCE, taken with it.
        assert_eq!(
            call(&mut c, name, &key, params, &["COST", "5"])[0],
            0,
            "{name}"
        );
        let forced = call(&mut c, name, &key, params, &["COST", "5", "FORCE"]);
        assert_eq!(
            &forced[..4],
            &[1, 10, 0, 0],
            "{name}: allowed, nothing remaining"
        );
        // A debt: even one unit now waits, and a cost above the limit is taken too.
        let after = call(&mut c, name, &key, params, &["PEEK"]);
        assert_eq!(after[2], 0, "{name}");
        let one = call(&mut c, name, &key, params, &[]);
        assert_eq!(one[0], 0, "{name}: {one:?}");
        assert!(one[3] > 0, "{name}: {one:?}");
        assert_eq!(
            call(&mut c, name, &key, params, &["COST", "11", "FORCE"])[0],
            1,
            "{name}"
        );
        let later = call(&mut c, name, &key, params, &[]);
        assert_eq!(later[0], 0, "{name}: {later:?}");
        assert!(later[3] > 0, "{name}: {later:?}");
    }
}

#[test]
fn peek_force_writes_nothing_and_a_zero_cost_force_is_a_check() {
    let server = Server::start();
    let mut c = server.client();
    for (name, params) in LIMITERS {
        let key = format!("peekforce:{name}");
        call(&mut c, name, &key, params, &["COST", "10"]);
        let before = frozen(&mut c, &key);
        let peek = call(&mut c, name, &key, params, &["COST", "3", "FORCE", "PEEK"]);
        assert_eq!(peek[0], 1, "{name}");
        assert_eq!(frozen(&mut c, &key), before, "{name}");
        call(&mut c, name, &key, params, &["COST", "0", "FORCE"]);
        assert_eq!(frozen(&mut c, &key), before, "{name}");
    }
}

#[test]
fn rl_all_with_force_takes_the_cost_on_every_key() {
    let server = Server::start();
    let mut c = server.client();
    let all = |c: &mut redis::Connection, rest: &[&str]| -> redis::Value {
        let mut args = vec![
            "RL.ALL",
            "2",
            "a",
            "b",
            "FIXED",
            "10",
            "1000000000000",
            "TOKENBUCKET",
            "100",
            "1",
            "1000000000000",
        ];
        args.extend_from_slice(rest);
        query(c, &args)
    };
    let first = |v: &redis::Value| match v {
        redis::Value::Array(items) => items.first().cloned(),
        _ => None,
    };
    assert_eq!(
        first(&all(&mut c, &["COST", "8"])),
        Some(redis::Value::Int(1))
    );
    let bucket_left = |c: &mut redis::Connection| {
        call_on(
            c,
            "RL.TOKENBUCKET",
            "b",
            &["100", "1", LONGEST, "COST", "0"],
        )[2]
    };
    // Refused by the window: nothing taken anywhere.
    assert_eq!(
        first(&all(&mut c, &["COST", "5"])),
        Some(redis::Value::Int(0))
    );
    assert_eq!(bucket_left(&mut c), 92);
    // Forced: taken by both.
    assert_eq!(
        first(&all(&mut c, &["COST", "5", "FORCE"])),
        Some(redis::Value::Int(1))
    );
    assert_eq!(bucket_left(&mut c), 87);
    assert_eq!(
        ints(
            &mut c,
            &["RL.FIXED", "a", "10", "1000000000000", "COST", "0"]
        )[..3],
        [0, 10, 0],
        "over the limit, even a look waits for the next window"
    );
    assert_eq!(
        ints(&mut c, &["RL.FIXED", "a", "10", "1000000000000"])[0],
        0
    );
    assert_eq!(
        error(
            &mut c,
            &["RL.ALL", "1", "a", "FIXED", "10", "1000", "FORCE", "FORCE"]
        ),
        "ERR option FORCE given more than once"
    );
}
