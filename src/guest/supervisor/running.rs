//! The commands running now, by id: what `status` lists, what a stop
//! signals, which command a lifetime tag belongs to; and the ids given
//! since boot and what the ended ones spent. State only: a command's life
//! is `command`'s, which records here when it starts and ends.

use crate::wire::{ExitReport, RunningCommand, SpentTotal};
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// A command as it started: what `status` says of it.
pub struct Entry {
    pub pid: Pid,
    /// Its lifetime tag (see `lifetime`).
    pub tag: u32,
    pub argv: Vec<String>,
    pub folder: Option<String>,
    pub requester_uid: u32,
}

/// The running commands, the next id, and the ended ones' spending.
pub struct RunningCommands {
    next: AtomicU64,
    running: Mutex<HashMap<u64, (Entry, Instant)>>,
    spent: Mutex<SpentTotal>,
}

impl Default for RunningCommands {
    fn default() -> Self {
        RunningCommands {
            next: AtomicU64::new(1),
            running: Mutex::default(),
            spent: Mutex::default(),
        }
    }
}

impl RunningCommands {
    fn running(&self) -> MutexGuard<'_, HashMap<u64, (Entry, Instant)>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new command's id (ids start at 1 and are never given twice).
    pub fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// Commands given an id since boot.
    pub fn started_since_boot(&self) -> u64 {
        self.next.load(Ordering::SeqCst) - 1
    }

    pub fn started(&self, command: u64, entry: Entry) {
        self.running().insert(command, (entry, Instant::now()));
    }

    /// Takes an ended command off the list; true when none is left.
    pub fn ended(&self, command: u64) -> bool {
        let mut running = self.running();
        running.remove(&command);
        running.is_empty()
    }

    pub fn count(&self) -> usize {
        self.running().len()
    }

    /// Every running command's process group leader.
    pub fn pids(&self) -> Vec<Pid> {
        self.running().values().map(|(r, _)| r.pid).collect()
    }

    /// The running commands' lifetime tags.
    pub fn tags(&self) -> HashSet<u32> {
        self.running().values().map(|(r, _)| r.tag).collect()
    }

    /// The running command whose lifetime tag `tag` is: its id and argv.
    pub fn of_tag(&self, tag: u32) -> Option<(u64, Vec<String>)> {
        self.running()
            .iter()
            .find(|(_, (r, _))| r.tag == tag)
            .map(|(id, (r, _))| (*id, r.argv.clone()))
    }

    /// The running command whose lifetime tag `tag` is: its id, and the
    /// SHA-256 of its argv joined by NUL (what audit lines say of it, so
    /// that no argument reaches them whole).
    pub fn digest_of_tag(&self, tag: u32) -> Option<(u64, String)> {
        let (command, argv) = self.of_tag(tag)?;
        let digest = <sha2::Sha256 as sha2::Digest>::digest(argv.join("\0").as_bytes());
        Some((command, format!("{digest:x}")))
    }

    /// The list `status` gives, by id.
    pub fn listing(&self) -> Vec<RunningCommand> {
        let now = Instant::now();
        let mut running: Vec<RunningCommand> = self
            .running()
            .iter()
            .map(|(command, (r, since))| RunningCommand {
                command: *command,
                pid: r.pid.as_raw(),
                argv: r.argv.clone(),
                folder: r.folder.clone(),
                requester_uid: r.requester_uid,
                running_ms: now.duration_since(*since).as_millis() as u64,
            })
            .collect();
        running.sort_by_key(|r| r.command);
        running
    }

    /// Adds an ended command's spending to the machine's.
    pub fn count_spent(&self, report: &ExitReport) {
        let mut total = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        total.commands += 1;
        total.wall_ms += report.duration_ms;
        total.cpu_user_ms += report.cpu_user_ms.unwrap_or(0.0);
        total.cpu_system_ms += report.cpu_system_ms.unwrap_or(0.0);
        total.max_rss_kb = total.max_rss_kb.max(report.max_rss_kb.unwrap_or(0));
    }

    /// What the commands that ended spent, all together.
    pub fn spent(&self) -> SpentTotal {
        self.spent.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: i32, tag: u32, argv: &[&str]) -> Entry {
        Entry {
            pid: Pid::from_raw(pid),
            tag,
            argv: argv.iter().map(|a| a.to_string()).collect(),
            folder: None,
            requester_uid: 0,
        }
    }

    #[test]
    fn commands_are_found_by_tag_and_leave_when_they_end() {
        let book = RunningCommands::default();
        let (a, b) = (book.next_id(), book.next_id());
        assert_eq!((a, b), (1, 2));
        book.started(a, entry(10, 7, &["sleep", "1"]));
        book.started(b, entry(11, 8, &["true"]));
        assert_eq!(book.of_tag(8), Some((2, vec!["true".to_string()])));
        assert_eq!(book.of_tag(9), None);
        let digest = book.digest_of_tag(7).map(|(_, d)| d);
        // sha256("sleep\01")
        let want = <sha2::Sha256 as sha2::Digest>::digest(b"sleep\x001");
        assert_eq!(digest, Some(format!("{want:x}")));
        assert_eq!(book.tags(), HashSet::from([7, 8]));
        let ids: Vec<u64> = book.listing().iter().map(|r| r.command).collect();
        assert_eq!(ids, [1, 2]);
        assert!(!book.ended(a));
        assert!(book.ended(b));
        assert_eq!((book.count(), book.started_since_boot()), (0, 2));
    }
}
