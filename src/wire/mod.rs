//! The wire: what warden and its clients say to each other, and nothing
//! of either side. The API's protocol (versions 1 to 9): every message is
//! a frame (`frames`), a 9-byte header and `len` payload bytes. Control
//! frames carry one JSON object, a request (`requests`) or an event
//! (`events`, `status`); data frames carry raw bytes, so output streams
//! without any encoding cost. `docs/protocol.md` is the reference; keep
//! the two in step. Beside it: the limits a request may ask for
//! (`limits`), the vsock ports a VM's guest and host meet on
//! (`vsock_ports`), and the blocking client (`client`).
//!
//! Nothing here imports the rest of the crate (see docs/architecture.md).
//! The protocol's types are re-exported here, so a client names
//! `wire::Request` whichever file holds it.

pub mod client;
pub mod events;
pub mod frames;
pub mod limits;
pub mod requests;
pub mod status;
pub mod vsock_ports;

pub use events::*;
pub use frames::*;
pub use limits::Limits;
pub use requests::*;
pub use status::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_examples_in_docs_protocol_md_are_what_the_code_sends() {
        let doc = include_str!("../../docs/protocol.md");
        let hello = Request::Hello {
            versions: vec![1],
            client: None,
            key: None,
        };
        let run = Request::Run(RunRequest {
            argv: Some(vec!["echo".into(), "hi".into()]),
            ..Default::default()
        });
        let answer = Event::Hello {
            version: 1,
            server: "warden 0.1.0".into(),
        };
        let started = Event::Started { command: 1, pid: 9 };
        // Unframed examples, as the reference shows them.
        for json in [
            serde_json::to_string(&Request::StopShell {
                signal: "KILL".into(),
            })
            .unwrap(),
            serde_json::to_string(&Event::ShellStopped {
                signalled: 41,
                left: 0,
            })
            .unwrap(),
        ] {
            assert!(doc.contains(&json), "docs/protocol.md lacks {json}");
        }
        for json in [
            serde_json::to_string(&hello).unwrap(),
            serde_json::to_string(&run).unwrap(),
            serde_json::to_string(&answer).unwrap(),
            serde_json::to_string(&started).unwrap(),
        ] {
            let framed = format!("{:08x}  {json}", json.len());
            assert!(doc.contains(&framed), "docs/protocol.md lacks {framed}");
        }
    }
}
