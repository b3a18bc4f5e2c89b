//! Text written on the request path (keys, header values) without the formatting
//! machinery: every request of every front end writes it, and `format!`, `to_string` and
//! `core::fmt` were a large part of a request's cost. The results are byte for byte what
//! `Display` writes.

use std::net::Ipv4Addr;

/// Appends `n` in decimal (what `n.to_string()` writes).
pub(crate) fn push_u64(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// `n` in decimal, as a header value.
pub(crate) fn decimal(n: u64) -> String {
    itoa::Buffer::new().format(n).to_owned()
}

/// An IPv4 address in dotted decimal (what `Ipv4Addr`'s `Display` writes), on the stack:
/// a request's client address goes into several keys, and naming it must not allocate.
#[derive(Clone, Copy)]
pub(crate) struct Ipv4Text {
    bytes: [u8; 15],
    len: usize,
}

impl Ipv4Text {
    pub(crate) fn of(ip: Ipv4Addr) -> Self {
        let mut text = Self {
            bytes: [0; 15],
            len: 0,
        };
        for (i, octet) in ip.octets().into_iter().enumerate() {
            if i > 0 {
                text.push(b".");
            }
            text.push(itoa::Buffer::new().format(octet).as_bytes());
        }
        text
    }

    /// Appends `bytes` (4 octets of at most 3 digits and 3 dots fill 15 bytes at most).
    fn push(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if let Some(slot) = self.bytes.get_mut(self.len..end) {
            slot.copy_from_slice(bytes);
            self.len = end;
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        // Digits and dots only: always UTF-8.
        std::str::from_utf8(self.bytes.get(..self.len).unwrap_or_default()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_addresses_are_written_as_display_writes_them() {
        for n in [0, 1, 9, 10, 99, 100, 59_999, 1_000_000_000, u64::MAX] {
            let mut out = "x=".to_owned();
            push_u64(&mut out, n);
            assert_eq!(out, format!("x={n}"));
            assert_eq!(decimal(n), n.to_string());
        }
        for a in [0u8, 1, 9, 10, 99, 100, 199, 200, 255] {
            for b in [0u8, 7, 10, 127, 255] {
                let ip = Ipv4Addr::new(a, b, 255 - b, a / 2);
                assert_eq!(Ipv4Text::of(ip).as_str(), ip.to_string());
            }
        }
        let widest = Ipv4Addr::new(255, 255, 255, 255);
        assert_eq!(Ipv4Text::of(widest).as_str(), "255.255.255.255");
    }
}
