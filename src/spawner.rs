//! The thread that forks every `shell` command.
//!
//! It installs the seccomp filter on itself once, at boot; every child it
//! forks inherits the filter, already compiled. Installing it in each child
//! instead made the kernel JIT-compile it once per command (the largest
//! share of the layers' cost). The filter denies nothing this thread needs
//! to set a child up (fork, credentials, prctl, Landlock, exec). The main
//! process is never forked here: it is not filtered.

use crate::reaper::Reaper;
use crate::spawn::{self, Launch, SpawnError, Spawned, Stdio};
use seccompiler::BpfProgram;
use std::sync::mpsc;
use std::sync::Arc;

type Reply = Box<dyn FnOnce(Result<Spawned, SpawnError>) + Send>;

struct Job {
    launch: Launch,
    stdio: Stdio,
    kill_group: bool,
    reply: Reply,
}

pub struct Spawner {
    jobs: mpsc::Sender<Job>,
}

impl Spawner {
    /// Starts the thread, which first installs `filters` on itself. The
    /// second value says whether that worked (the probe checks it anyway).
    pub fn start(reaper: Arc<Reaper>, filters: Vec<BpfProgram>) -> (Spawner, Result<(), String>) {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready_tx, ready) = mpsc::channel();
        let started = std::thread::Builder::new()
            .name("spawner".into())
            .spawn(move || {
                let _ = ready_tx.send(install(&filters));
                for job in queue {
                    let spawned = spawn::spawn(&job.launch, job.stdio, &reaper, job.kill_group);
                    drop(job.launch);
                    (job.reply)(spawned);
                }
            });
        let installed = match started {
            Ok(_) => ready
                .recv()
                .unwrap_or_else(|_| Err("the spawner thread died".into())),
            Err(e) => Err(format!("cannot start the spawner thread: {e}")),
        };
        (Spawner { jobs }, installed)
    }

    fn submit(&self, launch: Launch, stdio: Stdio, kill_group: bool, reply: Reply) -> bool {
        self.jobs
            .send(Job {
                launch,
                stdio,
                kill_group,
                reply,
            })
            .is_ok()
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
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) takes plain integers and affects
    // only the calling thread.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(format!(
            "cannot set no_new_privs on the spawner thread: {}",
            std::io::Error::last_os_error()
        ));
    }
    for program in filters {
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
                0u32,
                &prog as *const libc::sock_fprog,
            )
        };
        if rc < 0 {
            return Err(format!(
                "cannot install the seccomp filter: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}
