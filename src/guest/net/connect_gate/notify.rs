//! The syscall edge of the gate: seccomp's user notifications (receive,
//! check, answer), and what warden takes from the calling process (the
//! address in its memory, the socket it wants connected).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// The listener seccomp returned when the gate's filter was installed.
pub struct Listener {
    fd: OwnedFd,
    /// Whether the kernel wakes the caller and the gate synchronously.
    sync_wake_up: bool,
}

/// One syscall waiting for an answer.
#[derive(Debug, Clone, Copy)]
pub struct Notice {
    pub id: u64,
    /// The calling thread, as warden's pid namespace numbers it.
    pub tid: u32,
    pub nr: i32,
    pub args: [u64; 6],
}

fn ioctl<T>(fd: &OwnedFd, request: libc::Ioctl, arg: *mut T) -> io::Result<libc::c_int> {
    // SAFETY: every caller passes a request of the seccomp listener with
    // the argument type the kernel expects for it, alive for the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) };
    match rc {
        rc if rc < 0 => Err(io::Error::last_os_error()),
        rc => Ok(rc),
    }
}

/// SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (Linux 6.6): the caller and the
/// gate wake each other synchronously, on the same CPU, which saves a
/// cross-CPU wake-up each way.
const SYNC_WAKE_UP: libc::c_ulong = 1;

impl Listener {
    /// The listener, asked for synchronous wake-ups where the kernel has
    /// them (older kernels: the usual wake-ups, slower, same result).
    pub fn new(fd: OwnedFd) -> Listener {
        // SAFETY: SECCOMP_IOCTL_NOTIF_SET_FLAGS takes its flags by value,
        // not through a pointer; the kernel reads nothing else.
        let rc = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                SYNC_WAKE_UP,
            )
        };
        Listener {
            fd,
            sync_wake_up: rc == 0,
        }
    }

    /// Whether calls and answers wake each other on the same CPU.
    pub fn sync_wake_up(&self) -> bool {
        self.sync_wake_up
    }

    /// Waits for the next call. ENOENT (its caller died before it could be
    /// received) and EINTR are the caller's to retry.
    pub fn recv(&self) -> io::Result<Notice> {
        // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        ioctl(&self.fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n)?;
        Ok(Notice {
            id: n.id,
            tid: n.pid,
            nr: n.data.nr,
            args: n.data.args,
        })
    }

    /// Whether the call is still waiting: checked after reading from its
    /// process, so that what was read was that process's and not that of
    /// another which took its pid since.
    pub fn still_waiting(&self, id: u64) -> bool {
        let mut id = id;
        ioctl(&self.fd, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id).is_ok()
    }

    /// Answers the call: `error` 0 returns `val`, else fails with that errno.
    pub fn answer(&self, id: u64, val: i64, error: i32) -> io::Result<()> {
        self.send(id, val, -error, 0)
    }

    /// Lets the kernel carry the call out as made.
    pub fn carry_on(&self, id: u64) -> io::Result<()> {
        self.send(id, 0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32)
    }

    fn send(&self, id: u64, val: i64, error: i32, flags: u32) -> io::Result<()> {
        let mut resp = libc::seccomp_notif_resp {
            id,
            val,
            error,
            flags,
        };
        ioctl(&self.fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp).map(drop)
    }
}

/// Gives the calling thread, and it alone, the commands' real uid and
/// gid for good: the kernel lets a process read the memory of
/// (process_vm_readv) and take a descriptor from (pidfd_getfd) only a
/// process of its own real user, or holders of CAP_SYS_PTRACE, which a
/// container may not give. Its effective and saved ids stay root's, so it
/// keeps its capabilities, and no command may trace it or read its
/// memory (that needs every id to match).
///
/// What the commands do gain over this thread: they may signal it
/// (tgkill), lower its priority and lengthen its slices. It blocks every
/// signal it can (see `block_signals`), and the two it cannot block,
/// SIGKILL and SIGSTOP, the kernel discards when a process inside the
/// machine sends them to PID 1: hence the gate asks for PID 1. A lower
/// priority or longer slices slow only the commands' own connects.
pub fn take_callers_ids(uid: u32, gid: u32) -> io::Result<()> {
    drop_supplementary_groups();
    // SAFETY: raw setresgid/setresuid change only the calling thread's
    // ids (unlike libc's wrappers, which change every thread's); -1
    // leaves the effective and saved ids as they are.
    let rc = unsafe {
        match libc::syscall(libc::SYS_setresgid, gid, -1i32, -1i32) {
            0 => libc::syscall(libc::SYS_setresuid, uid, -1i32, -1i32),
            rc => rc,
        }
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Empties the calling thread's supplementary groups: a unix socket it
/// listens on for a caller (`listen_as`) shows them to its clients. Where
/// the user namespace forbids setgroups the thread keeps warden's, and the
/// gate works the same.
fn drop_supplementary_groups() {
    // SAFETY: a raw setgroups with no groups changes only the calling
    // thread's credentials and reads no memory.
    let _ = unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) };
}

