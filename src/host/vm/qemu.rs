//! QEMU and its vsock backend for one machine: the kit they boot from,
//! QEMU's arguments (a pure function, tested), the VM's size, and the
//! launch, each process in a session (and, where systemd runs, a scope)
//! of its own.

use super::accel::Accel;
use super::{dir, stop_backend};
use crate::host::definition::{Lend, LendMode};
use crate::host::error::LaunchError;
use crate::host::scope::{in_own_scope, systemd_runs};
use crate::host::state::container;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where `machine/vm/build` leaves the kit. `WARDEN_VM_CACHE` names
/// another (for the launcher, the VM tests and the build alike): a kit of
/// one's own, built with `WARDEN_VM_CACHE=DIR machine/vm/build`.
pub const KIT: &str = "/var/cache/warden-machine/vm";

/// The environment variable that names another kit.
pub const KIT_VAR: &str = "WARDEN_VM_CACHE";

/// Each VM has its own vsock device backend, so one CID serves them all.
pub const GUEST_CID: u32 = 3;

/// A VM's size when its definition gives none: software emulation here
/// boots a small one fastest.
pub(super) const DEFAULT_MEMORY_MB: u64 = 512;

pub(super) const DEFAULT_CPUS: u32 = 1;

/// What a VM is made from, and the programs that run it.
#[derive(Clone)]
pub struct Kit {
    pub dir: PathBuf,
    pub qemu: PathBuf,
    pub vhost: PathBuf,
}

/// Finds the kit and the programs, or says what is missing and how to get it.
pub fn kit() -> Result<Kit, LaunchError> {
    let dir = PathBuf::from(std::env::var(KIT_VAR).unwrap_or_else(|_| KIT.into()));
    let mut missing: Vec<String> = ["vmlinuz", "initrd.gz", "data.ext4", "workspace.ext4"]
        .iter()
        .filter(|f| !dir.join(f).exists())
        .map(|f| match std::env::var_os(KIT_VAR) {
            Some(_) => format!(
                "{} ({KIT_VAR}=DIR machine/vm/build makes it)",
                dir.join(f).display()
            ),
            None => format!("{} (machine/vm/build makes it)", dir.join(f).display()),
        })
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

/// The VM's memory (MiB) and CPUs, from its definition.
pub fn vm_size(size: &crate::host::agent::Size) -> (u64, u32) {
    (
        size.memory.map_or(DEFAULT_MEMORY_MB, |bytes| bytes >> 20),
        size.cpus.map_or(DEFAULT_CPUS, |c| c.ceil().max(1.0) as u32),
    )
}

/// The 9p mount tag of the definition's `i`th lend (the guest mounts it
/// by this tag; QEMU allows at most 31 bytes).
pub fn lend_tag(i: usize) -> String {
    format!("lend{i}")
}

/// Everything QEMU is given for one machine.
pub struct QemuPlan<'a> {
    pub id: &'a str,
    pub kernel: &'a Path,
    pub rootfs: &'a Path,
    /// The machine's VM folder.
    pub vm: &'a Path,
    pub tsc_khz: u64,
    /// Memory (MiB) and CPUs.
    pub size: (u64, u32),
    pub accel: &'a Accel,
    pub lends: &'a [Lend],
}

/// Pure: QEMU's arguments for the plan.
pub fn qemu_args(plan: &QemuPlan) -> Vec<String> {
    let mut args = machine_args(plan);
    args.extend(disk_args(plan));
    args.extend(lend_args(plan.lends));
    args.extend([
        "-kernel".into(),
        plan.kernel.display().to_string(),
        "-initrd".into(),
        vm_file(plan, "initrd.gz"),
        "-append".into(),
        kernel_cmdline(plan),
    ]);
    args
}

/// A file of the machine's VM folder, as QEMU is given it.
fn vm_file(plan: &QemuPlan, name: &str) -> String {
    plan.vm.join(name).display().to_string()
}

/// The guest kernel's command line.
fn kernel_cmdline(plan: &QemuPlan) -> String {
    [
        "console=ttyS0",
        "quiet",
        "pci=off",
        "panic=-1",
        &format!("tsc_early_khz={}", plan.tsc_khz),
        "root=/dev/vda",
        "rw",
        "warden.data=/dev/vdb",
        "warden.workspace=/dev/vdc",
        &format!("warden.hostname={}", plan.id),
    ]
    .join(" ")
}

