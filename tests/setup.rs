//! `run_setup` (protocol version 6): the owner, on the host's door, has
//! warden run a setup script as the runtime; the machine's own socket may
//! not ask for it.

mod common;

use common::{privileged, text, Machine, HOST_KEY};
use warden::client::{Client, ClientError};
use warden::protocol::ErrorCode;

#[test]
fn the_owner_runs_setup_as_the_runtime_and_the_machine_may_not() {
    if !privileged("the_owner_runs_setup_as_the_runtime_and_the_machine_may_not") {
        return;
    }
    let (m, host) = Machine::keyed(0o600);
    m.wait_ready();

    // The owner: run as the runtime, in its workspace, status and output
    // back (stderr too), a script longer than a pipe read whole.
    let mut owner = Client::connect_keyed(&host, Some(HOST_KEY), None).unwrap();
    assert_eq!(owner.version, 6);
    let padding = format!("# {}\n", "x".repeat(200)).repeat(1000);
    let script =
        format!("{padding}id -un\npwd\necho to-stderr >&2\nprintf made > made-by-setup\nexit 3\n");
    let (status, output) = owner.run_setup(&script).unwrap();
    assert_eq!(status, 3, "{output}");
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines[0], "runtime", "{output}");
    assert!(lines[1].ends_with("/home/runtime/workspace"), "{output}");
    assert!(output.contains("to-stderr"), "{output}");
    let made = m.root().join("home/runtime/workspace/made-by-setup");
    let meta = std::fs::metadata(&made).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 2000);

    // The machine's own socket (root here): refused, and the connection
    // stays open.
    let mut local = m.client();
    match local.run_setup("id") {
        Err(ClientError::Warden { code, message }) => {
            assert_eq!(code, ErrorCode::Refused, "{message}");
            assert!(message.contains("the owner's"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(local.status().is_ok());

    // One audit line, with the status and digests, never the text.
    let lines = m.audit_kinds("setup");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["status"], 3);
    assert!(lines[0]["script_sha256"].as_str().unwrap().len() == 64);
    let log = text(&std::fs::read(m.audit_path()).unwrap());
    assert!(!log.contains("to-stderr") && !log.contains("made-by-setup"));
}
