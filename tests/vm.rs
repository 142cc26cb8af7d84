//! warden as PID 1 of a micro-VM, under QEMU's software emulation: it boots
//! from the initramfs onto its root disk, serves the API over vsock with
//! the machine's key, confines commands as it does in a container, and
//! powers the VM off at the end. The host reaches the guest's vsock only
//! through vhost-device-vsock's unix socket, and every test runs under the
//! AF_VSOCK guard (tests/common/vm.rs): this host's own vsock is never
//! touched.

mod common;

use common::text;
use common::vm::{self, Options, Vm};
use std::process::Command;
use std::time::{Duration, Instant};
use warden::wire::client::ClientError;
use warden::wire::{ErrorCode, Event, Request, RunRequest};

fn run(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.to_string()),
        ..Default::default()
    }
}

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

    // Commands run as shell, on the machine warden booted.
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

    eprintln!(
        "vm test: status ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    // warden's own account of itself: PID 1, every layer that matters here
    // holding (a VM can always enforce the firewall and hide /proc).
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
        let state = status
            .layers
            .iter()
            .find(|l| l.layer == layer)
            .unwrap_or_else(|| panic!("no layer {layer} in {:?}", status.layers));
        assert!(state.holds, "{layer} does not hold: {}", state.detail);
    }
    assert_eq!(status.refusing, None);

    eprintln!(
        "vm test: proc+firewall ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    // ... and proven by commands: /proc hides the machine's processes;
    // shell may make no UDP or ICMP socket at all (seccomp), and the
    // firewall lets it reach nothing on loopback but the proxy (Landlock
    // refuses it a TCP listener too).
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

    eprintln!(
        "vm test: wrong key ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    // A wrong key is refused, after a delay, and audited (checked below,
    // on the data disk, once the VM is off).
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

    eprintln!(
        "vm test: figures ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    // Figures: `true` round trips over vsock on one connection, a new
    // connection with its first command, and output throughput.
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

    eprintln!(
        "vm test: shutdown ({:.1} s)",
        vm.launched.elapsed().as_secs_f64()
    );
    // The owner shuts the machine down over vsock: warden stops, syncs,
    // unmounts and powers the VM off; QEMU exits; no panic.
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

    // The volumes were unmounted before the power went: clean file systems,
    // and the audit log complete, to its shutdown line, and unbroken.
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

/// In a VM every command runs in a cgroup of its own: the layer is
/// proven at boot, whatever a command leaves behind ends with it by
/// cgroup.kill, its memory bound holds against memfd and many processes
/// (the whole command is killed and the exit says why, while warden and
/// the machine go on), and its process bound counts in the cgroup.
#[test]
fn in_a_vm_every_command_has_a_cgroup_that_holds() {
    vm::guard();
    let Some(kit) = vm::kit("in_a_vm_every_command_has_a_cgroup_that_holds") else {
        return;
    };
    let _one = vm::one_at_a_time();
    let mut vm = Vm::launch(&kit, Options::default());
    vm.wait_ready(Duration::from_secs(90));
    let mut client = vm.client();
    let status = client.status().unwrap();
    let layer = |name: &str| {
        status
            .layers
            .iter()
            .find(|l| l.layer == name)
            .unwrap_or_else(|| panic!("no layer {name} in {:?}", status.layers))
            .clone()
    };
    let cgroups = layer("cgroups");
    eprintln!("cgroups: {}", cgroups.detail);
    assert!(cgroups.holds, "{}", cgroups.detail);
    assert!(
        cgroups.detail.contains("could not fork"),
        "{}",
        cgroups.detail
    );
    let lifetime = layer("lifetime");
    assert!(
        lifetime.detail.starts_with("cgroup.kill"),
        "{}",
        lifetime.detail
    );

    // Escapes of every kind, then a look, as shell, for what is left.
    let escapes = "setsid sh -c 'sleep 771 &'; (sleep 772 &); nohup sleep 773 >/dev/null 2>&1 & \
                   bash -c 'sleep 774 & disown'; \
                   python3 -c 'import os; os.fork() or (os.setsid(), os.fork() or os.execvp(\"sleep\", [\"sleep\", \"775\"]))'; \
                   echo started";
    let out = client.run(run(escapes)).unwrap();
    assert_eq!(
        (out.exit.status, text(&out.stdout)),
        (0, "started\n".into()),
        "{out:?}"
    );
    assert!(out.exit.limit.is_none(), "{out:?}");
    let look = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 77' || true";
    let out = client.run(run(look)).unwrap();
    assert_eq!(text(&out.stdout).trim(), "0", "left alive: {out:?}");

    // A memory bound of 64 MiB against a memfd of 200 MiB and four
    // processes of 40 MiB: the command is killed as a whole, and says why.
    let mut bomb = run(
        "for i in 1 2 3 4; do python3 -c 'b = bytearray(40 << 20); import time; time.sleep(30)' & done; \
         python3 -c 'import os; fd = os.memfd_create(\"x\"); [os.write(fd, bytes(1 << 20)) for _ in range(200)]; print(\"NOT STOPPED\")'; wait",
    );
    bomb.limits = Some(warden::wire::Limits {
        memory_bytes: Some(64 << 20),
        ..Default::default()
    });
    let out = client.run(bomb).unwrap();
    eprintln!("memory bomb: {:?}", out.exit);
    assert_eq!(out.exit.limit.as_deref(), Some("memory"), "{out:?}");
    assert!(!text(&out.stdout).contains("NOT STOPPED"), "{out:?}");
    let after = client.run(run("echo alive")).unwrap();
    assert_eq!(text(&after.stdout), "alive\n", "{after:?}");
    assert!(client.status().unwrap().pid1);

    // A process bound of 8: forks past it fail, counted by the cgroup.
    let mut forks = run("for i in $(seq 20); do sleep 3 & done; wait");
    forks.limits = Some(warden::wire::Limits {
        processes: Some(8),
        ..Default::default()
    });
    let out = client.run(forks).unwrap();
    eprintln!(
        "forks past 8: {:?} {}",
        out.exit,
        text(&out.stderr).lines().next().unwrap_or("")
    );
    assert_ne!(out.exit.status, 0, "{out:?}");
    assert_eq!(out.exit.limit.as_deref(), Some("processes"), "{out:?}");

    // The audit log says why (read once the VM is off).
    client.send(0, &Request::Shutdown).unwrap();
    let _ = client.receive();
    assert!(vm
        .wait_exit(Duration::from_secs(60))
        .is_some_and(|s| s.success()));
    let log = vm.data_file("/audit/warden.jsonl");
    let ends: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["kind"] == "command_end")
        .collect();
    for limit in ["memory", "processes"] {
        assert!(
            ends.iter().any(|e| e["limit"] == limit),
            "no command_end with limit {limit}: {ends:?}"
        );
    }
    // The first command was the escapes. Those still in its process group
    // die with it (the group kill at its exit); the two that left it
    // (setsid, the daemon's double fork) were found in its cgroup.
    eprintln!("escapes' end: {}", ends[0]);
    assert!(
        ends[0]["left_behind_killed"].as_u64() >= Some(2),
        "the escapes' end is not audited: {}",
        ends[0]
    );
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

/// `warden ARGS` from the host (the guard inherited), its output shown
/// when an assertion fails.
fn warden(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::warden_bin())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

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
    const CANARY: &str = "vm-canary-4471";
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
    let exec = |argv: &[&str]| {
        let mut args = vec!["machine", "exec", id];
        args.extend(argv);
        warden(&args)
    };
    let (_, out, err) = exec(&["--", "id", "-un"]);
    assert_eq!(out.trim(), "shell", "{err}");
    let (_, out, err) = exec(&[
        "--folder",
        "build",
        "--shell",
        "echo built > f && cat f && pwd",
    ]);
    assert_eq!(out, "built\n/home/runtime/workspace/build\n", "{err}");
    // The key reached the runtime's .env (warden said so at boot), and
    // no command of shell's sees it.
    let (_, console, _) = warden(&["machine", "logs", id]);
    assert!(
        console.contains("the runtime's keys were handed over"),
        "{console}"
    );
    let (ok, out, err) = exec(&[
        "--shell",
        "cat /home/runtime/.env; env; cat /etc/warden/runtime.env",
    ]);
    assert!(!ok, "{out}{err}");
    assert!(!out.contains(CANARY) && !err.contains(CANARY), "{out}{err}");

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

    // A wrong key is refused over vsock, slowly.
    let socket = std::path::PathBuf::from(format!("/var/lib/warden/machines/{id}/vm/vsock.sock"));
    let refused = Instant::now();
    let wrong = warden::wire::client::Client::connect_hybrid_vsock(&socket, vm::PORT, "0000", None);
    assert!(
        matches!(wrong, Err(ClientError::Warden { .. })),
        "{:?}",
        wrong.err()
    );
    assert!(refused.elapsed() >= Duration::from_millis(400));

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

    // What the main process wrote on the data disk: the digest of the key
    // it was given.
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

    // Taken down: a VM has no container, so its files go (the initramfs
    // that holds the keys too) and its disks stay; ps lists it no more,
    // and its audit log is still read off its data disk.
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
    let (_, out, err) = exec(&["--folder", "build", "--", "cat", "f"]);
    assert_eq!(out, "built\n", "{err}");
    let (ok, audit, err) = warden(&["machine", "audit", id]);
    assert!(
        ok && audit.contains("chain intact")
            && audit.contains("read through the machine's warden: lines 1 to"),
        "audit after up: {audit}{err}"
    );

    let (ok, out, err) = warden(&["machine", "rm", id, "--volumes"]);
    assert!(ok, "rm: {out}{err}");
    assert!(!std::path::Path::new(&format!("/var/lib/warden/machines/{id}")).exists());

    // An image without what the definition requires: `up` says which, and
    // the VM is not left running.
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
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = common::machine::TestMachine::new("vm-lend");
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
    let id = &m.id;
    let (ok, up, err) = warden(&["machine", "up", m.definition().to_str().unwrap()]);
    assert!(ok, "up: {up}{err}");
    eprintln!("{up}");
    assert!(up.contains("acceleration: "), "{up}");
    assert!(up.contains("2 CPU, 1024 MiB; 2 lent folder(s)"), "{up}");
    let exec = |line: &str| warden(&["machine", "exec", id, "--shell", line]);

    // The size.
    let (_, cpus, err) = exec("nproc");
    assert_eq!(cpus.trim(), "2", "{err}");
    let (_, meminfo, err) = exec("grep MemTotal /proc/meminfo");
    let kib: u64 = meminfo
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{meminfo}{err}"));
    assert!(
        (900 << 10..=1 << 20).contains(&kib),
        "MemTotal {kib} kB for 1024 MiB"
    );

    // Mounted as 9p shares, read-only where lent to read, never with
    // set-uid files or devices.
    let (_, mounts, _) = exec("grep ' 9p ' /proc/mounts");
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

    // Read lend: readable, not writable even where its modes allow.
    let (ok, text_read, err) = exec("cat /lent/src/hello");
    assert!(ok, "{err}");
    assert_eq!(text_read, "from-host\n");
    for attempt in [
        "echo changed >> /lent/src/open.txt",
        "touch /lent/src/new",
        "rm /lent/src/hello",
    ] {
        let (ok, o, e) = exec(attempt);
        assert!(!ok, "{attempt}: {o}{e}");
        assert!(e.contains("Read-only file system"), "{attempt}: {e}");
    }
    assert_eq!(
        std::fs::read_to_string(src.join("open.txt")).unwrap(),
        "kept\n"
    );
    assert!(!src.join("new").exists());
    assert!(src.join("hello").exists());

    // Write lend: what shell writes appears on the host, shell's.
    let (ok, who, err) = exec("echo from-shell > /home/me/out/made && id -u");
    assert!(ok, "{err}");
    assert_eq!(who.trim(), "2001");
    let made = out_dir.join("made");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "from-shell\n");
    let meta = std::fs::metadata(&made).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (2001, 2001));
    // A file the host writes is seen inside at once.
    std::fs::write(out_dir.join("from-host"), "host-side\n").unwrap();
    let (_, seen, err) = exec("cat /home/me/out/from-host");
    assert_eq!(seen, "host-side\n", "{err}");
    // The folder's own modes hold: root's folder is not shell's to write.
    let (ok, o, e) = exec("touch /home/me/out/roots/x");
    assert!(!ok, "{o}{e}");
    assert!(e.contains("Permission denied"), "{e}");
    assert!(!out_dir.join("roots/x").exists());

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
