//! warden as the first process of a virtual machine: the duties an init
//! system has that a container runtime does for a container. It mounts the
//! kernel's file systems, loads the drivers the image lists, mounts the
//! machine's disks and moves into its root file system, names the machine,
//! and at the very end powers it off: PID 1 of a VM never exits, since the
//! kernel panics when it does.
//!
//! Beside it, what only a VM has: the API's vsock listener (`vsock`) and
//! the published ports the host's relay carries in (`published_ports`).
//!
//! What the VM is made of comes from the kernel command line (the host sets
//! it; nothing in the machine can change it):
//!
//! | parameter | meaning |
//! |---|---|
//! | `root=/dev/vda` | the root file system's disk; without it, the initramfs stays the root |
//! | `rootfstype=ext4` | its file system (default ext4) |
//! | `ro` | mount it read-only |
//! | `warden.data=/dev/vdb` | a disk mounted on the runtime's `data/` |
//! | `warden.workspace=/dev/vdc` | a disk mounted on the runtime's `workspace/` |
//! | `warden.hostname=NAME` | the machine's name (else /etc/hostname, else `warden`) |
//! | `warden.vm` | treat PID 1 as a VM's even where /proc is already mounted |
//! | `warden.fault=abort` | fault injection for the host's tests: warden aborts once it is ready, as a crash would |
//!
//! The initramfs carries `/init` (warden itself), the kernel modules, their
//! load order in `/lib/modules/warden.list`, and the machine's own files
//! under `/etc/warden/` (its key, and perhaps machine.json and policy/),
//! which are moved onto the root file system before warden switches to it.

pub mod published_ports;
pub mod vsock;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::ffi::CString;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The module load order, in the initramfs: one path per line (`#`
/// comments and blank lines ignored), optionally followed by parameters.
pub const MODULE_LIST: &str = "/lib/modules/warden.list";
/// The modules of lent folders (9p over virtio), opened in the initramfs
/// and loaded before the first folder is mounted: a VM that lends none
/// does without them.
const LEND_MODULE_LIST: &str = "/lib/modules/warden-lends.list";
/// The machine's own files in the initramfs, moved onto the root disk.
const MACHINE_FILES: &str = "/etc/warden";
/// Where the root disk is mounted before warden moves into it.
const NEW_ROOT: &str = "/newroot";
/// How long a disk may take to appear once its driver is loaded.
const DISK_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("mount {what} on {target}: {source}")]
    Mount {
        what: String,
        target: String,
        source: nix::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("disk {0} did not appear within {DISK_WAIT:?} (is its driver in {MODULE_LIST}?)")]
    NoDisk(String),
    #[error("switching root to {NEW_ROOT}: {0}")]
    SwitchRoot(String),
    #[error("internal error: warden panicked while booting the VM")]
    Panicked,
    #[error("PID 1 of a PID namespace, not of a machine: not a VM (nothing done beyond mounting its own /proc)")]
    NotAMachine,
}

/// The inode of the kernel's initial PID namespace (PROC_PID_INIT_INO),
/// the same on every kernel: only a machine's own PID 1 lives there, never
/// a container's.
const INITIAL_PID_NS: &str = "pid:[4026531836]";

/// Whether this process is in the kernel's initial PID namespace (reads
/// /proc).
fn in_initial_pid_namespace() -> bool {
    std::fs::read_link("/proc/self/ns/pid").is_ok_and(|l| l.as_os_str() == INITIAL_PID_NS)
}

fn io_error(path: impl AsRef<Path>) -> impl FnOnce(std::io::Error) -> VmError {
    let path = path.as_ref().display().to_string();
    move |source| VmError::Io { path, source }
}

/// Whether this process looks like PID 1 of a virtual machine: PID 1 with
/// no /proc yet (a container runtime always mounts one), or told so by
/// `warden.vm` and in the kernel's initial PID namespace. `boot` checks
/// the namespace again once /proc is there, before it goes further.
pub fn detect() -> bool {
    if nix::unistd::getpid().as_raw() != 1 {
        return false;
    }
    if !Path::new("/proc/self/stat").exists() {
        return true;
    }
    in_initial_pid_namespace()
        && std::fs::read_to_string("/proc/cmdline")
            .is_ok_and(|c| Cmdline::parse(&c).flag("warden.vm"))
}

/// The kernel command line, as `key` or `key=value` words.
#[derive(Debug, Clone, Default)]
pub struct Cmdline {
    words: Vec<(String, Option<String>)>,
}

