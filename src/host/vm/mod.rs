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
//! overlay). QEMU runs under KVM where `/dev/kvm` can run a guest
//! (`accel.rs` probes it), else with software emulation, saying why. Each
//! lent folder is a 9p share of QEMU's, mounted by the guest's warden at
//! the lend's `at`.
//!
//! The host reaches warden through `vsock.sock` ("CONNECT <port>"), with the
//! machine's key, and stops it with the protocol's `shutdown` request. A VM
//! with a network has no network device either: its proxy reaches out
//! through the host's egress relay (`egress.rs`, `vsock.sock_1025`).
//! `rm` and `down` empty the VM's folder, `down` keeping its disks, and
//! `ps` reads its row from it (`folder.rs`).

pub mod accel;
mod disks;
pub mod egress;
pub mod folder;
pub mod monitor;
pub mod ports;
mod qemu;
pub mod relay;
pub mod vhost;

use disks::{copy_sparse, initrd, rootfs, VOLUMES};
use folder::IMAGE_FILE;
pub use folder::{down, ids, list, remove};
use qemu::launch;
pub use qemu::{
    kit, lend_tag, qemu_args, tsc_khz, vm_size, Kit, QemuPlan, GUEST_CID, KIT, KIT_VAR,
};

use super::backend::{Backend, Made, Prepared};
use super::create::{RUNTIME_UID, SHELL_UID};
use super::definition::{Definition, Kind, Lend, Network, Workspace};
use super::error::LaunchError;
use super::ps::Row;
use super::state::{container, key, state_dir, write_machine_files};
use super::this_host::Host;
use super::{sha256_hex, step};
use crate::wire::client::{Client, Message};
use crate::wire::{Event, Request};
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Software emulation boots in seconds here; a loaded host takes longer.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The most folders a VM is lent: each is a virtio device, and microvm
/// has room for a few dozen beside the disks and vsock.
pub const MAX_LENDS: usize = 16;

/// How long `stop` waits for the power to go off before it kills QEMU.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The VM backend.
pub struct Vm;

impl Backend for Vm {
    fn noun(&self) -> &'static str {
        "VM"
    }

    fn fits(&self, def: &Definition, host: &Host) -> Result<(), LaunchError> {
        fits(def, host.rootless)
    }

    fn up(&self, p: &Prepared, _made: &mut Made) -> Result<(), LaunchError> {
        let main = main_process(p.def, &p.image.name)?;
        write_machine_files(p.def, &p.state, p.host, Some(&main))?;
        // The keys travel in the VM's initramfs: new values remake it.
        let inputs = sha256_hex(format!("{}\0{}", p.digest, p.keys_text).as_bytes());
        let image = (p.image.name.as_str(), p.image_id.as_str());
        up(p.def, image, &inputs, p.keys_text, p.start)?;
        // In warden's memory alone: handed at every `up`, kept VM or not.
        let handed =
            super::agent_setup::hand_credentials(p.credentials_text, || connect(&p.def.id, None))?;
        if handed > 0 {
            step(p.start, &format!("credentials handed to warden: {handed}"));
        }
        setup(p)
    }

    fn start(&self, id: &str) -> Result<(), LaunchError> {
        Err(LaunchError::new(
            format!("machine {id}"),
            "--start is for containers; `warden machine up` starts a VM",
        ))
    }

    fn stop(&self, id: &str) -> Result<(), LaunchError> {
        stop(id)
    }

    fn logs(&self, id: &str) -> Result<(), LaunchError> {
        logs(id)
    }

    fn remove(&self, id: &str, volumes: bool) -> Result<(), LaunchError> {
        remove(id, volumes)
    }

    fn connect(&self, id: &str, first: Option<(u32, &Request)>) -> Result<Client, LaunchError> {
        connect(id, first)
    }

    fn copy_audit(&self, id: &str, copy: &Path) -> Result<bool, LaunchError> {
        std::fs::create_dir(copy).map_err(|e| LaunchError::io(copy, e))?;
        copy_audit(id, copy)
    }

    fn list(&self) -> Result<Vec<Row>, LaunchError> {
        Ok(list())
    }

    fn down(&self, id: &str) -> Result<(), LaunchError> {
        down(id)
    }

    fn ids(&self) -> Result<Vec<String>, LaunchError> {
        Ok(ids())
    }
}

