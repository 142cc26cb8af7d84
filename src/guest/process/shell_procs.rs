//! Every process of `shell`, wherever it went: listed for `status`, and
//! stopped on the runtime's word (`stop_shell`), whatever session, group
//! or parent it escaped to. Found by uid in /proc (warden sees all of
//! them, hidepid or not); signalled by a child that becomes `shell` and
//! sends `kill(-1)`, so only shell's processes can ever be hit.

use crate::guest::process::proc_status::{self, Status};
use crate::guest::process::reaper::Reaper;
use crate::wire::ShellProcess;
use nix::sys::signal::Signal;

/// The most processes `status` lists (the count is always whole).
pub const LISTED: usize = 64;
/// Rounds of `stop`: a process forked while a round ran is found next.
const ROUNDS: usize = 20;

/// Pure: whether a process whose status is `status`, under `owner` (its
/// /proc entry's), is a live one of `uid`'s. An unknown uid is the
/// entry's owner's; only a known zombie is dead.
pub fn is_live_of(status: &Status, owner: Option<u32>, uid: u32) -> bool {
    status.zombie != Some(true) && status.uid.map_or(owner == Some(uid), |u| u == uid)
}

/// The pids of every live process whose real uid is `uid`.
pub fn pids_of(uid: u32) -> Vec<i32> {
    let mut pids: Vec<i32> = proc_status::pids()
        .into_iter()
        .filter(|pid| {
            let status = proc_status::read(*pid).map(|b| proc_status::parse(&b));
            match status {
                Ok(status) => {
                    // The entry's owner is asked only when the uid is unknown.
                    let owner = match status.uid {
                        Some(_) => None,
                        None => proc_status::owner(*pid),
                    };
                    is_live_of(&status, owner, uid)
                }
                // Unreadable but there: its entry's owner says whose.
                Err(_) => proc_status::owner(*pid) == Some(uid),
            }
        })
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
            // A name is any bytes: shown, not lost.
            let name = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
            let name = String::from_utf8_lossy(&name);
            ShellProcess {
                pid,
                name: crate::shared::printable::escape_controls(name.trim_end()),
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
    for round in 0..ROUNDS {
        // The first round is always sent: what /proc did not show is
        // still shell's, and kill(-1) finds it.
        if round > 0 && pids_of(uid).is_empty() {
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
        Ok((_, exit)) => matches!(
            exit.blocking_recv(),
            Ok(crate::guest::process::reaper::Exit::Code(0))
        ),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_table() {
        let status = |uid: Option<u32>, zombie: Option<bool>| Status {
            uid,
            zombie,
            groups: None,
        };
        // (status, owner of its /proc entry, live and shell's)
        let cases = [
            (status(Some(2001), Some(false)), Some(2001), true),
            (status(Some(2001), Some(true)), Some(2001), false),
            (status(Some(2000), Some(false)), Some(2000), false),
            (status(Some(0), Some(false)), Some(2001), false),
            (status(Some(2001), None), Some(2001), true),
            (status(None, None), Some(2001), true),
            (status(None, None), Some(0), false),
            (status(None, None), None, false),
        ];
        for (s, owner, want) in cases {
            assert_eq!(is_live_of(&s, owner, 2001), want, "{s:?} {owner:?}");
        }
    }
}
