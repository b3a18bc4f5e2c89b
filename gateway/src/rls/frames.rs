//! The HTTP/2 frames crossing one connection of the rate limit service, seen from their
//! 9-byte headers only (payloads are skipped, never copied or parsed): enough for the
//! listener to tell when a connection's opening is complete and when a call last moved,
//! whatever the peer sends between (a byte at a time, PINGs, SETTINGS).

/// The client connection preface, `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n` (RFC 9113, 3.4).
pub const PREFACE_LEN: usize = 24;
const HEADER_LEN: usize = 9;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const SETTINGS: u8 = 0x4;
pub const CONTINUATION: u8 = 0x9;
/// The flag of a SETTINGS frame that acknowledges the peer's.
pub const ACK: u8 = 0x1;

/// A frame whose last byte has just passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
}

impl Frame {
    /// A frame of a call: its request or its answer (HEADERS, CONTINUATION, DATA).
    pub fn is_call(self) -> bool {
        matches!(self.kind, DATA | HEADERS | CONTINUATION)
    }
}

/// One direction of a connection.
#[derive(Debug, Default)]
pub struct Frames {
    /// Preface bytes still to pass (the client's direction only).
    preface_left: usize,
    header: [u8; HEADER_LEN],
    header_filled: usize,
    payload_left: usize,
    current: Option<Frame>,
}

impl Frames {
    /// The client's direction: the preface, then frames.
    pub fn from_client() -> Frames {
        Frames {
            preface_left: PREFACE_LEN,
            ..Frames::default()
        }
    }

    /// The server's direction: frames from the first byte.
    pub fn from_server() -> Frames {
        Frames::default()
    }

    /// Takes the next bytes of the direction; `ended` gets each frame whose last byte is
    /// among them, in order. Linear in the number of frames, whatever their sizes.
    pub fn feed(&mut self, mut data: &[u8], mut ended: impl FnMut(Frame)) {
        while !data.is_empty() {
            if self.preface_left > 0 {
                let n = self.preface_left.min(data.len());
                self.preface_left -= n;
                data = data.get(n..).unwrap_or_default();
                continue;
            }
            if self.payload_left > 0 {
                let n = self.payload_left.min(data.len());
                self.payload_left -= n;
                data = data.get(n..).unwrap_or_default();
                if self.payload_left == 0 {
                    if let Some(f) = self.current.take() {
                        ended(f);
                    }
                }
                continue;
            }
            let n = (HEADER_LEN - self.header_filled).min(data.len());
            let (head, rest) = data.split_at(n);
            if let Some(slot) = self
                .header
                .get_mut(self.header_filled..self.header_filled + n)
            {
                slot.copy_from_slice(head);
            }
            self.header_filled += n;
            data = rest;
            if self.header_filled == HEADER_LEN {
                self.header_filled = 0;
                let [l0, l1, l2, kind, flags, ..] = self.header;
                let frame = Frame { kind, flags };
                let length = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
                if length == 0 {
                    ended(frame);
                } else {
                    self.payload_left = length;
                    self.current = Some(frame);
                }
            }
        }
    }
}

/// Whether a client has finished opening its connection: the preface, its SETTINGS, and its
/// acknowledgement of the server's SETTINGS (in any order after the preface).
#[derive(Debug, Default)]
pub struct Opening {
    settings: bool,
    acked: bool,
}

impl Opening {
    /// Notes a frame from the client; true once the opening is complete.
    pub fn see(&mut self, f: Frame) -> bool {
        if f.kind == SETTINGS {
            if f.flags & ACK == 0 {
                self.settings = true;
            } else {
                self.acked = true;
            }
        }
        self.done()
    }

    pub fn done(&self) -> bool {
        self.settings && self.acked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, flags: u8, payload: usize) -> Vec<u8> {
        let len = u32::try_from(payload).unwrap().to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 1];
        f.resize(HEADER_LEN + payload, 0xAA);
        f
    }

    fn ended(frames: &mut Frames, bytes: &[u8], step: usize) -> Vec<Frame> {
        let mut seen = Vec::new();
        for chunk in bytes.chunks(step) {
            frames.feed(chunk, |f| seen.push(f));
        }
        seen
    }

    #[test]
    fn frames_end_where_their_payload_ends_whatever_the_chunking() {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(SETTINGS, 0, 12));
        bytes.extend(frame(SETTINGS, ACK, 0));
        bytes.extend(frame(HEADERS, 4, 40));
        bytes.extend(frame(DATA, 1, 70_000));
        let expected = [
            Frame {
                kind: SETTINGS,
                flags: 0,
            },
            Frame {
                kind: SETTINGS,
                flags: ACK,
            },
            Frame {
                kind: HEADERS,
                flags: 4,
            },
            Frame {
                kind: DATA,
                flags: 1,
            },
        ];
        for step in [1, 7, 9, 24, 4096, bytes.len()] {
            assert_eq!(
                ended(&mut Frames::from_client(), &bytes, step),
                expected,
                "{step}"
            );
        }
        // Without its last byte, the DATA frame has not ended.
        let cut = &bytes[..bytes.len() - 1];
        assert_eq!(ended(&mut Frames::from_client(), cut, 1000).len(), 3);
    }

    #[test]
    fn the_opening_needs_settings_and_the_acknowledgement() {
        let mut o = Opening::default();
        assert!(!o.see(Frame {
            kind: HEADERS,
            flags: 0
        }));
        assert!(!o.see(Frame {
            kind: SETTINGS,
            flags: 0
        }));
        assert!(o.see(Frame {
            kind: SETTINGS,
            flags: ACK
        }));
    }
}
