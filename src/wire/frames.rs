//! The frame every message travels in: a 9-byte header (kind: u8, id:
//! u32 big-endian, len: u32 big-endian) and `len` payload bytes, the
//! header's pure decoder with its length limit, and the protocol versions
//! this build speaks.

/// The protocol versions this build speaks, newest last. Version 2 adds
/// the `shutdown` request (and its `shutting_down` answer); version 3 the
/// `stop_shell` request (`shell_stopped`), shell's processes in status,
/// and the runtime's gate (`close_gate`, `open_gate`, `gate`); version 4
/// terminals, detached commands, `hand_keys` and `hold`; version 5 the
/// audit log read through the API (`read_audit`, `audit_end`); version 6
/// the setup (`run_setup`); version 7 the credentials the proxy adds
/// (`hand_credentials`); version 8 runs and their budgets (`begin_run`,
/// `end_run`, `card`).
pub const SUPPORTED_VERSIONS: &[u32] = &[1, 2, 3, 4, 5, 6, 7, 8, 9];
pub const HEADER_LEN: usize = 9;
/// No frame may carry more than this; a larger one closes the connection.
pub const MAX_FRAME: u32 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A JSON request (client to warden) or event (warden to client).
    Control = 1,
    Stdout = 2,
    Stderr = 3,
    /// Bytes for a command's stdin; an empty frame closes it.
    Stdin = 4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    /// The client's name for a command (0: the connection itself).
    pub id: u32,
    pub len: u32,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME} bytes")]
    TooLarge(u32),
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0] = self.kind as u8;
        out[1..5].copy_from_slice(&self.id.to_be_bytes());
        out[5..9].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    /// Pure decoder of the fixed header; the length limit is part of the
    /// format, so a peer can never make warden allocate more than it allows.
    pub fn decode(raw: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
        let kind = match raw[0] {
            1 => Kind::Control,
            2 => Kind::Stdout,
            3 => Kind::Stderr,
            4 => Kind::Stdin,
            other => return Err(FrameError::UnknownKind(other)),
        };
        let id = u32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]);
        let len = u32::from_be_bytes([raw[5], raw[6], raw[7], raw[8]]);
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        Ok(Header { kind, id, len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_decoding_table() {
        let cases: &[([u8; 9], Result<Header, FrameError>)] = &[
            (
                [1, 0, 0, 0, 0, 0, 0, 0, 2],
                Ok(Header {
                    kind: Kind::Control,
                    id: 0,
                    len: 2,
                }),
            ),
            (
                [2, 0, 0, 1, 0, 0, 1, 0, 0],
                Ok(Header {
                    kind: Kind::Stdout,
                    id: 256,
                    len: 65536,
                }),
            ),
            (
                [4, 255, 255, 255, 255, 0, 0, 0, 0],
                Ok(Header {
                    kind: Kind::Stdin,
                    id: u32::MAX,
                    len: 0,
                }),
            ),
            (
                [3, 0, 0, 0, 7, 0, 16, 0, 0],
                Ok(Header {
                    kind: Kind::Stderr,
                    id: 7,
                    len: MAX_FRAME,
                }),
            ),
            (
                [3, 0, 0, 0, 7, 0, 16, 0, 1],
                Err(FrameError::TooLarge(MAX_FRAME + 1)),
            ),
            ([0, 0, 0, 0, 0, 0, 0, 0, 0], Err(FrameError::UnknownKind(0))),
            ([9, 0, 0, 0, 0, 0, 0, 0, 0], Err(FrameError::UnknownKind(9))),
            (
                [1, 0, 0, 0, 0, 255, 255, 255, 255],
                Err(FrameError::TooLarge(u32::MAX)),
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(&Header::decode(raw), want, "header {raw:?}");
        }
    }

    #[test]
    fn header_round_trips() {
        let h = Header {
            kind: Kind::Stderr,
            id: 0xdead_beef,
            len: 12345,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
    }
}
