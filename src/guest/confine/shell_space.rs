//! shell's own corner of the machine: a /tmp, a /dev/shm and a System V
//! IPC namespace apart from the runtime's and warden's.
//!
//! Entered once, at boot, by the spawner thread before it takes on its
//! seccomp filter: a thread may have a mount and an IPC namespace of its
//! own, and every command it forks inherits them. So a link `shell` plants
//! in its /tmp is never in a path the runtime uses (containers leave the
//! kernel's link protections off), and a segment it leaves behind is never
//! in the runtime's namespace, and is removed once shell has no live process left.

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::stat;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why shell has no corner of its own (or not all of it).
#[derive(Debug, thiserror::Error)]
pub enum ShellSpaceError {
    #[error("{}: {source}", path.display())]
    Stat { path: PathBuf, source: nix::Error },
    #[error("{}: no parent folder", .0.display())]
    NoParent(PathBuf),
    #[error("{} is a link or not a folder", .0.display())]
    NotAFolder(PathBuf),
    #[error("{} is not root's", .0.display())]
    NotRoots(PathBuf),
    #[error("{} may be entered by others (mode {mode:04o}); it must be root's alone", path.display())]
    OpenToOthers { path: PathBuf, mode: u32 },
    #[error("{}: {source}", path.display())]
    Make {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make shell a mount and IPC namespace of its own: {0} (needs CAP_SYS_ADMIN)")]
    Unshare(#[source] nix::Error),
    #[error("cannot make shell's mounts its own: {0}")]
    OwnMounts(#[source] nix::Error),
    #[error("cannot mount shell's /tmp: {0}")]
    MountTmp(#[source] nix::Error),
    #[error("cannot remount shell's /tmp nosuid,nodev: {0}")]
    RemountTmp(#[source] nix::Error),
    #[error("cannot mount shell's /dev/shm: {0}")]
    MountShm(#[source] nix::Error),
    #[error("shell's /tmp is still the machine's after mounting")]
    StillShared,
}

/// The kernel's protections that read 0, named.
#[derive(Debug, thiserror::Error)]
#[error("{} read 0 (the host's settings, in a container); shell's own /tmp and /dev/shm stand in", .off.join(", "))]
pub struct LinksUnprotected {
    pub off: Vec<&'static str>,
}

/// The size of shell's /dev/shm (a tmpfs of its own), as podman gives a
/// container's.
const SHM_SIZE: &str = "64m";

/// Enters shell's namespaces on the calling thread and mounts its /tmp
/// (a bind of `backing`) and /dev/shm. Says what holds, or why not.
pub fn enter(backing: &Path) -> Result<String, ShellSpaceError> {
    let stat_of = |path: &Path| {
        stat(path).map_err(|source| ShellSpaceError::Stat {
            path: path.into(),
            source,
        })
    };
    let before = stat_of(Path::new("/tmp"))?;
    prepare(backing)?;
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC)
        .map_err(ShellSpaceError::Unshare)?;
    // Mounts of the machine still reach shell; shell's never leave.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(ShellSpaceError::OwnMounts)?;
    mount(
        Some(backing),
        "/tmp",
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(ShellSpaceError::MountTmp)?;
    let quiet = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount(
        None::<&str>,
        "/tmp",
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | quiet,
        None::<&str>,
    )
    .map_err(ShellSpaceError::RemountTmp)?;
    let shm = match Path::new("/dev/shm").is_dir() {
        true => mount(
            Some("tmpfs"),
            "/dev/shm",
            Some("tmpfs"),
            quiet | MsFlags::MS_NOEXEC,
            Some(format!("mode=1777,size={SHM_SIZE}").as_str()),
        )
        .map(|()| format!("own /dev/shm (tmpfs, {SHM_SIZE})"))
        .map_err(ShellSpaceError::MountShm)?,
        false => "no /dev/shm".to_string(),
    };
    // Proven, not assumed: /tmp is now the backing folder, not the one
    // everyone else sees.
    let after = stat_of(Path::new("/tmp"))?;
    let want = stat_of(backing)?;
    if (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
        || (after.st_dev, after.st_ino) != (want.st_dev, want.st_ino)
    {
        return Err(ShellSpaceError::StillShared);
    }
    Ok(format!(
        "own /tmp ({}), {shm}, own System V IPC namespace (emptied once shell has no live process left)",
        backing.display()
    ))
}

/// Makes `backing` root's, mode 1777, inside a parent only root may
/// enter. What exists already is checked, never changed: a link, a folder
/// not root's, or a parent others may write or enter is refused.
fn prepare(backing: &Path) -> Result<(), ShellSpaceError> {
    let parent = backing
        .parent()
        .ok_or_else(|| ShellSpaceError::NoParent(backing.into()))?;
    // (folder, mode when made, mode bits it must not have when found)
    for (dir, mode, forbidden) in [(parent, 0o700, 0o077), (backing, 0o1777, 0)] {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
                return Err(ShellSpaceError::NotAFolder(dir.into()))
            }
            Ok(m) if m.uid() != 0 => return Err(ShellSpaceError::NotRoots(dir.into())),
            Ok(m) if m.mode() & forbidden != 0 => {
                return Err(ShellSpaceError::OpenToOthers {
                    path: dir.into(),
                    mode: m.mode() & 0o7777,
                })
            }
            Ok(_) => {}
            Err(_) => {
                let made = |source| ShellSpaceError::Make {
                    path: dir.into(),
                    source,
                };
                std::fs::create_dir_all(dir).map_err(made)?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
                    .map_err(made)?;
            }
        }
    }
    Ok(())
}

// From <linux/shm.h>, <linux/sem.h> and <linux/msg.h> (Linux 4.17): the
// *_STAT_ANY commands read an object whatever its mode. Plain *_STAT needs
// read permission or CAP_IPC_OWNER, which a container's warden lacks, so a
// 0600 segment of shell's would be invisible and stay.
const SHM_INFO: libc::c_int = 14;
const SHM_STAT_ANY: libc::c_int = 15;
const SEM_STAT_ANY: libc::c_int = 20;
const MSG_STAT_ANY: libc::c_int = 13;

/// `struct shm_info` of <linux/shm.h>, which the libc crate does not name.
#[repr(C)]
struct ShmInfo {
    used_ids: libc::c_int,
    shm_tot: libc::c_ulong,
    shm_rss: libc::c_ulong,
    shm_swp: libc::c_ulong,
    swap_attempts: libc::c_ulong,
    swap_successes: libc::c_ulong,
}

/// How many System V objects the calling thread's IPC namespace holds:
/// three syscalls, so that the end of a command costs nothing when shell
/// left none (the usual case).
pub fn ipc_objects() -> usize {
    // SAFETY: *_INFO fill a buffer smaller than the one given (see
    // `empty_ipc`); a failure counts as none.
    unsafe {
        let mut shm: ShmInfo = std::mem::zeroed();
        let shm_used = match libc::shmctl(0, SHM_INFO, &mut shm as *mut _ as *mut libc::shmid_ds) {
            -1 => 0,
            _ => shm.used_ids as usize,
        };
        let mut sem: libc::seminfo = std::mem::zeroed();
        let sem_used = match libc::semctl(0, 0, libc::SEM_INFO, &mut sem as *mut _) {
            -1 => 0,
            _ => sem.semusz as usize,
        };
        let mut msg: libc::msginfo = std::mem::zeroed();
        let msg_used =
            match libc::msgctl(0, libc::MSG_INFO, &mut msg as *mut _ as *mut libc::msqid_ds) {
                -1 => 0,
                _ => msg.msgpool as usize,
            };
        shm_used + sem_used + msg_used
    }
}

/// Removes every System V shared-memory segment, semaphore set and
/// message queue of the calling thread's IPC namespace (shell's, on the
/// spawner thread). A segment still attached goes when its last user
/// detaches. Returns how many were removed.
pub fn empty_ipc() -> usize {
    let mut removed = 0;
    // SAFETY: the *ctl calls take plain integers and a buffer at least as
    // large as what the kernel writes for each command (shm_info 48 bytes,
    // seminfo 40, msginfo 32, each into the larger *_ds); semctl's variadic
    // fourth argument is a `union semun`, which on x86_64 (the only ABI
    // warden runs) is passed exactly as the pointer given here. Each *_INFO
    // answers the highest index in use. Failures are skipped.
    unsafe {
        let mut shm: libc::shmid_ds = std::mem::zeroed();
        let max = libc::shmctl(0, SHM_INFO, &mut shm);
        for index in 0..=max.max(-1) {
            let id = libc::shmctl(index, SHM_STAT_ANY, &mut shm);
            if id >= 0 && libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) == 0 {
                removed += 1;
            }
        }
        let mut sem: libc::semid_ds = std::mem::zeroed();
        let max = libc::semctl(0, 0, libc::SEM_INFO, &mut sem as *mut _);
        for index in 0..=max.max(-1) {
            let id = libc::semctl(index, 0, SEM_STAT_ANY, &mut sem as *mut _);
            if id >= 0 && libc::semctl(id, 0, libc::IPC_RMID) == 0 {
                removed += 1;
            }
        }
        let mut msg: libc::msqid_ds = std::mem::zeroed();
        let max = libc::msgctl(0, libc::MSG_INFO, &mut msg);
        for index in 0..=max.max(-1) {
            let id = libc::msgctl(index, MSG_STAT_ANY, &mut msg);
            if id >= 0 && libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()) == 0 {
                removed += 1;
            }
        }
    }
    removed
}

/// The kernel's protections against links and files planted in shared
/// sticky folders, as they read. They are the host's in a container (not
/// per namespace), so warden changes them only in a VM, where the kernel
/// is its own (see `vm`); where they read 0, shell's own /tmp and /dev/shm
/// are what stands in, and this says so.
pub fn protect_links() -> Result<String, LinksUnprotected> {
    const KNOBS: [&str; 4] = [
        "protected_symlinks",
        "protected_hardlinks",
        "protected_fifos",
        "protected_regular",
    ];
    let off: Vec<&str> = KNOBS
        .into_iter()
        .filter(|knob| {
            let now = std::fs::read_to_string(format!("/proc/sys/fs/{knob}")).unwrap_or_default();
            matches!(now.trim(), "0" | "")
        })
        .collect();
    match off.is_empty() {
        true => Ok("the kernel refuses links and files planted in sticky folders".into()),
        false => Err(LinksUnprotected { off }),
    }
}