/// `len` bytes at `addr` in the memory of thread `tid`.
pub fn read_memory(tid: u32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let pid = nix::unistd::Pid::from_raw(tid as i32);
    let remote = [nix::sys::uio::RemoteIoVec {
        base: addr as usize,
        len,
    }];
    let n = nix::sys::uio::process_vm_readv(pid, &mut [io::IoSliceMut::new(&mut buf)], &remote)?;
    buf.truncate(n);
    Ok(buf)
}

/// Pidfds of the threads that called lately, kept open: the same thread
/// connecting again (a client making many connections) costs one
/// syscall, not three. A kept pidfd names the thread it was opened for
/// and no other: once that thread is gone the kernel answers ESRCH for
/// it, even if its tid was given to another thread since, and a new one
/// is opened.
#[derive(Default)]
pub struct Threads(std::collections::HashMap<u32, OwnedFd>);

/// Threads kept at most; past it all are let go.
const THREADS_KEPT: usize = 256;

impl Threads {
    /// A descriptor of warden's for the open file at `fd` in thread
    /// `tid`'s table (the same socket, not a copy of it). The thread stays
    /// pinned by its pidfd, so that `still_waiting` can then vouch that
    /// the file was the caller's.
    pub fn take(&mut self, tid: u32, fd: i32) -> io::Result<OwnedFd> {
        if let Some(thread) = self.0.get(&tid) {
            match pidfd_getfd(thread, fd) {
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                taken => return taken,
            }
        }
        let thread = pidfd_open(tid)?;
        let file = pidfd_getfd(&thread, fd)?;
        if self.0.len() >= THREADS_KEPT {
            self.0.clear();
        }
        self.0.insert(tid, thread);
        Ok(file)
    }
}

fn owned(rc: libc::c_long) -> io::Result<OwnedFd> {
    match rc {
        rc if rc < 0 => Err(io::Error::last_os_error()),
        // SAFETY: a descriptor the kernel just returned, owned by no one.
        rc => Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(rc as i32) }),
    }
}

/// A pidfd for one thread: PIDFD_THREAD (Linux 6.9) names any thread; on
/// older kernels only a process's first thread can be named.
fn pidfd_open(tid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new
    // descriptor or -1.
    let open =
        |flags: libc::c_uint| owned(unsafe { libc::syscall(libc::SYS_pidfd_open, tid, flags) });
    match open(libc::PIDFD_THREAD) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => open(0),
        found => found,
    }
}

fn pidfd_getfd(thread: &OwnedFd, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes a pidfd this thread owns, a descriptor
    // number and flags 0; it returns a new descriptor (close-on-exec) or -1.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, thread.as_raw_fd(), fd, 0) })
}

/// Asks the scheduler to run the calling thread in short slices (100 µs,
/// the least it grants; Linux 6.12's EEVDF reads a fair thread's
/// `sched_runtime` so). A thread with a nearer deadline is not preempted
/// by those it wakes: the gate's connect wakes warden's proxy, which
/// otherwise ran before the gate could answer, on the same CPU. Needs no
/// privilege; older kernels ignore it or refuse it, and the gate is only
/// slower there.
pub fn short_slices() {
    // SAFETY: sched_attr is plain data; zeroed is SCHED_OTHER at nice 0.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
    attr.sched_policy = libc::SCHED_OTHER as u32;
    attr.sched_runtime = 100_000;
    // SAFETY: sched_setattr reads `attr`, alive for the call, and changes
    // the calling thread (pid 0) alone.
    let _ = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr, 0) };
}

/// Blocks every signal that can be blocked on the calling thread.
pub fn block_signals() -> io::Result<()> {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), None).map_err(io::Error::from)
}

