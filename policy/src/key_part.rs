//! How text from a request becomes part of a Redis key: one rule for every key builder (the
//! policy engine's rule keys, the Envoy rate limit service's counters), so that no value
//! can end its part early, start another one, or choose a key's hash slot.
//!
//! The rule is percent-escaping: bytes of `A-Z a-z 0-9 . _ - /` stay as they are, every
//! other byte is written `%XX` (two upper-case hex digits). The separators of the key
//! builders (`:`, `=`), `%` itself, the braces of a hash tag, `~` (the mark of a digest),
//! spaces, control bytes and non-ASCII bytes are therefore never in an escaped part: two
//! different sequences of parts always give two different keys.

/// `value` with every byte outside `A-Z a-z 0-9 . _ - /` written as `%XX`.
///
/// ```
/// use redis_rl_policy::escape_key_part;
/// assert_eq!(escape_key_part("alice"), "alice");
/// assert_eq!(escape_key_part("/api/v1"), "/api/v1");
/// assert_eq!(escape_key_part("a_b:c=d"), "a_b%3Ac%3Dd");
/// assert_eq!(escape_key_part("{x}%"), "%7Bx%7D%25");
/// ```
pub fn escape_key_part(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    push_escaped_key_part(&mut out, value);
    out
}

/// Appends `value` escaped as [`escape_key_part`] does (a key is written in one go).
pub(crate) fn push_escaped_key_part(out: &mut String, value: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value.as_bytes() {
        if b.is_ascii_alphanumeric() || b"._-/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            for nibble in [b >> 4, b & 0x0f] {
                if let Some(&h) = HEX.get(usize::from(nibble)) {
                    out.push(char::from(h));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_braces_and_non_ascii_are_escaped() {
        assert_eq!(escape_key_part(""), "");
        assert_eq!(escape_key_part("a b\r\n"), "a%20b%0D%0A");
        assert_eq!(escape_key_part("~é"), "%7E%C3%A9");
        assert_eq!(escape_key_part("Az09._-/"), "Az09._-/");
    }

    #[test]
    fn distinct_values_stay_distinct_once_joined() {
        // What the Envoy service's old `_` joining could not tell apart.
        let join = |parts: &[&str]| {
            parts
                .iter()
                .map(|p| escape_key_part(p))
                .collect::<Vec<_>>()
                .join(":")
        };
        assert_ne!(join(&["alice:sub", "bob"]), join(&["alice", "sub:bob"]));
        assert_ne!(join(&["a%3Ab"]), join(&["a:b"]));
    }
}
