//! The launcher's VM backend: a machine as a micro-VM under QEMU, with
//! warden as its PID 1 (see machine/vm/README.md).
//!
//! The kit (`machine/vm/build`: kernel, initramfs, empty volumes) is shared;
//! each machine gets, in `<state>/vm/`: an initramfs with its own files
//! appended (key, config, policy, the runtime's keys), its data and
//! workspace disks (its volumes, kept across remakes), the host's end of
//! its vsock (`vsock.sock`, kept by its own vhost-device-vsock, which is
//! why every guest can have CID 3), its serial console (`serial.log`) and
//! QEMU's pid. The root disk is made from the machine's image once per
//! image and shared read-only (`snapshot=on`: writes go to a throwaway
//! overlay). QEMU runs with software emulation only.
//!
//! The host reaches warden through `vsock.sock` ("CONNECT <port>"), with the
//! machine's key, and stops it with the protocol's `shutdown` request.

use super::definition::{Definition, Network, Workspace};
use super::machine::{self, state_dir};
use crate::client::{Client, Message};
use crate::protocol::{Event, Request};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
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
const DEFAULT_MEMORY_MB: u64 = 512;
const DEFAULT_CPUS: u32 = 1;
/// Software emulation boots in seconds here; a loaded host takes longer.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `stop` waits for the power to go off before it kills QEMU.
const STOP_GRACE: Duration = Duration::from_secs(30);
const VOLUMES: [&str; 2] = ["data.ext4", "workspace.ext4"];

/// What a VM is made from, and the programs that run it.
pub struct Kit {
    pub dir: PathBuf,
    pub qemu: PathBuf,
    pub vhost: PathBuf,
}

/// Finds the kit and the programs, or says what is missing and how to get it.
pub fn kit() -> Result<Kit, String> {
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
        _ => Err(format!("a VM needs: {}", missing.join("; "))),
    }
}

