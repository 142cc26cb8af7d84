//! The thread that forks every `shell` command.
//!
//! It installs the seccomp filter on itself once, at boot; every child it
//! forks inherits the filter, already compiled. Installing it in each child
//! instead made the kernel JIT-compile it once per command (the largest
//! share of the layers' cost). The filter denies nothing this thread needs
//! to set a child up (fork, credentials, prctl, Landlock, exec). The main
//! process is never forked here: it is not filtered.
//!
//! The thread also empties its capability bounding set once, at start:
//! every command inherits the empty set, so a child does not pay one new
//! set of credentials per capability to drop it (it still reads the set
//! back before exec, and fails to start if anything is left). The thread
//! keeps its effective capabilities, which it needs to set children up;
//! it never execs.

use crate::guest::confine::shell_space;
use crate::guest::confine::spawn::{self, Launch, SpawnError, Spawned, Stdio};
use crate::guest::process::reaper::Reaper;
use seccompiler::BpfProgram;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;

type Reply = Box<dyn FnOnce(Result<Spawned, SpawnError>) + Send>;

/// The spawner, with what its thread found when it set itself up.
pub struct Started {
    pub spawner: Spawner,
    /// shell's own /tmp, /dev/shm and IPC namespace: what holds, or why not.
    pub space: Result<String, String>,
    /// The seccomp filter installed on the thread, or why not.
    pub filtered: Result<(), String>,
    /// The thread's bounding set emptied, or why not (each child then
    /// drops what is left itself, or fails to start).
    pub bounded: Result<(), String>,
}

// Moved once through the channel; boxing the launch would add an
// allocation to every command for a variant that is rare.
#[allow(clippy::large_enum_variant)]
enum Job {
    Spawn {
        launch: Launch,
        stdio: Stdio,
        kill_group: bool,
        reply: Reply,
    },
    /// Empty shell's System V IPC namespace (the spawner thread's), if
    /// no process of this uid is left to use it.
    EmptyIpc { uid: u32 },
    /// Install the connect gate's filter, whose listener goes back.
    InstallGate {
        program: BpfProgram,
        reply: mpsc::Sender<Result<OwnedFd, String>>,
    },
}

pub struct Spawner {
    jobs: mpsc::Sender<Job>,
    /// The root of the mount namespace commands run in (shell's own, seen
    /// through the spawner thread's /proc entry): a folder a command
    /// starts in is opened through it, so that it belongs to that
    /// namespace (a working folder from another is "unreachable" there).
    root: PathBuf,
}

