//! Every process of `shell`, wherever it went: listed for `status`, and
//! stopped on the runtime's word (`stop_shell`), whatever session, group
//! or parent it escaped to. Found by uid in /proc (warden sees all of
//! them, hidepid or not); signalled through a pidfd after checking the uid
//! again, so a pid reused meanwhile by someone else is never hit.

use crate::protocol::ShellProcess;
use std::os::fd::{FromRawFd, OwnedFd};

/// The most processes `status` lists (the count is always whole).
pub const LISTED: usize = 64;
/// Rounds of `stop`: a process forked while a round ran is found next.
const ROUNDS: usize = 20;

/// Pure: the real uid on a /proc/PID/status text's `Uid:` line.
pub fn uid_in_status(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn uid_of(pid: i32) -> Option<u32> {
    uid_in_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// The pids of every process whose real uid is `uid`.
pub fn pids_of(uid: u32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|pid| uid_of(*pid) == Some(uid))
        .collect();
    pids.sort_unstable();
    pids
}

/// What `status` says of them: at most LISTED, each with its name, and
/// how many there are in all.
pub fn census(uid: u32) -> (Vec<ShellProcess>, usize) {
    let pids = pids_of(uid);
    let count = pids.len();
    let listed = pids
        .into_iter()
        .take(LISTED)
        .map(|pid| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            ShellProcess {
                pid,
                name: crate::audit::escape_controls(name.trim_end()),
            }
        })
        .collect();
    (listed, count)
}

/// Sends `signal` to every process of `uid`, round after round until none
/// is left (or ROUNDS). Returns how many were signalled, and how many
/// were still there after the last round.
pub fn stop(uid: u32, signal: nix::sys::signal::Signal) -> (usize, usize) {
    let mut signalled = 0;
    for _ in 0..ROUNDS {
        let pids = pids_of(uid);
        if pids.is_empty() {
            return (signalled, 0);
        }
        for pid in pids {
            if send(pid, uid, signal) {
                signalled += 1;
            }
        }
        if signal != nix::sys::signal::Signal::SIGKILL {
            // Others than KILL may be handled and survived: one round.
            return (signalled, pids_of(uid).len());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    (signalled, pids_of(uid).len())
}

/// Signals `pid` if it is still a process of `uid`, through a pidfd.
fn send(pid: i32, uid: u32, signal: nix::sys::signal::Signal) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new
    // descriptor, owned here.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` was just returned by pidfd_open and is ours alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // The pidfd pins this process: were the pid reused after the uid was
    // read, the check below reads the newcomer, and it is spared.
    if uid_of(pid) != Some(uid) {
        return false;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: pidfd_send_signal on a pidfd we own, no siginfo.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal as i32,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_table() {
        let cases = [
            ("Name:\tsh\nUid:\t2001\t2001\t2001\t2001\n", Some(2001)),
            ("Uid:\t0\t1000\t0\t0\n", Some(0)),
            ("Name:\tsh\n", None),
            ("Uid:\tx\n", None),
        ];
        for (text, want) in cases {
            assert_eq!(uid_in_status(text), want, "{text:?}");
        }
    }
}
