//! The attack suite's attempts, shared by the machine in namespaces
//! (`tests/attacks.rs`) and the machines the launcher makes
//! (`tests/agent_machines.rs`): shell lines that must fail, and the
//! syscall-level attempts of `tests/attacks/attack.c`, each naming what it
//! tries. The targets (the runtime's home, its main process, warden's
//! socket...) are the machine's.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const ENV_CANARY: &str = "CANARY-ENV-5e2b9c";
pub const DATA_CANARY: &str = "CANARY-DATA-81f0aa";
pub const ROUTINE_CANARY: &str = "CANARY-ROUTINE-3c77";

/// What the attempts aim at, as the machine names them.
pub struct Targets {
    /// The runtime's home.
    pub home: String,
    /// The runtime's main process.
    pub main: String,
    pub audit: String,
    /// warden's machine config (world-readable, never granted).
    pub config: String,
    /// warden's own socket.
    pub socket: String,
    /// A TCP port listening on the machine's loopback.
    pub port: String,
    /// The runtime's abstract socket, where it has one.
    pub abstract_name: Option<String>,
}

/// The attack program, built with the machine's C compiler (for the main
/// process; commands get a copy in their own /tmp, see `hand_to_shell`).
pub fn build_attack_program() -> (tempfile::TempDir, PathBuf) {
    build_attack_program_with(&[])
}