/// The machine itself: name, accelerator, CPU, memory, no display and
/// no network, daemonized, its serial console to a file and its vsock
/// through the vhost-user backend.
fn machine_args(plan: &QemuPlan) -> Vec<String> {
    let (memory_mb, cpus) = plan.size;
    let p = |name: &str| vm_file(plan, name);
    let (accel, cpu) = match plan.accel {
        Accel::Kvm => ("kvm", "host"),
        // cx16=off: QEMU's emulated cmpxchg16b panics the guest about one
        // boot in three.
        Accel::Tcg(_) => ("tcg", "max,cx16=off"),
    };
    [
        "-name",
        &container(plan.id),
        "-accel",
        accel,
        "-cpu",
        cpu,
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
        // Its monitor: serve freezes and thaws the VM through it.
        "-qmp",
        &format!("unix:{},server=on,wait=off", p("qmp.sock")),
        "-chardev",
        &format!("socket,id=vhu,path={}", p("vhost.sock")),
        "-device",
        "vhost-user-vsock-device,chardev=vhu",
    ]
    .map(String::from)
    .to_vec()
}

/// The three disks, in the order the guest finds them (vda, vdb, vdc):
/// the root filesystem (its writes thrown away), data and workspace.
fn disk_args(plan: &QemuPlan) -> Vec<String> {
    let mut args = Vec::new();
    for (file, name, extra) in [
        (plan.rootfs.display().to_string(), "root", ",snapshot=on"),
        (vm_file(plan, "data.ext4"), "data", ""),
        (vm_file(plan, "workspace.ext4"), "work", ""),
    ] {
        args.extend([
            "-drive".into(),
            format!("file={file},format=raw,if=none,id={name}{extra}"),
            "-device".into(),
            format!("virtio-blk-device,drive={name}"),
        ]);
    }
    args
}

/// Each lend a 9p share of exactly its folder. passthrough: what the
/// guest writes is owned on the host by the guest's uid (shell's 2001,
/// the runtime's 2000), as in a rootful container; a read lend is
/// read-only in QEMU itself, whatever the guest's kernel asks.
fn lend_args(lends: &[Lend]) -> Vec<String> {
    let mut args = Vec::new();
    for (i, lend) in lends.iter().enumerate() {
        let tag = lend_tag(i);
        let readonly = match lend.mode {
            LendMode::Read => ",readonly=on",
            LendMode::Write => "",
        };
        args.extend([
            "-fsdev".into(),
            format!(
                "local,id={tag},path={},security_model=passthrough{readonly}",
                lend.host.display()
            ),
            "-device".into(),
            format!("virtio-9p-device,fsdev={tag},mount_tag={tag}"),
        ]);
    }
    args
}

/// Starts the vsock backend, then QEMU (which daemonizes once the VM is
/// set up); both outlive the launcher, in sessions of their own.
pub(super) fn launch(
    kit: &Kit,
    id: &str,
    rootfs: &Path,
    size: (u64, u32),
    accel: &Accel,
    lends: &[Lend],
) -> Result<(), LaunchError> {
    let vm = dir(id);
    for stale in [
        "vhost.sock",
        "vsock.sock",
        super::monitor::HIDDEN,
        "qemu.pid",
        "serial.log",
    ] {
        let _ = std::fs::remove_file(vm.join(stale));
    }
    let systemd = systemd_runs();
    // QEMU connects to the backend's socket as it starts: the backend
    // must be up, its socket made, first.
    start_vsock_backend(kit, id, &vm, systemd)?;
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let Some(khz) = tsc_khz(&cpuinfo) else {
        stop_backend(id);
        return Err(LaunchError::sentence(
            "no cpu MHz in /proc/cpuinfo (microvm needs it)",
        ));
    };
    let kernel = kit.dir.join("vmlinuz");
    let qemu = qemu_args(&QemuPlan {
        id,
        kernel: &kernel,
        rootfs,
        vm: &vm,
        tsc_khz: khz,
        size,
        accel,
        lends,
    });
    start_qemu(kit, id, systemd, qemu)
}