/// A program in PATH, or in the owner's cargo bin folder.
fn program(name: &str) -> Option<PathBuf> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(PathBuf::from)
        .chain([Path::new(&home).join(".cargo/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The machine's VM folder.
pub fn dir(id: &str) -> PathBuf {
    state_dir(id).join("vm")
}

/// Whether the machine `id` is a VM (its folder says so).
pub fn is_vm(id: &str) -> bool {
    dir(id).is_dir()
}

/// Refuses what a VM here cannot do, saying why.
pub fn fits(def: &Definition, rootless: bool) -> Result<(), String> {
    let refuse = |what: &str, why: &str| Err(format!("kind \"vm\": {what}: {why}"));
    if rootless {
        return refuse(
            "rootless",
            "VMs are made as root for now (their root disk comes from root's image storage)",
        );
    }
    if !def.lend.is_empty() {
        return refuse(
            "lend",
            "a VM has no shared folders here (no virtiofs); use the workspace disk",
        );
    }
    if let Workspace::Folder(_) = def.workspace {
        return refuse(
            "workspace",
            "a VM's workspace is its own disk, not a host folder",
        );
    }
    if def.network != Network::None {
        return refuse("network", "a VM has no network device yet; only \"none\"");
    }
    if def.keep_id.is_on() {
        return refuse("keep_id", "a VM has no host folders to keep ids in");
    }
    let agent_fields = [
        ("command", def.command.is_some()),
        ("restart", def.restart != super::agent::Restart::No),
        ("ports", !def.ports.is_empty()),
        ("requires", !def.requires.is_empty()),
        ("idle_stop_minutes", def.idle_stop_minutes.is_some()),
    ];
    if let Some((field, _)) = agent_fields.iter().find(|(_, given)| *given) {
        return refuse(
            field,
            "not for VMs yet: a VM runs warden alone, with no network device to publish on",
        );
    }
    if def.setup.is_some() {
        return refuse(
            "setup",
            "not run in VMs yet (the host has no way to run as runtime in one)",
        );
    }
    Ok(())
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
pub fn vm_size(size: &super::agent::Size) -> (u64, u32) {
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
        &machine::container(id),
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

/// Makes (or keeps) and starts the VM. `inputs` digests everything the
/// machine is made of; the same inputs on a running VM keep it.
pub fn up(
    def: &Definition,
    image: &str,
    inputs: &str,
    keys_text: &str,
    start: Instant,
) -> Result<(), String> {
    let kit = kit()?;
    let vm = dir(&def.id);
    let io = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&vm)
        .map_err(|e| io(&vm, e))?;
    let recorded = vm.join("inputs");
    let same = std::fs::read_to_string(&recorded).is_ok_and(|d| d == inputs);
    if running(&def.id) {
        if same {
            machine::step(
                start,
                &format!("{}: unchanged, kept", machine::container(&def.id)),
            );
            return Ok(());
        }
        stop(&def.id)?;
        machine::step(start, "inputs changed: the old VM powered off");
    }
    let rootfs = rootfs(&kit, image)?;
    machine::step(start, &format!("root disk {}", rootfs.display()));
    for volume in VOLUMES {
        if !vm.join(volume).exists() {
            copy_sparse(&kit.dir.join(volume), &vm.join(volume))?;
        }
    }
    initrd(&kit, &def.id, keys_text)?;
    // Recorded only once the VM answers: one that never did is not kept.
    let _ = std::fs::remove_file(&recorded);
    launch(&kit, &def.id, &rootfs, vm_size(&def.size))?;
    machine::step(start, "QEMU started (software emulation)");
    if let Err(e) = wait_ready(&def.id) {
        kill(&def.id);
        return Err(e);
    }
    machine::step(start, "warden answers over vsock");
    std::fs::write(&recorded, inputs).map_err(|e| io(&recorded, e))
}

fn copy_sparse(from: &Path, to: &Path) -> Result<(), String> {
    let out = Command::new("cp")
        .arg("--sparse=always")
        .args([from, to])
        .output()
        .map_err(|e| format!("cp: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "copy {}: {}",
            from.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// The root disk of `image`: made once per image id (its file system
/// tree, exported by the engine, into ext4 with `mkfs.ext4 -d`).
fn rootfs(kit: &Kit, image: &str) -> Result<PathBuf, String> {
    let id = machine::engine_output(
        "image id",
        &["image", "inspect", "--format", "{{.Id}}", image],
    )?;
    let id = id.trim().trim_start_matches("sha256:");
    let short = &id[..id.len().min(16)];
    // Root's alone: a disk holds the whole image, which the engine's own
    // storage keeps from other users too.
    let images = kit.dir.join("images");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&images)
        .map_err(|e| format!("{}: {e}", images.display()))?;
    std::fs::set_permissions(&images, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("{}: {e}", images.display()))?;
    let disk = images.join(format!("{short}.ext4"));
    if disk.exists() {
        return Ok(disk);
    }
    let tree = tempfile::Builder::new()
        .prefix("warden-rootfs-")
        .tempdir_in(&images)
        .map_err(|e| format!("{}: {e}", images.display()))?;
    let container = machine::engine_output("export image", &["create", image, "true"])?;
    let container = container.trim().to_string();
    let exported = Command::new("sh")
        .arg("-c")
        .arg(r#""$0" export "$1" | tar -x -C "$2" --numeric-owner"#)
        .arg(machine::host()?.engine.program())
        .args([&container, &tree.path().display().to_string()])
        .output();
    let _ = machine::engine_output("export image", &["rm", "-f", &container]);
    let exported = exported.map_err(|e| format!("export {image}: {e}"))?;
    if !exported.status.success() {
        return Err(format!(
            "export {image}: {}",
            String::from_utf8_lossy(&exported.stderr).trim()
        ));
    }
    // Two `up`s of one image each make their own, and the last rename wins.
    let partial = tree.path().with_extension("ext4");
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "root", "-d"])
        .arg(tree.path())
        .arg(&partial)
        .arg("2G")
        .output()
        .map_err(|e| format!("mkfs.ext4 (apt-get install e2fsprogs): {e}"))?;
    if !made.status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(format!(
            "mkfs.ext4 {}: {}",
            partial.display(),
            String::from_utf8_lossy(&made.stderr).trim()
        ));
    }
    std::fs::rename(&partial, &disk).map_err(|e| format!("{}: {e}", disk.display()))?;
    Ok(disk)
}

/// The kit's initramfs with the machine's own files appended as a second
/// cpio archive (the kernel unpacks both): its key, config and policy, and
/// the runtime's keys, all root's; warden moves them onto the root disk.
fn initrd(kit: &Kit, id: &str, keys_text: &str) -> Result<(), String> {
    let vm = dir(id);
    let state = state_dir(id);
    let stage = tempfile::Builder::new()
        .prefix("stage-")
        .tempdir_in(&vm)
        .map_err(|e| format!("{}: {e}", vm.display()))?;
    let etc = stage.path().join("etc/warden");
    std::fs::create_dir_all(etc.join("policy")).map_err(|e| format!("{}: {e}", etc.display()))?;
    let key = machine::key(id)?;
    let config = serde_json::json!({"key_file": "/etc/warden/key"});
    let mut files: Vec<(PathBuf, Vec<u8>, u32)> = vec![
        (etc.join("key"), key.into_bytes(), 0o600),
        (
            etc.join("machine.json"),
            format!("{config:#}\n").into_bytes(),
            0o644,
        ),
    ];
    if !keys_text.is_empty() {
        files.push((
            etc.join("runtime.env"),
            keys_text.as_bytes().to_vec(),
            0o600,
        ));
    }
    let policy = state.join("etc/policy");
    for entry in std::fs::read_dir(&policy).map_err(|e| format!("{}: {e}", policy.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", policy.display()))?;
        let bytes =
            std::fs::read(entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
        files.push((etc.join("policy").join(entry.file_name()), bytes, 0o644));
    }
    for (path, bytes, mode) in files {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        f.write_all(&bytes)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let initrd = vm.join("initrd.gz");
    let partial = vm.join("initrd.gz.partial");
    let _ = std::fs::remove_file(&partial);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .map_err(|e| format!("{}: {e}", partial.display()))?;
    let base = kit.dir.join("initrd.gz");
    std::fs::File::open(&base)
        .and_then(|mut f| std::io::copy(&mut f, &mut out))
        .map_err(|e| format!("{}: {e}", base.display()))?;
    drop(out);
    let packed = Command::new("sh")
        .arg("-c")
        .arg(r#"cd "$0" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip >> "$1""#)
        .arg(stage.path())
        .arg(&partial)
        .output()
        .map_err(|e| format!("cpio: {e}"))?;
    if !packed.status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(format!(
            "initramfs: {} (apt-get install cpio)",
            String::from_utf8_lossy(&packed.stderr).trim()
        ));
    }
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", partial.display()))?;
    std::fs::rename(&partial, &initrd).map_err(|e| format!("{}: {e}", initrd.display()))
}

/// Starts the vsock backend, then QEMU (which daemonizes once the VM is
/// set up); both outlive the launcher, in sessions of their own.
fn launch(kit: &Kit, id: &str, rootfs: &Path, size: (u64, u32)) -> Result<(), String> {
    let vm = dir(id);
    for stale in ["vhost.sock", "vsock.sock", "qemu.pid", "serial.log"] {
        let _ = std::fs::remove_file(vm.join(stale));
    }
    let log = |name: &str| {
        std::fs::File::create(vm.join(name))
            .map_err(|e| format!("{}: {e}", vm.join(name).display()))
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
        .map_err(|e| format!("vhost-device-vsock: {e}"))?;
    std::fs::write(vm.join("vhost.pid"), vhost.id().to_string())
        .map_err(|e| format!("vhost.pid: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !vm.join("vhost.sock").exists() {
        if Instant::now() > deadline {
            stop_backend(id);
            return Err(format!(
                "vhost-device-vsock made no socket in 10 s: {}",
                std::fs::read_to_string(vm.join("vhost.err"))
                    .unwrap_or_default()
                    .trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let Some(khz) = tsc_khz(&cpuinfo) else {
        stop_backend(id);
        return Err("no cpu MHz in /proc/cpuinfo (microvm needs it)".into());
    };
    let qemu = qemu_args(id, &kit.dir.join("vmlinuz"), rootfs, &vm, khz, size);
    let unit = format!("warden-{id}-qemu");
    let (program, args) = in_own_scope(systemd, &unit, &kit.qemu.display().to_string(), qemu);
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .map_err(|e| format!("{}: {e}", kit.qemu.display()))?;
    if !out.status.success() {
        stop_backend(id);
        return Err(format!(
            "QEMU failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Whether systemd manages this host (and `systemd-run` is here).
fn systemd_runs() -> bool {
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

/// QEMU's pid, when that process is this machine's QEMU.
fn qemu_pid(id: &str) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(dir(id).join("qemu.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let name = machine::container(id);
    cmdline
        .split(|b| *b == 0)
        .any(|arg| arg == name.as_bytes())
        .then_some(pid)
}

pub fn running(id: &str) -> bool {
    qemu_pid(id).is_some()
}

/// The last lines of the machine's console.
fn console_tail(id: &str, lines: usize) -> String {
    let text = std::fs::read_to_string(dir(id).join("serial.log")).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Waits for warden's "ready" line on the console, then for an answer
/// over vsock: connecting before the guest listens only makes work for the
/// vsock backend.
fn wait_ready(id: &str) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let serial = dir(id).join("serial.log");
    loop {
        let ready =
            std::fs::read_to_string(&serial).is_ok_and(|text| text.contains("warden: ready in "));
        let error = match ready {
            true => match connect(id, None) {
                Ok(_) => return Ok(()),
                Err(e) => e,
            },
            false => "warden has not said it is ready on the console".into(),
        };
        if !running(id) {
            stop_backend(id);
            return Err(format!(
                "the VM stopped before warden answered; its console's last lines:\n{}",
                console_tail(id, 15)
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "warden did not answer over vsock in {} s: {error}; the console's last lines:\n{}",
                READY_TIMEOUT.as_secs(),
                console_tail(id, 15)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Connects to the VM's warden through the host's end of its vsock.
pub fn connect(id: &str, first: Option<(u32, &Request)>) -> Result<Client, String> {
    let key = machine::key(id)?;
    let path = dir(id).join("vsock.sock");
    Client::connect_hybrid_vsock(&path, crate::vsock::DEFAULT_PORT, &key, first)
        .map_err(|e| format!("machine {id} (VM): {e}"))
}

/// Asks warden to stop and power off; kills QEMU after the grace period.
pub fn stop(id: &str) -> Result<(), String> {
    if let Some(pid) = qemu_pid(id) {
        let asked = connect(id, None).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(10)))
                .map_err(|e| e.to_string())?;
            c.send(0, &Request::Shutdown).map_err(|e| e.to_string())?;
            match c.receive() {
                Ok(Message::Event(0, Event::ShuttingDown)) | Err(_) => Ok(()),
                Ok(other) => Err(format!("shutdown answered {other:?}")),
            }
        });
        let deadline = Instant::now() + STOP_GRACE;
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if qemu_pid(id).is_some() {
            kill(id);
            return Err(format!(
                "machine {id}: the VM did not power off within {} s ({}); QEMU was killed",
                STOP_GRACE.as_secs(),
                asked.err().unwrap_or_else(|| "shutdown asked".into())
            ));
        }
    }
    stop_backend(id);
    Ok(())
}

/// Ends a VM that cannot be asked: QEMU killed, its backend ended.
fn kill(id: &str) {
    if let Some(pid) = qemu_pid(id) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    stop_backend(id);
}

/// Ends the machine's vhost-device-vsock.
fn stop_backend(id: &str) {
    let pid = std::fs::read_to_string(dir(id).join("vhost.pid"))
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok());
    if let Some(pid) = pid {
        let is_ours = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&dir(id).display().to_string()));
        if is_ours {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
    let _ = std::fs::remove_file(dir(id).join("vhost.pid"));
}

/// Removes the VM's files; with `volumes`, its disks too.
pub fn remove(id: &str, volumes: bool) -> Result<(), String> {
    if running(id) {
        stop(id)?;
    }
    let vm = dir(id);
    let entries = std::fs::read_dir(&vm).map_err(|e| format!("{}: {e}", vm.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if VOLUMES.iter().any(|v| name == *v) && !volumes {
            continue;
        }
        let path = entry.path();
        let removed = match path.is_dir() {
            true => std::fs::remove_dir_all(&path),
            false => std::fs::remove_file(&path),
        };
        removed.map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!("removed VM {}", machine::container(id));
    Ok(())
}

/// One line per VM of this owner: name and state.
pub fn list() -> Vec<String> {
    let Ok(root) = super::host::state_root() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|id| super::definition::valid_id(id) && is_vm(id))
        .collect();
    ids.sort();
    ids.into_iter()
        .map(|id| {
            let state = match running(&id) {
                true => "Running (VM)",
                false => "Stopped (VM)",
            };
            format!("{}\t{state}", machine::container(&id))
        })
        .collect()
}

/// The machine's console.
pub fn logs(id: &str) -> Result<(), String> {
    let path = dir(id).join("serial.log");
    let text = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::io::stdout()
        .write_all(&text)
        .map_err(|e| format!("stdout: {e}"))
}

/// Copies the audit log out of the data disk (read with debugfs, never
/// mounted on the host) into `copy`. Said plainly when the VM runs: the
/// lines it has not yet written to its disk are not in the copy.
pub fn copy_audit(id: &str, copy: &Path) -> Result<bool, String> {
    let disk = dir(id).join("data.ext4");
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("rdump /audit {}", copy.display()))
        .arg(&disk)
        .output()
        .map_err(|e| format!("debugfs (apt-get install e2fsprogs): {e}"))?;
    let dumped = copy.join("audit");
    if !dumped.is_dir() && running(id) {
        return Err(format!(
            "machine {id}: the VM runs and its data disk holds no audit log yet (the guest has not written it back); try again in a minute, or after `warden machine stop {id}`"
        ));
    }
    if !out.status.success() || !dumped.is_dir() {
        return Err(format!(
            "read the audit log from {}: {}",
            disk.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // rdump makes `copy/audit`; the log's files belong directly in `copy`.
    // Only regular files come out: the disk is the machine's, and a link
    // there must not lead the host (root) to its own files.
    for entry in std::fs::read_dir(&dumped)
        .map_err(|e| e.to_string())?
        .flatten()
    {
        let path = entry.path();
        let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
        let moved = match regular {
            true => std::fs::rename(&path, copy.join(entry.file_name())),
            false => std::fs::remove_file(&path).or_else(|_| std::fs::remove_dir_all(&path)),
        };
        moved.map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let _ = std::fs::remove_dir(&dumped);
    Ok(running(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_vm_cannot_do_is_refused_with_the_reason() {
        let def = |extra: &str| {
            let text = format!(r#"{{"id": "v", "image": "x", "kind": "vm"{extra}}}"#);
            Definition::parse(Path::new("/d/def.json"), &text).unwrap()
        };
        let table = [
            ("", false, None),
            ("", true, Some("rootless")),
            (
                r#", "lend": [{"host": "/h", "at": "/lent/h", "mode": "read"}]"#,
                false,
                Some("lend"),
            ),
            (r#", "workspace": "/w""#, false, Some("workspace")),
            (r#", "network": "private""#, false, Some("network")),
            (r#", "keep_id": true"#, false, Some("keep_id")),
            (r#", "setup": "s.sh""#, false, Some("setup")),
        ];
        for (extra, rootless, want) in table {
            match (fits(&def(extra), rootless), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.starts_with(&format!("kind \"vm\": {w}: ")), "{e}"),
                (got, want) => panic!("{extra}: {got:?}, wanted {want:?}"),
            }
        }
    }

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
        let size = super::super::agent::Size::default();
        assert_eq!(vm_size(&size), (512, 1));
        let size = super::super::agent::Size {
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
