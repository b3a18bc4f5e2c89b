//! Keys the limiters did not write, or wrote for the other command: other Redis types get
//! WRONGTYPE, other strings the documented `ERR`, and the key is left byte for byte as it was
//! (DUMP and absolute expiry), whatever the options (PEEK, COST 0, an impossible COST).

use redis_rl_testkit::*;

const SLOW: &str = "1000000000";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_OURS: &str = "ERR key holds a value that is not a redis-rl limiter";
const TB_AS_SW: &str = "ERR key holds a token bucket limiter, not a sliding window limiter";
const SW_AS_TB: &str = "ERR key holds a sliding window limiter, not a token bucket limiter";
const CORRUPT_TB: &str = "ERR key holds a corrupt redis-rl token bucket limiter";
const CORRUPT_SW: &str = "ERR key holds a corrupt redis-rl sliding window limiter";
const UNKNOWN_TAG: &str =
    "ERR key holds a redis-rl limiter of a kind this module does not know (tag 63)";

fn version(v: u8) -> String {
    format!("ERR key holds a redis-rl limiter in format version {v}, this module reads version 1")
}

/// The two commands, with valid arguments after the key.
const COMMANDS: [(&str, &[&str]); 2] = [
    ("RL.TOKENBUCKET", &["10", "10", SLOW]),
    ("RL.SLIDING", &["10", "1000000000000"]),
];

/// Option sets that must not get past a foreign key either.
const OPTIONS: [&[&str]; 5] = [
    &[],
    &["PEEK"],
    &["COST", "0"],
    &["COST", "11"],
    &["COST", "3", "PEEK"],
];

fn set_bytes(c: &mut redis::Connection, key: &str, value: &[u8], px: Option<u64>) {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    if let Some(ms) = px {
        cmd.arg("PX").arg(ms);
    }
    cmd.query::<()>(c).expect("SET");
}

/// Runs both commands with every option set on `key`; each must fail with its expected text
/// and leave the key exactly as it was.
fn refused_untouched(c: &mut redis::Connection, key: &str, expected: [&str; 2], what: &str) {
    let before = frozen(c, key);
    assert!(before.0.is_some(), "{what}: no key");
    for ((name, params), expected) in COMMANDS.iter().zip(expected) {
        for options in OPTIONS {
            let mut args = vec![*name, key];
            args.extend_from_slice(params);
            args.extend_from_slice(options);
            assert_eq!(error(c, &args), expected, "{what}: {args:?}");
            assert_eq!(frozen(c, key), before, "{what}: {args:?} changed the key");
        }
    }
}

/// A real stored value of each kind, as the module wrote it.
fn real_values(c: &mut redis::Connection) -> (Vec<u8>, Vec<u8>) {
    ints(
        c,
        &["RL.TOKENBUCKET", "real:tb", "10", "10", SLOW, "COST", "3"],
    );
    ints(
        c,
        &["RL.SLIDING", "real:sw", "10", "1000000000000", "COST", "3"],
    );
    let tb: Vec<u8> = query(c, &["GET", "real:tb"]);
    let sw: Vec<u8> = query(c, &["GET", "real:sw"]);
    query::<i64>(c, &["DEL", "real:tb", "real:sw"]);
    (tb, sw)
}

#[test]
fn other_types_are_wrongtype_and_untouched() {
    let server = Server::start();
    let mut c = server.client();
    query::<i64>(&mut c, &["RPUSH", "list", "a", "b"]);
    query::<i64>(
        &mut c,
        &["HSET", "hash", "tokens", "10", "ts", "1700000000"],
    );
    query::<i64>(&mut c, &["SADD", "set", "a"]);
    query::<i64>(&mut c, &["ZADD", "zset", "1", "a"]);
    query::<String>(&mut c, &["XADD", "stream", "*", "f", "v"]);
    query::<i64>(&mut c, &["PEXPIRE", "hash", "100000"]);
    let dirty = info_field(&mut c, "persistence", "rdb_changes_since_last_save");
    for key in ["list", "hash", "set", "zset", "stream"] {
        refused_untouched(&mut c, key, [WRONGTYPE, WRONGTYPE], key);
    }
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_changes_since_last_save"),
        dirty
    );
}

