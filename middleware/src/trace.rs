//! W3C trace context (`traceparent`, <https://www.w3.org/TR/trace-context/>): the trace a
//! request belongs to, so that its log lines and problem bodies carry the id an operator
//! searches for in the tracing system, and the upstream continues the same trace.

use http::HeaderMap;

/// The `traceparent` request header.
pub const TRACEPARENT: &str = "traceparent";
/// [`TRACEPARENT`] as a header name: a `&str` is parsed into a name on each lookup or insert.
pub(crate) const TRACEPARENT_NAME: http::HeaderName = http::HeaderName::from_static(TRACEPARENT);

/// The trace of one request: the caller's (from a valid `traceparent`) or a new one, and the
/// span id of this hop, which the forwarded `traceparent` names as the parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    /// The caller's span, when the request came with a valid `traceparent`.
    parent_id: Option<[u8; 8]>,
    flags: u8,
}

impl TraceContext {
    /// The trace of a request: its `traceparent` when valid, else a new trace (sampled flag
    /// set, so a collector behind the upstream keeps it).
    pub fn of(headers: &HeaderMap) -> Self {
        let random = uuid::Uuid::new_v4().into_bytes();
        let span_id: [u8; 8] = std::array::from_fn(|i| random.get(i).copied().unwrap_or(1));
        let span_id = if span_id == [0; 8] { [1; 8] } else { span_id };
        let incoming = headers
            .get(TRACEPARENT_NAME)
            .and_then(|v| v.to_str().ok())
            .and_then(parse);
        match incoming {
            Some((trace_id, parent_id, flags)) => Self {
                trace_id,
                span_id,
                parent_id: Some(parent_id),
                flags,
            },
            None => Self {
                trace_id: uuid::Uuid::new_v4().into_bytes(),
                span_id,
                parent_id: None,
                flags: 0x01,
            },
        }
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> String {
        hex(&self.trace_id)
    }

    /// This hop's span id, 16 lowercase hex digits.
    pub fn span_id(&self) -> String {
        hex(&self.span_id)
    }

    /// The caller's span id, when the request carried a valid `traceparent`.
    pub fn parent_id(&self) -> Option<String> {
        self.parent_id.as_ref().map(|p| hex(p))
    }

    /// The `traceparent` to send upstream: the same trace, this hop as the parent.
    pub fn traceparent(&self) -> String {
        let mut out = String::with_capacity(55);
        out.push_str("00-");
        push_hex(&mut out, &self.trace_id);
        out.push('-');
        push_hex(&mut out, &self.span_id);
        out.push('-');
        push_hex(&mut out, &[self.flags]);
        out
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    out
}

/// Lowercase hex into one buffer (ids are built for every request: no allocation per byte,
/// and one copy into `out` per 16 bytes rather than a push per digit).
fn push_hex(out: &mut String, bytes: &[u8]) {
    let digit = |nibble: u8| {
        if nibble < 10 {
            b'0' + nibble
        } else {
            b'a' - 10 + nibble
        }
    };
    for chunk in bytes.chunks(16) {
        let mut text = [0u8; 32];
        for (pair, &b) in text.chunks_exact_mut(2).zip(chunk) {
            if let [high, low] = pair {
                *high = digit(b >> 4);
                *low = digit(b & 0x0f);
            }
        }
        // Hex digits: ASCII.
        let text = text.get(..2 * chunk.len()).unwrap_or_default();
        out.push_str(std::str::from_utf8(text).unwrap_or_default());
    }
}

/// Parses `version-traceid-parentid-flags` as the specification asks of a receiver: version
/// `ff` and all-zero ids are invalid, hex is lowercase, version `00` is exactly 55
/// characters, and a later version may append fields after a `-`.
fn parse(value: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    let bytes = value.as_bytes();
    if bytes.len() < 55 || (bytes.len() > 55 && bytes.get(55) != Some(&b'-')) {
        return None;
    }
    let field = |from: usize, len: usize| -> Option<Vec<u8>> {
        let text = value.get(from..from + len)?;
        if !text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return None;
        }
        (0..len / 2)
            .map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
            .collect()
    };
    if [2, 35, 52].iter().any(|&i| bytes.get(i) != Some(&b'-')) {
        return None;
    }
    let version = *field(0, 2)?.first()?;
    if version == 0xff || (version == 0 && bytes.len() != 55) {
        return None;
    }
    let trace_id: [u8; 16] = field(3, 32)?.try_into().ok()?;
    let parent_id: [u8; 8] = field(36, 16)?.try_into().ok()?;
    let flags = *field(53, 2)?.first()?;
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some((trace_id, parent_id, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn hex_is_lowercase_two_digits_a_byte_over_several_chunks() {
        let bytes: Vec<u8> = (0..=255).collect();
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&bytes), expected);
        assert_eq!(hex(&[]), "");
        assert_eq!(hex(&[0xab]), "ab");
    }

    fn of(value: &str) -> TraceContext {
        let mut h = HeaderMap::new();
        h.insert(TRACEPARENT, value.parse().unwrap());
        TraceContext::of(&h)
    }

    #[test]
    fn a_valid_traceparent_is_continued_with_this_hop_as_parent() {
        let t = of(VALID);
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id().as_deref(), Some("00f067aa0ba902b7"));
        let out = t.traceparent();
        assert!(
            out.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{out}"
        );
        assert!(out.ends_with("-01"), "{out}");
        assert_ne!(t.span_id(), "00f067aa0ba902b7");
        assert_eq!(parse(&out).map(|p| p.0), parse(VALID).map(|p| p.0));
        // The sampled flag is kept as it came.
        let unsampled = of(&VALID.replace("-01", "-00"));
        assert!(unsampled.traceparent().ends_with("-00"));
        // A later version may append fields.
        let future = of(&format!("01{}-extra", &VALID[2..]));
        assert_eq!(future.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn an_invalid_or_missing_traceparent_starts_a_new_trace() {
        for bad in [
            "",
            "garbage",
            &VALID.to_uppercase(),
            &VALID.replace("00-4bf9", "ff-4bf9"),
            &format!("{VALID}-extra"),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            let t = of(bad);
            assert_eq!(t.parent_id(), None, "{bad}");
            assert_ne!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736", "{bad}");
            assert_eq!(t.trace_id().len(), 32);
            assert!(parse(&t.traceparent()).is_some(), "{}", t.traceparent());
        }
        let a = TraceContext::of(&HeaderMap::new());
        let b = TraceContext::of(&HeaderMap::new());
        assert_ne!(a.trace_id(), b.trace_id());
        assert!(a.traceparent().ends_with("-01"));
    }
}
