//! Assertions shared by the module's tests: what a refused call, a PEEK and a write must
//! (not) do to a key.

use crate::cmd::{error, frozen, query, server_time_us};

/// Checks `PTTL key` after a write that replied `reset_after` ms and was made at server time
/// `since_us` (µs, read before the call) or later: the key expires `reset_after` + 1000 ms
/// (the default TTL slack) after the call's instant rounded up to the ms, so PTTL is at most
/// that (+1 for the rounding), and at least that less the ms that may have passed since
/// `since_us` (measured, not assumed: a loaded machine can stall between two calls). A key
/// that already expired (PTTL -2) passes only if that much time did pass.
pub fn assert_pttl_after_call(
    conn: &mut redis::Connection,
    key: &str,
    reset_after: i64,
    since_us: u64,
) {
    let pttl: i64 = query(conn, &["PTTL", key]);
    let waited = i64::try_from((server_time_us(conn) - since_us).div_ceil(1000)).unwrap();
    let ttl = reset_after + 1000;
    assert!(
        pttl <= ttl + 1,
        "{key}: PTTL {pttl} above reset_after {reset_after} + 1000 ms of slack"
    );
    assert!(
        pttl >= ttl - waited || (pttl == -2 && waited > ttl),
        "{key}: PTTL {pttl} below reset_after {reset_after} + 1000 ms of slack, \
         {waited} ms after the call"
    );
}

/// Checks a `PEEK` reply against the real call made just after it: the same decision, limit
/// and remaining; the waits (`retry_after_ms`, `reset_after_ms`) may only have shrunk by the
/// time that passed in between (a millisecond later a wait may be a millisecond shorter).
pub fn assert_peek_then_real(peeked: &[i64], real: &[i64], what: &str) {
    assert_eq!(peeked[..3], real[..3], "{what}");
    let (peek_wait, real_wait) = (peeked[3], real[3]);
    assert!(
        peek_wait == real_wait
            || (real_wait > 0 && (real_wait..real_wait + 1000).contains(&peek_wait)),
        "{what}: waits {peek_wait} then {real_wait}"
    );
    assert!(
        real[4] <= peeked[4] && peeked[4] - real[4] < 60_000,
        "{what}: reset_after {} then {}",
        peeked[4],
        real[4]
    );
}

/// Arguments that are not plain decimal integers, or beyond every documented range: each is
/// refused with the range error of the argument it stands for.
pub const NOT_DECIMAL_INTEGERS: &[&str] = &[
    "",
    "abc",
    "1.5",
    "1e3",
    "0x10",
    "-1",
    "-0",
    "+1",
    " 1",
    "1 ",
    "1_000",
    "\u{0663}",             // ARABIC-INDIC DIGIT THREE
    "18446744073709551616", // u64::MAX + 1
    "18446744073709551615", // u64::MAX
    "99999999999999999999999",
    "ten",
    "1.0",
    "1,000",
    "9223372036854775808", // i64::MAX + 1
    "-9223372036854775808",
];

/// Runs `args` (the key is `args[1]`), which must fail with exactly `expected`, and checks
/// that the key kept its bytes and absolute expiry (or stayed missing).
pub fn refused_untouched(conn: &mut redis::Connection, args: &[&str], expected: &str) {
    let before = frozen(conn, args[1]);
    assert_eq!(error(conn, args), expected, "{args:?}");
    assert_eq!(frozen(conn, args[1]), before, "{args:?} changed the key");
}

/// Runs `calls` and checks that they left `key` as it was (bytes and absolute expiry, or
/// missing): what a denial, a PEEK or a zero-cost check must do. Returns what `calls` did.
pub fn writes_nothing<T>(
    conn: &mut redis::Connection,
    key: &str,
    calls: impl FnOnce(&mut redis::Connection) -> T,
) -> T {
    let before = frozen(conn, key);
    let out = calls(conn);
    assert_eq!(frozen(conn, key), before, "{key} was written");
    out
}