#[test]
fn strings_we_did_not_write_are_refused_and_untouched() {
    let server = Server::start();
    let mut c = server.client();
    let long_text = "x".repeat(37);
    let values: [(&str, &[u8]); 9] = [
        ("text", b"hello"),
        ("empty", b""),
        ("integer", b"12345"),
        ("small integer", b"7"),
        ("text of our length", long_text.as_bytes()),
        ("magic only", b"\0RL"),
        ("magic and version", b"\0RL\x01"),
        ("lowercase magic", b"\0rl\x01T"),
        ("no NUL", b"RL\x01T\0\0\0\0\0\0\0\0"),
    ];
    let dirty = info_field(&mut c, "persistence", "rdb_changes_since_last_save");
    for (what, value) in values {
        set_bytes(&mut c, "k", value, None);
        refused_untouched(&mut c, "k", [NOT_OURS, NOT_OURS], what);
        // The same with an expiry, which must survive too.
        set_bytes(&mut c, "k", value, Some(100_000));
        refused_untouched(&mut c, "k", [NOT_OURS, NOT_OURS], what);
    }
    // Only the SETs dirtied the dataset.
    let after = info_field(&mut c, "persistence", "rdb_changes_since_last_save");
    let changes = |v: &Option<String>| v.as_deref().unwrap().parse::<i64>().unwrap();
    assert_eq!(changes(&after) - changes(&dirty), 2 * values.len() as i64);
}

#[test]
fn one_limiter_kind_is_refused_by_the_other_command() {
    let server = Server::start();
    let mut c = server.client();
    ints(
        &mut c,
        &["RL.TOKENBUCKET", "tb", "10", "10", SLOW, "COST", "3"],
    );
    ints(
        &mut c,
        &["RL.SLIDING", "sw", "10", "1000000000000", "COST", "3"],
    );
    for (key, (name, params), expected) in
        [("tb", COMMANDS[1], TB_AS_SW), ("sw", COMMANDS[0], SW_AS_TB)]
    {
        let before = frozen(&mut c, key);
        for options in OPTIONS {
            let mut args = vec![name, key];
            args.extend_from_slice(params);
            args.extend_from_slice(options);
            assert_eq!(error(&mut c, &args), expected, "{args:?}");
            assert_eq!(frozen(&mut c, key), before, "{args:?} changed the key");
        }
    }
    // Each still works with its own command.
    assert_eq!(
        ints(
            &mut c,
            &["RL.TOKENBUCKET", "tb", "10", "10", SLOW, "COST", "0"]
        )[2],
        7
    );
    assert_eq!(
        ints(
            &mut c,
            &["RL.SLIDING", "sw", "10", "1000000000000", "COST", "0"]
        )[2],
        7
    );
}

