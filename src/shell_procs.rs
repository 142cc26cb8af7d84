//! Every process of `shell`, wherever it went: listed for `status`, and
//! stopped on the runtime's word (`stop_shell`), whatever session, group
//! or parent it escaped to. Found by uid in /proc (warden sees all of
//! them, hidepid or not); signalled by a child that becomes `shell` and
//! sends `kill(-1)`, so only shell's processes can ever be hit.

use crate::protocol::ShellProcess;
use crate::reaper::Reaper;
use nix::sys::signal::Signal;

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

/// Pure: whether a /proc/PID/status text is a zombie's (dead, waiting to
/// be reaped: nothing left to stop or to use anything).
pub fn is_zombie(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .is_some_and(|s| s.trim_start().starts_with('Z'))
}

/// The real uid of a live process (None for a zombie or one gone).
fn uid_of(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    match is_zombie(&status) {
        true => None,
        false => uid_in_status(&status),
    }
}

/// The pids of every live process whose real uid is `uid`.
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
                name: crate::printable::escape_controls(name.trim_end()),
            }
        })
        .collect();
    (listed, count)
}

/// Sends `signal` to every process of `uid` (group `gid`), round after
/// round until none is left (or ROUNDS). Each round is one `kill(-1)` made
/// as `uid` by a child of warden's: the kernel walks every process under
/// its lock, and a process with a SIGKILL pending cannot fork, so a fork
/// loop cannot outrun it. Returns how many there were, and how many are
/// left.
pub fn stop(reaper: &Reaper, uid: u32, gid: u32, signal: Signal) -> (usize, usize) {
    let before = pids_of(uid).len();
    for _ in 0..ROUNDS {
        if pids_of(uid).is_empty() {
            break;
        }
        if !kill_all_as(reaper, uid, gid, signal) {
            break;
        }
        if signal != Signal::SIGKILL {
            // Others than KILL may be handled and survived: one round.
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    (before, pids_of(uid).len())
}

/// Forks a child that becomes `uid` and signals every process it may
/// (`kill(-1)`: all of `uid`'s, never itself); waits for it. False when it
/// could not be done.
fn kill_all_as(reaper: &Reaper, uid: u32, gid: u32, signal: Signal) -> bool {
    let sig = signal as libc::c_int;
    let spawned = reaper.spawn(false, || {
        // SAFETY: the child makes only raw syscalls on plain integers, then
        // _exits; nothing it touches was allocated after the fork.
        match unsafe { libc::fork() } {
            -1 => Err(nix::errno::Errno::last()),
            0 => unsafe {
                let became = libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>())
                    == 0
                    && libc::syscall(libc::SYS_setresgid, gid, gid, gid) == 0
                    && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0;
                // Without becoming `uid`, kill(-1) would hit everyone.
                if !became {
                    libc::_exit(1);
                }
                libc::kill(-1, sig);
                libc::_exit(0)
            },
            pid => Ok(nix::unistd::Pid::from_raw(pid)),
        }
    });
    match spawned {
        Ok((_, exit)) => matches!(exit.blocking_recv(), Ok(crate::reaper::Exit::Code(0))),
        Err(_) => false,
    }
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
        assert!(is_zombie("Name:\tsh\nState:\tZ (zombie)\n"));
        assert!(!is_zombie("Name:\tsh\nState:\tS (sleeping)\n"));
        assert!(!is_zombie("Name:\tsh\n"));
    }
}