impl Cmdline {
    /// Pure parser (quotes are not special to warden's parameters).
    pub fn parse(text: &str) -> Cmdline {
        let words = text
            .split_whitespace()
            .take_while(|w| *w != "--")
            .map(|w| match w.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (w.to_string(), None),
            })
            .collect();
        Cmdline { words }
    }

    /// The last value given to `key` (the kernel's rule too).
    pub fn value(&self, key: &str) -> Option<&str> {
        self.words
            .iter()
            .rev()
            .find(|(k, v)| k == key && v.is_some())
            .and_then(|(_, v)| v.as_deref())
            .filter(|v| !v.is_empty())
    }

    pub fn flag(&self, key: &str) -> bool {
        self.words.iter().any(|(k, _)| k == key)
    }
}

/// The VM once booted: what warden must remember to mount its volumes and
/// to power it off.
pub struct Vm {
    pub cmdline: Cmdline,
    /// The modules loaded, for the boot line.
    pub modules: Vec<String>,
    pub root: String,
    pub hostname: String,
    /// The lent folders' modules, opened in the initramfs, loaded only
    /// if the machine config lends folders.
    lend_modules: Vec<Module>,
}

/// Boots the VM up to where a container starts: kernel file systems,
/// modules, the root disk (moved into), the rest of the kernel file
/// systems, the host name. The volumes wait for the machine config.
/// `mark` is told where each step ends (the boot line's phases).
pub fn boot(mark: &mut dyn FnMut(&'static str)) -> Result<Vm, VmError> {
    // In this order: /proc holds the command line, the modules drive the
    // root disk, and the later mounts go on the root switched to.
    mount_kernel_fs()?;
    let cmdline = Cmdline::parse(
        &std::fs::read_to_string("/proc/cmdline").map_err(io_error("/proc/cmdline"))?,
    );
    mark("vm_kernel_fs");
    let modules = load_modules(&open_modules(Path::new(MODULE_LIST)));
    let lend_modules = open_modules(Path::new(LEND_MODULE_LIST));
    mark("vm_modules");
    let root = mount_root(&cmdline, mark)?;
    mark("vm_root");
    mount_the_rest()?;
    link_dev_fds()?;
    let hostname = set_hostname(&cmdline);
    kernel_settings();
    mark("vm_mounts_and_settings");
    Ok(Vm {
        cmdline,
        modules,
        root,
        hostname,
        lend_modules,
    })
}

/// /proc, /sys and /dev; refused (NotAMachine) in a container.
fn mount_kernel_fs() -> Result<(), VmError> {
    let early = [
        (
            "proc",
            "/proc",
            "proc",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None,
        ),
        (
            "sysfs",
            "/sys",
            "sysfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None,
        ),
        (
            "devtmpfs",
            "/dev",
            "devtmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("mode=0755"),
        ),
    ];
    for (source, target, fstype, flags, data) in early {
        mount_fs(source, target, fstype, flags, data)?;
        // A container's PID 1 that has no /proc stops here: nothing of a
        // machine's (disks, modules, vsock) is ever touched from one.
        if target == "/proc" && !in_initial_pid_namespace() {
            return Err(VmError::NotAMachine);
        }
    }
    Ok(())
}

/// The root disk named on the command line, mounted, its machine files
/// moved in, and switched to; the initramfs if none is named. Returns
/// what the root is, for the boot line.
fn mount_root(cmdline: &Cmdline, mark: &mut dyn FnMut(&'static str)) -> Result<String, VmError> {
    let root = match cmdline.value("root") {
        Some(disk) => {
            let fstype = cmdline.value("rootfstype").unwrap_or("ext4");
            let mut flags = MsFlags::MS_NOATIME;
            if cmdline.flag("ro") {
                flags |= MsFlags::MS_RDONLY;
            }
            wait_for(disk)?;
            mark("vm_disk_wait");
            mount_fs(disk, NEW_ROOT, fstype, flags, None)?;
            move_machine_files(Path::new(NEW_ROOT))?;
            switch_root()?;
            format!("{disk} ({fstype})")
        }
        None => "the initramfs".to_string(),
    };
    Ok(root)
}

/// The rest of the kernel file systems, on the root: /dev/pts, /dev/shm,
/// /run, /tmp and the cgroups.
fn mount_the_rest() -> Result<(), VmError> {
    let late = [
        (
            "devpts",
            "/dev/pts",
            "devpts",
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("mode=0620,ptmxmode=0666,gid=5"),
        ),
        (
            "tmpfs",
            "/dev/shm",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777"),
        ),
        (
            "tmpfs",
            "/run",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        ),
        (
            "tmpfs",
            "/tmp",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777"),
        ),
    ];
    for (source, target, fstype, flags, data) in late {
        mount_fs(source, target, fstype, flags, data)?;
    }
    mount_cgroups()
}

/// /dev/fd and the standard streams' links.
fn link_dev_fds() -> Result<(), VmError> {
    // What a devtmpfs lacks and programs expect (bash's <(...) needs /dev/fd).
    for (link, to) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        if std::fs::symlink_metadata(link).is_err() {
            std::os::unix::fs::symlink(to, link).map_err(io_error(link))?;
        }
    }
    Ok(())
}

/// The host name: the command line's, else /etc/hostname's, else
/// "warden".
fn set_hostname(cmdline: &Cmdline) -> String {
    let hostname = cmdline
        .value("warden.hostname")
        .map(str::to_string)
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "warden".to_string());
    if let Err(e) = nix::unistd::sethostname(&hostname) {
        crate::say!("cannot set the host name {hostname:?}: {e}");
    }
    hostname
}

