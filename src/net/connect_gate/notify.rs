//! The syscall edge of the gate: seccomp's user notifications (receive,
//! check, answer, hand over a socket), and what warden reads of the
//! calling process (its memory, its descriptor's flags) through /proc.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;

/// The listener seccomp returned when the gate's filter was installed.
pub struct Listener(OwnedFd);

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
const SYNC_WAKE_UP: u64 = 1;

impl Listener {
    /// The listener, asked for synchronous wake-ups where the kernel has
    /// them (older kernels: the usual wake-ups, slower, same result).
    pub fn new(fd: OwnedFd) -> Listener {
        let mut flags = SYNC_WAKE_UP;
        let _ = ioctl(&fd, libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS, &mut flags);
        Listener(fd)
    }

    /// Waits for the next call. ENOENT (its caller died before it could be
    /// received) and EINTR are the caller's to retry.
    pub fn recv(&self) -> io::Result<Notice> {
        // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        ioctl(&self.0, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n)?;
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
        ioctl(&self.0, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id).is_ok()
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
        ioctl(&self.0, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp).map(drop)
    }

    /// Puts `fd` (warden's) at number `at` in the caller's descriptor table,
    /// closing what was there.
    pub fn place(&self, id: u64, fd: BorrowedFd<'_>, at: i32, cloexec: bool) -> io::Result<()> {
        let at = u32::try_from(at).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        let mut add = libc::seccomp_notif_addfd {
            id,
            flags: libc::SECCOMP_ADDFD_FLAG_SETFD as u32,
            srcfd: fd.as_raw_fd() as u32,
            newfd: at,
            newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
        };
        ioctl(&self.0, libc::SECCOMP_IOCTL_NOTIF_ADDFD, &mut add).map(drop)
    }
}

/// A calling thread's /proc folder, opened once for what is read of it.
pub struct Caller(File);

impl Caller {
    pub fn open(tid: u32) -> io::Result<Caller> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(format!("/proc/{tid}"))
            .map(Caller)
    }

    fn file(&self, name: &std::ffi::CStr) -> io::Result<File> {
        // SAFETY: openat on a descriptor this Caller owns, with a
        // NUL-terminated name; the result is a new descriptor or -1.
        let fd = unsafe {
            libc::openat(
                self.0.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        match fd {
            fd if fd < 0 => Err(io::Error::last_os_error()),
            // SAFETY: a descriptor openat just returned, owned by no one.
            fd => Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) }),
        }
    }

    /// `len` bytes at `addr` in the thread's memory.
    pub fn read_memory(&self, addr: u64, len: usize) -> io::Result<Vec<u8>> {
        let mem = self.file(c"mem")?;
        let mut buf = vec![0u8; len];
        let n = mem.read_at(&mut buf, addr)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// The file flags of descriptor `fd` (O_NONBLOCK, O_CLOEXEC among
    /// them), as its fdinfo gives them.
    pub fn fd_flags(&self, fd: i32) -> io::Result<u32> {
        let name = std::ffi::CString::new(format!("fdinfo/{fd}"))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let mut info = String::new();
        io::Read::read_to_string(&mut self.file(&name)?, &mut info)?;
        flags_of(&info).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no flags line"))
    }
}

/// The `flags:` line of an fdinfo file (octal).
pub fn flags_of(fdinfo: &str) -> Option<u32> {
    let value = fdinfo.lines().find_map(|l| l.strip_prefix("flags:"))?;
    u32::from_str_radix(value.trim(), 8).ok()
}

/// Has the calling thread's file accesses checked as `uid`:`gid`: the
/// gate reads the memory of commands, which /proc lets only their own
/// user do (or CAP_SYS_PTRACE, which a container may not give). Only the
/// filesystem ids change, and only this thread's, so no one else gains
/// the right to signal warden.
pub fn act_as(uid: u32, gid: u32) -> Result<(), String> {
    // SAFETY: setfsgid/setfsuid take plain integers and change only the
    // calling thread's filesystem ids; they return the previous id.
    let (old_gid, now_gid, old_uid, now_uid) = unsafe {
        (
            libc::syscall(libc::SYS_setfsgid, gid),
            libc::syscall(libc::SYS_setfsgid, gid),
            libc::syscall(libc::SYS_setfsuid, uid),
            libc::syscall(libc::SYS_setfsuid, uid),
        )
    };
    let _ = (old_gid, old_uid);
    match (now_gid as u32 == gid, now_uid as u32 == uid) {
        (true, true) => Ok(()),
        _ => Err(format!(
            "cannot take {uid}:{gid} as the gate thread's filesystem ids"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_flags() {
        for (text, want) in [
            (
                "pos:\t0\nflags:\t02004002\nmnt_id:\t9\nino:\t123\n",
                Some(0o2004002),
            ),
            ("pos:\t0\nflags:\t02\n", Some(2)),
            ("pos:\t0\n", None),
            ("flags:\tzz\n", None),
            ("", None),
        ] {
            assert_eq!(flags_of(text), want, "{text:?}");
        }
    }
}
