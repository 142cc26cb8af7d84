//! What the host can see of a VM's vhost-device-vsock (0.3.0) from
//! outside, through /proc: whether its rings are armed, how many
//! connections it holds, and whether its worker thread runs, and waits.
//!
//! Why it matters: QEMU's `stop` stops the device's rings (vhost-user's
//! GET_VRING_BASE, handled by another thread than the worker's, with no
//! wait for it) and `cont` arms them again (SET_VRING_KICK) without
//! waiting for the backend to have done so. A worker that touches a ring
//! while it is stopped fails, and its thread ends, silently: from then on
//! no connection into the guest is answered, and none ever will be. It
//! touches them at any event on the host's side of the vsock (a
//! connection to `vsock.sock`, data, the end of one) and while it carries
//! a connection's last packets (the guest's reset after the host's end).
//! So a freeze waits until the backend holds no connection and its worker
//! waits in epoll, and a thaw waits until both rings are armed again,
//! before anything connects.
//!
//! What is read: the worker's epoll (the eventpoll that watches another
//! eventpoll, the backend's own) has the kick of the RX ring (data 0) and
//! of the TX ring (data 1) while they are armed; the backend's sockets are
//! its `vsock.sock` listener, its connection from QEMU and one for each
//! connection it carries (until the guest's reset ends it); the worker is
//! the thread named `vring_worker`, and `syscall` in its /proc folder says
//! whether it is blocked in epoll_wait.

use std::path::Path;
use std::time::{Duration, Instant};

/// What was seen of the backend at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Both rings' kicks are watched: the rings are armed.
    pub armed: bool,
    /// Connections the backend holds, open or ending (each a socket
    /// beside its listener and its connection from QEMU).
    pub connections: usize,
    /// Its worker thread runs.
    pub worker: bool,
    /// Its worker thread waits in epoll for its next event.
    pub waiting: bool,
}

/// The backend's sockets that are no connection it carries: its
/// `vsock.sock` listener and its connection from QEMU.
const OWN_SOCKETS: usize = 2;

/// The machine's vhost-device-vsock as /proc shows it; None when it is
/// not running, or not laid out as 0.3.0's is.
pub fn look(id: &str) -> Option<Seen> {
    let vm = super::dir(id);
    let pid: i32 = std::fs::read_to_string(vm.join("vhost.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let proc = std::path::PathBuf::from(format!("/proc/{pid}"));
    // That pid is this machine's backend (its socket in the VM's folder).
    let cmdline = std::fs::read(proc.join("cmdline")).ok()?;
    if !String::from_utf8_lossy(&cmdline).contains(&vm.display().to_string()) {
        return None;
    }
    let mut epolls = Vec::new();
    let mut sockets: usize = 0;
    for entry in std::fs::read_dir(proc.join("fd")).ok()?.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target.to_string_lossy().starts_with("socket:") {
            sockets += 1;
        }
        if target != Path::new("anon_inode:[eventpoll]") {
            continue;
        }
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(info) = std::fs::read_to_string(proc.join("fdinfo").join(fd.to_string())) else {
            continue;
        };
        epolls.push((fd, watched(&info)));
    }
    let armed = armed(&epolls)?;
    let worker = worker(&proc);
    Some(Seen {
        armed,
        connections: sockets.checked_sub(OWN_SOCKETS)?,
        worker: worker.is_some(),
        waiting: worker.is_some_and(|task| {
            std::fs::read_to_string(task.join("syscall")).is_ok_and(|s| in_epoll_wait(&s))
        }),
    })
}

/// The /proc folder of vhost-user-backend's worker thread, when it runs.
fn worker(proc: &Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(proc.join("task"))
        .ok()?
        .flatten()
        .map(|task| task.path())
        .find(|task| {
            std::fs::read_to_string(task.join("comm"))
                .is_ok_and(|name| name.trim() == "vring_worker")
        })
}

/// Pure: whether a thread's /proc `syscall` says it is blocked in
/// epoll_wait or epoll_pwait (x86_64's numbers); "running" when it runs.
fn in_epoll_wait(syscall: &str) -> bool {
    matches!(
        syscall.split_whitespace().next(),
        Some("232" | "281" | "441")
    )
}

/// Pure: what an eventpoll's fdinfo says it watches, (fd, data) each.
fn watched(fdinfo: &str) -> Vec<(i32, u64)> {
    fdinfo
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let after = |key: &str| {
                let at = words.iter().position(|w| *w == key)?;
                words.get(at + 1).copied()
            };
            let fd = after("tfd:")?.parse().ok()?;
            let data = u64::from_str_radix(after("data:")?, 16).ok()?;
            Some((fd, data))
        })
        .collect()
}

