//! QEMU and its vsock backend for one machine: the kit they boot from,
//! QEMU's arguments (a pure function, tested), the VM's size, and the
//! launch, each process in a session (and, where systemd runs, a scope)
//! of its own.

use super::{dir, stop_backend};
use crate::launcher::error::LaunchError;
use crate::launcher::state::container;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where `machine/vm/build` leaves the kit (WARDEN_VM_CACHE overrides).
pub const KIT: &str = "/var/cache/warden-machine/vm";

/// Each VM has its own vsock device backend, so one CID serves them all.
pub const GUEST_CID: u32 = 3;

/// A VM's size when its definition gives none: software emulation here
/// boots a small one fastest.
pub(super) const DEFAULT_MEMORY_MB: u64 = 512;

pub(super) const DEFAULT_CPUS: u32 = 1;

/// What a VM is made from, and the programs that run it.
pub struct Kit {
    pub dir: PathBuf,
    pub qemu: PathBuf,
    pub vhost: PathBuf,
}

/// Finds the kit and the programs, or says what is missing and how to get it.
pub fn kit() -> Result<Kit, LaunchError> {
    let dir = PathBuf::from(std::env::var("WARDEN_VM_CACHE").unwrap_or_else(|_| KIT.into()));
    let mut missing: Vec<String> = ["vmlinuz", "initrd.gz", "data.ext4", "workspace.ext4"]
        .iter()
        .filter(|f| !dir.join(f).exists())
        .map(|f| format!("{} (machine/vm/build makes it)", dir.join(f).display()))
        .collect();
    let qemu = program("qemu-system-x86_64");
    let vhost = program("vhost-device-vsock");
    if qemu.is_none() {
        missing.push("qemu-system-x86_64 (apt-get install qemu-system-x86)".into());
    }
    if vhost.is_none() {
        missing.push("vhost-device-vsock (cargo install --locked vhost-device-vsock@0.3.0)".into());
    }
    match (qemu, vhost) {
        (Some(qemu), Some(vhost)) if missing.is_empty() => Ok(Kit { dir, qemu, vhost }),
        _ => Err(LaunchError::new("a VM needs", missing.join("; "))),
    }
}

