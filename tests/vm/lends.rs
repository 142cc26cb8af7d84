//! A VM's size, lent folders and `env`, from its definition as a
//! container's.

use super::warden;
use crate::common;
use crate::common::machine::TestMachine;
use crate::common::text;
use crate::common::vm;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A VM's size, lent folders and `env`, from its definition as a container's:
/// `cpus` and `memory` are what the guest has; a folder lent to read is
/// read-only for shell whatever its modes (QEMU's share and the mount are
/// read-only); what shell writes in a folder lent for writing appears on
/// the host, owned by shell's uid as in a rootful container; and the
/// folder's modes still hold inside.
#[test]
fn a_vm_has_its_size_and_its_lent_folders() {
    vm::guard();
    let test = "a_vm_has_its_size_and_its_lent_folders";
    if !common::privileged(test) {
        return;
    }
    if vm::kit(test).is_none() {
        return;
    }
    let _one = vm::one_at_a_time();
    let m = common::machine::TestMachine::new("vm-lend");
    let (src, out_dir) = define_a_vm_lending_two_folders(&m);
    let id = &m.id;
    let (ok, up, err) = warden(&["machine", "up", m.definition().to_str().unwrap()]);
    assert!(ok, "up: {up}{err}");
    eprintln!("{up}");
    assert!(up.contains("acceleration: "), "{up}");
    assert!(up.contains("2 CPU, 1024 MiB; 2 lent folder(s)"), "{up}");

    the_guest_has_the_size_defined(id);
    the_lends_are_9p_shares_never_with_set_uid_files_or_devices(id);
    a_read_lend_is_read_only_whatever_its_modes(id, &src);
    let made = a_write_lend_is_shared_with_the_host_as_shells(id, &out_dir);

    let (ok, o, e) = warden(&["machine", "stop", id]);
    assert!(ok, "stop: {o}{e}");
    let (_, console, _) = warden(&["machine", "logs", id]);
    assert!(console.contains("reboot: Power down"), "{console}");
    let disk = format!("/var/lib/warden/machines/{id}/vm/data.ext4");
    let seen = Command::new("debugfs")
        .args(["-R", "cat /main-env", &disk])
        .output()
        .unwrap();
    assert_eq!(text(&seen.stdout), "hello-vm", "{}", text(&seen.stderr));
    let (ok, o, e) = warden(&["machine", "rm", id, "--volumes"]);
    assert!(ok, "rm: {o}{e}");
    // The host's folders stay, with what was written in them.
    assert!(made.exists() && src.join("hello").exists());
}

/// `warden machine exec ID --shell LINE`.
fn exec(id: &str, line: &str) -> (bool, String, String) {
    warden(&["machine", "exec", id, "--shell", line])
}

/// `m` defined as a VM of 2 CPUs and 1024 MiB, with `env`, lending `src`
/// to read (a file in it open to anyone by its modes) and `out` to write
/// (shell's, with a folder of root's in it); the two folders.
fn define_a_vm_lending_two_folders(m: &TestMachine) -> (PathBuf, PathBuf) {
    let src = m.dir.path().join("src");
    let out_dir = m.dir.path().join("out");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("hello"), "from-host\n").unwrap();
    // Writable by anyone by its modes: only the read-only share stops it.
    std::fs::write(src.join("open.txt"), "kept\n").unwrap();
    std::fs::set_permissions(src.join("open.txt"), std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::create_dir(&out_dir).unwrap();
    let shell = Some(nix::unistd::Uid::from_raw(2001));
    let shell_group = Some(nix::unistd::Gid::from_raw(2001));
    nix::unistd::chown(&out_dir, shell, shell_group).unwrap();
    // root's, 0755, inside the writable folder: not shell's to write.
    std::fs::create_dir(out_dir.join("roots")).unwrap();
    m.define(serde_json::json!({
        "image": "localhost/warden-machine:latest", "kind": "vm",
        "cpus": 2, "memory": "1024m",
        // The main process gets `env`, as a container's does.
        "env": {"GREETING": "hello-vm"},
        "command": ["sh", "-c", "printf %s \"$GREETING\" > /home/runtime/data/main-env; exec sleep 100000"],
        "lend": [
            {"host": src, "at": "/lent/src", "mode": "read"},
            {"host": out_dir, "at": "/home/me/out", "mode": "write"},
        ],
    }));
    (src, out_dir)
}

/// The size: the guest's CPUs and memory are the definition's.
fn the_guest_has_the_size_defined(id: &str) {
    let (_, cpus, err) = exec(id, "nproc");
    assert_eq!(cpus.trim(), "2", "{err}");
    let (_, meminfo, err) = exec(id, "grep MemTotal /proc/meminfo");
    let kib: u64 = meminfo
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{meminfo}{err}"));
    assert!(
        (900 << 10..=1 << 20).contains(&kib),
        "MemTotal {kib} kB for 1024 MiB"
    );
}

/// Mounted as 9p shares, read-only where lent to read, never with
/// set-uid files or devices.
fn the_lends_are_9p_shares_never_with_set_uid_files_or_devices(id: &str) {
    let (_, mounts, _) = exec(id, "grep ' 9p ' /proc/mounts");
    let line = |at: &str| {
        mounts
            .lines()
            .find(|l| l.split(' ').nth(1) == Some(at))
            .unwrap_or_else(|| panic!("{at} not mounted: {mounts}"))
            .to_string()
    };
    let src_line = line("/lent/src");
    assert!(src_line.contains(" ro,nosuid,nodev"), "{src_line}");
    let out_line = line("/home/me/out");
    assert!(out_line.contains(" rw,nosuid,nodev"), "{out_line}");
}

/// Read lend: readable, not writable even where its modes allow.
fn a_read_lend_is_read_only_whatever_its_modes(id: &str, src: &Path) {
    let (ok, text_read, err) = exec(id, "cat /lent/src/hello");
    assert!(ok, "{err}");
    assert_eq!(text_read, "from-host\n");
    for attempt in [
        "echo changed >> /lent/src/open.txt",
        "touch /lent/src/new",
        "rm /lent/src/hello",
    ] {
        let (ok, o, e) = exec(id, attempt);
        assert!(!ok, "{attempt}: {o}{e}");
        assert!(e.contains("Read-only file system"), "{attempt}: {e}");
    }
    assert_eq!(
        std::fs::read_to_string(src.join("open.txt")).unwrap(),
        "kept\n"
    );
    assert!(!src.join("new").exists());
    assert!(src.join("hello").exists());
}

/// Write lend: what shell writes appears on the host, shell's; what the
/// host writes is seen inside; the folder's own modes hold. Returns the
/// file shell made, as the host sees it.
fn a_write_lend_is_shared_with_the_host_as_shells(id: &str, out_dir: &Path) -> PathBuf {
    let (ok, who, err) = exec(id, "echo from-shell > /home/me/out/made && id -u");
    assert!(ok, "{err}");
    assert_eq!(who.trim(), "2001");
    let made = out_dir.join("made");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "from-shell\n");
    let meta = std::fs::metadata(&made).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (2001, 2001));
    // A file the host writes is seen inside at once.
    std::fs::write(out_dir.join("from-host"), "host-side\n").unwrap();
    let (_, seen, err) = exec(id, "cat /home/me/out/from-host");
    assert_eq!(seen, "host-side\n", "{err}");
    // The folder's own modes hold: root's folder is not shell's to write.
    let (ok, o, e) = exec(id, "touch /home/me/out/roots/x");
    assert!(!ok, "{o}{e}");
    assert!(e.contains("Permission denied"), "{e}");
    assert!(!out_dir.join("roots/x").exists());
    made
}