/// The VM's main process, which its warden starts as runtime: the
/// definition's `command`, else the CMD of an image built for warden (its
/// entrypoint is warden, and CMD its main process); none otherwise.
fn main_process(def: &Definition, image: &str) -> Result<Vec<String>, LaunchError> {
    if let Some(command) = &def.command {
        return Ok(command.clone());
    }
    let inspect = |what: &str| {
        super::engine::run(
            "inspect image",
            &["image", "inspect", "--format", what, image],
        )
    };
    let entry = inspect("{{json .Config.Entrypoint}}")?;
    if !super::create::entrypoint_is_warden(&entry) {
        return Ok(Vec::new());
    }
    let cmd = inspect("{{json .Config.Cmd}}")?;
    Ok(serde_json::from_str::<Option<Vec<String>>>(cmd.trim())
        .ok()
        .flatten()
        .unwrap_or_default())
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
pub fn fits(def: &Definition, rootless: bool) -> Result<(), LaunchError> {
    let refuse =
        |what: &str, why: &str| Err(LaunchError::new("kind \"vm\"", format!("{what}: {why}")));
    if rootless {
        return refuse(
            "rootless",
            "a VM is made as root here: its root disk is exported from root's image storage, and its kit (/var/cache/warden-machine/vm), its state and its relay are root's; run `sudo warden machine up`",
        );
    }
    if def.lend.len() > MAX_LENDS {
        return refuse(
            "lend",
            &format!(
                "{} folders; a VM takes at most {MAX_LENDS} (each is a device of its own)",
                def.lend.len()
            ),
        );
    }
    if let Workspace::Folder(_) = def.workspace {
        return refuse(
            "workspace",
            "a VM's workspace is its own disk, not a host folder",
        );
    }
    match &def.network {
        Network::None | Network::Namespace(_) => {}
        Network::Private => {}
        Network::Host => {
            return refuse(
                "network",
                "\"host\" is for rootless containers; a VM reaches out through its host's relay: \"private\" (the host's network) or a namespace's path",
            )
        }
    }
    if def.network != Network::None && def.hosts.is_none() {
        return refuse(
            "network",
            "a VM with a network needs `hosts`: its relay on the host decides by the machine's own list, and cannot learn the default list from inside the guest",
        );
    }
    let served = super::definition::serve_fits(
        def.sleep.serve,
        def.sleep.idle,
        !def.ports.is_empty(),
        Kind::Vm,
    );
    if let Err(why) = served {
        return refuse("serve", why);
    }
    if def.keep_id.is_on() {
        return refuse(
            "keep_id",
            &format!("needs rootless podman, and a VM is made as root: as in a rootful container, files written in lent folders belong to the machine's uids on the host ({RUNTIME_UID}, {SHELL_UID})"),
        );
    }
    Ok(())
}

/// Makes (or keeps) and starts the VM. `inputs` digests everything the
/// machine is made of; the same inputs on a running VM keep it.
pub fn up(
    def: &Definition,
    image: (&str, &str),
    inputs: &str,
    keys_text: &str,
    start: Instant,
) -> Result<(), LaunchError> {
    let kit = kit()?;
    let vm = dir(&def.id);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&vm)
        .map_err(|e| LaunchError::io(&vm, e))?;
    let recorded = vm.join("inputs");
    let same = std::fs::read_to_string(&recorded).is_ok_and(|d| d == inputs);
    if running(&def.id) {
        if same {
            step(start, &format!("{}: unchanged, kept", container(&def.id)));
            return Ok(());
        }
        stop(&def.id)?;
        step(start, "inputs changed: the old VM powered off");
    }
    lent_folders(&def.lend)?;
    let rootfs = rootfs(&kit, image)?;
    step(start, &format!("root disk {}", rootfs.display()));
    let named = vm.join(IMAGE_FILE);
    std::fs::write(&named, image.0).map_err(|e| LaunchError::io(&named, e))?;
    for volume in VOLUMES {
        if !vm.join(volume).exists() {
            copy_sparse(&kit.dir.join(volume), &vm.join(volume))?;
        }
    }
    initrd(&kit, def, keys_text)?;
    // Recorded only once the VM answers: one that never did is not kept.
    let _ = std::fs::remove_file(&recorded);
    let accel = accel::verdict(&accel::probe());
    step(start, &accel.line());
    // An emulated guest kernel now and then panics early in boot (seen:
    // "Fatal exception in interrupt" under software emulation): started
    // once more, and said, rather than failed.
    let mut again = false;
    loop {
        boot(&kit, def, &rootfs, &accel, start)?;
        let Err(e) = wait_ready(&def.id) else { break };
        kill(&def.id);
        let console = std::fs::read_to_string(dir(&def.id).join("serial.log"));
        match early_panic(&console.unwrap_or_default()) {
            Some(reason) if !again => {
                step(start, &format!("the guest kernel panicked before warden answered ({reason}): starting it once more"));
                again = true;
            }
            _ => return Err(e),
        }
    }
    step(start, "warden answers over vsock");
    for line in ports::published(&def.id) {
        step(start, &format!("published: {line}"));
    }
    // An image without what the definition requires is not kept running.
    if let Err(e) = super::agent_setup::check_requires(def, || connect(&def.id, None)) {
        let _ = stop(&def.id);
        return Err(e);
    }
    std::fs::write(&recorded, inputs).map_err(|e| LaunchError::io(&recorded, e))
}