/// The kernel's settings warden makes: protected links and files in
/// sticky folders, and Ctrl-Alt-Del as a signal.
fn kernel_settings() {
    // What a distribution's init sets: links in shared sticky folders
    // (/tmp) followed only when their owner may, no writes through
    // others' fifos and files there. Without it shell could plant links
    // for the runtime or root to follow.
    for knob in [
        "protected_symlinks",
        "protected_hardlinks",
        "protected_fifos",
        "protected_regular",
    ] {
        let path = format!("/proc/sys/fs/{knob}");
        if let Err(e) = std::fs::write(&path, "1") {
            crate::say!("cannot set {path}: {e}");
        }
    }
    // Ctrl-Alt-Del becomes SIGINT to warden (a shutdown) instead of an
    // immediate reboot by the kernel.
    if let Err(e) = nix::sys::reboot::set_cad_enabled(false) {
        crate::say!("cannot turn Ctrl-Alt-Del into a signal: {e}");
    }
}

impl Vm {
    /// Mounts the data and workspace disks named on the command line on
    /// the runtime's `data/` and `workspace/` (the layout phase then gives
    /// them their owners and modes), then the lent folders' 9p shares at
    /// their places (after the workspace: the agent's folder is lent under
    /// it), their modules loaded first. Returns what it mounted and loaded.
    pub fn mount_volumes(
        &self,
        runtime_home: &Path,
        lends: &[crate::shared::config::VmLend],
    ) -> Result<Vec<String>, VmError> {
        let mut mounted = Vec::new();
        for (key, folder, flags) in [
            (
                "warden.data",
                "data",
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            ),
            (
                "warden.workspace",
                "workspace",
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            ),
        ] {
            let Some(disk) = self.cmdline.value(key) else {
                continue;
            };
            let target = runtime_home.join(folder);
            wait_for(disk)?;
            mount_fs(disk, &target, "ext4", flags | MsFlags::MS_NOATIME, None)?;
            mounted.push(format!("{disk} on {}", target.display()));
        }
        if !lends.is_empty() {
            let loaded = load_modules(&self.lend_modules);
            if !loaded.is_empty() {
                mounted.push(format!("modules {} (for lent folders)", loaded.join(", ")));
            }
        }
        for lend in lends {
            let (flags, mode) = lend_flags(lend.read_only);
            mount_fs(
                &lend.tag,
                &lend.at,
                "9p",
                flags,
                Some("trans=virtio,version=9p2000.L"),
            )?;
            mounted.push(format!(
                "{} (9p, {mode}) on {}",
                lend.tag,
                lend.at.display()
            ));
        }
        Ok(mounted)
    }

    /// Fault injection, for the host's tests only (`warden.fault=abort` on
    /// the command line, which only the host sets): the crash a bug would
    /// be, after the machine is ready.
    pub fn inject_fault(&self) {
        if self.cmdline.value("warden.fault") == Some("abort") {
            crate::say!("warden.fault=abort: aborting now, as a crash would");
            std::process::abort();
        }
    }
}

/// Pure: a lent folder's mount flags: never set-uid files or device nodes
/// from the host; read-only when lent to read (QEMU's share is read-only
/// too, so a remount could not make it writable).
fn lend_flags(read_only: bool) -> (MsFlags, &'static str) {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    match read_only {
        true => (flags | MsFlags::MS_RDONLY, "read-only"),
        false => (flags, "read-write"),
    }
}

