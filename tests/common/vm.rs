//! A warden micro-VM for the tests: QEMU's software emulation (never KVM
//! here), the guest's vsock carried by vhost-device-vsock to a unix socket
//! on the host, and what machine/vm/build made (kernel, initramfs, root
//! disk, empty volumes).
//!
//! Everything runs under `guard()`: a seccomp filter on the whole test
//! process, inherited by every thread and child (QEMU, vhost-device-vsock),
//! that makes socket(AF_VSOCK) fail. vsock on this host belongs to whatever
//! runs it; the host side of a VM's vsock is always a unix socket.

use super::skipped;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use warden::host::vm::Kit;
use warden::wire::client::{Client, ClientError};

/// The guest's CID, and warden's vsock port (its default).
pub const GUEST_CID: u32 = 3;
pub const PORT: u32 = warden::wire::vsock_ports::DEFAULT_PORT;

/// Installs the AF_VSOCK guard on every thread of this process (once;
/// threads and children made later inherit it): socket(AF_VSOCK, ...)
/// fails with EAFNOSUPPORT, and io_uring, which can make sockets without
/// the socket call, is not there (ENOSYS). Call it first in every test.
pub fn guard() {
    static GUARD: OnceLock<()> = OnceLock::new();
    GUARD.get_or_init(|| {
        let on_vsock = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            libc::AF_VSOCK as u64,
        )
        .unwrap();
        let refuse_vsock = SeccompFilter::new(
            [(
                libc::SYS_socket,
                vec![SeccompRule::new(vec![on_vsock]).unwrap()],
            )]
            .into(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
            TargetArch::x86_64,
        )
        .unwrap();
        let no_io_uring = SeccompFilter::new(
            [(libc::SYS_io_uring_setup, vec![])].into(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            TargetArch::x86_64,
        )
        .unwrap();
        for filter in [refuse_vsock, no_io_uring] {
            let program: BpfProgram = filter.try_into().unwrap();
            seccompiler::apply_filter_all_threads(&program)
                .expect("cannot install the AF_VSOCK guard: no VM test may run without it");
        }
        assert!(guard_active(), "the AF_VSOCK guard is not in place");
    });
}

/// Whether this thread runs under seccomp filters (the guard's among them).
pub fn guard_active() -> bool {
    std::fs::read_to_string("/proc/thread-self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Seccomp:", "2"])
}

/// One VM at a time: two TCG guests on two cores would only slow each
/// other and blur the figures.
/// What every VM test does first: the guard, root, the kit; then its turn
/// (held while the returned guard lives). None: skipped, and said why.
pub fn ready(test: &str) -> Option<MutexGuard<'static, ()>> {
    guard();
    if !super::privileged(test) || kit(test).is_none() {
        return None;
    }
    Some(one_at_a_time())
}

pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Finds the launcher's kit (warden::host::vm::kit: kernel, initramfs,
/// volumes, QEMU, vhost-device-vsock) and what the tests need beside it
/// (machine/vm/build's shared root disk, debugfs and e2fsck to read the
/// volumes), or says why not: under CI=true a missing piece fails the test;
/// elsewhere the test skips, saying why.
pub fn kit(test: &str) -> Option<Kit> {
    let found = warden::host::vm::kit();
    let mut missing: Vec<String> = found
        .as_ref()
        .err()
        .map(ToString::to_string)
        .into_iter()
        .collect();
    if let Ok(kit) = &found {
        if !kit.dir.join("rootfs.ext4").exists() {
            missing.push("rootfs.ext4 (machine/vm/build makes it)".into());
        }
    }
    for tool in ["debugfs", "e2fsck"] {
        if !["/usr/sbin", "/sbin", "/usr/bin"]
            .iter()
            .any(|d| Path::new(d).join(tool).exists())
        {
            missing.push(format!("{tool} (apt: e2fsprogs)"));
        }
    }
    match found {
        Ok(kit) if missing.is_empty() => return Some(kit),
        _ => {}
    }
    let reason = format!("{test}: missing {}", missing.join(", "));
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason}; CI=true forbids skipping");
    }
    skipped(&reason);
    None
}

#[derive(Default, Clone)]
pub struct Options {
    /// Words added to the kernel command line.
    pub cmdline: Vec<String>,
    /// /etc/warden/machine.json for the machine, carried by its initramfs.
    pub machine_json: Option<Value>,
}

pub struct Vm {
    pub dir: tempfile::TempDir,
    pub key: String,
    qemu: Option<Child>,
    vhost: Child,
    /// When QEMU was started.
    pub launched: Instant,
    qemu_exit: Option<ExitStatus>,
    /// What to launch it again from, once, should its kernel panic early.
    again: Option<(Kit, Options)>,
}