/// Connects socket `sock` to the address in `raw` (a sockaddr, as the
/// caller gave it and the gate checked it).
pub fn connect_raw(sock: &OwnedFd, raw: &[u8]) -> io::Result<()> {
    let len = libc::socklen_t::try_from(raw.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: connect reads `len` bytes at `raw`, a live slice of that
    // length; the kernel checks that they form an address of the
    // socket's family.
    let rc = unsafe { libc::connect(sock.as_raw_fd(), raw.as_ptr().cast(), len) };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The family of socket `sock` (SO_DOMAIN), as the kernel has it.
pub fn family(sock: &OwnedFd) -> io::Result<i32> {
    let mut family: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `family`, an int
    // alive for the call, and the length it wrote into `len`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut family as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    match rc {
        0 => Ok(family),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The local port of IP socket `sock`; 0 while it is unbound.
pub fn local_port(sock: &OwnedFd) -> io::Result<u16> {
    use nix::sys::socket::{getsockname, SockaddrStorage};
    let local: SockaddrStorage = getsockname(sock.as_raw_fd()).map_err(io::Error::from)?;
    let port = match (local.as_sockaddr_in(), local.as_sockaddr_in6()) {
        (Some(v4), _) => v4.port(),
        (_, Some(v6)) => v6.port(),
        _ => 0,
    };
    Ok(port)
}

/// listen(2) on `sock` with the calling thread's effective ids set to
/// `uid` and `gid` for the call (the kernel records them as the socket's
/// peer credentials), then root's again. Err is the errno to answer.
/// The thread's real ids are the callers' and its saved ids root's (see
/// `take_callers_ids`), so it may switch both ways.
pub fn listen_as(sock: &OwnedFd, backlog: i32, uid: u32, gid: u32) -> Result<(), i32> {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EPERM)
    };
    set_effective(uid, gid).map_err(|()| errno())?;
    // SAFETY: listen takes a descriptor this thread owns and an int.
    let rc = unsafe { libc::listen(sock.as_raw_fd(), backlog) };
    let listened = match rc {
        0 => Ok(()),
        _ => Err(errno()),
    };
    // Back to root's: without it the gate could not take the next
    // caller's socket. A thread that cannot is refused listens from now.
    set_effective(0, 0).map_err(|()| libc::EPERM)?;
    listened
}

/// Sets the calling thread's effective uid and gid (the gid first, while
/// the thread may still).
fn set_effective(uid: u32, gid: u32) -> Result<(), ()> {
    let (uid, gid) = (uid as libc::c_long, gid as libc::c_long);
    // SAFETY: raw setresuid/setresgid change only the calling thread's
    // ids; -1 leaves the real and saved ids as they are. Going back to
    // root sets the uid first, which gives the thread back its
    // capabilities, then the gid.
    let rc = unsafe {
        let resgid = |g: libc::c_long| libc::syscall(libc::SYS_setresgid, -1i64, g, -1i64);
        let resuid = |u: libc::c_long| libc::syscall(libc::SYS_setresuid, -1i64, u, -1i64);
        match uid {
            0 => match resuid(uid) {
                0 => resgid(gid),
                rc => rc,
            },
            _ => match resgid(gid) {
                0 => resuid(uid),
                rc => rc,
            },
        }
    };
    match rc {
        0 => Ok(()),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    /// A listener for the gate's filter, installed on a thread of its own
    /// that ends at once (a filter binds only the thread that installs it).
    fn listener() -> OwnedFd {
        std::thread::spawn(|| {
            let program = crate::guest::confine::seccomp::gate_program().unwrap();
            let prog = libc::sock_fprog {
                len: program.len() as libc::c_ushort,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            // SAFETY: prctl and seccomp take plain integers and `prog`,
            // alive for the call; both act on this thread alone.
            let fd = unsafe {
                assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
                libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                    &prog,
                )
            };
            assert!(fd >= 0, "seccomp: {}", io::Error::last_os_error());
            // SAFETY: a new descriptor seccomp returned, owned by no one.
            unsafe { OwnedFd::from_raw_fd(fd as i32) }
        })
        .join()
        .unwrap()
    }

    /// (major, minor) of the running kernel.
    fn kernel() -> (u32, u32) {
        let uname = nix::sys::utsname::uname().unwrap();
        let release = uname.release().to_string_lossy().into_owned();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (next(), next())
    }

    #[test]
    fn the_listener_asks_for_synchronous_wake_ups_where_the_kernel_has_them() {
        let listener = Listener::new(listener());
        assert_eq!(
            listener.sync_wake_up(),
            kernel() >= (6, 6),
            "{:?}",
            kernel()
        );
    }

    #[test]
    fn the_gates_thread_asks_for_short_slices_where_the_kernel_has_them() {
        let slice = std::thread::spawn(|| {
            short_slices();
            let sched = std::fs::read_to_string("/proc/thread-self/sched").unwrap();
            sched
                .lines()
                .find(|l| l.starts_with("se.slice"))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
        })
        .join()
        .unwrap();
        if kernel() >= (6, 12) {
            assert_eq!(slice.as_deref(), Some("100000"), "{:?}", kernel());
        }
    }
}
