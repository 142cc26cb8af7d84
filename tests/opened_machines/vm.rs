//! A VM machine on the internet through the host's relay, its kit's
//! initramfs holding this build's warden: the credential is handed over
//! vsock.

use super::{
    assert_credential_arrived, assert_masked_echo, assert_no_secret,
    assert_status_shows_the_opened_host, merged, on_the_internet, opened, owners_files,
};
use crate::common;
use crate::common::internet::Internet;
use crate::common::machine::{show, TestMachine, IMAGE};
use crate::common::{text, warden_bin};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The private VM kit `vm_warden` runs with (`WARDEN_VM_CACHE`).
static VM_KIT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// `warden ARGS` with the private kit of `vm_kit_of_this_warden`.
fn vm_warden(args: &[&str]) -> std::process::Output {
    let kit = VM_KIT.get().expect("the private kit is made first");
    common::machine::warden_with(args, &[(warden::host::vm::KIT_VAR, kit)])
}

/// A kit of the shared one's kernel, volumes and root disks, whose
/// initramfs's /init is this build's warden: the shared kit's may be
/// older than opened hosts. Its initramfs is the shared one with a second
/// cpio archive appended holding `init` (the kernel unpacks both, the
/// later file replacing the earlier); the rest are links. Removed with
/// the guard.
fn vm_kit_of_this_warden(shared: &Path) -> common::machine::Gone {
    let kit = tempfile::Builder::new()
        .prefix("warden-kit-")
        .tempdir_in("/var/tmp")
        .unwrap()
        .keep();
    let gone = common::machine::Gone(kit.clone());
    for file in ["vmlinuz", "data.ext4", "workspace.ext4", "rootfs.ext4"] {
        let target = std::fs::canonicalize(shared.join(file)).unwrap();
        std::os::unix::fs::symlink(target, kit.join(file)).unwrap();
    }
    // The root disks made per image: linked, so none is made again (on a
    // fresh host no VM has made one yet: this VM makes its own).
    let images = kit.join("images");
    std::fs::create_dir(&images).unwrap();
    std::fs::set_permissions(&images, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let made = match std::fs::read_dir(shared.join("images")) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        listed => listed.unwrap().flatten().collect(),
    };
    for disk in made {
        if disk.file_name().to_string_lossy().ends_with(".ext4") {
            std::os::unix::fs::symlink(disk.path(), images.join(disk.file_name())).unwrap();
        }
    }
    // warden without its debug info: a smaller initramfs to unpack under
    // emulation.
    let stage = kit.join("stage");
    std::fs::create_dir(&stage).unwrap();
    let out = std::process::Command::new("strip")
        .args(["--strip-debug", "-o"])
        .arg(stage.join("init"))
        .arg(warden_bin())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("strip", &out));
    std::fs::copy(shared.join("initrd.gz"), kit.join("initrd.gz")).unwrap();
    let pack = format!(
        "cd '{}' && echo init | cpio -o -H newc -R 0:0 --quiet | gzip >> '{}'",
        stage.display(),
        kit.join("initrd.gz").display()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &pack])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("cpio", &out));
    std::fs::remove_dir_all(&stage).unwrap();
    gone
}

/// A VM machine on the internet through the host's relay (as in
/// vm_network.rs), one boot: the credential from the owner's `.env` is
/// handed to the guest's warden over vsock, its proxy adds it to shell's
/// plain curl (the machine's bundle trusted with no flag), the origin
/// receives it, and nothing the owner reads holds it.
#[test]
fn a_vm_adds_the_owners_credential_through_the_hosts_relay() {
    let test = "a_vm_adds_the_owners_credential_through_the_hosts_relay";
    let Some(_one) = common::vm::ready(test) else {
        return;
    };
    let started = Instant::now();
    let shared = common::vm::kit(test).unwrap().dir;
    let kit = vm_kit_of_this_warden(&shared);
    VM_KIT.get_or_init(|| kit.0.clone());
    assert_eq!(VM_KIT.get(), Some(&kit.0), "one private kit per run");
    let net = Internet::start();
    let id = common::machine::machine_id("vm-opened");
    let state = warden::host::machine::state_dir(&id);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let m = TestMachine::in_folder(id, dir, vm_warden, state);
    let ca = owners_files(m.dir.path(), &net);
    m.define(merged(
        merged(json!({"image": IMAGE, "kind": "vm"}), opened(&ca)),
        on_the_internet(&net),
    ));
    eprintln!("kit and internet: {:.2} s", started.elapsed().as_secs_f64());

    let out = m.up();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(said.contains("credentials handed to warden: 1"), "{said}");
    assert!(said.contains("the VM's relay listening"), "{said}");
    assert_no_secret("up", &said);

    let timed = Instant::now();
    let out = m.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "60",
        "https://allowed.test/echo",
    ]);
    eprintln!("curl in the VM: {:.2} s", timed.elapsed().as_secs_f64());
    assert_masked_echo("curl in the VM", &out, &|| {
        vm_warden(&["machine", "audit", &m.id])
    });
    assert_credential_arrived(&net, "/echo", 1);

    assert_status_shows_the_opened_host(&vm_warden, &m.id, 1);
    let out = vm_warden(&["machine", "audit", &m.id]);
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(said.contains("chain intact"), "{said}");
    assert!(said.contains("credentials_handed"), "{said}");
    assert_no_secret("audit", &said);
    let out = vm_warden(&["machine", "logs", &m.id]);
    assert_no_secret("logs", &(text(&out.stdout) + &text(&out.stderr)));
    eprintln!("{test}: {:.2} s", started.elapsed().as_secs_f64());
}
