//! A command's processes end with it, wherever they went. Each command
//! runs with one supplementary group of its own, its tag (a gid from
//! `TAG_BASE`, owning no file): every process it starts inherits it,
//! through a new session, a double fork, `daemon()`, `nohup` or `disown`,
//! and none can drop it (no capabilities, no_new_privs). When the command
//! ends, whatever still carries its tag is killed, round after round until
//! none is left. This needs no cgroup, so it holds on every machine kind.
//! A command run with `keep_background` keeps its processes: its tag stays
//! taken, they are listed in `status` and end with `stop_shell` or the
//! machine.

use crate::guest::process::proc_status::{self, Status};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// The first tag; tags are `TAG_BASE..TAG_BASE + TAG_COUNT`, inside the id
/// range a rootless engine maps (65536 ids).
pub const TAG_BASE: u32 = 60_000;
pub const TAG_COUNT: u32 = 4_000;
/// Every tag, for asking whether a group is one.
pub const TAGS: std::ops::Range<u32> = TAG_BASE..TAG_BASE + TAG_COUNT;
/// Rounds of killing before the sweep gives up (a fork bomb outrunning it
/// is stopped by its process limit first).
const ROUNDS: usize = 50;

/// The tags in use: by running commands, and by kept processes.
#[derive(Default)]
pub struct Tags {
    in_use: Mutex<HashSet<u32>>,
    next: AtomicU32,
}

impl Tags {
    /// A free tag, or None when every one is taken.
    pub fn take(&self) -> Option<u32> {
        let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..TAG_COUNT {
            let tag = TAG_BASE + self.next.fetch_add(1, Ordering::Relaxed) % TAG_COUNT;
            if in_use.insert(tag) {
                return Some(tag);
            }
        }
        None
    }

    pub fn give_back(&self, tag: u32) {
        self.in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&tag);
    }

    /// Every tag is free again (all of shell's processes were stopped).
    pub fn give_back_kept(&self, running: &HashSet<u32>) {
        self.in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|t| running.contains(t));
    }
}

/// Pure: whether a process whose status is `status`, under `owner` (its
/// /proc entry's), is one of `uid`'s carrying `tag`. What cannot be read is
/// taken the hostile way: an unknown uid is the entry's owner's, and a
/// process of `uid` whose groups are unknown carries every tag.
pub fn carries(status: &Status, owner: Option<u32>, uid: u32, tag: u32) -> bool {
    let theirs = status.uid.map_or(owner == Some(uid), |u| u == uid);
    theirs && status.groups.as_ref().is_none_or(|g| g.contains(&tag))
}

/// The processes of `uid` that carry `tag` now.
pub fn carriers(uid: u32, tag: u32) -> Vec<Pid> {
    proc_status::pids()
        .into_iter()
        .filter(|pid| {
            // The owner first (one stat), the status only for uid's.
            let owner = proc_status::owner(*pid);
            if owner != Some(uid) {
                return false;
            }
            let status = proc_status::read(*pid).map(|b| proc_status::parse(&b));
            carries(&status.unwrap_or_default(), owner, uid, tag)
        })
        .map(Pid::from_raw)
        .collect()
}

/// Kills every process of `uid` that carries `tag`, round after round
/// (what forks meanwhile is caught next round); returns how many were
/// killed and how many were still there when it gave up.
pub fn sweep(uid: u32, tag: u32) -> (usize, usize) {
    let mut killed = HashSet::new();
    for _ in 0..ROUNDS {
        let found = carriers(uid, tag);
        if found.is_empty() {
            return (killed.len(), 0);
        }
        for pid in found {
            // Killed once is enough; a dying process is still listed a
            // moment.
            if !killed.contains(&pid) && nix::sys::signal::kill(pid, Signal::SIGKILL).is_ok() {
                killed.insert(pid);
            }
        }
        // Let the kernel finish them before looking again.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    (killed.len(), carriers(uid, tag).len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carries_table() {
        let status = |uid: Option<u32>, groups: Option<Vec<u32>>| Status {
            uid,
            zombie: Some(false),
            groups,
        };
        let tagged = Some(vec![2001, 60007]);
        // (status, owner of its /proc entry, tag, carries)
        let cases = [
            (status(Some(2001), tagged.clone()), Some(2001), 60007, true),
            (status(Some(2001), tagged.clone()), Some(2001), 60000, false),
            (
                status(Some(2001), Some(vec![600070])),
                Some(2001),
                60007,
                false,
            ),
            (status(Some(2001), Some(vec![])), Some(2001), 60007, false),
            (status(Some(2000), tagged.clone()), Some(2000), 60007, false),
            // Unknown groups: a carrier; unknown uid: the owner's.
            (status(Some(2001), None), Some(2001), 60007, true),
            (status(None, None), Some(2001), 60007, true),
            (status(None, None), Some(0), 60007, false),
            (status(None, tagged.clone()), None, 60007, false),
        ];
        for (s, owner, tag, want) in cases {
            assert_eq!(carries(&s, owner, 2001, tag), want, "{s:?} {owner:?} {tag}");
        }
    }

    #[test]
    fn tags_are_unique_until_given_back() {
        let tags = Tags::default();
        let a = tags.take().unwrap();
        let b = tags.take().unwrap();
        assert_ne!(a, b);
        assert!((TAG_BASE..TAG_BASE + TAG_COUNT).contains(&a));
        let all: Vec<u32> = (2..TAG_COUNT).map(|_| tags.take().unwrap()).collect();
        assert_eq!(all.len() as u32, TAG_COUNT - 2);
        assert_eq!(tags.take(), None, "every tag taken");
        tags.give_back(a);
        assert_eq!(tags.take(), Some(a));
    }
}