/// The end of a VM: every process is killed, the disks are synced and
/// unmounted, and the VM is powered off. Never returns.
pub fn power_off(status: i32) -> ! {
    crate::say!("powering the machine off (status {status})");
    // Every process but warden (already so at a normal shutdown).
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(-1),
        nix::sys::signal::Signal::SIGKILL,
    );
    nix::unistd::sync();
    unmount_all();
    nix::unistd::sync();
    let err = match nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_POWER_OFF) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    // Only a kernel without the permission or the means gets here; exiting
    // would panic it, so warden halts instead, saying why.
    crate::say!("cannot power off: {err}; halting");
    let _ = nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_HALT_SYSTEM);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Unmounts every file system but the kernel's own, deepest first, and
/// leaves the root read-only, so nothing is lost at power-off.
fn unmount_all() {
    // As bytes: one path that is not UTF-8 must not leave every mount.
    let Ok(bytes) = std::fs::read("/proc/self/mountinfo") else {
        return;
    };
    let text = String::from_utf8_lossy(&bytes);
    let targets: Vec<String> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape)
        .collect();
    let keep = |t: &str| {
        t == "/"
            || ["/proc", "/sys", "/dev"]
                .iter()
                .any(|k| t == *k || t.starts_with(&format!("{k}/")))
    };
    for target in targets.iter().rev().filter(|t| !keep(t)) {
        if let Err(e) = umount2(target.as_str(), MntFlags::empty()) {
            crate::say!("unmount {target}: {e}; detaching it");
            let _ = umount2(target.as_str(), MntFlags::MNT_DETACH);
        }
    }
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    if let Err(e) = mount(None::<&str>, "/", None::<&str>, flags, None::<&str>) {
        crate::say!("cannot remount / read-only: {e}");
    }
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let mut out = Vec::new();
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        if bytes[i] == b'\\' {
            if let Some(n) = octal {
                out.push(n);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mounts one file system, making its mount point; one already there
/// (EBUSY) is fine.
fn mount_fs(
    source: &str,
    target: impl AsRef<Path>,
    fstype: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), VmError> {
    let target = target.as_ref();
    std::fs::create_dir_all(target).map_err(io_error(target))?;
    match mount(Some(source), target, Some(fstype), flags, data) {
        Ok(()) | Err(nix::Error::EBUSY) => Ok(()),
        Err(source_err) => Err(VmError::Mount {
            what: format!("{source} ({fstype})"),
            target: target.display().to_string(),
            source: source_err,
        }),
    }
}

/// The cgroup2 hierarchy, favouring moves: every command joins a cgroup
/// of its own, and without `favordynmods` (Linux 6.0) each move waits for
/// an RCU grace period (about 15 ms under emulation), at the price of
/// slightly dearer forks and exits. A kernel without the option mounts it
/// plainly, saying so.
fn mount_cgroups() -> Result<(), VmError> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let at = "/sys/fs/cgroup";
    mount_fs("cgroup2", at, "cgroup2", flags, Some("favordynmods")).or_else(|e| {
        crate::say!("cgroup2 without favordynmods ({e}): each command's move into its cgroup waits for an RCU grace period");
        mount_fs("cgroup2", at, "cgroup2", flags, None)
    })
}

/// A module of a list, opened: it can be loaded after the initramfs is
/// left behind.
struct Module {
    /// Its file's name without `.ko`, for the boot line.
    name: String,
    path: String,
    params: String,
    file: std::io::Result<std::fs::File>,
}

/// The modules of `list` (one path per line, optionally followed by
/// parameters; `#` comments), opened, in order; none if there is no list.
fn open_modules(list: &Path) -> Vec<Module> {
    let Ok(text) = std::fs::read_to_string(list) else {
        return Vec::new();
    };
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (path, params) = line.split_once(' ').unwrap_or((line, ""));
            let name = Path::new(path)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.to_string());
            Module {
                name,
                path: path.to_string(),
                params: params.trim().to_string(),
                file: std::fs::File::open(path),
            }
        })
        .collect()
}

/// Loads `modules`, in order, with finit_module; returns the names of
/// those loaded. A module that is already there (or built in) is fine;
/// one that fails is said, and the layer that needed it will say it does
/// not hold.
fn load_modules(modules: &[Module]) -> Vec<String> {
    let mut loaded = Vec::new();
    for module in modules {
        let result = match &module.file {
            Err(e) => Err(e.to_string()),
            Ok(file) => CString::new(module.params.as_str())
                .map_err(|e| e.to_string())
                .and_then(|params| {
                    let flags = nix::kmod::ModuleInitFlags::empty();
                    match nix::kmod::finit_module(file, &params, flags) {
                        Ok(()) | Err(nix::Error::EEXIST) => Ok(()),
                        Err(e) => Err(e.to_string()),
                    }
                }),
        };
        match result {
            Ok(()) => loaded.push(module.name.clone()),
            Err(e) => crate::say!("module {}: {e}", module.path),
        }
    }
    loaded
}

