//! The one place that waits for children. Every exited child, ours or an
//! orphan handed to us, is reaped here; a child somebody spawned through
//! `Reaper::spawn` has its status delivered to that somebody.
//!
//! All of it happens under one lock, which also covers fork and signalling:
//! a pid is only signalled while its zombie is unreaped, so a pid the kernel
//! has handed to someone else is never signalled.

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::oneshot;

/// Reaps `pid` (WNOHANG), with what it spent.
fn wait4(pid: Pid) -> nix::Result<(WaitStatus, Spent)> {
    let mut status: libc::c_int = 0;
    // SAFETY: zeroed rusage is a valid value; wait4 fills both out
    // parameters, which live for the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above: plain out pointers to our stack.
    let rc = unsafe { libc::wait4(pid.as_raw(), &mut status, libc::WNOHANG, &mut usage) };
    match rc {
        r if r < 0 => Err(Errno::last()),
        0 => Ok((WaitStatus::StillAlive, Spent::default())),
        _ => Ok((
            WaitStatus::from_raw(pid, status)?,
            Spent::from_rusage(&usage),
        )),
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    /// The shell's convention: the code, or 128+n for a death by signal n.
    pub fn status(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(n) => 128 + n,
        }
    }

    fn from_wait(status: WaitStatus) -> Option<Exit> {
        match status {
            WaitStatus::Exited(_, code) => Some(Exit::Code(code)),
            WaitStatus::Signaled(_, sig, _) => Some(Exit::Signal(sig as i32)),
            _ => None,
        }
    }
}

/// What a process and the children it waited for spent, from wait4(2).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    pub user_ms: f64,
    pub system_ms: f64,
    /// The largest resident set any of them had, in KiB.
    pub max_rss_kb: u64,
}

impl Spent {
    fn from_rusage(r: &libc::rusage) -> Spent {
        let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
        Spent {
            user_ms: ms(r.ru_utime),
            system_ms: ms(r.ru_stime),
            max_rss_kb: r.ru_maxrss.max(0) as u64,
        }
    }
}

/// At most this many spendings wait to be taken (a waiter that never asks
/// for its child's, such as a probe's, cannot grow the table).
const MAX_SPENT: usize = 4096;

struct Waiter {
    tx: oneshot::Sender<Exit>,
    /// Kill the rest of the child's process group when it exits.
    kill_group: bool,
}

#[derive(Default)]
pub struct Reaper {
    waiters: Mutex<HashMap<i32, Waiter>>,
    spent: Mutex<HashMap<i32, Spent>>,
}

impl Reaper {
    fn lock(&self) -> MutexGuard<'_, HashMap<i32, Waiter>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `fork` (which must fork and return the child's pid in the
    /// parent) with the lock held, so the child cannot be reaped before its
    /// waiter is registered.
    pub fn spawn(
        &self,
        kill_group: bool,
        fork: impl FnOnce() -> nix::Result<Pid>,
    ) -> nix::Result<(Pid, oneshot::Receiver<Exit>)> {
        let mut waiters = self.lock();
        let pid = fork()?;
        let (tx, rx) = oneshot::channel();
        waiters.insert(pid.as_raw(), Waiter { tx, kill_group });
        Ok((pid, rx))
    }

    /// Reaps every child that has exited. Returns how many were orphans
    /// (children nobody was waiting for).
    pub fn reap(&self) -> usize {
        let mut waiters = self.lock();
        let mut orphans = 0;
        loop {
            // Peek first (WNOWAIT): the zombie keeps its pid, and so its
            // process group id, reserved while we kill the group.
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
            let pid = match waitid(Id::All, flags) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    crate::say!("reaper: waitid: {e}");
                    break;
                }
                Ok(status) => match status.pid() {
                    Some(pid) => pid,
                    None => break,
                },
            };
            if waiters.get(&pid.as_raw()).is_some_and(|w| w.kill_group) {
                let _ = killpg(pid, Signal::SIGKILL);
            }
            let (exit, spent) = match wait4(pid) {
                Ok((status, spent)) => (Exit::from_wait(status), spent),
                Err(e) => {
                    crate::say!("reaper: wait4({pid}): {e}");
                    (None, Spent::default())
                }
            };
            match (waiters.remove(&pid.as_raw()), exit) {
                (Some(w), Some(exit)) => {
                    self.keep_spent(pid, spent);
                    let _ = w.tx.send(exit);
                }
                (Some(w), None) => {
                    waiters.insert(pid.as_raw(), w);
                }
                (None, _) => orphans += 1,
            }
        }
        orphans
    }

    fn keep_spent(&self, pid: Pid, spent: Spent) {
        let mut table = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        if table.len() >= MAX_SPENT {
            table.clear();
        }
        table.insert(pid.as_raw(), spent);
    }

    /// What a reaped child spent (once: it is then forgotten).
    pub fn take_spent(&self, pid: Pid) -> Option<Spent> {
        self.spent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&pid.as_raw())
    }

    /// Sends `sig` to `pid` (or its process group) if it is still one of
    /// ours and unreaped. Returns false if it has already been reaped.
    pub fn signal(&self, pid: Pid, sig: Signal, group: bool) -> bool {
        let waiters = self.lock();
        if !waiters.contains_key(&pid.as_raw()) {
            return false;
        }
        let result = if group {
            killpg(pid, sig)
        } else {
            nix::sys::signal::kill(pid, sig)
        };
        if let Err(e) = result {
            if e != Errno::ESRCH {
                crate::say!("cannot send {sig} to {pid}: {e}");
            }
        }
        true
    }
}
