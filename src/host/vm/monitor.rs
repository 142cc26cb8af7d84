//! A VM's freeze and thaw, through QEMU's monitor (QMP, a unix socket in
//! the machine's folder): `stop` halts its vCPUs with its memory kept,
//! `cont` lets them run again. What a container's `pause` is to podman.
//!
//! Its vsock needs care (`vhost.rs`): vhost-device-vsock 0.3.0 ends its
//! worker, for good, when it touches a ring QEMU has stopped (at any
//! host-side event, or carrying a connection's last packets). So a frozen VM's `vsock.sock` is hidden (renamed `HIDDEN`):
//! nothing on the host, warden or not, can connect to it then. A freeze
//! hides it, waits until the backend is quiet (no connection held, not
//! even one ending, its worker waiting), then stops the VM; a thaw lets
//! it run, waits until the backend has armed its rings again, then shows
//! the socket.
//!
//! Armed is not yet answering: QEMU hands the backend the rings' kicks
//! before it enables them and gives their interrupts (SET_VRING_KICK, then
//! SET_VRING_ENABLE and SET_VRING_CALL), and a kick or an interrupt that
//! falls between is lost: a connection made then may wait for an answer
//! that never comes (seen once in about a hundred thaws here). So before
//! the socket is shown, the thaw makes a round trip through it (a CONNECT
//! to a port no one listens on, which the guest refuses), tried again
//! when no answer comes: each new request has the backend go through both
//! rings again.

use super::vhost;
use crate::host::error::LaunchError;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The monitor's socket, beside the VM's other files.
pub fn socket(id: &str) -> PathBuf {
    super::dir(id).join("qmp.sock")
}

/// `vsock.sock`'s name while the VM is frozen.
pub const HIDDEN: &str = "vsock.sock.frozen";

/// How long a freeze waits for the backend to be quiet (a connection's
/// end is carried in milliseconds).
const QUIET_WAIT: Duration = Duration::from_secs(1);

/// How long a thaw waits for the backend to arm its rings again.
const ARM_WAIT: Duration = Duration::from_secs(5);

/// Without /proc's view of the backend, how long a thaw waits instead.
const ARM_BLIND: Duration = Duration::from_millis(250);

/// A vsock port no one listens on in a warden guest: its refusal is the
/// thaw's round trip.
const NOBODY: u32 = 1;

/// How long each round trip may take, and how many are tried.
const ROUND_TRIP_WAIT: Duration = Duration::from_secs(1);
const ROUND_TRIPS: usize = 5;

/// Halts the VM's vCPUs; its memory, devices and vsock stay. Its vsock's
/// socket is hidden first, and the backend must be quiet: no connection
/// held, its worker waiting (else not frozen now, the socket shown again).
pub fn freeze(id: &str) -> Result<(), LaunchError> {
    hide(id)?;
    let frozen = match vhost::wait_quiet(id, QUIET_WAIT) {
        Some(s) if !s.worker => Err(dead(id)),
        Some(s) if !vhost::quiet(&s) => Err(LaunchError::new(
            format!("machine {id}"),
            format!(
                "its vsock still carries {} connection(s){}: not frozen now",
                s.connections,
                match s.waiting {
                    true => "",
                    false => ", its backend busy",
                }
            ),
        )),
        _ => command(id, "stop"),
    };
    if frozen.is_err() {
        show(id);
    }
    frozen
}

/// Lets a frozen VM run again.
pub fn thaw(id: &str) -> Result<(), LaunchError> {
    command(id, "cont")
}

/// After a thaw: once the backend has armed its rings again and a round
/// trip through it was answered, the vsock's socket is shown. Err when its
/// worker has ended or no round trip was answered (the socket is shown
/// all the same: nothing more is lost by it).
pub fn vsock_back(id: &str) -> Result<(), LaunchError> {
    let seen = vhost::wait_for(id, ARM_WAIT, |s| s.armed);
    let armed = match seen {
        None => {
            std::thread::sleep(ARM_BLIND);
            Ok(())
        }
        Some(s) if !s.worker => Err(dead(id)),
        Some(s) if !s.armed => Err(LaunchError::new(
            format!("machine {id}"),
            format!(
                "its vsock's rings were not armed again {} s after the thaw",
                ARM_WAIT.as_secs()
            ),
        )),
        Some(_) => Ok(()),
    };
    let vm = super::dir(id);
    let path = match vm.join(HIDDEN).exists() {
        true => vm.join(HIDDEN),
        false => vm.join("vsock.sock"),
    };
    let back = armed.and_then(|()| match round_trip(&path) {
        true => Ok(()),
        false => Err(LaunchError::new(
            format!("machine {id}"),
            format!(
                "its vsock answered nothing after the thaw ({ROUND_TRIPS} tries of {} s)",
                ROUND_TRIP_WAIT.as_secs()
            ),
        )),
    });
    show(id);
    back
}

