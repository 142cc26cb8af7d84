//! What warden says of itself: status (users, layout, running commands),
//! the audit log's verifiable chain, and the runtime's own events.

use super::{argv, boot, run};
use crate::common::{privileged, RUNTIME_UID};
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use warden::wire::client::Message;
use warden::wire::{ErrorCode, Event, Request};

#[test]
fn status_reports_users_layout_and_running_commands() {
    if !privileged("status_reports_users_layout_and_running_commands") {
        return;
    }
    let m = boot();
    let mut c = m.client();
    let mut req = argv(&["sleep", "30"]);
    req.folder = Some("w".into());
    c.send(1, &Request::Run(req)).unwrap();
    assert!(matches!(
        c.receive().unwrap(),
        Message::Event(1, Event::Started { .. })
    ));
    let s = m.client().status().unwrap();
    assert!(s.pid1);
    // warden's own boot time, the same as its boot line says.
    let boot_line = &m.audit_kinds("boot")[0];
    assert!(s.boot_ms > 0.0);
    assert_eq!(Some(s.boot_ms), boot_line["boot_ms"].as_f64());
    assert_eq!(
        s.users.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(),
        ["runtime", "shell"]
    );
    assert!(s.layout.iter().all(|p| p.ok), "{:?}", s.layout);
    assert_eq!(s.running.len(), 1);
    assert_eq!(
        (s.running[0].folder.as_deref(), s.running[0].requester_uid),
        (Some("w"), 0)
    );
    // A path made wrong behind warden's back shows up at once.
    std::fs::set_permissions(
        m.home.join("data"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let s = m.client().status().unwrap();
    let data = s.layout.iter().find(|p| p.path.ends_with("/data")).unwrap();
    assert!(!data.ok, "{data:?}");
}

#[test]
fn the_audit_log_records_commands_in_a_verifiable_chain_shell_cannot_read() {
    if !privileged("the_audit_log_records_commands_in_a_verifiable_chain_shell_cannot_read") {
        return;
    }
    let m = boot();
    let mut req = argv(&["echo", "audited"]);
    req.folder = Some("a".into());
    run(&m, req);
    let cat = run(&m, argv(&["cat", &m.audit_path().display().to_string()]));
    assert_ne!(cat.exit.status, 0, "shell read the audit log");
    let start = m.audit_kinds("command_start");
    let found = start
        .iter()
        .find(|l| l["argv"] == json!(["echo", "audited"]))
        .unwrap();
    assert_eq!(
        (found["folder"].as_str(), found["requester_uid"].as_u64()),
        (Some("a"), Some(0))
    );
    let end = m.audit_kinds("command_end");
    let found_end = end
        .iter()
        .find(|l| l["command"] == found["command"])
        .unwrap();
    assert_eq!(
        (
            found_end["status"].as_i64(),
            found_end["stdout_bytes"].as_u64()
        ),
        (Some(0), Some(8))
    );
    let text = std::fs::read_to_string(m.audit_path()).unwrap();
    let mut prev = "0".repeat(64);
    for line in text.lines() {
        prev = warden::shared::audit_chain::check_line(line, &prev)
            .unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    let meta = std::fs::metadata(m.audit_path()).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (0, RUNTIME_UID, 0o640)
    );
}

#[test]
fn the_runtime_appends_its_own_events_and_refusals_are_logged() {
    if !privileged("the_runtime_appends_its_own_events_and_refusals_are_logged") {
        return;
    }
    let m = boot();
    let mut c = m.client();
    let event = Request::Audit {
        kind: "served_memory".into(),
        fields: json!({"file": "notes.md", "to": "agent"}),
    };
    c.send(0, &event).unwrap();
    let seq = match c.receive().unwrap() {
        Message::Event(0, Event::Recorded { seq }) => seq,
        other => panic!("{other:?}"),
    };
    let line = m.audit().into_iter().find(|l| l["seq"] == seq).unwrap();
    assert_eq!(
        (line["kind"].as_str(), line["event"].as_str()),
        (Some("runtime"), Some("served_memory"))
    );
    assert_eq!(
        (line["from_uid"].as_u64(), line["fields"]["file"].as_str()),
        (Some(0), Some("notes.md"))
    );
    // A bad kind is refused, and the refusal is itself in the log.
    c.send(
        0,
        &Request::Audit {
            kind: "Bad Kind".into(),
            fields: json!(null),
        },
    )
    .unwrap();
    assert!(matches!(
        c.receive().unwrap(),
        Message::Event(
            0,
            Event::Error {
                code: ErrorCode::BadRequest,
                ..
            }
        )
    ));
    let refused = m.audit_kinds("request_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["code"], "bad_request");
}