impl Vm {
    /// Starts vhost-device-vsock, then QEMU; does not wait for warden.
    pub fn launch(kit: &Kit, opts: Options) -> Vm {
        assert!(guard_active(), "launch a VM only under the AF_VSOCK guard");
        let again = Some((kit.clone(), opts.clone()));
        let dir = tempfile::Builder::new()
            .prefix("warden-vm-")
            .tempdir()
            .unwrap();
        let run = dir.path();
        let key = random_key();
        let initrd = initramfs_with_the_machines_files(kit, run, &key, &opts);
        copy_the_volumes(kit, run);
        let (vhost, vhost_sock) = start_vhost_device_vsock(kit, run);
        let cmdline = kernel_command_line(opts.cmdline);
        let mut qemu = qemu_command(kit, run, &initrd, &vhost_sock, &cmdline);
        let launched = Instant::now();
        let qemu = qemu.spawn().expect("qemu-system-x86_64");
        Vm {
            dir,
            key,
            qemu: Some(qemu),
            vhost,
            launched,
            qemu_exit: None,
            again,
        }
    }

    pub fn vsock_path(&self) -> PathBuf {
        self.dir.path().join("vsock.sock")
    }

    pub fn connect_with(&self, key: &str) -> Result<Client, ClientError> {
        Client::connect_hybrid_vsock(&self.vsock_path(), PORT, key, None)
    }

    pub fn client(&self) -> Client {
        self.connect_with(&self.key)
            .unwrap_or_else(|e| panic!("connect over vsock: {e}\n{}", self.console()))
    }

