//! The runtime's gate: once a tool that read from outside has answered,
//! the runtime closes it, and every shell command is refused with its
//! reason until it opens it again; each change is audited and shown.

mod common;

use common::{privileged, Machine, Options};
use warden::wire::client::ClientError;
use warden::wire::{ErrorCode, RunRequest};

fn sh(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.into()),
        ..Default::default()
    }
}

#[test]
fn a_closed_gate_refuses_every_command_with_its_reason_until_opened() {
    if !privileged("a_closed_gate_refuses_every_command_with_its_reason_until_opened") {
        return;
    }
    let m = Machine::boot(Options::default());
    let mut c = m.client();
    assert!(!c.status().unwrap().gate.unwrap().closed);
    let reason = "a web page was read in this reply";
    let gate = c.gate(Some(reason)).unwrap();
    assert!(gate.closed);
    assert_eq!(gate.reason.as_deref(), Some(reason));
    // Every connection sees it: a new client is refused as well.
    for mut client in [m.client(), m.client()] {
        match client.run(sh("echo should not run > /tmp/ran")) {
            Err(ClientError::Warden {
                code: ErrorCode::GateClosed,
                message,
            }) => assert!(message.contains(reason), "{message}"),
            other => panic!("ran through a closed gate: {other:?}"),
        }
    }
    let status = c.status().unwrap();
    assert_eq!(status.gate.unwrap().reason.as_deref(), Some(reason));
    assert_eq!(status.commands_started, 0, "nothing was started");
    // A reason that would forge a line of the log is refused.
    assert!(c.gate(Some("ok\n#9 forged")).is_err());
    // Opened, commands run again.
    assert!(!c.gate(None).unwrap().closed);
    let out = c.run(sh("echo runs")).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "runs");
    let closed = m.audit_kinds("gate_closed");
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0]["reason"], reason);
    assert_eq!(m.audit_kinds("gate_opened").len(), 1);
    let refused = m.audit_kinds("command_refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
}
