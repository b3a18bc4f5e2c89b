//! RESP on the wire for the pipelined connection: commands encoded straight into the
//! connection's output buffer, replies found and decoded in its input buffer.
//!
//! The limiter's replies are integers, bulk strings and arrays of them; those are decoded
//! here over the byte slice. Any other reply (errors, simple strings, RESP3 types) is handed,
//! as the exact bytes of that one reply, to the `redis` crate's own parser, so it comes out
//! as the same `Value` (and the same error once extracted) as through the crate's
//! connections. (The crate's parser resumes across reads with parser combinators: a
//! profile of the gateway found about a fifth of the client's CPU time per decision in it.)

use redis::{Arg, Cmd, RedisResult, Value};

/// Appends `cmd` as a RESP array of bulk strings (what the server reads) to `out`.
pub(crate) fn encode(cmd: &Cmd, out: &mut Vec<u8>) {
    let count = cmd.args_iter().count();
    push_header(out, b'*', count);
    for arg in cmd.args_iter() {
        match arg {
            Arg::Simple(bytes) => {
                push_header(out, b'$', bytes.len());
                out.extend_from_slice(bytes);
                out.extend_from_slice(b"\r\n");
            }
            // A scan cursor: the limiter sends none; written as the crate writes a new one.
            Arg::Cursor => out.extend_from_slice(b"$1\r\n0\r\n"),
        }
    }
}

fn push_header(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        if let Some(d) = digits.get_mut(i) {
            *d = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || i == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(i..).unwrap_or_default());
    out.extend_from_slice(b"\r\n");
}

/// One reply at the start of a buffer.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The reply is not all there yet: read more.
    Incomplete,
    /// The reply (an error reply already extracted as the error) and its length in bytes.
    Complete(RedisResult<Value>, usize),
}

/// Decodes the reply at the start of `buf`. A malformed reply is an error of the `redis`
/// crate's parser (the connection cannot be trusted after it).
pub(crate) fn decode(buf: &[u8]) -> Result<Reply, redis::RedisError> {
    // The limiter's replies in one pass; they hold no error reply, so nothing to extract.
    if let Some((value, len)) = fast(buf, 0) {
        return Ok(Reply::Complete(Ok(value), len));
    }
    let Some(len) = extent(buf, 0)? else {
        return Ok(Reply::Incomplete);
    };
    let bytes = buf.get(..len).unwrap_or_default();
    let value = redis::parse_redis_value(bytes)?;
    Ok(Reply::Complete(value.extract_error(), len))
}

/// The line starting at `at` (without its CRLF) and where the next one starts.
fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let end = rest.iter().position(|&b| b == b'\r')?;
    (rest.get(end + 1) == Some(&b'\n')).then_some(())?;
    Some((rest.get(..end)?, at + end + 2))
}

fn malformed(what: &str) -> redis::RedisError {
    (
        redis::ErrorKind::ParseError,
        "parse error",
        what.to_string(),
    )
        .into()
}

fn number(text: &[u8]) -> Result<i64, redis::RedisError> {
    parse_int(text).ok_or_else(|| malformed("expected a number"))
}

/// A decimal integer as RESP writes it (an optional minus, then digits), without overflow.
fn parse_int(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        n = n
            .checked_mul(10)?
            .checked_add(if negative { -d } else { d })?;
    }
    Some(n)
}

/// The length in bytes of the reply starting at `at`, or `None` when the buffer ends first.
/// Knows every RESP2 and RESP3 type, so a reply left to the `redis` crate's parser is cut
/// out exactly.
fn extent(buf: &[u8], at: usize) -> Result<Option<usize>, redis::RedisError> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some((head, next)) = line(buf, at + 1) else {
        return Ok(None);
    };
    let end = match kind {
        // Lines: simple string, error, integer, null, double, boolean, big number.
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => next,
        // Length-prefixed: bulk string, bulk error, verbatim string (-1: null).
        b'$' | b'!' | b'=' => match number(head)? {
            n if n < 0 => next,
            n => {
                let end = next + usize::try_from(n).map_err(|_| malformed("length"))? + 2;
                if buf.len() < end {
                    return Ok(None);
                }
                end
            }
        },
        // Aggregates of n elements (-1: null), maps and attributes of n pairs.
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number(head)?;
            let items = if matches!(kind, b'%' | b'|') {
                n.saturating_mul(2)
            } else {
                n
            };
            let mut end = next;
            for _ in 0..items.max(0) {
                match extent(buf, end)? {
                    Some(len) => end += len,
                    None => return Ok(None),
                }
            }
            end
        }
        _ => return Err(malformed("unknown reply type")),
    };
    Ok(Some(end - at))
}