/// A program in PATH, or in the owner's cargo bin folder.
pub(super) fn program(name: &str) -> Option<PathBuf> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(PathBuf::from)
        .chain([Path::new(&home).join(".cargo/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The host CPU's clock in kHz, from /proc/cpuinfo: QEMU's microvm needs
/// it on the guest's command line, or about one boot in ten hangs.
pub fn tsc_khz(cpuinfo: &str) -> Option<u64> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|mhz| (mhz * 1000.0) as u64)
}

/// QEMU's arguments for the machine `id` whose files are in `vm`.
/// The VM's memory (MiB) and CPUs, from its definition.
pub fn vm_size(size: &crate::launcher::agent::Size) -> (u64, u32) {
    (
        size.memory.map_or(DEFAULT_MEMORY_MB, |bytes| bytes >> 20),
        size.cpus.map_or(DEFAULT_CPUS, |c| c.ceil().max(1.0) as u32),
    )
}

pub fn qemu_args(
    id: &str,
    kernel: &Path,
    rootfs: &Path,
    vm: &Path,
    tsc_khz: u64,
    (memory_mb, cpus): (u64, u32),
) -> Vec<String> {
    let p = |name: &str| vm.join(name).display().to_string();
    let drive = |file: String, name: &str, extra: &str| {
        format!("file={file},format=raw,if=none,id={name}{extra}")
    };
    let cmdline = [
        "console=ttyS0",
        "quiet",
        "pci=off",
        "panic=-1",
        &format!("tsc_early_khz={tsc_khz}"),
        "root=/dev/vda",
        "rw",
        "warden.data=/dev/vdb",
        "warden.workspace=/dev/vdc",
        &format!("warden.hostname={id}"),
    ]
    .join(" ");
    let mut args: Vec<String> = [
        "-name",
        &container(id),
        // Software emulation only: this host's /dev/kvm cannot run an
        // ordinary kernel. cx16=off: QEMU's emulated cmpxchg16b panics
        // the guest about one boot in three.
        "-accel",
        "tcg",
        "-cpu",
        "max,cx16=off",
        "-M",
        "microvm,memory-backend=mem",
        "-m",
        &memory_mb.to_string(),
        "-smp",
        &cpus.to_string(),
        "-object",
        &format!("memory-backend-memfd,id=mem,size={memory_mb}M,share=on"),
        "-display",
        "none",
        "-no-reboot",
        "-net",
        "none",
        "-daemonize",
        "-pidfile",
        &p("qemu.pid"),
        "-serial",
        &format!("file:{}", p("serial.log")),
        "-chardev",
        &format!("socket,id=vhu,path={}", p("vhost.sock")),
        "-device",
        "vhost-user-vsock-device,chardev=vhu",
    ]
    .map(String::from)
    .to_vec();
    for (file, name, extra) in [
        (rootfs.display().to_string(), "root", ",snapshot=on"),
        (p("data.ext4"), "data", ""),
        (p("workspace.ext4"), "work", ""),
    ] {
        args.extend([
            "-drive".into(),
            drive(file, name, extra),
            "-device".into(),
            format!("virtio-blk-device,drive={name}"),
        ]);
    }
    args.extend([
        "-kernel".into(),
        kernel.display().to_string(),
        "-initrd".into(),
        p("initrd.gz"),
        "-append".into(),
        cmdline,
    ]);
    args
}

/// Starts the vsock backend, then QEMU (which daemonizes once the VM is
/// set up); both outlive the launcher, in sessions of their own.
pub(super) fn launch(
    kit: &Kit,
    id: &str,
    rootfs: &Path,
    size: (u64, u32),
) -> Result<(), LaunchError> {
    let vm = dir(id);
    for stale in ["vhost.sock", "vsock.sock", "qemu.pid", "serial.log"] {
        let _ = std::fs::remove_file(vm.join(stale));
    }
    let log = |name: &str| {
        std::fs::File::create(vm.join(name)).map_err(|e| LaunchError::io(&vm.join(name), e))
    };
    let systemd = systemd_runs();
    let vhost_args = vec![
        "--guest-cid".to_string(),
        GUEST_CID.to_string(),
        "--socket".into(),
        vm.join("vhost.sock").display().to_string(),
        "--uds-path".into(),
        vm.join("vsock.sock").display().to_string(),
    ];
    let unit = format!("warden-{id}-vsock");
    let (program, args) =
        in_own_scope(systemd, &unit, &kit.vhost.display().to_string(), vhost_args);
    let vhost = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log("vhost.log")?)
        .stderr(log("vhost.err")?)
        .process_group(0)
        .spawn()
        .map_err(|e| LaunchError::new("vhost-device-vsock", e.to_string()))?;
    std::fs::write(vm.join("vhost.pid"), vhost.id().to_string())
        .map_err(|e| LaunchError::new("vhost.pid", e.to_string()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !vm.join("vhost.sock").exists() {
        if Instant::now() > deadline {
            stop_backend(id);
            return Err(LaunchError::new(
                "vhost-device-vsock made no socket in 10 s",
                std::fs::read_to_string(vm.join("vhost.err"))
                    .unwrap_or_default()
                    .trim(),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let Some(khz) = tsc_khz(&cpuinfo) else {
        stop_backend(id);
        return Err(LaunchError::sentence(
            "no cpu MHz in /proc/cpuinfo (microvm needs it)",
        ));
    };
    let qemu = qemu_args(id, &kit.dir.join("vmlinuz"), rootfs, &vm, khz, size);
    let unit = format!("warden-{id}-qemu");
    let (program, args) = in_own_scope(systemd, &unit, &kit.qemu.display().to_string(), qemu);
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .map_err(|e| LaunchError::io(&kit.qemu, e))?;
    if !out.status.success() {
        stop_backend(id);
        return Err(LaunchError::new(
            format!("QEMU failed ({})", out.status),
            String::from_utf8_lossy(&out.stderr).trim(),
        ));
    }
    Ok(())
}

/// Whether systemd manages this host (and `systemd-run` is here).
pub(super) fn systemd_runs() -> bool {
    Path::new("/run/systemd/system").is_dir()
        && std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| dir.join("systemd-run").is_file())
        })
}

/// Pure: the command that runs `program args` in a systemd scope of its
/// own where systemd runs, so that stopping or restarting the owner's
/// program (its unit's cgroup) does not stop the VM; as given elsewhere
/// (the processes are in sessions of their own either way).
pub fn in_own_scope(
    systemd: bool,
    unit: &str,
    program: &str,
    args: Vec<String>,
) -> (String, Vec<String>) {
    if !systemd {
        return (program.to_string(), args);
    }
    let mut scoped = vec![
        "--scope".to_string(),
        "--quiet".into(),
        "--collect".into(),
        format!("--unit={unit}"),
        "--".into(),
        program.to_string(),
    ];
    scoped.extend(args);
    ("systemd-run".into(), scoped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_from_cpuinfo() {
        let table = [
            ("processor\t: 0\ncpu MHz\t\t: 2999.998\n", Some(2_999_998)),
            ("cpu MHz : 2100\n", Some(2_100_000)),
            ("processor : 0\n", None),
            ("cpu MHz : fast\n", None),
        ];
        for (text, want) in table {
            assert_eq!(tsc_khz(text), want, "{text:?}");
        }
    }

    #[test]
    fn qemu_is_software_only_and_names_the_machine() {
        let args = qemu_args(
            "demo",
            Path::new("/k/vmlinuz"),
            Path::new("/k/images/x.ext4"),
            Path::new("/s/demo/vm"),
            2_000_000,
            (1024, 2),
        );
        let line = args.join(" ");
        assert!(line.contains("-accel tcg"), "{line}");
        assert!(!line.contains("kvm"), "{line}");
        assert!(line.contains("-name warden-demo"), "{line}");
        assert!(line.contains("file=/k/images/x.ext4,format=raw,if=none,id=root,snapshot=on"));
        assert!(line.contains("file=/s/demo/vm/data.ext4,format=raw,if=none,id=data "));
        assert!(line.contains("tsc_early_khz=2000000"), "{line}");
        assert!(line.contains("warden.hostname=demo"), "{line}");
        assert!(line.contains("-pidfile /s/demo/vm/qemu.pid"), "{line}");
        assert!(line.contains("-m 1024 -smp 2"), "{line}");
        assert!(
            line.contains("memory-backend-memfd,id=mem,size=1024M"),
            "{line}"
        );
        let size = crate::launcher::agent::Size::default();
        assert_eq!(vm_size(&size), (512, 1));
        let size = crate::launcher::agent::Size {
            cpus: Some(1.5),
            memory: Some(1 << 30),
            pids: None,
        };
        assert_eq!(vm_size(&size), (1024, 2));
    }

    #[test]
    fn a_scope_of_its_own_only_where_systemd_runs() {
        let args = vec!["-m".to_string(), "512".into()];
        assert_eq!(
            in_own_scope(false, "warden-a-qemu", "/usr/bin/qemu", args.clone()),
            ("/usr/bin/qemu".to_string(), args.clone())
        );
        let (program, scoped) = in_own_scope(true, "warden-a-qemu", "/usr/bin/qemu", args);
        assert_eq!(program, "systemd-run");
        assert_eq!(
            scoped,
            [
                "--scope",
                "--quiet",
                "--collect",
                "--unit=warden-a-qemu",
                "--",
                "/usr/bin/qemu",
                "-m",
                "512"
            ]
        );
    }
}