/// One answered `CONNECT` to a port no one listens on, through the vsock's
/// socket at `path` (the guest's refusal closes it; anything read is an
/// answer); tried `ROUND_TRIPS` times.
fn round_trip(path: &Path) -> bool {
    for _ in 0..ROUND_TRIPS {
        let Ok(mut stream) = UnixStream::connect(path) else {
            return false;
        };
        let asked = stream
            .set_read_timeout(Some(ROUND_TRIP_WAIT))
            .and_then(|()| stream.write_all(format!("CONNECT {NOBODY}\n").as_bytes()));
        if asked.is_err() {
            continue;
        }
        let mut answer = [0u8; 64];
        match stream.read(&mut answer) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            _ => return true,
        }
    }
    false
}

/// The error of a VM whose vsock backend's worker has ended.
fn dead(id: &str) -> LaunchError {
    LaunchError::new(
        format!("machine {id}"),
        "its vsock answers nothing any more (vhost-device-vsock's worker ended: a host connection reached it while the VM was frozen); `warden machine stop` and `up` make it again",
    )
}

/// `vsock.sock` renamed `HIDDEN`: connecting to the VM fails at once.
fn hide(id: &str) -> Result<(), LaunchError> {
    let vm = super::dir(id);
    let (from, to) = (vm.join("vsock.sock"), vm.join(HIDDEN));
    match std::fs::rename(&from, &to) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && to.exists() => Ok(()),
        done => done.map_err(|e| LaunchError::io(&from, e)),
    }
}

/// `vsock.sock` shown again, when hidden.
pub fn show(id: &str) {
    let vm = super::dir(id);
    let (hidden, shown) = (vm.join(HIDDEN), vm.join("vsock.sock"));
    if hidden.exists() && !shown.exists() {
        let _ = std::fs::rename(hidden, shown);
    }
}

/// Whether the VM's vsock is hidden (it is frozen, or being frozen).
pub fn hidden(id: &str) -> bool {
    super::dir(id).join(HIDDEN).exists()
}

/// Whether the VM's vCPUs are halted now (None: the monitor did not say).
pub fn frozen(id: &str) -> Option<bool> {
    let answer = ask(id, "query-status").ok()?;
    Some(!answer.get("running")?.as_bool()?)
}

fn command(id: &str, what: &str) -> Result<(), LaunchError> {
    ask(id, what).map(|_| ())
}

/// One command's answer (its `return`). Every QMP session begins with
/// the monitor's greeting and the client's `qmp_capabilities`; QEMU reads
/// what it is sent in order, so both are sent at once.
fn ask(id: &str, what: &str) -> Result<serde_json::Value, LaunchError> {
    let fail = |e: &dyn std::fmt::Display| {
        LaunchError::new(
            format!("machine {id}: QEMU's monitor"),
            format!("{what}: {e}"),
        )
    };
    let mut stream = UnixStream::connect(socket(id)).map_err(|e| fail(&e))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| fail(&e))?;
    let sent = format!("{{\"execute\":\"qmp_capabilities\"}}\n{{\"execute\":\"{what}\"}}\n");
    stream.write_all(sent.as_bytes()).map_err(|e| fail(&e))?;
    let mut returns = 0;
    for line in BufReader::new(stream).lines() {
        let line = line.map_err(|e| fail(&e))?;
        match answer(&line) {
            Reply::Greeting | Reply::Event => {}
            Reply::Return(_) if returns == 0 => returns = 1,
            Reply::Return(value) => return Ok(value),
            Reply::Error(e) => return Err(fail(&e)),
            Reply::Unreadable => return Err(fail(&format!("unreadable answer: {line}"))),
        }
    }
    Err(fail(&"the monitor closed the connection"))
}

/// What one line from the monitor is.
#[derive(Debug, PartialEq)]
enum Reply {
    Greeting,
    Event,
    Return(serde_json::Value),
    Error(String),
    Unreadable,
}

/// Pure: reads one line of the monitor's.
fn answer(line: &str) -> Reply {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
        return Reply::Unreadable;
    };
    if value.get("QMP").is_some() {
        Reply::Greeting
    } else if value.get("event").is_some() {
        Reply::Event
    } else if let Some(ret) = value.get("return") {
        Reply::Return(ret.clone())
    } else if let Some(error) = value.get("error") {
        let desc = error.get("desc").and_then(|d| d.as_str()).unwrap_or("");
        Reply::Error(desc.to_string())
    } else {
        Reply::Unreadable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_monitors_lines_are_read_by_kind() {
        let cases = [
            (
                r#"{"QMP": {"version": {}, "capabilities": []}}"#,
                Reply::Greeting,
            ),
            (
                r#"{"timestamp": {"seconds": 1}, "event": "STOP"}"#,
                Reply::Event,
            ),
            (r#"{"return": {}}"#, Reply::Return(json!({}))),
            (
                r#"{"return": {"running": false, "status": "paused"}}"#,
                Reply::Return(json!({"running": false, "status": "paused"})),
            ),
            (
                r#"{"error": {"class": "GenericError", "desc": "no such command"}}"#,
                Reply::Error("no such command".into()),
            ),
            ("not json", Reply::Unreadable),
            (r#"{"other": 1}"#, Reply::Unreadable),
        ];
        for (line, want) in cases {
            assert_eq!(answer(line), want, "{line}");
        }
    }
}