/// Starts the VM's relay (where it needs one), its vsock backend and QEMU.
fn boot(
    kit: &Kit,
    def: &Definition,
    rootfs: &Path,
    accel: &accel::Accel,
    start: Instant,
) -> Result<(), LaunchError> {
    if relay::needed(def) {
        let ports = super::agent_setup::host_ports(def)?;
        relay::start(def, &ports)?;
        step(start, "the VM's relay listening (egress, published ports)");
    }
    let size = vm_size(&def.size);
    launch(kit, &def.id, rootfs, size, accel, &def.lend)?;
    let how = match accel {
        accel::Accel::Kvm => "KVM",
        accel::Accel::Tcg(_) => "software emulation",
    };
    step(
        start,
        &format!(
            "QEMU started ({how}; {} CPU, {} MiB; {} lent folder(s))",
            size.1,
            size.0,
            def.lend.len()
        ),
    );
    Ok(())
}

/// Pure: the reason a guest kernel gave for a panic on its console before
/// warden said it was ready, where starting again may cure it. Not when
/// PID 1 ended ("Attempted to kill init"): warden itself failed, and would
/// again.
pub fn early_panic(console: &str) -> Option<String> {
    if console.contains("warden: ready in ") {
        return None;
    }
    let line = console.lines().find(|l| l.contains("Kernel panic"))?;
    if line.contains("Attempted to kill init") {
        return None;
    }
    let from = line.find("Kernel panic").unwrap_or(0);
    Some(line[from..].trim().to_string())
}

/// Runs the definition's `setup` as the runtime, through the VM's warden
/// (`run_setup`), once for these inputs: a failed one runs again at the
/// next `up`, and its output is the error.
fn setup(p: &Prepared) -> Result<(), LaunchError> {
    let (Some(script), Some(digest)) = (&p.def.setup, &p.setup_digest) else {
        return Ok(());
    };
    // A VM's disks live in its state folder: the digest beside them.
    let done = p.state.join("setup.done");
    if p.setup_ran(script, std::fs::read_to_string(&done).ok().as_deref()) {
        return Ok(());
    }
    let named = || format!("setup {}", script.display());
    let text =
        std::fs::read_to_string(script).map_err(|e| LaunchError::new(named(), e.to_string()))?;
    let (status, output) = connect(&p.def.id, None)?
        .run_setup(&text)
        .map_err(|e| LaunchError::new(named(), e.to_string()))?;
    if status != 0 {
        // The script's whole output, on lines of their own.
        return Err(LaunchError::sentence(format!(
            "{} failed (exit status {status}):\n{output}",
            named()
        )));
    }
    std::fs::write(&done, digest).map_err(|e| LaunchError::io(&done, e))?;
    step(p.start, &format!("{} ran", named()));
    Ok(())
}

/// Each lend's host side is a folder (9p shares folders, not files),
/// checked before QEMU is started so that `up` says which one is not.
fn lent_folders(lends: &[Lend]) -> Result<(), LaunchError> {
    for (i, lend) in lends.iter().enumerate() {
        match std::fs::metadata(&lend.host) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(LaunchError::new(
                    format!("lend[{i}].host {}", lend.host.display()),
                    "not a folder: a VM is lent folders only (9p shares folders)",
                ))
            }
            Err(e) => return Err(LaunchError::io(&lend.host, e)),
        }
    }
    Ok(())
}

