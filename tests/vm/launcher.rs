//! The launcher's VM backend end to end: `warden machine up` makes a VM
//! from a definition, runs, stops and removes it, and refuses an image
//! that lacks what the definition requires.

use super::warden;
use crate::common;
use crate::common::text;
use crate::common::vm;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use warden::wire::client::ClientError;

/// The key the runtime is given, which no command of shell's may see.
const CANARY: &str = "vm-canary-4471";

/// The launcher's VM backend end to end: `warden machine up` makes a VM
/// from a definition, hands the runtime its key and nothing to shell, runs
/// commands over vsock, keeps an unchanged VM, refuses a wrong key, stops
/// it by powering it off, reads its audit log off its disk and leaves
/// nothing behind.
#[test]
fn the_launcher_makes_runs_stops_and_removes_a_vm() {
    vm::guard();
    let test = "the_launcher_makes_runs_stops_and_removes_a_vm";
    if !common::privileged(test) {
        return;
    }
    if vm::kit(test).is_none() {
        return;
    }
    let _one = vm::one_at_a_time();
    let m = common::machine::TestMachine::defined(
        "vm",
        serde_json::json!({
            "image": "localhost/warden-machine:latest", "kind": "vm",
            "keys": ["API_TOKEN"], "hosts": ["allowed.example"],
            // The agent's own process: it sees its key, says it is ready
            // (up waits for it), and runs on.
            "command": ["sh", "-c", "printf %s \"$API_TOKEN\" | sha256sum > /home/runtime/data/main-saw; sleep 1; /sbin/warden ready; exec sleep 100000"],
            "ready": "runtime",
            "requires": ["python3", "git"],
        }),
    );
    let id = &m.id;
    std::fs::write(m.dir.path().join(".env"), format!("API_TOKEN={CANARY}\n")).unwrap();
    let file = m.definition();

    let started = Instant::now();
    let (ok, out, err) = warden(&["machine", "up", file.to_str().unwrap()]);
    assert!(ok, "up: {out}{err}");
    assert!(out.contains("ready: runtime"), "up: {out}{err}");
    eprintln!("launcher VM: up {:.1} s", started.elapsed().as_secs_f64());
    shell_runs_and_never_sees_the_key(id);
    the_main_process_runs_and_an_unchanged_vm_is_kept(id, &file);
    a_wrong_key_is_refused_over_vsock_slowly(id);
    a_stop_powers_the_vm_off(id);
    the_data_disk_and_the_audit_log_after_the_stop(id);
    down_keeps_the_disks_and_up_finds_them(id, &file);

    let (ok, out, err) = warden(&["machine", "rm", id, "--volumes"]);
    assert!(ok, "rm: {out}{err}");
    assert!(!std::path::Path::new(&format!("/var/lib/warden/machines/{id}")).exists());

    an_image_without_what_is_required_is_not_left_running();
}

/// `warden machine exec ID ARGV`.
fn exec(id: &str, argv: &[&str]) -> (bool, String, String) {
    let mut args = vec!["machine", "exec", id];
    args.extend(argv);
    warden(&args)
}

/// Commands run as shell, in the folder asked; the key reached the
/// runtime's .env and no command of shell's sees it.
fn shell_runs_and_never_sees_the_key(id: &str) {
    let (_, out, err) = exec(id, &["--", "id", "-un"]);
    assert_eq!(out.trim(), "shell", "{err}");
    let (_, out, err) = exec(
        id,
        &[
            "--folder",
            "build",
            "--shell",
            "echo built > f && cat f && pwd",
        ],
    );
    assert_eq!(out, "built\n/home/runtime/workspace/build\n", "{err}");
    // The key reached the runtime's .env (warden said so at boot), and
    // no command of shell's sees it.
    let (_, console, _) = warden(&["machine", "logs", id]);
    assert!(
        console.contains("the runtime's keys were handed over"),
        "{console}"
    );
    let (ok, out, err) = exec(
        id,
        &[
            "--shell",
            "cat /home/runtime/.env; env; cat /etc/warden/runtime.env",
        ],
    );
    assert!(!ok, "{out}{err}");
    assert!(!out.contains(CANARY) && !err.contains(CANARY), "{out}{err}");
}

/// Status says the layers hold and the main process runs; `up` again
/// keeps the unchanged VM, which ps lists as running.
fn the_main_process_runs_and_an_unchanged_vm_is_kept(id: &str, file: &Path) {
    let (ok, status, err) = warden(&["machine", "status", id]);
    assert!(ok, "{err}");
    // The main process runs, as runtime, with the key in its environment.
    let main = warden::host::machine::status(id).unwrap().main;
    let main = main.expect("a main process");
    assert!(main.pid > 0 && main.argv[0] == "sh", "{main:?}");
    for layer in ["firewall", "proc_hidden", "landlock", "seccomp"] {
        assert!(
            status
                .lines()
                .any(|l| l.starts_with(&format!("layer {layer} ")) && l.contains(" holds ")),
            "{layer}: {status}"
        );
    }
    let (_, out, _) = warden(&["machine", "up", file.to_str().unwrap()]);
    assert!(out.contains("unchanged, kept"), "{out}");
    let (_, out, _) = warden(&["machine", "ps"]);
    let row = common::machine::ps_row(&out, id).expect("a row in ps");
    assert_eq!(&row[1..5], ["vm", "qemu", "0", "running"], "{out}");
}

