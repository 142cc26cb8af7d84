//! shell's own corner of the machine: a /tmp, a /dev/shm and a System V
//! IPC namespace apart from the runtime's and warden's.
//!
//! Entered once, at boot, by the spawner thread before it takes on its
//! seccomp filter: a thread may have a mount and an IPC namespace of its
//! own, and every command it forks inherits them. So a link `shell` plants
//! in its /tmp is never in a path the runtime uses (containers leave the
//! kernel's link protections off), and a segment it leaves behind is never
//! in the runtime's namespace, and is removed once no command runs.

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::stat;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The size of shell's /dev/shm (a tmpfs of its own), as podman gives a
/// container's.
const SHM_SIZE: &str = "64m";

/// Enters shell's namespaces on the calling thread and mounts its /tmp
/// (a bind of `backing`) and /dev/shm. Says what holds, or why not.
pub fn enter(backing: &Path) -> Result<String, String> {
    let before = stat("/tmp").map_err(|e| format!("/tmp: {e}"))?;
    prepare(backing)?;
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC).map_err(|e| {
        format!("cannot make shell a mount and IPC namespace of its own: {e} (needs CAP_SYS_ADMIN)")
    })?;
    // Mounts of the machine still reach shell; shell's never leave.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make shell's mounts its own: {e}"))?;
    mount(
        Some(backing),
        "/tmp",
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| format!("cannot mount shell's /tmp: {e}"))?;
    let quiet = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount(
        None::<&str>,
        "/tmp",
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | quiet,
        None::<&str>,
    )
    .map_err(|e| format!("cannot remount shell's /tmp nosuid,nodev: {e}"))?;
    let shm = match Path::new("/dev/shm").is_dir() {
        true => mount(
            Some("tmpfs"),
            "/dev/shm",
            Some("tmpfs"),
            quiet | MsFlags::MS_NOEXEC,
            Some(format!("mode=1777,size={SHM_SIZE}").as_str()),
        )
        .map(|()| format!("own /dev/shm (tmpfs, {SHM_SIZE})"))
        .map_err(|e| format!("cannot mount shell's /dev/shm: {e}"))?,
        false => "no /dev/shm".to_string(),
    };
    // Proven, not assumed: /tmp is now the backing folder, not the one
    // everyone else sees.
    let after = stat("/tmp").map_err(|e| format!("/tmp: {e}"))?;
    let want = stat(backing).map_err(|e| format!("{}: {e}", backing.display()))?;
    if (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
        || (after.st_dev, after.st_ino) != (want.st_dev, want.st_ino)
    {
        return Err("shell's /tmp is still the machine's after mounting".into());
    }
    Ok(format!(
        "own /tmp ({}), {shm}, own System V IPC namespace (emptied whenever no command runs)",
        backing.display()
    ))
}

/// Makes `backing` root's, mode 1777, inside a parent only root may
/// enter; refuses links and anything another user owns on the way.
fn prepare(backing: &Path) -> Result<(), String> {
    let parent = backing
        .parent()
        .ok_or_else(|| format!("{}: no parent folder", backing.display()))?;
    for (dir, mode) in [(parent, 0o700), (backing, 0o1777)] {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
                return Err(format!("{} is a link or not a folder", dir.display()))
            }
            Ok(m) if m.uid() != 0 => return Err(format!("{} is not root's", dir.display())),
            Ok(_) => {}
            Err(_) => {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?
            }
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok(())
}

// From <linux/shm.h>; the libc crate names the semaphore and message
// queue ones only.
const SHM_STAT: libc::c_int = 13;
const SHM_INFO: libc::c_int = 14;

/// Removes every System V shared-memory segment, semaphore set and
/// message queue of the calling thread's IPC namespace (shell's, on the
/// spawner thread). A segment still attached goes when its last user
/// detaches. Returns how many were removed.
pub fn empty_ipc() -> usize {
    let mut removed = 0;
    // SAFETY: the *ctl calls take plain integers and a buffer of the size
    // the kernel writes for each command; failures are skipped.
    unsafe {
        let mut shm: libc::shmid_ds = std::mem::zeroed();
        let max = libc::shmctl(0, SHM_INFO, &mut shm);
        for index in 0..=max.max(-1) {
            let id = libc::shmctl(index, SHM_STAT, &mut shm);
            if id >= 0 && libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) == 0 {
                removed += 1;
            }
        }
        let mut sem: libc::semid_ds = std::mem::zeroed();
        let max = libc::semctl(0, 0, libc::SEM_INFO, &mut sem as *mut _);
        for index in 0..=max.max(-1) {
            let id = libc::semctl(index, 0, libc::SEM_STAT, &mut sem as *mut _);
            if id >= 0 && libc::semctl(id, 0, libc::IPC_RMID) == 0 {
                removed += 1;
            }
        }
        let mut msg: libc::msqid_ds = std::mem::zeroed();
        let max = libc::msgctl(0, libc::MSG_INFO, &mut msg);
        for index in 0..=max.max(-1) {
            let id = libc::msgctl(index, libc::MSG_STAT, &mut msg);
            if id >= 0 && libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()) == 0 {
                removed += 1;
            }
        }
    }
    removed
}

/// The kernel's protections against links and files planted in shared
/// sticky folders: set where warden may (a VM, a namespace of its own),
/// then read back. A container's /proc/sys is read-only and they read 0
/// there: then shell's own /tmp is what stands in, and this says so.
pub fn protect_links() -> Result<String, String> {
    const KNOBS: [(&str, &str); 4] = [
        ("protected_symlinks", "1"),
        ("protected_hardlinks", "1"),
        ("protected_fifos", "2"),
        ("protected_regular", "2"),
    ];
    let mut off = Vec::new();
    for (knob, want) in KNOBS {
        let path = format!("/proc/sys/fs/{knob}");
        let _ = std::fs::write(&path, want);
        let now = std::fs::read_to_string(&path).unwrap_or_default();
        if now.trim() == "0" || now.is_empty() {
            off.push(knob);
        }
    }
    match off.is_empty() {
        true => Ok("the kernel refuses links and files planted in sticky folders".into()),
        false => Err(format!(
            "{} read 0 and cannot be set here (a read-only /proc/sys, as in a container); shell's own /tmp and /dev/shm stand in",
            off.join(", ")
        )),
    }
}