#[test]
fn damaged_limiter_values_are_refused_and_untouched() {
    let server = Server::start();
    let mut c = server.client();
    let (tb2, sw2) = real_values(&mut c);
    assert_eq!(
        (&tb2[..5], &sw2[..5]),
        (&b"\0RL\x02T"[..], &b"\0RL\x02S"[..])
    );
    // Format version 1 (what older modules wrote, still read): damaged at known offsets.
    let v1 = |tag: u8, fields: &[&[u8]]| [&[0, b'R', b'L', 1, tag][..], &fields.concat()].concat();
    let tb = v1(
        b'T',
        &[
            &1_700_000_000_000_000u64.to_le_bytes(),
            &1_000_000_000u64.to_le_bytes(),
            &7_000_000_000_000u128.to_le_bytes(),
        ],
    );
    let sw = v1(
        b'S',
        &[
            &1_000_000_000_000u64.to_le_bytes(),
            &0u64.to_le_bytes(),
            &0u64.to_le_bytes(),
            &3u64.to_le_bytes(),
        ],
    );
    assert_eq!((tb.len(), sw.len()), (37, 37));
    let with = |base: &[u8], at: usize, byte: u8| {
        let mut v = base.to_vec();
        v[at] = byte;
        v
    };
    let longer = |base: &[u8]| [base, b"\0"].concat();
    // Token bucket fields: updated_at_us u64, refill_ms u64 (offset 13), level u128 (offset 21).
    let tb_refill_zero = [&tb[..13], &[0u8; 8], &tb[21..]].concat();
    let tb_level_huge = [&tb[..21], &[0xffu8; 16]].concat();
    // Sliding fields: window_ms u64, window_start_ms u64 (offset 13), previous u64 (offset 21),
    // current u64 (offset 29).
    let sw_window_zero = [&sw[..5], &[0u8; 8], &sw[13..]].concat();
    let sw_unaligned = with(&sw, 13, sw[13].wrapping_add(1));
    let sw_count_huge = [&sw[..21], &[0xffu8; 8], &sw[29..]].concat();

    // (what, value, error from RL.TOKENBUCKET and from RL.SLIDING)
    let bad_tb = || [CORRUPT_TB.to_string(), TB_AS_SW.to_string()];
    let bad_sw = || [SW_AS_TB.to_string(), CORRUPT_SW.to_string()];
    let both = |e: String| [e.clone(), e];
    let cases: Vec<(&str, Vec<u8>, [String; 2])> = vec![
        (
            "first 10 bytes of a token bucket",
            tb[..10].to_vec(),
            bad_tb(),
        ),
        (
            "first 10 bytes of a sliding window",
            sw[..10].to_vec(),
            bad_sw(),
        ),
        ("header only", tb[..5].to_vec(), bad_tb()),
        ("token bucket one byte short", tb[..36].to_vec(), bad_tb()),
        ("token bucket one byte long", longer(&tb), bad_tb()),
        ("sliding window one byte long", longer(&sw), bad_sw()),
        ("version 9", with(&tb, 3, 9), both(version(9))),
        ("version 0", with(&sw, 3, 0), both(version(0))),
        ("version 255", with(&sw, 3, 255), both(version(255))),
        ("tag ?", with(&tb, 4, b'?'), both(UNKNOWN_TAG.into())),
        (
            "tag ? on a short value",
            with(&tb[..5], 4, b'?'),
            both(UNKNOWN_TAG.into()),
        ),
        ("refill_ms 0", tb_refill_zero, bad_tb()),
        ("level above any capacity", tb_level_huge, bad_tb()),
        ("window_ms 0", sw_window_zero, bad_sw()),
        ("window start not aligned", sw_unaligned, bad_sw()),
        ("count above any limit", sw_count_huge, bad_sw()),
        // Version 2 (varints): truncated, one byte long, a varint not in its shortest form.
        (
            "version 2 token bucket truncated",
            tb2[..tb2.len() - 1].to_vec(),
            bad_tb(),
        ),
        (
            "version 2 token bucket one byte long",
            longer(&tb2),
            bad_tb(),
        ),
        (
            "version 2 sliding window one byte long",
            longer(&sw2),
            bad_sw(),
        ),
        (
            "version 2 sliding window, a varint not in its shortest form",
            [&sw2[..sw2.len() - 1], &[sw2[sw2.len() - 1] | 0x80, 0]].concat(),
            bad_sw(),
        ),
        (
            "version 2 token bucket of a version 1 length",
            with(&tb, 3, 2),
            bad_tb(),
        ),
    ];
    for (what, value, [tb_error, sw_error]) in &cases {
        for px in [None, Some(100_000)] {
            set_bytes(&mut c, "k", value, px);
            refused_untouched(&mut c, "k", [tb_error.as_str(), sw_error.as_str()], what);
        }
    }
}
