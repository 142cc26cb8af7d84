//! The thread the runtime's processes are forked from where warden's
//! connect gate decides the runtime's network too (`runtime_hosts` where
//! nftables cannot hold). It carries the runtime's gate filter, which
//! every process forked from it inherits, as the spawner thread carries
//! the commands' filters.

use super::spawner::{install_listening, SpawnerError};
use seccompiler::BpfProgram;
use std::os::fd::OwnedFd;
use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

pub struct RuntimeSpawner {
    jobs: mpsc::Sender<Job>,
}

impl RuntimeSpawner {
    /// Starts the thread with `program` installed on it (and
    /// no_new_privs, which its children keep); the gate's listener.
    pub fn start(program: BpfProgram) -> Result<(RuntimeSpawner, OwnedFd), SpawnerError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready_tx, ready) = mpsc::channel();
        std::thread::Builder::new()
            .name("runtime-spawner".into())
            .spawn(move || {
                let listener = install_listening(&program);
                let installed = listener.is_ok();
                let _ = ready_tx.send(listener);
                if installed {
                    for job in queue {
                        job();
                    }
                }
            })
            .map_err(SpawnerError::RuntimeStart)?;
        let listener = ready.recv().map_err(|_| SpawnerError::RuntimeGone)??;
        Ok((RuntimeSpawner { jobs }, listener))
    }

    /// Runs `f` on the thread (a fork there gives a child its filter).
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, SpawnerError> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .map_err(|_| SpawnerError::RuntimeGone)?;
        rx.recv().map_err(|_| SpawnerError::RuntimeGone)
    }
}