/// Pure: from the process's eventpolls (fd, what each watches), whether
/// both rings are armed; None when no eventpoll watches another (not the
/// layout of 0.3.0).
fn armed(epolls: &[(i32, Vec<(i32, u64)>)]) -> Option<bool> {
    let is_epoll = |fd: i32| epolls.iter().any(|(e, _)| *e == fd);
    let (_, worker) = epolls
        .iter()
        .find(|(_, list)| list.iter().any(|(fd, _)| is_epoll(*fd)))?;
    Some(
        [0, 1]
            .iter()
            .all(|ring| worker.iter().any(|(_, d)| d == ring)),
    )
}

/// Waits (at most `limit`) until `good` holds for what is seen, or the
/// worker is gone; the last seen (None: never seen).
pub fn wait_for(id: &str, limit: Duration, good: impl Fn(&Seen) -> bool) -> Option<Seen> {
    let deadline = Instant::now() + limit;
    loop {
        let seen = look(id);
        match seen {
            Some(s) if good(&s) || !s.worker => return seen,
            _ if Instant::now() >= deadline => return seen,
            _ => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// How long the backend must be seen quiet, twice, before a freeze.
const QUIET_FOR: Duration = Duration::from_millis(10);

/// Whether a freeze may stop the rings now: no connection held (none
/// ending either) and the worker waiting for its next event.
pub fn quiet(s: &Seen) -> bool {
    s.connections == 0 && s.waiting
}

/// Waits (at most `limit`) until the backend is seen quiet twice,
/// `QUIET_FOR` apart; the last seen.
pub fn wait_quiet(id: &str, limit: Duration) -> Option<Seen> {
    let deadline = Instant::now() + limit;
    loop {
        let seen = wait_for(
            id,
            deadline.saturating_duration_since(Instant::now()),
            quiet,
        );
        match seen {
            Some(s) if quiet(&s) => {
                std::thread::sleep(QUIET_FOR);
                let again = look(id);
                if again.is_some_and(|s| quiet(&s)) || Instant::now() >= deadline {
                    return again;
                }
            }
            _ => return seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKER: &str = "pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t1039\n\
tfd:       19 events:       19 data:                1  pos:0 ino:40f sdev:10\n\
tfd:       18 events:       19 data:                0  pos:0 ino:40f sdev:10\n\
tfd:        5 events:       19 data:                5  pos:0 ino:40f sdev:10\n\
tfd:        9 events:       19 data:                3  pos:0 ino:40f sdev:10\n\
tfd:        4 events:       19 data:                4  pos:0 ino:40f sdev:10\n";
    const OWN: &str = "pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t1039\n\
tfd:        3 events:       19 data:                3  pos:0 ino:719c56 sdev:9\n";

    #[test]
    fn an_eventpolls_fdinfo_is_read_as_fd_and_data() {
        assert_eq!(
            watched(WORKER),
            vec![(19, 1), (18, 0), (5, 5), (9, 3), (4, 4)]
        );
        assert_eq!(watched(OWN), vec![(3, 3)]);
        assert_eq!(
            watched("tfd:       21 events:       1d data:               1a  pos:0"),
            vec![(21, 0x1a)]
        );
        assert!(watched("pos:\t0\neventfd-count: 0\n").is_empty());
    }

    #[test]
    fn the_rings_are_armed_while_the_workers_epoll_watches_both_kicks() {
        let running = vec![(4, watched(OWN)), (8, watched(WORKER))];
        assert_eq!(armed(&running), Some(true));
        // Frozen: QEMU stopped the rings, their kicks are no longer watched.
        let stopped: Vec<(i32, u64)> = watched(WORKER)
            .into_iter()
            .filter(|(_, d)| *d > 1)
            .collect();
        assert_eq!(armed(&[(4, watched(OWN)), (8, stopped)]), Some(false));
        // One kick back (the RX ring's), the TX ring's not yet.
        let half: Vec<(i32, u64)> = watched(WORKER)
            .into_iter()
            .filter(|(_, d)| *d != 1)
            .collect();
        assert_eq!(armed(&[(8, half), (4, watched(OWN))]), Some(false));
        // No eventpoll watching another: not 0.3.0's layout.
        assert_eq!(armed(&[(4, watched(OWN))]), None);
        assert_eq!(armed(&[]), None);
    }

    #[test]
    fn a_thread_waits_in_epoll_by_its_syscall_number() {
        assert!(in_epoll_wait(
            "232 0x8 0x7f5e4c3fe8b0 0x64 0xffffffff 0x0 0x0 0x7f5e4c3fe7f8 0x7f5e4d6d0a2e\n"
        ));
        assert!(in_epoll_wait(
            "281 0x8 0x7f5e4c3fe8b0 0x64 0xffffffff 0x0 0x8 0x7f 0x7f\n"
        ));
        assert!(!in_epoll_wait("running\n"));
        assert!(
            !in_epoll_wait("47 0xc 0x7ffd 0x0 0x0 0x0 0x0 0x7ffd 0x7f\n"),
            "recvmsg"
        );
        assert!(!in_epoll_wait(""));
    }
}