impl Spawner {
    /// Starts the thread, which first enters shell's own namespaces (with
    /// its /tmp behind `shell_tmp`; see `shell_space`), then installs
    /// `filters` on itself. The values say whether each worked (the probe
    /// checks the filter anyway).
    pub fn start(
        reaper: Arc<Reaper>,
        filters: Vec<BpfProgram>,
        shell_tmp: PathBuf,
        last_cap: u32,
    ) -> Started {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready_tx, ready) = mpsc::channel();
        let started = std::thread::Builder::new()
            .name("spawner".into())
            .spawn(move || {
                let space = shell_space::enter(&shell_tmp);
                let tid = nix::unistd::gettid();
                let bounded = drop_bounding_set(last_cap);
                let _ = ready_tx.send((space, install(&filters), bounded.clone(), tid));
                for job in queue {
                    match job {
                        Job::Spawn {
                            mut launch,
                            stdio,
                            kill_group,
                            reply,
                        } => {
                            if bounded.is_ok() {
                                launch.inherits_empty_bounding_set();
                            }
                            let spawned = spawn::spawn(&launch, stdio, &reaper, kill_group);
                            drop(launch);
                            reply(spawned);
                        }
                        // Checked here, in queue order: a command forked
                        // before this job is a process by now, and one
                        // asked for after it is not forked yet.
                        Job::InstallGate { program, reply } => {
                            let _ = reply.send(install_listening(&program));
                        }
                        Job::EmptyIpc { uid } => {
                            if shell_space::ipc_objects() > 0
                                && crate::guest::process::shell_procs::pids_of(uid).is_empty()
                            {
                                shell_space::empty_ipc();
                            }
                        }
                    }
                }
            });
        let failed = |why: String| {
            let none = nix::unistd::Pid::from_raw(0);
            (Err(why.clone()), Err(why.clone()), Err(why), none)
        };
        let (space, filtered, bounded, tid) = match started {
            Ok(_) => ready
                .recv()
                .unwrap_or_else(|_| failed("the spawner thread died".into())),
            Err(e) => failed(format!("cannot start the spawner thread: {e}")),
        };
        // The commands' namespace is the thread's, whatever became of
        // shell's own mounts (an unshare that worked, then a mount that
        // failed, still leaves the thread in a namespace of its own).
        let root = match tid.as_raw() {
            0 => PathBuf::from("/"),
            tid => PathBuf::from(format!("/proc/self/task/{tid}/root")),
        };
        Started {
            spawner: Spawner { jobs, root },
            space,
            filtered,
            bounded,
        }
    }

    fn submit(&self, launch: Launch, stdio: Stdio, kill_group: bool, reply: Reply) -> bool {
        self.jobs
            .send(Job::Spawn {
                launch,
                stdio,
                kill_group,
                reply,
            })
            .is_ok()
    }

    /// `path` (absolute) as the commands' mount namespace has it.
    pub fn in_commands_view(&self, path: &std::path::Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// Installs `program` on the thread (after its other filters, so
    /// every command forked from now on carries it) with a listener for
    /// its notifications, which is returned.
    pub fn install_gate(&self, program: BpfProgram) -> Result<OwnedFd, String> {
        let (reply, answer) = mpsc::channel();
        self.jobs
            .send(Job::InstallGate { program, reply })
            .map_err(|_| "the spawner thread is gone".to_string())?;
        answer
            .recv()
            .map_err(|_| "the spawner thread is gone".to_string())?
    }

    /// Asks the thread to empty shell's System V IPC namespace once no
    /// process of `uid` is left (what commands left behind goes with
    /// them; a process kept in the background keeps what it uses).
    pub fn empty_ipc(&self, uid: u32) {
        let _ = self.jobs.send(Job::EmptyIpc { uid });
    }

    pub async fn spawn(
        &self,
        launch: Launch,
        stdio: Stdio,
        kill_group: bool,
    ) -> Result<Spawned, SpawnError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let reply: Reply = Box::new(move |r| {
            let _ = tx.send(r);
        });
        if !self.submit(launch, stdio, kill_group, reply) {
            return Err(SpawnError::SpawnerGone);
        }
        rx.await.unwrap_or(Err(SpawnError::SpawnerGone))
    }

    /// The same, waiting on this thread (at boot, and for the probe).
    pub fn spawn_blocking(
        &self,
        launch: Launch,
        stdio: Stdio,
        kill_group: bool,
    ) -> Result<Spawned, SpawnError> {
        let (tx, rx) = mpsc::channel();
        let reply: Reply = Box::new(move |r| {
            let _ = tx.send(r);
        });
        if !self.submit(launch, stdio, kill_group, reply) {
            return Err(SpawnError::SpawnerGone);
        }
        rx.recv().unwrap_or(Err(SpawnError::SpawnerGone))
    }
}

/// Installs the filters on the calling thread. no_new_privs is set on this
/// thread first (it is per thread: warden's other threads and the main
/// process keep their powers; every command sets it anyway): without it,
/// installing a filter needs CAP_SYS_ADMIN, which a container may not have.
fn install(filters: &[BpfProgram]) -> Result<(), String> {
    if filters.is_empty() {
        return Ok(());
    }
    no_new_privs()?;
    for program in filters {
        seccomp(program, 0).map_err(|e| format!("cannot install the seccomp filter: {e}"))?;
    }
    Ok(())
}

/// Installs the gate's `program` with a new listener, and returns it.
pub(super) fn install_listening(program: &BpfProgram) -> Result<OwnedFd, String> {
    no_new_privs()?;
    let fd = seccomp(program, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32)
        .map_err(|e| format!("cannot install the connect gate's filter: {e}"))?;
    let fd = i32::try_from(fd).map_err(|_| "seccomp returned no listener".to_string())?;
    // SAFETY: with NEW_LISTENER, seccomp(2) returns a new descriptor that
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Empties the calling thread's capability bounding set (capabilities 0
/// to `last_cap`). Dropping needs CAP_SETPCAP; where it is missing, each
/// child's own drop fails the same way and the command does not start.
fn drop_bounding_set(last_cap: u32) -> Result<(), String> {
    for cap in 0..=last_cap {
        // SAFETY: prctl(PR_CAPBSET_DROP) takes plain integers and changes
        // only the calling thread's credentials.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } < 0 {
            return Err(format!(
                "cannot empty the spawner thread's bounding set (capability {cap}): {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

fn no_new_privs() -> Result<(), String> {
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) takes plain integers and affects
    // only the calling thread.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(format!(
            "cannot set no_new_privs on the spawner thread: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// seccomp(SECCOMP_SET_MODE_FILTER, flags, program) on the calling thread.
fn seccomp(program: &BpfProgram, flags: u32) -> std::io::Result<libc::c_long> {
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at a live, valid BPF program; seccomp(2)
    // copies it before returning.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    match rc {
        rc if rc < 0 => Err(std::io::Error::last_os_error()),
        rc => Ok(rc),
    }
}