/// Decodes integers, bulk strings, nulls and arrays of them; `None` for anything else (left
/// to the `redis` crate's parser) and for a reply not all there yet.
fn fast(buf: &[u8], at: usize) -> Option<(Value, usize)> {
    let kind = *buf.get(at)?;
    let (head, next) = line(buf, at + 1)?;
    match kind {
        b':' => Some((Value::Int(parse_int(head)?), next)),
        b'$' => {
            let n = parse_int(head)?;
            if n < 0 {
                return Some((Value::Nil, next));
            }
            let end = next + usize::try_from(n).ok()?;
            if buf.get(end..end + 2) != Some(b"\r\n".as_slice()) {
                return None;
            }
            let bytes = buf.get(next..end)?;
            Some((Value::BulkString(bytes.to_vec()), end + 2))
        }
        b'*' => {
            let n = parse_int(head)?;
            if n < 0 {
                return Some((Value::Nil, next));
            }
            let mut items = Vec::with_capacity(usize::try_from(n).ok()?.min(1024));
            let mut at = next;
            for _ in 0..n {
                let (item, after) = fast(buf, at)?;
                items.push(item);
                at = after;
            }
            Some((Value::Array(items), at))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> RedisResult<Value> {
        match decode(bytes).unwrap() {
            Reply::Complete(v, len) => {
                assert_eq!(len, bytes.len(), "{:?}", String::from_utf8_lossy(bytes));
                v
            }
            Reply::Incomplete => panic!("incomplete: {:?}", String::from_utf8_lossy(bytes)),
        }
    }

    #[test]
    fn commands_are_encoded_as_the_crate_packs_them() {
        let mut cmd = redis::cmd("RL.ALL");
        cmd.arg(1)
            .arg("rl:{k}")
            .arg("SLIDING")
            .arg(100)
            .arg(b"\r\n\0".as_slice());
        let mut out = b"before".to_vec();
        encode(&cmd, &mut out);
        assert_eq!(out.get(6..).unwrap(), cmd.get_packed_command().as_slice());
        let mut empty = redis::Cmd::new();
        empty.arg("");
        let mut out = Vec::new();
        encode(&empty, &mut out);
        assert_eq!(out, empty.get_packed_command());
    }

    #[test]
    fn every_reply_decodes_as_the_crates_parser_decodes_it() {
        let replies: &[&[u8]] = &[
            b":0\r\n",
            b":-12345678901\r\n",
            b"$5\r\nhello\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n:0\r\n*1\r\n*4\r\n:100000000\r\n:99\r\n:0\r\n:60000\r\n",
            b"+OK\r\n",
            b"+PONG\r\n",
            b"*2\r\n$3\r\nabc\r\n+OK\r\n",
            b"*2\r\n*1\r\n$-1\r\n:7\r\n",
            b"$4\r\na\r\nb\r\n",
        ];
        for bytes in replies {
            let expected = redis::parse_redis_value(bytes).unwrap();
            assert_eq!(
                whole(bytes).unwrap(),
                expected,
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn error_replies_are_the_crates_errors() {
        for bytes in [
            b"-NOPERM this user has no permissions\r\n".as_slice(),
            b"-ERR unknown command 'RL.ALL'\r\n",
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ] {
            let expected = redis::parse_redis_value(bytes)
                .unwrap()
                .extract_error()
                .unwrap_err();
            let got = whole(bytes).unwrap_err();
            assert_eq!(got.kind(), expected.kind());
            assert_eq!(got.code(), expected.code());
            assert_eq!(got.to_string(), expected.to_string());
        }
        // An error inside an array is the reply's error, as the crate extracts it.
        let nested = b"*2\r\n:1\r\n-ERR inner\r\n";
        assert!(whole(nested).is_err());
    }

    #[test]
    fn a_cut_reply_waits_for_the_rest_and_replies_follow_one_another() {
        let two = b"*2\r\n:1\r\n$3\r\nabc\r\n:5\r\n";
        for cut in 0..17 {
            assert!(
                matches!(decode(&two[..cut]).unwrap(), Reply::Incomplete),
                "{cut}"
            );
        }
        let Reply::Complete(first, len) = decode(two).unwrap() else {
            panic!("complete")
        };
        assert_eq!(len, 17);
        assert_eq!(
            first.unwrap(),
            Value::Array(vec![Value::Int(1), Value::BulkString(b"abc".to_vec())])
        );
        assert!(matches!(
            decode(&two[17..]).unwrap(),
            Reply::Complete(Ok(Value::Int(5)), 4)
        ));
    }

    #[test]
    fn resp3_replies_are_cut_out_whole() {
        for bytes in [
            b"%1\r\n+a\r\n:1\r\n".as_slice(),
            b"~2\r\n,1.5\r\n#t\r\n",
            b"_\r\n",
            b"=7\r\ntxt:abc\r\n",
        ] {
            assert_eq!(extent(bytes, 0).unwrap(), Some(bytes.len()));
        }
    }

    #[test]
    fn integers_are_read_exactly() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"9223372036854775808"), None);
        assert_eq!(parse_int(b""), None);
        assert_eq!(parse_int(b"-"), None);
        assert_eq!(parse_int(b"1x"), None);
    }

    #[test]
    fn garbage_is_an_error_not_a_hang() {
        assert!(decode(b"?what\r\n").is_err());
        assert!(decode(b"$x\r\n").is_err());
    }
}
