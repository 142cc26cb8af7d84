//! A VM's folder (`<state>/vm/`) as the commands that end a VM and `ps`
//! see it: `rm` empties it (its disks too with `--volumes`), `down`
//! powers the VM off and keeps only its disks, and `ps` reads a row from
//! it (a VM taken down, its disks alone left, is no machine listed).

use super::super::ps::Row;
use super::disks::VOLUMES;
use super::{container, dir, is_vm, ports, running, state_dir, stop};
use crate::host::error::LaunchError;
use std::path::Path;

/// The file in a VM's folder naming the image its last `up` booted.
pub(super) const IMAGE_FILE: &str = "image";

/// Removes the VM's files; with `volumes`, its disks too.
pub fn remove(id: &str, volumes: bool) -> Result<(), LaunchError> {
    if running(id) {
        stop(id)?;
    }
    clear(&dir(id), volumes)?;
    println!("removed VM {}", container(id));
    Ok(())
}

/// Takes the VM down: it has no container to remove, so it is powered
/// off (as `stop` does) and its folder emptied of all but its disks (its
/// initramfs, which holds the runtime's keys, its console, its sockets);
/// the disks (its data, with the audit log, and its workspace) and the
/// state folder stay, and the next `up` boots a new VM on them.
pub fn down(id: &str) -> Result<(), LaunchError> {
    let was = match running(id) {
        true => {
            stop(id)?;
            "powered off"
        }
        false => "was stopped",
    };
    let kept = clear(&dir(id), false)?;
    println!(
        "machine {id} down (VM): {was}, its files removed; kept for its next up: disks {}, state folder {}",
        kept.join(", "),
        state_dir(id).display()
    );
    Ok(())
}

/// Empties a VM's folder `vm`, keeping its disks unless `disks`; returns
/// the disks kept.
fn clear(vm: &Path, disks: bool) -> Result<Vec<String>, LaunchError> {
    let entries = std::fs::read_dir(vm).map_err(|e| LaunchError::io(vm, e))?;
    let mut kept = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !disks && VOLUMES.iter().any(|v| name == *v) {
            kept.push(name.to_string_lossy().into_owned());
            continue;
        }
        let path = entry.path();
        // A link is removed, never followed.
        let removed = match entry.file_type().is_ok_and(|t| t.is_dir()) {
            true => std::fs::remove_dir_all(&path),
            false => std::fs::remove_file(&path),
        };
        removed.map_err(|e| LaunchError::io(&path, e))?;
    }
    kept.sort();
    Ok(kept)
}

/// Whether the VM's folder holds more than its disks: a VM taken down
/// keeps only those, and is no machine `ps` lists.
fn made(vm: &Path) -> bool {
    std::fs::read_dir(vm).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| !VOLUMES.iter().any(|v| e.file_name() == *v))
    })
}

/// The ids of this owner's VMs (the machines in its state root with a VM
/// folder), sorted.
pub fn ids() -> Vec<String> {
    let Ok(root) = crate::host::this_host::state_root() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|id| crate::host::definition::valid_id(id) && is_vm(id))
        .collect();
    ids.sort();
    ids
}

/// This owner's VMs, a row each (those taken down left out), read from
/// their folders: no engine is asked.
pub fn list() -> Vec<Row> {
    ids()
        .into_iter()
        .filter(|id| running(id) || made(&dir(id)))
        .map(|id| row(&id))
        .collect()
}

/// The VM's row for `ps`: its owner is its folder's, its image the one
/// its last `up` booted.
fn row(id: &str) -> Row {
    use std::os::unix::fs::MetadataExt;
    let vm = dir(id);
    let running = running(id);
    let frozen = crate::host::state::state_dir(id)
        .join(crate::host::state::PAUSED)
        .exists();
    let state = match (running, frozen) {
        (true, true) => "paused",
        (true, false) => "running",
        (false, _) => "stopped",
    };
    let image = std::fs::read_to_string(vm.join(IMAGE_FILE)).unwrap_or_default();
    Row {
        id: id.to_string(),
        name: container(id),
        kind: "vm",
        engine: "qemu",
        owner: std::fs::metadata(&vm).ok().map(|m| m.uid()),
        image: image.trim().to_string(),
        state: state.into(),
        status: state.into(),
        running,
        ports: ports::published(id),
        idle_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_keeps_a_vms_disks_alone_and_rm_volumes_keeps_nothing() {
        let lay_out = || {
            let vm = tempfile::tempdir().unwrap();
            for file in [
                "data.ext4",
                "workspace.ext4",
                "initrd.gz",
                "serial.log",
                "inputs",
                IMAGE_FILE,
                "vsock.sock_1025",
            ] {
                std::fs::write(vm.path().join(file), file).unwrap();
            }
            std::fs::create_dir(vm.path().join("lend")).unwrap();
            std::fs::write(vm.path().join("lend/x"), "x").unwrap();
            // A link out of the folder is removed, never followed.
            let outside = tempfile::tempdir().unwrap();
            std::fs::write(outside.path().join("keep"), "k").unwrap();
            std::os::unix::fs::symlink(outside.path(), vm.path().join("link")).unwrap();
            (vm, outside)
        };
        let names = |vm: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(vm)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        // (disks too, what is left, what is said kept, still made)
        let cases: [(bool, &[&str], &[&str], bool); 2] = [
            (
                false,
                &["data.ext4", "workspace.ext4"],
                &["data.ext4", "workspace.ext4"],
                false,
            ),
            (true, &[], &[], false),
        ];
        for (disks, left, said, still_made) in cases {
            let (vm, outside) = lay_out();
            assert!(made(vm.path()));
            let kept = clear(vm.path(), disks).unwrap();
            assert_eq!(kept, said, "disks {disks}");
            assert_eq!(names(vm.path()), left, "disks {disks}");
            assert_eq!(made(vm.path()), still_made, "disks {disks}");
            assert!(outside.path().join("keep").exists(), "followed a link");
            if !disks {
                let data = std::fs::read_to_string(vm.path().join("data.ext4")).unwrap();
                assert_eq!(data, "data.ext4", "a kept disk is untouched");
            }
        }
        assert!(clear(Path::new("/nonexistent/vm"), false).is_err());
        assert!(!made(Path::new("/nonexistent/vm")));
    }
}