/// A wrong key is refused over vsock, slowly.
fn a_wrong_key_is_refused_over_vsock_slowly(id: &str) {
    let socket = std::path::PathBuf::from(format!("/var/lib/warden/machines/{id}/vm/vsock.sock"));
    let refused = Instant::now();
    let wrong = warden::wire::client::Client::connect_hybrid_vsock(&socket, vm::PORT, "0000", None);
    assert!(
        matches!(wrong, Err(ClientError::Warden { .. })),
        "{:?}",
        wrong.err()
    );
    assert!(refused.elapsed() >= Duration::from_millis(400));
}

/// `machine stop` powers the VM off cleanly; ps says it is stopped.
fn a_stop_powers_the_vm_off(id: &str) {
    let stopping = Instant::now();
    let (ok, out, err) = warden(&["machine", "stop", id]);
    assert!(ok, "stop: {out}{err}");
    eprintln!(
        "launcher VM: stop {:.1} s",
        stopping.elapsed().as_secs_f64()
    );
    let (_, console, _) = warden(&["machine", "logs", id]);
    assert!(console.contains("reboot: Power down"), "{console}");
    assert!(!console.contains("Kernel panic"), "{console}");
    let (_, out, _) = warden(&["machine", "ps"]);
    let row = common::machine::ps_row(&out, id).expect("a row in ps");
    assert_eq!(
        &row[1..7],
        [
            "vm",
            "qemu",
            "0",
            "stopped",
            "-",
            "localhost/warden-machine:latest"
        ],
        "{out}"
    );
}

/// What the main process wrote on the data disk: the digest of the key
/// it was given. The audit log, read off the disk: whole, the wrong key's
/// refusal in it, the key not.
fn the_data_disk_and_the_audit_log_after_the_stop(id: &str) {
    let disk = format!("/var/lib/warden/machines/{id}/vm/data.ext4");
    let saw = Command::new("debugfs")
        .args(["-R", "cat /main-saw", &disk])
        .output()
        .unwrap();
    let want = format!(
        "{:x}  -",
        <sha2::Sha256 as sha2::Digest>::digest(CANARY.as_bytes())
    );
    assert_eq!(text(&saw.stdout).trim(), want, "{}", text(&saw.stderr));
    let (ok, audit, err) = warden(&["machine", "audit", id]);
    assert!(ok, "audit: {audit}{err}");
    assert!(audit.contains("chain intact"), "{audit}");
    assert!(audit.contains("connection_refused"), "{audit}");
    assert!(!audit.contains(CANARY), "{audit}");
}

/// Taken down: a VM has no container, so its files go (the initramfs
/// that holds the keys too) and its disks stay; ps lists it no more,
/// and its audit log is still read off its data disk.
fn down_keeps_the_disks_and_up_finds_them(id: &str, file: &Path) {
    let (ok, out, err) = warden(&["machine", "down", id]);
    assert!(ok, "down: {out}{err}");
    assert!(
        out.contains(&format!("machine {id} down (VM): was stopped")),
        "{out}"
    );
    let vm_dir = std::path::PathBuf::from(format!("/var/lib/warden/machines/{id}/vm"));
    assert!(vm_dir.join("data.ext4").exists() && vm_dir.join("workspace.ext4").exists());
    assert!(
        !vm_dir.join("initrd.gz").exists(),
        "the keys' initramfs is gone"
    );
    let (_, out, _) = warden(&["machine", "ps"]);
    assert!(common::machine::ps_row(&out, id).is_none(), "{out}");
    let (ok, audit, err) = warden(&["machine", "audit", id]);
    assert!(
        ok && audit.contains("chain intact"),
        "audit after down: {audit}{err}"
    );
    // Up again: a new VM on the same disks finds the workspace's files,
    // and its audit log goes on in one chain, read through its warden.
    let (ok, out, err) = warden(&["machine", "up", file.to_str().unwrap()]);
    assert!(ok, "up after down: {out}{err}");
    let (_, out, err) = exec(id, &["--folder", "build", "--", "cat", "f"]);
    assert_eq!(out, "built\n", "{err}");
    let (ok, audit, err) = warden(&["machine", "audit", id]);
    assert!(
        ok && audit.contains("chain intact")
            && audit.contains("read through the machine's warden: lines 1 to"),
        "audit after up: {audit}{err}"
    );
}

/// An image without what the definition requires: `up` says which, and
/// the VM is not left running.
fn an_image_without_what_is_required_is_not_left_running() {
    let lacking = common::machine::TestMachine::defined(
        "vm-req",
        serde_json::json!({
            "image": "localhost/warden-machine:latest", "kind": "vm",
            "requires": ["python3", "no-such-tool-7"],
        }),
    );
    let file = lacking.definition();
    let (ok, out, err) = warden(&["machine", "up", file.to_str().unwrap()]);
    assert!(!ok, "{out}{err}");
    assert!(
        err.contains("requires: the image has no no-such-tool-7"),
        "{out}{err}"
    );
    let (_, out, _) = warden(&["machine", "ps"]);
    let row = common::machine::ps_row(&out, &lacking.id);
    assert!(row.is_none_or(|r| r[4] != "running"), "{out}");
}