    /// Waits until warden answers over vsock; returns the time from
    /// QEMU's launch. As the launcher does, it connects only once warden
    /// has said on the console that it is ready: vhost-device-vsock 0.3.0
    /// may leave later connections unanswered after one made before the
    /// guest listened (seen here, about one boot in twenty).
    /// A guest kernel that panics before warden is ready (an emulated
    /// one does now and then) is launched once more, as the launcher does.
    pub fn wait_ready(&mut self, limit: Duration) -> Duration {
        loop {
            let deadline = self.launched + limit;
            let ready = self.serial().contains("warden: ready in ");
            if ready && self.connect_with(&self.key).is_ok() {
                return self.launched.elapsed();
            }
            if let Some(reason) = warden::host::vm::early_panic(&self.serial()) {
                if let Some((kit, opts)) = self.again.take() {
                    eprintln!("the guest kernel panicked before warden was ready ({reason}): launched once more\n{}", self.console());
                    *self = Vm::launch(&kit, opts);
                    self.again = None;
                    continue;
                }
            }
            if let Some(status) = self.exited() {
                panic!(
                    "QEMU exited ({status}) before warden was ready\n{}",
                    self.console()
                );
            }
            assert!(
                Instant::now() < deadline,
                "warden not ready over vsock within {limit:?}\n{}",
                self.console()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// QEMU's exit status, once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.qemu_exit.is_none() {
            if let Some(qemu) = self.qemu.as_mut() {
                self.qemu_exit = qemu.try_wait().unwrap();
            }
        }
        self.qemu_exit
    }

    /// Waits for QEMU to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The serial console so far.
    pub fn serial(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serial.log")).unwrap_or_default()
    }

    /// The serial console and QEMU's own errors, for failure messages.
    pub fn console(&self) -> String {
        let err = std::fs::read_to_string(self.dir.path().join("qemu.err")).unwrap_or_default();
        format!(
            "--- serial console ---\n{}\n--- qemu ---\n{err}",
            self.serial()
        )
    }

    /// A file of the data disk (the runtime's `data/`), read on the host
    /// with debugfs: only once QEMU has exited.
    pub fn data_file(&self, path: &str) -> String {
        let disk = self.dir.path().join("data.ext4");
        let out = Command::new("debugfs")
            .args(["-R", &format!("cat {path}")])
            .arg(&disk)
            .stderr(Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether a volume's file system is clean (e2fsck -n finds nothing):
    /// it was unmounted before the power went off.
    pub fn volume_clean(&self, volume: &str) -> (bool, String) {
        let out = Command::new("e2fsck")
            .args(["-f", "-n"])
            .arg(self.dir.path().join(volume))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if let Some(mut qemu) = self.qemu.take() {
            let _ = qemu.kill();
            let _ = qemu.wait();
        }
        let _ = self.vhost.kill();
        let _ = self.vhost.wait();
    }
}

/// The kit's initramfs in `run`, with the machine's own files appended as
/// a second cpio archive: its `key`, and `opts`' machine.json.
fn initramfs_with_the_machines_files(kit: &Kit, run: &Path, key: &str, opts: &Options) -> PathBuf {
    // The machine's own files, appended to the initramfs as a second
    // cpio archive: warden moves them onto the root disk.
    let stage = run.join("stage/etc/warden");
    std::fs::create_dir_all(&stage).unwrap();
    std::fs::write(stage.join("key"), key).unwrap();
    std::fs::set_permissions(stage.join("key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    if let Some(config) = &opts.machine_json {
        std::fs::write(stage.join("machine.json"), config.to_string()).unwrap();
    }
    let initrd = run.join("initrd.gz");
    std::fs::copy(kit.dir.join("initrd.gz"), &initrd).unwrap();
    let pack = format!(
        "cd {} && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip >> {}",
        run.join("stage").display(),
        initrd.display()
    );
    assert!(Command::new("sh")
        .args(["-c", &pack])
        .status()
        .unwrap()
        .success());
    initrd
}

/// The kit's data and workspace volumes, copied (sparse) into `run`.
fn copy_the_volumes(kit: &Kit, run: &Path) {
    for volume in ["data.ext4", "workspace.ext4"] {
        let copied = Command::new("cp")
            .arg("--sparse=always")
            .arg(kit.dir.join(volume))
            .arg(run.join(volume))
            .status()
            .unwrap();
        assert!(copied.success());
    }
}

/// vhost-device-vsock for the guest, its socket in `run` (waited for), its
/// unix socket for the host's end `run`/vsock.sock.
fn start_vhost_device_vsock(kit: &Kit, run: &Path) -> (Child, PathBuf) {
    let vhost_sock = run.join("vhost.sock");
    let vhost = Command::new(&kit.vhost)
        .args(["--guest-cid", &GUEST_CID.to_string(), "--socket"])
        .arg(&vhost_sock)
        .arg("--uds-path")
        .arg(run.join("vsock.sock"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(run.join("vhost.log")).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("vhost-device-vsock");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !vhost_sock.exists() {
        assert!(
            Instant::now() < deadline,
            "vhost-device-vsock made no socket"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    (vhost, vhost_sock)
}

/// The guest kernel's command line, with `extra` words at its end.
fn kernel_command_line(extra: Vec<String>) -> Vec<String> {
    let mut cmdline = vec![
        "console=ttyS0".to_string(),
        "quiet".into(),
        "pci=off".into(),
        "panic=-1".into(),
        format!("tsc_early_khz={}", tsc_khz()),
        "root=/dev/vda".into(),
        "rw".into(),
        "warden.data=/dev/vdb".into(),
        "warden.workspace=/dev/vdc".into(),
        "warden.hostname=warden-test-vm".into(),
    ];
    cmdline.extend(extra);
    cmdline
}

/// QEMU for the kit's kernel and `initrd`, its disks and logs in `run`, its
/// vsock through `vhost_sock`.
fn qemu_command(
    kit: &Kit,
    run: &Path,
    initrd: &Path,
    vhost_sock: &Path,
    cmdline: &[String],
) -> Command {
    let drive = |file: &Path, id: &str, extra: &str| {
        format!("file={},format=raw,if=none,id={id}{extra}", file.display())
    };
    let mut qemu = Command::new(&kit.qemu);
    // cx16=off: QEMU 7.2's emulation of cmpxchg16b (the guest's slab
    // allocator's fast path) corrupts flags and panics about one boot
    // in three; without it the kernel uses its fallback.
    qemu.args(["-accel", "tcg", "-cpu", "max,cx16=off"])
        .args(["-M", "microvm,memory-backend=mem"])
        .args(["-m", "512", "-smp", "1"])
        .args(["-object", "memory-backend-memfd,id=mem,size=512M,share=on"])
        .args(["-display", "none", "-no-reboot", "-net", "none"])
        .arg("-serial")
        .arg(format!("file:{}", run.join("serial.log").display()))
        .arg("-chardev")
        .arg(format!("socket,id=vhu,path={}", vhost_sock.display()))
        .args(["-device", "vhost-user-vsock-device,chardev=vhu"])
        // The root disk is shared by every test VM: their writes go to
        // a throwaway overlay.
        .arg("-drive")
        .arg(drive(&kit.dir.join("rootfs.ext4"), "root", ",snapshot=on"))
        .args(["-device", "virtio-blk-device,drive=root"])
        .arg("-drive")
        .arg(drive(&run.join("data.ext4"), "data", ""))
        .args(["-device", "virtio-blk-device,drive=data"])
        .arg("-drive")
        .arg(drive(&run.join("workspace.ext4"), "work", ""))
        .args(["-device", "virtio-blk-device,drive=work"])
        .arg("-kernel")
        .arg(kit.dir.join("vmlinuz"))
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(cmdline.join(" "))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(run.join("qemu.log")).unwrap())
        .stderr(std::fs::File::create(run.join("qemu.err")).unwrap());
    qemu
}

/// A fresh machine key: 48 hex characters from the kernel's random pool.
fn random_key() -> String {
    let mut bytes = [0u8; 24];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut bytes,
    )
    .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The host CPU's clock in kHz (the launcher reads it the same way).
fn tsc_khz() -> u64 {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    warden::host::vm::tsc_khz(&info).expect("no cpu MHz in /proc/cpuinfo")
}
