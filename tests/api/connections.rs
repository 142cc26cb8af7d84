//! Who may connect and what a connection may send: the socket's mode and
//! peer credentials, the host socket's key, malformed input (typed errors,
//! warden carries on), and a client that disconnects.

use super::{argv, boot, run, shell};
use crate::common::{self, privileged, text, Machine, RUNTIME_UID, SHELL_UID};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};
use warden::wire::client::Client;
use warden::wire::{ErrorCode, Event, Header, Kind};

#[test]
fn only_root_and_runtime_may_connect() {
    if !privileged("only_root_and_runtime_may_connect") {
        return;
    }
    let m = boot();
    let meta = std::fs::metadata(&m.socket).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (0, RUNTIME_UID, 0o660)
    );
    let status_as = |uid: u32, gid: u32| {
        use std::os::unix::process::CommandExt;
        Command::new(common::warden_bin())
            .args(["status", "--socket"])
            .arg(&m.socket)
            .uid(uid)
            .gid(gid)
            .output()
            .unwrap()
    };
    // shell is stopped by the socket's mode...
    let out = status_as(SHELL_UID, SHELL_UID);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out.stderr)
    );
    // ...and, should the mode ever be wrong, by its peer credentials.
    std::fs::set_permissions(
        &m.socket,
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    let out = status_as(SHELL_UID, SHELL_UID);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("Refused"),
        "{}",
        text(&out.stderr)
    );
    let refused = m.audit_kinds("connection_refused");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["uid"], SHELL_UID);
    // The runtime may.
    let out = status_as(RUNTIME_UID, RUNTIME_UID);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("user shell"));
}

/// A raw connection, to send what no well-behaved client would.
struct Raw(UnixStream);

