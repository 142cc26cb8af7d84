//! A machine's freeze and thaw (the engine's pause and unpause, a VM's
//! QEMU monitor), its marker in its state folder, and the sleep lock that
//! keeps every connection into the machine (its door, a VM's port) out of
//! them: what serve's idle, the door, a VM's relay and `up --warm --paused`
//! share.

use super::note_wake;
use crate::host::state::state_dir;
use crate::host::{engine, LaunchError};
use std::path::Path;

/// Freezes a running machine (the engine's pause, the cgroup freezer; a
/// VM's monitor): its audit log says so first, then its marker is kept, so
/// that a request to its door (or a VM's port) from then on thaws it
/// first. Under the sleep lock, taken before anything is said: no thaw
/// runs between the marker and the freeze, and while a connection into
/// the machine is open nothing happens at all (not now), not even the
/// audit line of a pause that did not come.
pub fn freeze(id: &str, state: &Path, idle_ms: u64) -> Result<(), LaunchError> {
    let path = state.join(SLEEP_LOCK);
    let _locked = lock(&path, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|_| {
        LaunchError::new(
            format!("machine {id}"),
            "a connection into it is open: not frozen now",
        )
    })?;
    // The backend's own connection: `connect` would wait for the shared
    // lock this freeze holds.
    let noted = super::super::of(id).connect(id, None).and_then(|mut c| {
        c.pause(idle_ms)
            .map_err(|e| LaunchError::sentence(e.to_string()))
    });
    if let Err(e) = noted {
        eprintln!("warden: machine {id}: its freeze is not in its audit log: {e}");
    }
    let marker = state.join(crate::host::state::PAUSED);
    std::fs::write(&marker, b"").map_err(|e| LaunchError::io(&marker, e))?;
    let frozen = match crate::host::vm::is_vm(id) {
        true => crate::host::vm::monitor::freeze(id),
        false => engine::run("pause", &["pause", &crate::host::state::container(id)]).map(drop),
    };
    if frozen.is_err() {
        let _ = std::fs::remove_file(&marker);
    }
    frozen
}

/// Whether the machine is marked frozen (by `freeze`).
pub fn frozen(state: &Path) -> bool {
    state.join(crate::host::state::PAUSED).exists()
}

/// Thaws the machine when it is frozen (the engine's unpause, a VM's
/// monitor), its marker gone; true when it was. A marker left by a
/// machine that runs (its freeze cut short) is taken away.
pub fn thaw_frozen(id: &str, state: &Path) -> Result<bool, LaunchError> {
    let marker = state.join(crate::host::state::PAUSED);
    if !marker.exists() {
        return Ok(false);
    }
    let _locked = sleep_lock(state)?;
    if !marker.exists() {
        return Ok(false);
    }
    let vm = crate::host::vm::is_vm(id);
    if vm && !crate::host::vm::running(id) {
        // A VM that ended while frozen: nothing to thaw.
        crate::host::vm::monitor::show(id);
        let _ = std::fs::remove_file(&marker);
        return Ok(false);
    }
    let thawed = match vm {
        true => crate::host::vm::monitor::thaw(id),
        false => engine::run("unpause", &["unpause", &crate::host::state::container(id)]).map(drop),
    };
    if let Err(e) = thawed {
        if frozen_now(id) != Some(false) {
            return Err(e);
        }
    }
    // A VM's vsock is shown again once its backend can take a connection.
    let back = match vm {
        true => crate::host::vm::monitor::vsock_back(id),
        false => Ok(()),
    };
    let _ = std::fs::remove_file(&marker);
    back.map(|()| true)
}

/// Whether the engine or the monitor says the machine is frozen now.
fn frozen_now(id: &str) -> Option<bool> {
    if crate::host::vm::is_vm(id) {
        return crate::host::vm::monitor::frozen(id);
    }
    let name = crate::host::state::container(id);
    let out = engine::run(
        "inspect",
        &["inspect", "--format", "{{.State.Status}}", &name],
    )
    .ok()?;
    Some(out.trim() == "paused")
}

/// The lock of a machine that may be frozen, in its state folder: a freeze
/// or a thaw holds it alone; each connection into the machine (its door,
/// a VM's port) holds it shared while it is open, and a freeze waits for
/// none: the machine is in use. A VM's vsock does not outlive a host-side
/// connection begun or ended while its rings are stopped, from QEMU's
/// `stop` until its backend has armed them again after `cont` (see
/// `vm::vhost`), so none may be then: the freeze and the thaw, under this
/// lock, also hide its socket for that time (`vm::monitor`). `up` makes
/// it for a machine that pauses.
pub const SLEEP_LOCK: &str = "sleep.lock";

fn sleep_lock(state: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, LaunchError> {
    lock(&state.join(SLEEP_LOCK), nix::fcntl::FlockArg::LockExclusive)
}

fn lock(
    path: &Path,
    how: nix::fcntl::FlockArg,
) -> Result<nix::fcntl::Flock<std::fs::File>, LaunchError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| LaunchError::io(path, e))?;
    nix::fcntl::Flock::lock(file, how)
        .map_err(|(_, e)| LaunchError::io(path, std::io::Error::from(e)))
}

/// Held while a connection into the machine is open: no freeze begins
/// meanwhile.
pub struct Awake(#[allow(dead_code)] Option<nix::fcntl::Flock<std::fs::File>>);

/// Keeps the machine awake while a connection into it is open: a
/// frozen one is thawed first for `cause` (its door would answer nothing),
/// or, with no cause, left frozen (None). A machine that never pauses
/// costs one look at its state folder.
pub fn awake(id: &str, cause: Option<&str>) -> Result<Option<Awake>, LaunchError> {
    let state = state_dir(id);
    let path = state.join(SLEEP_LOCK);
    if !path.exists() {
        return Ok(Some(Awake(None)));
    }
    for _ in 0..3 {
        let held = lock(&path, nix::fcntl::FlockArg::LockShared)?;
        if !state.join(crate::host::state::PAUSED).exists() {
            return Ok(Some(Awake(Some(held))));
        }
        drop(held);
        match cause {
            Some(cause) => thaw_for(id, cause)?,
            None => return Ok(None),
        }
    }
    Err(LaunchError::new(
        format!("machine {id}"),
        "frozen again each time it was thawed",
    ))
}

/// Thaws a frozen machine for `cause` (its door, a VM's port), the wake
/// in its audit log.
pub fn thaw_for(id: &str, cause: &str) -> Result<(), LaunchError> {
    if thaw_frozen(id, &state_dir(id))? {
        note_wake(id, cause);
    }
    Ok(())
}