/// Waits for a disk's device node (its driver probes it asynchronously).
fn wait_for(disk: &str) -> Result<(), VmError> {
    let deadline = Instant::now() + DISK_WAIT;
    while !Path::new(disk).exists() {
        if Instant::now() > deadline {
            return Err(VmError::NoDisk(disk.to_string()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Moves the machine's own files (its key, perhaps its config and policy)
/// from the initramfs onto the root disk, replacing what the image had;
/// they are removed from the initramfs, which stays in memory.
fn move_machine_files(new_root: &Path) -> Result<(), VmError> {
    let from = Path::new(MACHINE_FILES);
    if !from.is_dir() {
        return Ok(());
    }
    let to = new_root.join(MACHINE_FILES.trim_start_matches('/'));
    copy_tree(from, &to)?;
    std::fs::remove_dir_all(from).map_err(io_error(from))
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), VmError> {
    std::fs::create_dir_all(to).map_err(io_error(to))?;
    // warden alone reads them (as root): not shell, whose Landlock grants
    // it /etc to read, nor the runtime (the config holds the main
    // process's command line and environment).
    std::os::unix::fs::chown(to, Some(0), Some(0)).map_err(io_error(to))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).map_err(io_error(to))?;
    for entry in std::fs::read_dir(from).map_err(io_error(from))? {
        let entry = entry.map_err(io_error(from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let meta = entry.metadata().map_err(io_error(&src))?;
        if meta.is_dir() {
            copy_tree(&src, &dst)?;
            continue;
        }
        // Written with the source's mode from the start (a key is 0600 at
        // every moment), replacing whatever the image had there.
        let mode = meta.permissions().mode() & 0o777;
        let _ = std::fs::remove_file(&dst);
        let bytes = std::fs::read(&src).map_err(io_error(&src))?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&dst)
            .map_err(io_error(&dst))?;
        std::io::Write::write_all(&mut file, &bytes).map_err(io_error(&dst))?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io_error(&dst))?;
        std::os::unix::fs::chown(&dst, Some(0), Some(0)).map_err(io_error(&dst))?;
    }
    Ok(())
}

/// Moves the kernel's file systems and then the new root over `/`, and
/// enters it (what switch_root does; warden stays PID 1, the same process).
fn switch_root() -> Result<(), VmError> {
    let fail = |what: &str, e: nix::Error| VmError::SwitchRoot(format!("{what}: {e}"));
    for fs in ["/dev", "/proc", "/sys"] {
        let target = PathBuf::from(NEW_ROOT).join(&fs[1..]);
        std::fs::create_dir_all(&target).map_err(io_error(&target))?;
        mount(
            Some(fs),
            &target,
            None::<&str>,
            MsFlags::MS_MOVE,
            None::<&str>,
        )
        .map_err(|e| fail(&format!("move {fs}"), e))?;
    }
    nix::unistd::chdir(NEW_ROOT).map_err(|e| fail("chdir", e))?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(|e| fail("move the new root onto /", e))?;
    nix::unistd::chroot(".").map_err(|e| fail("chroot", e))?;
    nix::unistd::chdir("/").map_err(|e| fail("chdir /", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_table() {
        let c = Cmdline::parse(
            "console=ttyS0 root=/dev/vda ro warden.data=/dev/vdb warden.hostname= root=/dev/vdz -- init x=1",
        );
        let cases = [
            ("root", Some("/dev/vdz")),
            ("console", Some("ttyS0")),
            ("warden.data", Some("/dev/vdb")),
            ("warden.hostname", None),
            ("warden.workspace", None),
            ("ro", None),
            ("x", None),
        ];
        for (key, want) in cases {
            assert_eq!(c.value(key), want, "{key}");
        }
        assert!(c.flag("ro"));
        assert!(
            !c.flag("init"),
            "words after -- are init's, not the kernel's"
        );
        assert!(!c.flag("warden.vm"));
    }

    #[test]
    fn lends_mount_without_setuid_or_devices_and_read_only_when_read() {
        let (flags, mode) = lend_flags(true);
        assert!(flags.contains(MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV));
        assert_eq!(mode, "read-only");
        let (flags, mode) = lend_flags(false);
        assert!(!flags.contains(MsFlags::MS_RDONLY));
        assert!(flags.contains(MsFlags::MS_NOSUID | MsFlags::MS_NODEV));
        assert_eq!(mode, "read-write");
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape(r"/home/a\040b"), "/home/a b");
        assert_eq!(unescape(r"/x\\"), r"/x\\");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
