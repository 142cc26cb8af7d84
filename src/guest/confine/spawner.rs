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

use crate::guest::confine::shell_space::{self, ShellSpaceError};
use crate::guest::confine::spawn::{self, Launch, SpawnError, Spawned, Stdio};
use crate::guest::process::reaper::Reaper;
use seccompiler::BpfProgram;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;

type Reply = Box<dyn FnOnce(Result<Spawned, SpawnError>) + Send>;

/// What a spawner thread (the commands', or the runtime's) could not do
/// to itself, or that it is gone.
#[derive(Debug, thiserror::Error)]
pub enum SpawnerError {
    /// shell's own namespaces, entered by the thread.
    #[error(transparent)]
    Space(#[from] ShellSpaceError),
    #[error("cannot set no_new_privs on the spawner thread: {0}")]
    NoNewPrivs(#[source] std::io::Error),
    #[error("cannot install the seccomp filter: {0}")]
    Filter(#[source] std::io::Error),
    #[error("cannot install the connect gate's filter: {0}")]
    GateFilter(#[source] std::io::Error),
    #[error("seccomp returned no listener")]
    NoListener,
    #[error("cannot empty the spawner thread's bounding set (capability {cap}): {source}")]
    BoundingSet { cap: u32, source: std::io::Error },
    /// Said of all three things the thread would have done.
    #[error("cannot start the spawner thread: {0}")]
    Start(#[source] Arc<std::io::Error>),
    #[error("the spawner thread died")]
    Died,
    #[error("the spawner thread is gone")]
    Gone,
    #[error("cannot start the runtime's spawner thread: {0}")]
    RuntimeStart(#[source] std::io::Error),
    #[error("the runtime's spawner thread is gone")]
    RuntimeGone,
}

/// What the thread found when it set itself up, and its id.
type Found = (
    Result<String, SpawnerError>,
    Result<(), SpawnerError>,
    Result<(), SpawnerError>,
    nix::unistd::Pid,
);

/// The spawner, with what its thread found when it set itself up.
pub struct Started {
    pub spawner: Spawner,
    /// shell's own /tmp, /dev/shm and IPC namespace: what holds, or why not.
    pub space: Result<String, SpawnerError>,
    /// The seccomp filter installed on the thread, or why not.
    pub filtered: Result<(), SpawnerError>,
    /// The thread's bounding set emptied, or why not (each child then
    /// drops what is left itself, or fails to start).
    pub bounded: Result<(), SpawnerError>,
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
        reply: mpsc::Sender<Result<OwnedFd, SpawnerError>>,
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
                let space = shell_space::enter(&shell_tmp).map_err(SpawnerError::Space);
                let tid = nix::unistd::gettid();
                let bounded = drop_bounding_set(last_cap);
                let bounded_ok = bounded.is_ok();
                let _ = ready_tx.send((space, install(&filters), bounded, tid));
                for job in queue {
                    match job {
                        Job::Spawn {
                            mut launch,
                            stdio,
                            kill_group,
                            reply,
                        } => {
                            if bounded_ok {
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
        let failed = |why: &dyn Fn() -> SpawnerError| -> Found {
            let none = nix::unistd::Pid::from_raw(0);
            (Err(why()), Err(why()), Err(why()), none)
        };
        let (space, filtered, bounded, tid) = match started {
            Ok(_) => ready
                .recv()
                .unwrap_or_else(|_| failed(&|| SpawnerError::Died)),
            Err(e) => {
                let e = Arc::new(e);
                failed(&|| SpawnerError::Start(e.clone()))
            }
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
    pub fn install_gate(&self, program: BpfProgram) -> Result<OwnedFd, SpawnerError> {
        let (reply, answer) = mpsc::channel();
        self.jobs
            .send(Job::InstallGate { program, reply })
            .map_err(|_| SpawnerError::Gone)?;
        answer.recv().map_err(|_| SpawnerError::Gone)?
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
fn install(filters: &[BpfProgram]) -> Result<(), SpawnerError> {
    if filters.is_empty() {
        return Ok(());
    }
    no_new_privs()?;
    for program in filters {
        seccomp(program, 0).map_err(SpawnerError::Filter)?;
    }
    Ok(())
}

/// Installs the gate's `program` with a new listener, and returns it.
pub(super) fn install_listening(program: &BpfProgram) -> Result<OwnedFd, SpawnerError> {
    no_new_privs()?;
    let fd = seccomp(program, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32)
        .map_err(SpawnerError::GateFilter)?;
    let fd = i32::try_from(fd).map_err(|_| SpawnerError::NoListener)?;
    // SAFETY: with NEW_LISTENER, seccomp(2) returns a new descriptor that
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Empties the calling thread's capability bounding set (capabilities 0
/// to `last_cap`). Dropping needs CAP_SETPCAP; where it is missing, each
/// child's own drop fails the same way and the command does not start.
fn drop_bounding_set(last_cap: u32) -> Result<(), SpawnerError> {
    for cap in 0..=last_cap {
        // SAFETY: prctl(PR_CAPBSET_DROP) takes plain integers and changes
        // only the calling thread's credentials.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } < 0 {
            return Err(SpawnerError::BoundingSet {
                cap,
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

fn no_new_privs() -> Result<(), SpawnerError> {
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) takes plain integers and affects
    // only the calling thread.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(SpawnerError::NoNewPrivs(std::io::Error::last_os_error()));
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