impl Raw {
    fn connect(m: &Machine) -> Raw {
        let s = UnixStream::connect(&m.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Raw(s)
    }
    fn frame(&mut self, kind: u8, id: u32, body: &[u8]) {
        let mut h = Header {
            kind: Kind::Control,
            id,
            len: body.len() as u32,
        }
        .encode();
        h[0] = kind;
        let _ = self.0.write_all(&h);
        let _ = self.0.write_all(body);
    }
    fn control(&mut self, id: u32, body: &str) {
        self.frame(1, id, body.as_bytes());
    }
    fn hello(&mut self) {
        self.control(0, r#"{"type":"hello","versions":[1]}"#);
        assert!(matches!(
            self.event(),
            Some((0, Event::Hello { version: 1, .. }))
        ));
    }
    /// The next control event, or None when warden closed the connection.
    fn event(&mut self) -> Option<(u32, Event)> {
        loop {
            let mut raw = [0u8; 9];
            self.0.read_exact(&mut raw).ok()?;
            let h = Header::decode(&raw).unwrap();
            let mut body = vec![0; h.len as usize];
            self.0.read_exact(&mut body).ok()?;
            if h.kind == Kind::Control {
                return Some((h.id, serde_json::from_slice(&body).unwrap()));
            }
        }
    }
    fn error_code(&mut self) -> Option<ErrorCode> {
        match self.event() {
            Some((_, Event::Error { code, .. })) => Some(code),
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

#[test]
fn malformed_input_gets_typed_errors_and_warden_carries_on() {
    if !privileged("malformed_input_gets_typed_errors_and_warden_carries_on") {
        return;
    }
    let m = boot();
    fatal_input_closes_the_connection(&m);
    let _still_open = recoverable_input_leaves_the_connection_working(&m);
    // And everyone else was never affected.
    assert_eq!(text(&run(&m, argv(&["echo", "fine"])).stdout), "fine\n");
}

/// Fatal: the connection is closed after the error.
fn fatal_input_closes_the_connection(m: &Machine) {
    type Send = Box<dyn Fn(&mut Raw)>;
    let fatal: Vec<(&str, Send, ErrorCode)> = vec![
        (
            "run before hello",
            Box::new(|r| r.control(1, r#"{"type":"status"}"#)),
            ErrorCode::HelloRequired,
        ),
        (
            "data before hello",
            Box::new(|r| r.frame(4, 1, b"x")),
            ErrorCode::HelloRequired,
        ),
        (
            "no common version",
            Box::new(|r| r.control(0, r#"{"type":"hello","versions":[99]}"#)),
            ErrorCode::UnsupportedVersion,
        ),
        (
            "oversized frame",
            Box::new(|r| {
                r.hello();
                let mut h = Header {
                    kind: Kind::Control,
                    id: 1,
                    len: 0,
                }
                .encode();
                h[5..9].copy_from_slice(&(64u32 << 20).to_be_bytes());
                r.0.write_all(&h).unwrap();
            }),
            ErrorCode::FrameTooLarge,
        ),
        (
            "unknown frame kind",
            Box::new(|r| {
                r.hello();
                r.frame(77, 1, b"");
            }),
            ErrorCode::BadFrame,
        ),
        (
            "output frame from a client",
            Box::new(|r| {
                r.hello();
                r.frame(2, 1, b"x");
            }),
            ErrorCode::BadFrame,
        ),
    ];
    for (what, send, want) in fatal {
        let mut r = Raw::connect(m);
        send(&mut r);
        assert_eq!(r.error_code(), Some(want), "{what}");
        assert!(r.event().is_none(), "{what}: connection should be closed");
    }
}

/// Not fatal: an error, then the same connection still works. The
/// connection is returned, open (its `sleep 5` running).
fn recoverable_input_leaves_the_connection_working(m: &Machine) -> Raw {
    let mut r = Raw::connect(m);
    r.hello();
    let recoverable = [
        ("{not json", ErrorCode::BadJson),
        (r#"{"type":"launch"}"#, ErrorCode::BadRequest),
        (r#"{"type":"run","argv":"ls"}"#, ErrorCode::BadRequest),
        (
            r#"{"type":"run","argv":["ls"],"unknown":1}"#,
            ErrorCode::BadRequest,
        ),
        (r#"{"type":"run"}"#, ErrorCode::BadRequest),
        (
            r#"{"type":"run","argv":["ls"],"timeout_ms":99999999999999999999999}"#,
            ErrorCode::BadRequest,
        ),
        (r#"{"type":"hello","versions":[1]}"#, ErrorCode::BadRequest),
    ];
    for (body, want) in recoverable {
        r.control(3, body);
        assert_eq!(r.error_code(), Some(want), "{body}");
    }
    r.frame(1, 3, &[0xff, 0xfe, b'{']);
    assert_eq!(r.error_code(), Some(ErrorCode::BadJson), "invalid UTF-8");
    r.control(0, r#"{"type":"run","argv":["true"]}"#);
    assert_eq!(r.error_code(), Some(ErrorCode::BadRequest), "run with id 0");
    r.frame(4, 42, b"stdin for nobody");
    assert_eq!(r.error_code(), Some(ErrorCode::UnknownId));
    r.control(7, r#"{"type":"run","argv":["sleep","5"]}"#);
    r.control(7, r#"{"type":"run","argv":["true"]}"#);
    loop {
        match r.event() {
            Some((7, Event::Started { .. })) => continue,
            Some((7, Event::Error { code, .. })) => {
                assert_eq!(code, ErrorCode::DuplicateId);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    r.control(0, r#"{"type":"status"}"#);
    loop {
        // The run on id 7 may report its start before or after the error.
        match r.event() {
            Some((7, Event::Started { .. })) => continue,
            Some((0, Event::Status(_))) => break,
            other => panic!("{other:?}"),
        }
    }
    r
}

#[test]
fn a_client_that_disconnects_takes_its_commands_with_it() {
    if !privileged("a_client_that_disconnects_takes_its_commands_with_it") {
        return;
    }
    let m = boot();
    let mut r = Raw::connect(&m);
    r.hello();
    r.control(1, r#"{"type":"run","shell":"sleep 101 & sleep 101"}"#);
    assert!(matches!(r.event(), Some((1, Event::Started { .. }))));
    drop(r);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !m.client().status().unwrap().running.is_empty() {
        assert!(Instant::now() < deadline, "the command outlived its client");
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = common::processes_of(SHELL_UID, &["sleep", "101"]);
    assert_eq!(left, 0, "a process outlived its client");
}

/// A machine with a host socket and a key file, as the launcher makes one.
#[test]
fn the_host_socket_lets_in_only_the_machines_key() {
    if !privileged("the_host_socket_lets_in_only_the_machines_key") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let (m, host) = Machine::keyed(0o600);
    m.wait_ready();
    let mode = std::fs::metadata(&host).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o600,
        "the owner's alone; the key decides among those who reach it"
    );
    let keyed = |key: Option<&str>| {
        Client::connect_keyed(&host, key, None).map(|mut c| c.run(argv(&["id", "-un"])).unwrap())
    };
    let out = keyed(Some("test-key-0123456789abcdef0123456789abcdef")).unwrap();
    assert_eq!(text(&out.stdout).trim(), "shell");
    for (key, reason) in [
        (
            Some("test-key-0123456789abcdef0123456789abcdeX"),
            "wrong key",
        ),
        (None, "no key"),
    ] {
        let e = keyed(key).expect_err("refused").to_string();
        assert!(e.contains(reason), "{e}");
    }
    let refused = m.audit_kinds("connection_refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused.iter().all(|l| l["door"] == "host"));
    assert!(refused.iter().all(|l| l["via"] == "host_socket"));
    assert_eq!(m.audit_kinds("connection")[0]["door"], "host");
    // shell cannot read the key.
    let out = run(
        &m,
        shell(&format!("cat {}", m.root().join("key").display())),
    );
    assert_ne!(out.exit.status, 0);
    assert!(!text(&out.stdout).contains("test-key"));
}

#[test]
fn a_key_file_others_may_read_stops_the_boot() {
    if !privileged("a_key_file_others_may_read_stops_the_boot") {
        return;
    }
    let (mut m, _) = Machine::keyed(0o644);
    assert_eq!(m.wait(Duration::from_secs(10)), 1);
    assert!(
        m.log().contains("must be root's and mode 0600 or 0400"),
        "{}",
        m.log()
    );
}