/// As `build_attack_program`, with `flags` for the compiler too: `-static`
/// for a machine whose C library need not be this host's (an image).
pub fn build_attack_program_with(flags: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("warden-attack-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let bin = dir.path().join("attack");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/attacks/attack.c");
    let out = Command::new("cc")
        .args(["-O1", "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A setuid-root copy of id: it must gain nothing.
    let suid = dir.path().join("id-suid");
    std::fs::copy("/usr/bin/id", &suid).unwrap();
    std::fs::set_permissions(&suid, PermissionsExt::from_mode(0o4755)).unwrap();
    (dir, bin)
}

/// Shell lines that must fail (non-zero exit), leaking nothing.
pub fn shell_lines(t: &Targets) -> Vec<(&'static str, String)> {
    let (h, main, audit, config) = (&t.home, &t.main, &t.audit, &t.config);
    vec![
        ("read .env", format!("cat {h}/.env")),
        ("list data/", format!("ls {h}/data")),
        ("read a memory file", format!("cat {h}/data/memory.txt")),
        ("read the audit log", format!("cat {audit}")),
        (
            "write into routines",
            format!("echo x > {h}/workspace/routines/planted"),
        ),
        (
            "change a routine",
            format!("echo evil >> {h}/workspace/routines/agent.md"),
        ),
        (
            "delete a routine",
            format!("rm -f {h}/workspace/routines/agent.md"),
        ),
        (
            "rename routines",
            format!("mv {h}/workspace/routines {h}/workspace/r2"),
        ),
        (
            "delete the runtime's workspace folder",
            format!("rm -rf {h}/workspace/runtime-notes"),
        ),
        (
            "symlink to .env, then read",
            format!("ln -s {h}/.env l && cat l"),
        ),
        ("hardlink to .env", format!("ln {h}/.env hard")),
        (
            "symlink to data/, then list",
            format!("ln -s {h}/data d && ls d/"),
        ),
        (
            "list the workspace's other folders",
            format!("ls {h}/workspace"),
        ),
        ("list /", "ls /".into()),
        ("write in /etc", "touch /etc/planted".into()),
        (
            "write in /var/tmp",
            "touch /var/tmp/planted-by-shell".into(),
        ),
        (
            "read warden's config (world-readable, not granted)",
            format!("cat {config}"),
        ),
        (
            "read /proc/1/environ (warden)",
            "cat /proc/1/environ".into(),
        ),
        (
            "read the runtime's environ",
            format!("cat /proc/{main}/environ"),
        ),
        (
            "read the runtime's cmdline",
            format!("cat /proc/{main}/cmdline"),
        ),
        ("see the runtime's process", format!("test -e /proc/{main}")),
        ("sudo", "sudo -n true".into()),
        ("su to root", "su -c id root </dev/null".into()),
        ("read /etc/shadow", "cat /etc/shadow".into()),
    ]
}

/// Syscall-level attempts: the program says what the kernel answered
/// (`blocked: ...`).
pub fn programs(t: &Targets) -> Vec<(&'static str, Vec<String>)> {
    let (main, socket, port) = (t.main.as_str(), t.socket.as_str(), t.port.as_str());
    let mut out: Vec<(&'static str, Vec<&str>)> = vec![
        ("ptrace the runtime", vec!["ptrace-attach", main]),
        ("ptrace warden", vec!["ptrace-attach", "1"]),
        ("ptrace traceme", vec!["ptrace-traceme"]),
        (
            "process_vm_readv the runtime",
            vec!["process-vm-readv", main],
        ),
        (
            "process_vm_writev the runtime",
            vec!["process-vm-writev", main],
        ),
        ("open the runtime's /proc/PID/mem", vec!["proc-mem", main]),
        ("io_uring", vec!["io-uring"]),
        ("bpf", vec!["bpf"]),
        ("perf_event_open", vec!["perf-event-open"]),
        ("userfaultfd", vec!["userfaultfd"]),
        ("keyctl", vec!["keyctl"]),
        ("add_key", vec!["add-key"]),
        ("mount", vec!["mount"]),
        ("umount", vec!["umount"]),
        ("unshare a user namespace", vec!["unshare-user"]),
        ("unshare a network namespace", vec!["unshare-net"]),
        ("clone with CLONE_NEWUSER", vec!["clone-newuser"]),
        ("clone3", vec!["clone3"]),
        ("setns", vec!["setns"]),
        ("init_module", vec!["init-module"]),
        ("finit_module", vec!["finit-module"]),
        ("reboot", vec!["reboot"]),
        ("kexec_load", vec!["kexec"]),
        ("swapon", vec!["swapon"]),
        ("syslog", vec!["syslog"]),
        ("open_by_handle_at", vec!["open-by-handle"]),
        ("chroot", vec!["chroot"]),
        ("personality", vec!["personality"]),
        ("modify_ldt", vec!["modify-ldt"]),
        ("mbind", vec!["mbind"]),
        ("set_mempolicy", vec!["set-mempolicy"]),
        ("memfd_secret", vec!["memfd-secret"]),
        ("TIOCSTI", vec!["tiocsti"]),
        ("AF_PACKET socket", vec!["af-packet"]),
        ("raw socket", vec!["raw-socket"]),
        ("netlink audit socket", vec!["netlink-audit"]),
        ("UDP socket", vec!["udp-socket"]),
        ("UDP over IPv6 socket", vec!["udp6-socket"]),
        ("ICMP datagram (ping) socket", vec!["ping-socket"]),
        ("SCTP socket", vec!["sctp-socket"]),
        ("AF_ALG socket", vec!["alg-socket"]),
        ("x32 syscall", vec!["x32"]),
        ("ia32 syscall", vec!["ia32"]),
        ("kill the runtime", vec!["kill", main]),
        ("kill warden", vec!["kill", "1"]),
        ("connect to warden's socket", vec!["unix-connect", socket]),
        ("TCP connect to a loopback port", vec!["tcp-connect", port]),
        (
            "TCP Fast Open to a loopback port",
            vec!["tcp-fast-open", port],
        ),
        ("TCP bind", vec!["tcp-bind", "8080"]),
        ("TCP listen without bind", vec!["tcp-listen"]),
        ("TCP listen over IPv6 without bind", vec!["tcp6-listen"]),
        (
            "a TCP socket swapped under a unix socket's listen",
            vec!["listen-race", "/tmp/warden-listen-race.sock", "2000"],
        ),
        ("TIOCSETD", vec!["tiocsetd"]),
        ("keep a capability", vec!["capabilities"]),
    ];
    if let Some(name) = &t.abstract_name {
        out.push((
            "connect to the runtime's abstract socket",
            vec!["abstract-connect", name],
        ));
    }
    out.into_iter()
        .map(|(name, args)| (name, args.into_iter().map(String::from).collect()))
        .collect()
}

/// No canary may ever appear in a command's output.
/// An attack program's run: it ran (status 0), every attempt of it was
/// blocked, and it shows no secret.
pub fn assert_blocked(name: &str, o: &impl super::Printed) {
    let t = super::printed(o);
    assert!(o.succeeded(), "{name}: {t}");
    assert!(t.starts_with("blocked: "), "{name}: {t}");
    assert_no_secret(name, o);
}

pub fn assert_no_secret(name: &str, o: &impl super::Printed) {
    let t = super::printed(o);
    for canary in [ENV_CANARY, DATA_CANARY] {
        assert!(!t.contains(canary), "{name}: a secret leaked: {t}");
    }
}

/// Copies the attack programs into shell's own /tmp (the folder behind it,
/// which warden made at boot); returns the program's path as shell sees it.
pub fn hand_to_shell(m: &super::Machine, bin_dir: &Path) -> PathBuf {
    let dest = m.root().join("var/shell-tmp/warden-attack");
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::set_permissions(&dest, PermissionsExt::from_mode(0o755)).unwrap();
    for (name, mode) in [("attack", 0o755), ("id-suid", 0o4755)] {
        std::fs::copy(bin_dir.join(name), dest.join(name)).unwrap();
        std::fs::set_permissions(dest.join(name), PermissionsExt::from_mode(mode)).unwrap();
    }
    PathBuf::from("/tmp/warden-attack/attack")
}
