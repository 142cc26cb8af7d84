//! The owner's ways in that a cluster offers, against a real warden (PID 1
//! of its own namespaces, tests/common): the TCP door (`tcp_door`, on the
//! machine's loopback, the machine's key as on the host socket), which
//! shell cannot even reach, and the audit log read through the API
//! (`read_audit`, protocol version 5), which verifies as it is on disk.

mod common;

use common::{privileged, text, Machine, Options};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use warden::wire::client::{Client, ClientError};
use warden::wire::{ErrorCode, Event, Header, Kind, RunRequest, SUPPORTED_VERSIONS};

/// The newest version warden speaks, the one a current client agrees on.
fn newest() -> u32 {
    *SUPPORTED_VERSIONS.last().unwrap()
}

const KEY: &str = "test-key-0123456789abcdef0123456789abcdef";
const DOOR: &str = "127.0.0.1:7000";

/// A machine with a TCP door and a key file, as the pod's manifests make
/// one; `tweak` changes its options (capabilities dropped, ...).
fn door_machine(tweak: impl FnOnce(&mut Options)) -> Machine {
    use std::os::unix::fs::PermissionsExt;
    let dir = Machine::folder("");
    let key = dir.path().join("key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut opts = Options {
        config: json!({"tcp_door": DOOR, "key_file": key}),
        ..Default::default()
    };
    tweak(&mut opts);
    let m = Machine::start_in(dir, opts);
    m.wait_ready();
    m
}

/// A client through the door, from inside the machine's network namespace
/// (where `kubectl port-forward` connects in a pod).
fn door(m: &Machine, key: Option<&str>) -> Result<Client, ClientError> {
    m.in_netns(|| Client::connect_tcp(DOOR, key, None))
}

fn shell(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.into()),
        timeout_ms: Some(60_000),
        ..Default::default()
    }
}

/// The whole log, read through `client`, with what `audit_end` said.
fn read_log(client: &mut Client, from: u64) -> (String, warden::wire::client::AuditRead) {
    let mut bytes = Vec::new();
    let read = client.read_audit(from, &mut bytes).unwrap();
    (String::from_utf8(bytes).unwrap(), read)
}

#[test]
fn the_tcp_door_lets_in_only_the_machines_key() {
    if !privileged("the_tcp_door_lets_in_only_the_machines_key") {
        return;
    }
    let m = door_machine(|_| {});
    // With the key: commands run as shell, status answers, the log reads.
    let mut owner = door(&m, Some(KEY)).unwrap();
    assert_eq!(owner.version, newest());
    let out = owner.run(shell("id -un")).unwrap();
    assert_eq!(text(&out.stdout).trim(), "shell");
    let status = owner.status().unwrap();
    assert!(status.users.iter().any(|u| u.name == "shell"), "{status:?}");
    let (log, read) = read_log(&mut owner, 1);
    assert_eq!(read.first_seq, Some(1));
    warden::shared::audit_chain::verify_text(&log, None).unwrap();
    assert!(log.contains("\"via\":\"tcp\""), "{log}");
    // Without it, or with another: refused, audited as the door's.
    for (key, reason) in [
        (
            Some("test-key-0123456789abcdef0123456789abcdeX"),
            "wrong key",
        ),
        (None, "no key"),
    ] {
        let e = door(&m, key).err().expect("refused").to_string();
        assert!(e.contains(reason), "{e}");
    }
    let refused = m.audit_kinds("connection_refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused
        .iter()
        .all(|l| l["door"] == "host" && l["via"] == "tcp"));
    let let_in = m.audit_kinds("connection");
    assert!(
        let_in
            .iter()
            .any(|l| l["via"] == "tcp" && l["key"] == "accepted"),
        "{let_in:?}"
    );
    // The boot line names the door.
    assert_eq!(m.audit_kinds("boot")[0]["tcp_door"], DOOR);
}

/// Under warden's firewall, shell's TCP connects reach only the proxy:
/// the door on the same loopback is out of its reach, whether nftables
/// holds the layer or warden's connect gate (without NET_ADMIN, as in a
/// pod under baseline). The owner reaches it meanwhile, so it is there.
#[test]
fn shell_cannot_reach_the_tcp_door() {
    if !privileged("shell_cannot_reach_the_tcp_door") {
        return;
    }
    let probe = r#"python3 -c '
import socket
try:
    socket.create_connection(("127.0.0.1", 7000), timeout=5); print("CONNECTED")
except socket.timeout as e:
    print("TIMEOUT", e)
except OSError as e:
    print("refused", e)
'"#;
    for (held_by, drop_caps) in [
        ("table inet warden", vec![]),
        (
            "held by warden's connect gate",
            vec!["net_admin".to_string()],
        ),
    ] {
        // Without NET_ADMIN warden cannot bring lo up itself: a namespace
        // of the test's own, lo up, as a pod's is (one each, so that no
        // table of the first is left for the second).
        let netns = Netns::new("door");
        let m = door_machine(|o| {
            o.drop_caps = drop_caps;
            o.netns = Some(netns.0.clone());
        });
        let status = m.client().status().unwrap();
        let fw = common::layer(&status, "firewall");
        assert!(fw.holds && fw.detail.contains(held_by), "{fw:?}");
        let out = m.client().run(shell(probe)).unwrap();
        let said = text(&out.stdout) + &text(&out.stderr);
        assert!(said.starts_with("refused"), "{held_by}: {said}");
        let out = m
            .client()
            .run(shell("bash -c 'echo > /dev/tcp/127.0.0.1/7000'"))
            .unwrap();
        assert_ne!(out.exit.status, 0, "{held_by}: {}", text(&out.stderr));
        // Nothing of it reached warden's door; the owner does.
        let at_door: Vec<Value> = m
            .audit()
            .into_iter()
            .filter(|l| l["via"] == "tcp")
            .collect();
        assert!(at_door.is_empty(), "{held_by}: {at_door:?}");
        let mut owner = door(&m, Some(KEY)).unwrap();
        assert_eq!(owner.run(shell("echo in")).unwrap().stdout, b"in\n");
        if held_by.contains("connect gate") {
            // The gate refused it, and says so (from its audit thread).
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let found = loop {
                let refused = m.audit_kinds("connect_refused");
                let found = refused
                    .iter()
                    .any(|l| l["address"] == DOOR && l["command"].is_u64());
                if found || std::time::Instant::now() > deadline {
                    break (found, refused);
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            assert!(found.0, "{:?}", found.1);
        }
    }
}

/// A network namespace of the test's own, with lo up; removed when
/// dropped.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("warden-{tag}-{}", std::process::id());
        for args in [
            vec!["netns", "add", &name],
            vec!["-n", &name, "link", "set", "lo", "up"],
        ] {
            let out = std::process::Command::new("ip")
                .args(&args)
                .output()
                .unwrap();
            assert!(out.status.success(), "ip {args:?}: {}", text(&out.stderr));
        }
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", &self.0])
            .output();
    }
}

