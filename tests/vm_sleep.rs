//! A VM that sleeps behind `warden machine serve`: idle for its time, it
//! is frozen through QEMU's monitor (its memory kept, its time standing
//! still) and `ps` says `paused`; a connection to its published port (its
//! relay's) thaws it and gets the page at the first try, and so does a
//! request to its door; the audit log says each wake and its cause, its
//! chain intact. Nothing on the host can connect to its vsock while it is
//! frozen.

mod common;

use common::machine::{http_get, ps_row, show, TestMachine};
use common::serve::{kept_and_stood_still, page, serving, wait_for, RUNTIME};
use common::{text, vm};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_vm_pauses_when_idle_and_thaws_at_its_port_and_its_door() {
    let Some(_one) = vm::ready("a_vm_pauses_when_idle_and_thaws_at_its_port_and_its_door") else {
        return;
    };
    let mut command = Command::new(common::warden_bin());
    command.args(["machine", "serve"]);
    let _serve = serving(command);
    let m = TestMachine::defined(
        "vm-pause",
        serde_json::json!({
            "image": "localhost/warden-machine:latest", "kind": "vm",
            "ports": [{"port": 3000, "host": "auto", "from": 18500}],
            "serve": true, "idle": "pause", "idle_stop_minutes": 0.1,
            "command": ["sh", "-c", RUNTIME], "ready_port": 3000,
        }),
    );
    let port = up_watched(&m);
    let ask = || http_get(port, "/", Duration::ZERO);
    let state = || ps_state(&m);

    let (count, before) = page(&ask);
    let asked = Instant::now();
    assert_eq!(count, 1);
    wait_for("paused after 6 s idle", "paused", &state);
    std::thread::sleep(Duration::from_secs(3));
    // Nothing on the host reaches a frozen VM's vsock (one connection
    // would leave it answering nothing after the thaw): its socket is
    // hidden until then.
    let vsock = warden::host::state::state_dir(&m.id).join("vm/vsock.sock");
    let reached = std::os::unix::net::UnixStream::connect(&vsock).map(drop);
    assert_eq!(
        reached.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::NotFound),
        "{} while frozen",
        vsock.display()
    );
    kept_and_stood_still(&ask, before, asked);
    let log = m.audit();
    for line in [" pause idle_ms=", " wake cause=port"] {
        assert!(log.contains(line), "{line}: {log}");
    }
    assert_eq!(state(), "running");

    // Frozen again, a request to its door thaws it.
    wait_for("paused again", "paused", &state);
    let out = m.exec(&["id", "-un"]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("exec", &out));
    let log = m.audit();
    assert!(log.contains(" wake cause=door"), "{log}");
    assert!(log.contains("chain intact"), "{log}");
}

/// The freeze and the thaw themselves, many times over, each freeze right
/// after a connection's end and each thaw followed at once by a
/// connection to the VM's warden. vhost-device-vsock's worker ends for
/// good when it touches a ring QEMU has stopped: QEMU's `cont` returns
/// before the backend has armed its rings again (a connection made at
/// once ended it about one thaw in ten here), and a `stop` that came while
/// it still carried the last connection's end ended it within a few
/// cycles on a loaded host. Between, nothing on the host can reach the
/// vsock.
#[test]
fn a_vms_vsock_answers_at_once_after_each_thaw() {
    let Some(_one) = vm::ready("a_vms_vsock_answers_at_once_after_each_thaw") else {
        return;
    };
    let m = TestMachine::defined(
        "vm-thaws",
        serde_json::json!({
            "image": "localhost/warden-machine:latest", "kind": "vm",
            "command": ["sleep", "infinity"],
        }),
    );
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let vsock = warden::host::vm::dir(&m.id).join("vsock.sock");
    for cycle in 0..30 {
        warden::host::vm::monitor::freeze(&m.id).unwrap_or_else(|e| panic!("freeze {cycle}: {e}"));
        let reached = std::os::unix::net::UnixStream::connect(&vsock).map(drop);
        assert_eq!(
            reached.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::NotFound),
            "cycle {cycle}: the vsock's socket while frozen"
        );
        std::thread::sleep(Duration::from_millis(50));
        warden::host::vm::monitor::thaw(&m.id).unwrap_or_else(|e| panic!("thaw {cycle}: {e}"));
        warden::host::vm::monitor::vsock_back(&m.id)
            .unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
        let answered = warden::host::vm::connect(&m.id, None)
            .map_err(|e| e.to_string())
            .and_then(|mut c| c.status().map_err(|e| e.to_string()));
        assert!(
            answered.is_ok(),
            "cycle {cycle}: no answer right after the thaw: {answered:?}; {:?}",
            warden::host::vm::vhost::look(&m.id)
        );
    }
}

/// `up`, which must succeed and say that serve freezes the VM; the host
/// port its relay publishes 3000 on.
fn up_watched(m: &TestMachine) -> u16 {
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let said = text(&out.stdout);
    assert!(
        said.contains("frozen when idle by warden machine serve"),
        "{said}"
    );
    said.lines()
        .find_map(|l| {
            let (_, port) = l.split_once("published: 3000/tcp -> 127.0.0.1:")?;
            port.trim().parse().ok()
        })
        .unwrap_or_else(|| panic!("no published port: {said}"))
}

/// The VM's state as `warden machine ps` says it.
fn ps_state(m: &TestMachine) -> String {
    let out = m.warden(&["machine", "ps"]);
    let table = text(&out.stdout);
    let row = ps_row(&table, &m.id).unwrap_or_else(|| panic!("not listed: {table}"));
    row.get(4).cloned().unwrap_or_default()
}