/// Spawns vhost-device-vsock in a scope of its own, records its pid and
/// waits (10 s at most) for its socket.
fn start_vsock_backend(kit: &Kit, id: &str, vm: &Path, systemd: bool) -> Result<(), LaunchError> {
    let log = |name: &str| {
        std::fs::File::create(vm.join(name)).map_err(|e| LaunchError::io(&vm.join(name), e))
    };
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
    Ok(())
}

/// Runs QEMU in a scope of its own until it daemonizes; when it fails,
/// the backend is stopped too.
fn start_qemu(kit: &Kit, id: &str, systemd: bool, qemu: Vec<String>) -> Result<(), LaunchError> {
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

    fn plan<'a>(accel: &'a Accel, lends: &'a [Lend]) -> QemuPlan<'a> {
        QemuPlan {
            id: "demo",
            kernel: Path::new("/k/vmlinuz"),
            rootfs: Path::new("/k/images/x.ext4"),
            vm: Path::new("/s/demo/vm"),
            tsc_khz: 2_000_000,
            size: (1024, 2),
            accel,
            lends,
        }
    }

    #[test]
    fn qemu_names_the_machine_and_sizes_it() {
        let tcg = Accel::Tcg("no vmx".into());
        let line = qemu_args(&plan(&tcg, &[])).join(" ");
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
        assert!(!line.contains("9p"), "no lend, no share: {line}");
        let size = crate::host::agent::Size::default();
        assert_eq!(vm_size(&size), (512, 1));
        let size = crate::host::agent::Size {
            cpus: Some(1.5),
            memory: Some(1 << 30),
            pids: None,
        };
        assert_eq!(vm_size(&size), (1024, 2));
        let size = crate::host::agent::Size {
            cpus: Some(2.0),
            memory: Some(1024 << 20),
            pids: Some(100),
        };
        assert_eq!(vm_size(&size), (1024, 2));
    }

    /// The accelerator follows the probe's verdict, and only KVM's verdict
    /// ever puts "kvm" on QEMU's command line.
    #[test]
    fn the_accelerator_follows_the_verdict() {
        let table = [
            (Accel::Kvm, "-accel kvm -cpu host ", true),
            (
                Accel::Tcg("no vmx or svm".into()),
                "-accel tcg -cpu max,cx16=off ",
                false,
            ),
        ];
        for (accel, want, kvm) in table {
            let line = qemu_args(&plan(&accel, &[])).join(" ");
            assert!(line.contains(want), "{accel:?}: {line}");
            assert_eq!(line.contains("kvm"), kvm, "{accel:?}: {line}");
            assert!(!line.contains("-enable-kvm"), "{line}");
        }
    }

    /// Each lend is a 9p share of its folder alone, tagged by its place;
    /// a read lend is read-only in QEMU itself.
    #[test]
    fn lends_are_9p_shares_read_only_when_read() {
        let lends = [
            Lend {
                host: "/home/me/src".into(),
                at: "/lent/src".into(),
                mode: LendMode::Read,
            },
            Lend {
                host: "/home/me/out dir".into(),
                at: "/home/me/out".into(),
                mode: LendMode::Write,
            },
        ];
        let tcg = Accel::Tcg("x".into());
        let args = qemu_args(&plan(&tcg, &lends));
        let after = |flag: &str| -> Vec<&str> {
            args.windows(2)
                .filter(|w| w[0] == flag)
                .map(|w| w[1].as_str())
                .collect()
        };
        assert_eq!(
            after("-fsdev"),
            [
                "local,id=lend0,path=/home/me/src,security_model=passthrough,readonly=on",
                "local,id=lend1,path=/home/me/out dir,security_model=passthrough",
            ]
        );
        let devices = after("-device");
        assert!(devices.contains(&"virtio-9p-device,fsdev=lend0,mount_tag=lend0"));
        assert!(devices.contains(&"virtio-9p-device,fsdev=lend1,mount_tag=lend1"));
        // The shares come before the kernel, whose command line stays last.
        assert_eq!(args[args.len() - 2], "-append");
        assert!(lend_tag(999).len() < 32);
    }
}