/// QEMU's pid, when that process is this machine's QEMU.
fn qemu_pid(id: &str) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(dir(id).join("qemu.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let name = container(id);
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
fn wait_ready(id: &str) -> Result<(), LaunchError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let serial = dir(id).join("serial.log");
    loop {
        let ready =
            std::fs::read_to_string(&serial).is_ok_and(|text| text.contains("warden: ready in "));
        let error = match ready {
            true => match connect(id, None) {
                Ok(_) => return Ok(()),
                Err(e) => e.to_string(),
            },
            false => "warden has not said it is ready on the console".into(),
        };
        // A kernel that panicked may not have ended QEMU yet: no wait.
        let console = std::fs::read_to_string(&serial).unwrap_or_default();
        if let Some(reason) = early_panic(&console) {
            return Err(LaunchError::sentence(format!(
                "the guest kernel panicked before warden answered ({reason}); its console's last lines:\n{}",
                console_tail(id, 15)
            )));
        }
        if !running(id) {
            stop_backend(id);
            // The console's lines follow: a sentence with no step.
            return Err(LaunchError::sentence(format!(
                "the VM stopped before warden answered; its console's last lines:\n{}",
                console_tail(id, 15)
            )));
        }
        if Instant::now() > deadline {
            return Err(LaunchError::new(
                format!(
                    "warden did not answer over vsock in {} s",
                    READY_TIMEOUT.as_secs()
                ),
                format!(
                    "{error}; the console's last lines:\n{}",
                    console_tail(id, 15)
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Connects to the VM's warden through the host's end of its vsock.
pub fn connect(id: &str, first: Option<(u32, &Request)>) -> Result<Client, LaunchError> {
    let key = key(id)?;
    let path = dir(id).join("vsock.sock");
    if !path.exists() && monitor::hidden(id) {
        // Frozen: its vsock's socket is hidden until the thaw.
        return Err(LaunchError::new(
            format!("machine {id} (VM)"),
            "it is frozen (warden machine serve paused it): a request to its door thaws it",
        ));
    }
    Client::connect_hybrid_vsock(&path, crate::wire::vsock_ports::DEFAULT_PORT, &key, first)
        .map_err(|e| LaunchError::new(format!("machine {id} (VM)"), e.to_string()))
}

/// Asks warden to stop and power off; kills QEMU after the grace period.
pub fn stop(id: &str) -> Result<(), LaunchError> {
    if let Some(pid) = qemu_pid(id) {
        let asked = connect(id, None)
            .map_err(|e| e.to_string())
            .and_then(|mut c| {
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
            return Err(LaunchError::new(
                format!("machine {id}"),
                format!(
                    "the VM did not power off within {} s ({}); QEMU was killed",
                    STOP_GRACE.as_secs(),
                    asked.err().unwrap_or_else(|| "shutdown asked".into())
                ),
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

/// Ends the machine's vhost-device-vsock and its egress relay.
pub(super) fn stop_backend(id: &str) {
    for file in ["vhost.pid", "relay.pid"] {
        let pid = std::fs::read_to_string(dir(id).join(file))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            let is_ours = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c).contains(&dir(id).display().to_string())
            });
            if is_ours {
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                // Gone before a new one takes its ports and sockets.
                let deadline = Instant::now() + Duration::from_secs(2);
                while nix::sys::signal::kill(pid, None).is_ok() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        let _ = std::fs::remove_file(dir(id).join(file));
    }
}

/// The machine's console.
pub fn logs(id: &str) -> Result<(), LaunchError> {
    let path = dir(id).join("serial.log");
    let text = std::fs::read(&path).map_err(|e| LaunchError::io(&path, e))?;
    std::io::stdout()
        .write_all(&text)
        .map_err(|e| LaunchError::new("stdout", e.to_string()))
}

/// Copies the audit log out of the data disk (read with debugfs, never
/// mounted on the host) into `copy`. Said plainly when the VM runs: the
/// lines it has not yet written to its disk are not in the copy.
pub fn copy_audit(id: &str, copy: &Path) -> Result<bool, LaunchError> {
    let disk = dir(id).join("data.ext4");
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("rdump /audit {}", copy.display()))
        .arg(&disk)
        .output()
        .map_err(|e| LaunchError::new("debugfs (apt-get install e2fsprogs)", e.to_string()))?;
    let dumped = copy.join("audit");
    if !dumped.is_dir() && running(id) {
        return Err(LaunchError::new(
            format!("machine {id}"),
            format!("the VM runs and its data disk holds no audit log yet (the guest has not written it back); try again in a minute, or after `warden machine stop {id}`"),
        ));
    }
    if !out.status.success() || !dumped.is_dir() {
        return Err(LaunchError::new(
            format!("read the audit log from {}", disk.display()),
            String::from_utf8_lossy(&out.stderr).trim(),
        ));
    }
    // rdump makes `copy/audit`; the log's files belong directly in `copy`.
    // Only regular files come out: the disk is the machine's, and a link
    // there must not lead the host (root) to its own files.
    for entry in std::fs::read_dir(&dumped)
        .map_err(|e| LaunchError::sentence(e.to_string()))?
        .flatten()
    {
        let path = entry.path();
        let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
        let moved = match regular {
            true => std::fs::rename(&path, copy.join(entry.file_name())),
            false => std::fs::remove_file(&path).or_else(|_| std::fs::remove_dir_all(&path)),
        };
        moved.map_err(|e| LaunchError::io(&path, e))?;
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
        let many: Vec<String> = (0..=MAX_LENDS)
            .map(|i| format!(r#"{{"host": "/h{i}", "at": "/lent/{i}", "mode": "read"}}"#))
            .collect();
        let many_lends = format!(r#", "lend": [{}]"#, many.join(","));
        let table = [
            ("", false, None),
            ("", true, Some("rootless")),
            (
                r#", "lend": [{"host": "/h", "at": "/lent/h", "mode": "read"}, {"host": "/w", "at": "/home/me/w", "mode": "write"}]"#,
                false,
                None,
            ),
            (r#", "workspace": "/w""#, false, Some("workspace")),
            (r#", "network": "private""#, false, Some("network")),
            (
                r#", "network": "private", "hosts": ["a.test"]"#,
                false,
                None,
            ),
            (
                r#", "network": "/run/netns/n", "hosts": ["a.test"]"#,
                false,
                None,
            ),
            (r#", "network": "/run/netns/n""#, false, Some("network")),
            (
                r#", "network": "host", "hosts": ["a.test"]"#,
                false,
                Some("network"),
            ),
            (r#", "keep_id": true"#, false, Some("keep_id")),
            (r#", "keep_id": "runtime""#, false, Some("keep_id")),
            (many_lends.as_str(), false, Some("lend")),
            (r#", "cpus": 2, "memory": "1g""#, false, None),
            (r#", "setup": "s.sh""#, false, None),
            (r#", "restart": "always""#, false, None),
            (r#", "command": ["node", "server.js"]"#, false, None),
            (r#", "requires": ["node"]"#, false, None),
            (r#", "idle_stop_minutes": 5"#, false, None),
        ];
        for (extra, rootless, want) in table {
            match (fits(&def(extra), rootless), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => {
                    let text = e.to_string();
                    assert!(text.starts_with(&format!("kind \"vm\": {w}: ")), "{text}");
                }
                (got, want) => panic!("{extra}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn a_kernel_that_panics_before_warden_is_told_from_warden_ending() {
        let early = "[    0.412345] RIP: 0010:sched_clock_cpu+0x9/0xb0\r\n\
                     [    0.412900] Kernel panic - not syncing: Fatal exception in interrupt\r\n\
                     [    0.413000] Rebooting in 1 seconds..\r\n";
        let init_died = "warden: boot failed: no /etc/warden/key\n\
                         [    2.100000] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100\n";
        let after_ready = "warden: ready in 812 ms\n\
                           [   40.000000] Kernel panic - not syncing: Fatal exception\n";
        let cases = [
            (
                early,
                Some("Kernel panic - not syncing: Fatal exception in interrupt"),
            ),
            (init_died, None),
            (after_ready, None),
            (
                "[    0.1] Linux version 6.1\nwarden: mounting disks\n",
                None,
            ),
            ("", None),
        ];
        for (console, want) in cases {
            assert_eq!(early_panic(console).as_deref(), want, "{console}");
        }
    }
}
