//! A VM booted by the tests themselves (tests/common/vm.rs): the AF_VSOCK
//! guard holds, one VM serves over vsock, confines, refuses a wrong key and
//! powers off cleanly, a VM whose warden dies is seen to, and a container's
//! PID 1 without /proc is not taken for a VM.

use super::run;
use crate::common;
use crate::common::vm::{self, Options, Vm};
use std::process::Command;
use std::time::{Duration, Instant};
use warden::wire::client::{Client, ClientError};
use warden::wire::{ErrorCode, Event, Request, RunRequest, Status};

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The guard holds: a child made under it (as QEMU and vhost-device-vsock
/// are) cannot make an AF_VSOCK socket. The child checks that it runs under
/// seccomp before it tries, so the attempt is only ever made guarded.
#[test]
fn af_vsock_is_refused_under_the_guard() {
    vm::guard();
    assert!(vm::guard_active());
    let probe = r#"
import socket, sys
status = open("/proc/self/status").read()
if "Seccomp:\t2" not in status:
    print("UNGUARDED: not trying"); sys.exit(3)
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    print("CREATED")
except OSError as e:
    print("refused", e.errno)
"#;
    let out = Command::new("python3")
        .args(["-c", probe])
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        format!("refused {}", libc::EAFNOSUPPORT),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One VM for the whole path: boot, commands as shell over vsock, a wrong
/// key refused and audited, the confinement and the firewall holding inside,
/// the figures the benchmarks want, and a clean power-off.
#[test]
fn vm_boots_serves_over_vsock_confines_and_powers_off() {
    vm::guard();
    let Some(kit) = vm::kit("vm_boots_serves_over_vsock_confines_and_powers_off") else {
        return;
    };
    let _one = vm::one_at_a_time();
    let mut vm = Vm::launch(&kit, Options::default());
    let ready = vm.wait_ready(Duration::from_secs(90));
    let mut client = vm.client();
    let newest = *warden::wire::SUPPORTED_VERSIONS.last().unwrap();
    assert_eq!(client.version, newest, "{}", client.server);

    commands_run_as_shell_on_the_machine_warden_booted(&mut client);

    eprintln!(
        "vm test: status ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    let status = every_layer_that_matters_holds(&mut client);

    eprintln!(
        "vm test: proc+firewall ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    proc_and_the_network_hold_for_shell(&mut client);

    eprintln!(
        "vm test: wrong key ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    let refusal = a_wrong_key_is_refused_slowly(&vm);

    eprintln!(
        "vm test: figures ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    print_the_figures(&vm, &mut client, ready, &status, refusal);

    eprintln!(
        "vm test: shutdown ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    the_owner_shuts_it_down(&mut vm, &mut client);
    the_volumes_are_clean_and_the_audit_log_whole(&vm);
}

/// Commands run as shell, on the machine warden booted.
fn commands_run_as_shell_on_the_machine_warden_booted(client: &mut Client) {
    let out = client
        .run(run(
            "id -un; uname -n; ls /proc | grep -x 1 || echo no-pid-1",
        ))
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.exit.status,
        0,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"shell"), "{text}");
    assert_eq!(lines.get(1), Some(&"warden-test-vm"), "{text}");
    assert_eq!(lines.get(2), Some(&"no-pid-1"), "shell sees PID 1: {text}");
}

/// warden's own account of itself: PID 1, every layer that matters here
/// holding (a VM can always enforce the firewall and hide /proc).
fn every_layer_that_matters_holds(client: &mut Client) -> Status {
    let status = client.status().unwrap();
    assert!(status.pid1);
    assert!(status.boot_ms > 0.0);
    for layer in [
        "identity",
        "capabilities",
        "no_new_privs",
        "landlock",
        "seccomp",
        "proc_hidden",
        "firewall",
    ] {
        let state = common::layer(&status, layer);
        assert!(state.holds, "{layer} does not hold: {}", state.detail);
    }
    assert_eq!(status.refusing, None);
    status
}

/// ... and proven by commands: /proc hides the machine's processes;
/// shell may make no UDP or ICMP socket at all (seccomp), and the
/// firewall lets it reach nothing on loopback but the proxy (Landlock
/// refuses it a TCP listener too).
fn proc_and_the_network_hold_for_shell(client: &mut Client) {
    let out = client.run(run("cat /proc/1/environ")).unwrap();
    assert_ne!(out.exit.status, 0);
    // No distribution init sets the link protections in a VM: warden did.
    let knobs = "cat /proc/sys/fs/protected_symlinks /proc/sys/fs/protected_hardlinks \
                 /proc/sys/fs/protected_fifos /proc/sys/fs/protected_regular";
    let out = client.run(run(knobs)).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1\n1\n1\n1\n",
        "{out:?}"
    );
    let probe = r#"python3 -c '
import socket
for kind, proto in (("udp", 0), ("icmp", socket.IPPROTO_ICMP)):
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM, proto); print(kind, "SOCKET MADE")
    except OSError as e:
        print(kind, "socket refused", e.errno)
t = socket.socket()
try:
    t.bind(("127.0.0.1", 0)); t.listen(); port = t.getsockname()[1]
except OSError as e:
    print("tcp bind refused", e.errno); port = 1
try:
    socket.create_connection(("127.0.0.1", port), timeout=2); print("TCP CONNECTED")
except OSError as e:
    print("tcp refused", e.errno)
'"#;
    let out = client.run(run(probe)).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("udp socket refused 1"), "{text}");
    assert!(text.contains("icmp socket refused 1"), "{text}");
    assert!(text.contains("tcp refused"), "{text}");
    assert!(
        !text.contains("MADE") && !text.contains("CONNECTED"),
        "{text}"
    );
}

/// A wrong key is refused, after a delay, and audited (checked by
/// `the_volumes_are_clean_and_the_audit_log_whole`, on the data disk, once
/// the VM is off). Returns how long the refusal took.
fn a_wrong_key_is_refused_slowly(vm: &Vm) -> Duration {
    let wrong = "0".repeat(48);
    let tried = Instant::now();
    match vm.connect_with(&wrong) {
        Err(ClientError::Warden { code, message }) => {
            assert_eq!(code, ErrorCode::Refused, "{message}");
            assert!(message.contains("wrong key"), "{message}");
        }
        Err(other) => panic!("wrong key: {other}"),
        Ok(_) => panic!("a wrong key was let in"),
    }
    let refusal = tried.elapsed();
    assert!(
        refusal >= Duration::from_millis(450),
        "refused in {refusal:?}: not slowed"
    );
    refusal
}

/// Figures: `true` round trips over vsock on one connection, a new
/// connection with its first command, and output throughput; printed with
/// the launch's `ready`, warden's boot time and the wrong key's `refusal`.
fn print_the_figures(
    vm: &Vm,
    client: &mut Client,
    ready: Duration,
    status: &Status,
    refusal: Duration,
) {
    let mut round_trips = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let out = client
            .run(RunRequest {
                argv: Some(vec!["true".into()]),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(out.exit.status, 0);
        round_trips.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut fresh = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut c = vm.client();
        assert_eq!(c.run(run("true")).unwrap().exit.status, 0);
        fresh.push(t.elapsed().as_secs_f64() * 1e3);
    }
    eprintln!(
        "vm test: throughput ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    let bytes: u64 = 64 << 20;
    let t = Instant::now();
    let mut got = 0u64;
    let report = client
        .run_streaming(run(&format!("head -c {bytes} /dev/zero")), |_, chunk| {
            got += chunk.len() as u64
        })
        .unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!((report.status, got), (0, bytes));
    println!(
        "VM figures: launch to API ready over vsock {:.0} ms; warden boot_ms {:.0}; \
         exec true round trip median {:.1} ms (one connection), {:.1} ms (new connection); \
         output {:.0} MiB/s; wrong key refused in {:.0} ms",
        ready.as_secs_f64() * 1e3,
        status.boot_ms,
        median(round_trips),
        median(fresh),
        got as f64 / secs / (1 << 20) as f64,
        refusal.as_secs_f64() * 1e3,
    );
}

/// The owner shuts the machine down over vsock: warden stops, syncs,
/// unmounts and powers the VM off; QEMU exits; no panic.
fn the_owner_shuts_it_down(vm: &mut Vm, client: &mut Client) {
    client.send(0, &Request::Shutdown).unwrap();
    match client.receive() {
        Ok(warden::wire::client::Message::Event(0, Event::ShuttingDown)) => {}
        other => panic!("shutdown answered {other:?}"),
    }
    let exit = vm.wait_exit(Duration::from_secs(60));
    let console = vm.console();
    assert!(
        exit.is_some_and(|s| s.success()),
        "QEMU did not exit cleanly: {exit:?}\n{console}"
    );
    assert!(console.contains("reboot: Power down"), "{console}");
    assert!(!console.contains("Kernel panic"), "{console}");
    assert!(!console.contains("Attempted to kill init"), "{console}");
}

/// The volumes were unmounted before the power went: clean file systems,
/// and the audit log complete, to its shutdown line, and unbroken.
fn the_volumes_are_clean_and_the_audit_log_whole(vm: &Vm) {
    for volume in ["data.ext4", "workspace.ext4"] {
        let (clean, text) = vm.volume_clean(volume);
        assert!(clean, "{volume}: {text}");
    }
    let log = vm.data_file("/audit/warden.jsonl");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["kind"].as_str()).collect();
    the_boot_line_says_what_the_vm_loaded(&lines);
    let refused = lines
        .iter()
        .find(|l| l["kind"] == "connection_refused")
        .expect("the wrong key is audited");
    assert_eq!(refused["via"], "vsock", "{refused}");
    assert_eq!(refused["reason"], "wrong key", "{refused}");
    assert!(!log.contains(&vm.key), "the key reached the audit log");
    for kind in ["shutdown_requested", "stopped", "shutdown"] {
        assert!(kinds.contains(&kind), "no {kind} line: {kinds:?}");
    }
    let copy = vm.dir.path().join("warden.jsonl");
    std::fs::write(&copy, &log).unwrap();
    let verified = Command::new(common::warden_bin())
        .args(["audit", "verify"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        verified.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
}

/// The boot line: PID 1, the VM's vsock port and root disk, the modules it
/// loaded and its own steps timed.
fn the_boot_line_says_what_the_vm_loaded(lines: &[serde_json::Value]) {
    let boot = lines
        .iter()
        .find(|l| l["kind"] == "boot")
        .expect("boot line");
    assert_eq!(boot["pid1"], true);
    assert_eq!(boot["vm"]["vsock_port"], vm::PORT);
    assert!(
        boot["vm"]["root"].as_str().unwrap().starts_with("/dev/vda"),
        "{boot}"
    );
    // The boot's modules, and not the lent folders' (this VM lends none).
    let modules: Vec<&str> = boot["vm"]["modules"]
        .as_array()
        .expect("vm.modules")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    for needed in [
        "ext4",
        "virtio_blk",
        "vmw_vsock_virtio_transport",
        "nf_tables",
    ] {
        assert!(modules.contains(&needed), "{needed} not in {modules:?}");
    }
    assert!(!modules.iter().any(|m| m.starts_with("9p")), "{modules:?}");
    // A VM's own steps are timed apart on the boot line.
    let phases: Vec<&str> = boot["boot_phases_ms"]
        .as_array()
        .expect("boot_phases_ms")
        .iter()
        .filter_map(|p| p["phase"].as_str())
        .collect();
    for step in ["vm_modules", "vm_root", "probe"] {
        assert!(phases.contains(&step), "{step} not in {phases:?}");
    }
}

/// PID 1 dying ends the VM where the host sees it: the kernel panics
/// ("Attempted to kill init"), panic=-1 reboots at once and -no-reboot
/// makes QEMU exit. Here warden crashes on purpose once it is ready
/// (`warden.fault=abort`, a command-line switch only the host can set).
#[test]
fn vm_whose_warden_dies_is_detected() {
    vm::guard();
    let Some(kit) = vm::kit("vm_whose_warden_dies_is_detected") else {
        return;
    };
    let _one = vm::one_at_a_time();
    let mut vm = Vm::launch(
        &kit,
        Options {
            cmdline: vec!["warden.fault=abort".into()],
            ..Default::default()
        },
    );
    let exit = vm.wait_exit(Duration::from_secs(90));
    let console = vm.console();
    assert!(
        exit.is_some(),
        "QEMU still runs after warden died\n{console}"
    );
    assert!(console.contains("warden.fault=abort"), "{console}");
    assert!(
        console.contains("Kernel panic - not syncing: Attempted to kill init"),
        "{console}"
    );
    // The host's way in is gone with it.
    assert!(vm.connect_with(&vm.key).is_err());
}

/// A container's PID 1 with no /proc looks like a VM's at first; warden
/// finds out from the PID namespace and stops there, touching nothing of a
/// machine's (no disks, no modules, no vsock, no power).
#[test]
fn pid1_of_a_namespace_without_proc_is_not_taken_for_a_vm() {
    vm::guard();
    if !common::privileged("pid1_of_a_namespace_without_proc_is_not_taken_for_a_vm") {
        return;
    }
    let out = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount",
            "--propagation",
            "private",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "umount -l /proc && exec \"$0\" init",
            common::warden_bin(),
        ])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("not a VM"), "{log}");
    assert!(!log.contains("vsock"), "{log}");
}
