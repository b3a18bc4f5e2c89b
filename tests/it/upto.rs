//! `UPTO` (partial grants) on RL.TOKENBUCKET, RL.SLIDING, RL.FIXED and RL.GCRA: the call
//! takes `min(COST, available)` and replies a sixth integer, `granted`; granting nothing is a
//! denial that writes nothing; `UPTO PEEK` tells the grant and writes nothing; calls without
//! `UPTO` keep their five integers. Slow limiters (nothing refills or rolls over during the
//! test) keep every number exact.

use redis_rl_testkit::*;

/// A limit of 10 on each algorithm, far too slow to refill during a test.
const LIMITERS: [(&str, &[&str]); 4] = [
    ("RL.TOKENBUCKET", &["10", "1", "1000000000000"]),
    ("RL.SLIDING", &["10", "1000000000000"]),
    ("RL.FIXED", &["10", "1000000000000"]),
    ("RL.GCRA", &["10", "1000000000000"]),
];

fn call(
    c: &mut redis::Connection,
    name: &str,
    key: &str,
    params: &[&str],
    opts: &[&str],
) -> Vec<i64> {
    let mut args = vec![name, key];
    args.extend_from_slice(params);
    args.extend_from_slice(opts);
    ints(c, &args)
}

#[test]
fn upto_grants_what_is_available_and_denies_without_writing() {
    let server = Server::start();
    let mut c = server.client();
    for (name, params) in LIMITERS {
        let key = format!("{name}:k");
        let run = |c: &mut redis::Connection, opts: &[&str]| call(c, name, &key, params, opts);
        // Without UPTO: five integers, as ever.
        assert_eq!(run(&mut c, &["COST", "3"])[..3], [1, 10, 7], "{name}");
        assert_eq!(run(&mut c, &["COST", "0"]).len(), 5);
        // A peek tells the grant and takes nothing; the real call then grants the same.
        let peek = run(&mut c, &["COST", "4", "UPTO", "PEEK"]);
        assert_eq!((&peek[..4], peek[5]), (&[1, 10, 3, 0][..], 4), "{name}");
        let real = run(&mut c, &["COST", "4", "UPTO"]);
        assert_peek_then_real(&peek, &real, name);
        assert_eq!(real[5], 4, "{name}");
        // More than is left: the rest (3), not "never" though the cost is above the limit.
        let peek = run(&mut c, &["UPTO", "COST", "25", "peek"]);
        let real = run(&mut c, &["upto", "cost", "25"]);
        assert_eq!((&real[..4], real[5]), (&[1, 10, 0, 0][..], 3), "{name}");
        assert_peek_then_real(&peek, &real, name);
        assert_eq!(peek[5], real[5]);
        // Nothing left: denied, granted 0, the wait for one unit, nothing written.
        let before = frozen(&mut c, &key);
        let denied = run(&mut c, &["COST", "5", "UPTO"]);
        assert_eq!((&denied[..3], denied[5]), (&[0, 10, 0][..], 0), "{name}");
        assert!(denied[3] > 0, "{name}: {denied:?}");
        let one = run(&mut c, &["COST", "1", "PEEK"]);
        // The same reply, waits a millisecond shorter at most for the time in between.
        assert_peek_then_real(&denied[..5], &one, &format!("{name}: the wait of one unit"));
        assert_eq!(run(&mut c, &["UPTO", "PEEK", "COST", "5"])[5], 0);
        assert_eq!(frozen(&mut c, &key), before, "{name}: a denial wrote");
        // COST 0 UPTO is the zero-cost check: allowed, granted 0, nothing written.
        let check = run(&mut c, &["COST", "0", "UPTO"]);
        assert_eq!((check[0], check[2], check[5]), (1, 0, 0), "{name}");
        assert_eq!(frozen(&mut c, &key), before, "{name}: COST 0 UPTO wrote");
        // UPTO alone takes one unit (COST defaults to 1) and still replies six integers.
        let fresh = format!("{name}:fresh");
        let one = call(&mut c, name, &fresh, params, &["UPTO"]);
        assert_eq!((&one[..4], one[5]), (&[1, 10, 9, 0][..], 1), "{name}");
    }
}

/// A partial grant stores exactly what the same cost without `UPTO` stores: the limiter
/// then decides identically on both keys.
#[test]
fn a_grant_counts_like_the_same_cost_without_upto() {
    let server = Server::start();
    let mut c = server.client();
    for (name, params) in LIMITERS {
        let (a, b) = (format!("{name}:a"), format!("{name}:b"));
        call(&mut c, name, &a, params, &["COST", "6"]);
        call(&mut c, name, &b, params, &["COST", "6"]);
        let granted = call(&mut c, name, &a, params, &["COST", "100", "UPTO"]);
        assert_eq!(granted[5], 4, "{name}");
        call(&mut c, name, &b, params, &["COST", "4"]);
        let on_a = call(&mut c, name, &a, params, &["COST", "0"]);
        let on_b = call(&mut c, name, &b, params, &["COST", "0"]);
        assert_eq!(on_a[..3], on_b[..3], "{name}");
        let view = |c: &mut redis::Connection, key: &str| -> Vec<(String, redis::Value)> {
            query(c, &["RL.STATE", key])
        };
        let (va, vb) = (view(&mut c, &a), view(&mut c, &b));
        // The counts agree (instants may differ by the time between the calls).
        let count = |v: &[(String, redis::Value)]| {
            v.iter()
                .filter(|(k, _)| {
                    ["current", "count", "previous", "tokens_at_update", "used"]
                        .contains(&k.as_str())
                })
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(count(&va), count(&vb), "{name}");
    }
}