#[test]
fn a_tcp_door_off_loopback_stops_the_boot() {
    if !privileged("a_tcp_door_off_loopback_stops_the_boot") {
        return;
    }
    for (address, said) in [
        ("0.0.0.0:7000", "must be a loopback address"),
        ("127.0.0.1:0", "a port other than 0"),
    ] {
        let mut m = Machine::start(Options {
            config: json!({"tcp_door": address}),
            ..Default::default()
        });
        assert_eq!(m.wait(Duration::from_secs(10)), 1, "{address}");
        let log = m.log();
        assert!(
            log.contains("refusing to start") && log.contains("tcp_door") && log.contains(said),
            "{address}: {log}"
        );
    }
}

/// The log read through the machine's own socket: the lines as on disk,
/// from a seq on, verified by the chain and by `warden audit verify`.
#[test]
fn the_audit_log_is_read_through_the_api_and_verifies() {
    if !privileged("the_audit_log_is_read_through_the_api_and_verifies") {
        return;
    }
    let m = Machine::boot(Options::default());
    let mut client = m.client();
    for i in 0..20 {
        client.audit("note", json!({"i": i})).unwrap();
    }
    let (log, read) = read_log(&mut client, 1);
    // What was on disk when it was read: the same bytes.
    let on_disk = std::fs::read_to_string(m.audit_path()).unwrap();
    assert!(on_disk.starts_with(&log), "read:\n{log}\ndisk:\n{on_disk}");
    assert_eq!(
        (read.first_seq, read.lines, read.bytes),
        (Some(1), read.last_seq, log.len() as u64)
    );
    assert_eq!(log.lines().count() as u64, read.last_seq);
    let copy = tempfile::tempdir().unwrap();
    let file = copy.path().join("warden.jsonl");
    std::fs::write(&file, &log).unwrap();
    let out = std::process::Command::new(common::warden_bin())
        .args(["audit", "verify"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success() && text(&out.stdout).starts_with("ok: "),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // From a seq on: the rest of the chain, verified from its first prev.
    let (tail, read) = read_log(&mut client, 10);
    assert_eq!(read.first_seq, Some(10));
    let first: Value = serde_json::from_str(tail.lines().next().unwrap()).unwrap();
    assert_eq!(first["seq"], 10);
    warden::shared::audit_chain::verify_text(&tail, first["prev"].as_str()).unwrap();
    // Past the end: nothing, said so.
    let (none, read) = read_log(&mut client, 1_000_000);
    assert_eq!((none.as_str(), read.first_seq, read.lines), ("", None, 0));
}

/// A raw connection speaking an older version: `read_audit` is a version
/// 5 request, refused there as any newer request is, and warden carries
/// on; a frame id of 0 is refused too.
#[test]
fn read_audit_needs_version_5_and_an_id() {
    if !privileged("read_audit_needs_version_5_and_an_id") {
        return;
    }
    let m = Machine::boot(Options::default());
    for (versions, id, said) in [
        ("[1,2,3,4]", 1, "version 5 request"),
        ("[5]", 0, "non-zero frame id"),
    ] {
        let mut s = UnixStream::connect(&m.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut send = |id: u32, body: String| {
            let h = Header {
                kind: Kind::Control,
                id,
                len: body.len() as u32,
            };
            s.write_all(&h.encode()).unwrap();
            s.write_all(body.as_bytes()).unwrap();
        };
        send(0, format!(r#"{{"type":"hello","versions":{versions}}}"#));
        send(id, r#"{"type":"read_audit","from_seq":1}"#.to_string());
        let mut events = Vec::new();
        while events.len() < 2 {
            let mut raw = [0u8; 9];
            s.read_exact(&mut raw).unwrap();
            let h = Header::decode(&raw).unwrap();
            let mut body = vec![0; h.len as usize];
            s.read_exact(&mut body).unwrap();
            assert_eq!(h.kind, Kind::Control, "no log bytes on a refusal");
            events.push(serde_json::from_slice::<Event>(&body).unwrap());
        }
        match &events[1] {
            Event::Error { code, message } => {
                assert_eq!(*code, ErrorCode::BadRequest);
                assert!(message.contains(said), "{message}");
            }
            other => panic!("{versions}: {other:?}"),
        }
    }
    // warden carries on.
    assert_eq!(m.client().status().unwrap().protocol, newest());
}
