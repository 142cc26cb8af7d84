//! fork and exec, at the syscall edge.
//!
//! Everything the child needs is prepared before fork (C strings, pointer
//! arrays, candidate paths), because between fork and exec a child of a
//! multi-threaded process may only make async-signal-safe calls: no
//! allocation, no locks. The child reports a failure through a close-on-exec
//! pipe as (stage, errno); an empty read means exec succeeded.

use crate::reaper::{Exit, Reaper};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::unistd::Pid;
use std::ffi::{CString, NulError};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use tokio::sync::oneshot;

/// Who the child becomes.
#[derive(Debug, Clone)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// A new session (and so a new process group, with no terminal): for
    /// commands, which must not reach warden's terminal or group.
    Session,
    /// A new process group in warden's session: for the main process.
    ProcessGroup,
}

/// Where the child starts.
#[derive(Debug, Clone)]
pub enum Workdir {
    At(CString),
    /// chdir to `base`, then make (as the child's user) and enter each part.
    Made {
        base: CString,
        parts: Vec<CString>,
    },
}

/// A fully prepared program launch.
pub struct Launch {
    argv: Vec<CString>,
    env: Vec<CString>,
    /// Paths to try execve on, in order (PATH search done in advance).
    candidates: Vec<CString>,
    identity: Identity,
    grouping: Grouping,
    workdir: Workdir,
    /// Set no_new_privs before exec.
    no_new_privs: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("empty argv")]
    EmptyArgv,
    #[error("NUL byte in argument or environment")]
    Nul(#[from] NulError),
}

impl Launch {
    /// `path` is the PATH used to find argv[0] when it has no '/'.
    pub fn new(
        argv: &[String],
        env: &[(String, String)],
        path: &str,
        identity: Identity,
        grouping: Grouping,
        workdir: Workdir,
        no_new_privs: bool,
    ) -> Result<Launch, LaunchError> {
        let program = argv.first().ok_or(LaunchError::EmptyArgv)?;
        if program.is_empty() {
            return Err(LaunchError::EmptyArgv);
        }
        let candidates = candidates(program, path)
            .into_iter()
            .map(CString::new)
            .collect::<Result<_, _>>()?;
        Ok(Launch {
            argv: argv
                .iter()
                .map(|a| CString::new(a.as_str()))
                .collect::<Result<_, _>>()?,
            env: env
                .iter()
                .map(|(k, v)| CString::new(format!("{k}={v}")))
                .collect::<Result<_, _>>()?,
            candidates,
            identity,
            grouping,
            workdir,
            no_new_privs,
        })
    }
}

/// Pure: the paths execvp would try for `program` under `path`.
pub fn candidates(program: &str, path: &str) -> Vec<String> {
    if program.contains('/') {
        return vec![program.to_string()];
    }
    path.split(':')
        .map(|dir| if dir.is_empty() { "." } else { dir })
        .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
        .collect()
}

/// The stage at which a child failed, as reported through the error pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    Stdio = 1,
    Session = 2,
    Credentials = 3,
    NoNewPrivs = 4,
    Workdir = 5,
    Exec = 6,
}

impl Stage {
    fn from_u8(v: u8) -> Option<Stage> {
        Some(match v {
            1 => Stage::Stdio,
            2 => Stage::Session,
            3 => Stage::Credentials,
            4 => Stage::NoNewPrivs,
            5 => Stage::Workdir,
            6 => Stage::Exec,
            _ => return None,
        })
    }

    fn describe(self) -> &'static str {
        match self {
            Stage::Stdio => "cannot set up stdio",
            Stage::Session => "cannot make a new session",
            Stage::Credentials => "cannot switch user",
            Stage::NoNewPrivs => "cannot set no_new_privs",
            Stage::Workdir => "cannot make or enter the working folder",
            Stage::Exec => "cannot execute",
        }
    }
}

/// A child that failed before or at exec.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} {program}: {errno}", stage.describe())]
pub struct ChildFailure {
    pub stage: Stage,
    pub errno: Errno,
    pub program: String,
}

impl ChildFailure {
    /// The exit status the child used: 127 not found, 126 not executable
    /// (the shell's convention, and tini's), 125 a setup failure.
    pub fn status(&self) -> i32 {
        failure_status(self.stage, self.errno)
    }
}

fn failure_status(stage: Stage, errno: Errno) -> i32 {
    match (stage, errno) {
        (Stage::Exec, Errno::ENOENT | Errno::ENOTDIR) => 127,
        (Stage::Exec, _) => 126,
        _ => 125,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("fork: {0}")]
    Fork(Errno),
    #[error("pipe: {0}")]
    Pipe(Errno),
    #[error(transparent)]
    Child(ChildFailure),
}

pub struct Spawned {
    pub pid: Pid,
    pub exit: oneshot::Receiver<Exit>,
}

/// The three descriptors the child gets as 0, 1 and 2.
pub struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Forks, sets the child up and execs it. Returns once the child has
/// exec'd (or failed to). The child's end of `stdio` is closed here.
pub fn spawn(
    launch: &Launch,
    stdio: Stdio,
    reaper: &Reaper,
    kill_group: bool,
) -> Result<Spawned, SpawnError> {
    let (err_read, err_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(SpawnError::Pipe)?;
    let argv = pointers(&launch.argv);
    let envp = pointers(&launch.env);
    let groups: Vec<libc::gid_t> = launch.identity.groups.clone();
    let plan = ChildPlan {
        launch,
        argv: &argv,
        envp: &envp,
        groups: &groups,
        stdio: [
            stdio.stdin.as_raw_fd(),
            stdio.stdout.as_raw_fd(),
            stdio.stderr.as_raw_fd(),
        ],
        err_fd: err_write.as_raw_fd(),
    };
    let (pid, exit) = reaper
        .spawn(kill_group, || {
            // SAFETY: the child only runs `plan.run()`, which makes raw
            // async-signal-safe syscalls on memory prepared before fork and
            // never returns (it execs or _exits).
            match unsafe { libc::fork() } {
                -1 => Err(Errno::last()),
                0 => plan.run(),
                pid => Ok(Pid::from_raw(pid)),
            }
        })
        .map_err(SpawnError::Fork)?;
    drop(err_write);
    drop(stdio);
    match read_failure(&err_read) {
        None => Ok(Spawned { pid, exit }),
        Some((stage, errno)) => Err(SpawnError::Child(ChildFailure {
            stage,
            errno,
            program: launch.argv[0].to_string_lossy().into_owned(),
        })),
    }
}

fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn read_failure(fd: &OwnedFd) -> Option<(Stage, Errno)> {
    let mut buf = [0u8; 5];
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(fd.as_raw_fd(), &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    if got < buf.len() {
        return None;
    }
    let errno = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
    Some((Stage::from_u8(buf[0])?, Errno::from_raw(errno)))
}

/// The kernel's struct sigaction on x86_64 (not glibc's, which differs).
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// What the child runs, borrowed from memory prepared before fork.
struct ChildPlan<'a> {
    launch: &'a Launch,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    groups: &'a [libc::gid_t],
    stdio: [RawFd; 3],
    err_fd: RawFd,
}

impl ChildPlan<'_> {
    /// The child's whole life before exec. Only raw syscalls: no allocation,
    /// no locks, no Rust std I/O.
    fn run(&self) -> ! {
        let failed = |stage: Stage| -> ! { self.fail(stage, Errno::last()) };
        // SAFETY (whole block): each call is a plain syscall on values that
        // live in the parent's copied memory; none allocates or locks.
        unsafe {
            // Signals: warden blocks them all and ignores SIGPIPE; a child
            // starts clean.
            // The raw syscall: glibc's wrappers refuse the signals it
            // reserves (32, 33), which may still be ignored.
            let default = KernelSigaction {
                handler: libc::SIG_DFL,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            for sig in 1..=64 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    let act: *const KernelSigaction = &default;
                    libc::syscall(
                        libc::SYS_rt_sigaction,
                        sig,
                        act,
                        std::ptr::null::<u8>(),
                        8usize,
                    );
                }
            }
            let empty: libc::sigset_t = std::mem::zeroed();
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());

            for (target, &fd) in self.stdio.iter().enumerate() {
                if libc::dup2(fd, target as RawFd) < 0 {
                    failed(Stage::Stdio);
                }
            }
            // Nothing of warden's may leak into the child: every other
            // descriptor closes at exec (the error pipe included).
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );

            let grouped = match self.launch.grouping {
                Grouping::Session => libc::setsid(),
                Grouping::ProcessGroup => libc::setpgid(0, 0),
            };
            if grouped < 0 {
                failed(Stage::Session);
            }

            // Raw syscalls, not glibc's wrappers: those broadcast to threads
            // that do not exist in this child.
            let id = &self.launch.identity;
            if libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr()) < 0
                || libc::syscall(libc::SYS_setresgid, id.gid, id.gid, id.gid) < 0
                || libc::syscall(libc::SYS_setresuid, id.uid, id.uid, id.uid) < 0
            {
                failed(Stage::Credentials);
            }
            if self.launch.no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                failed(Stage::NoNewPrivs);
            }

            libc::umask(0o022);
            match &self.launch.workdir {
                Workdir::At(dir) => {
                    if libc::chdir(dir.as_ptr()) < 0 {
                        failed(Stage::Workdir);
                    }
                }
                Workdir::Made { base, parts } => {
                    if libc::chdir(base.as_ptr()) < 0 {
                        failed(Stage::Workdir);
                    }
                    for part in parts {
                        if libc::mkdir(part.as_ptr(), 0o755) < 0 && Errno::last() != Errno::EEXIST {
                            failed(Stage::Workdir);
                        }
                        if libc::chdir(part.as_ptr()) < 0 {
                            failed(Stage::Workdir);
                        }
                    }
                }
            }

            let mut denied = false;
            for path in &self.launch.candidates {
                libc::execve(path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr());
                match Errno::last() {
                    Errno::ENOENT | Errno::ENOTDIR => {}
                    // Denied: but a PATH folder we may not search only
                    // means the program is not there.
                    Errno::EACCES => {
                        let mut st: libc::stat = std::mem::zeroed();
                        if libc::stat(path.as_ptr(), &mut st) == 0 {
                            denied = true;
                        }
                    }
                    other => self.fail(Stage::Exec, other),
                }
            }
            self.fail(
                Stage::Exec,
                if denied { Errno::EACCES } else { Errno::ENOENT },
            )
        }
    }

    fn fail(&self, stage: Stage, errno: Errno) -> ! {
        let status = failure_status(stage, errno);
        let e = (errno as i32).to_ne_bytes();
        let msg = [stage as u8, e[0], e[1], e[2], e[3]];
        // SAFETY: write(2) and _exit(2) are async-signal-safe; `msg` is on
        // the child's stack.
        unsafe {
            libc::write(self.err_fd, msg.as_ptr().cast(), msg.len());
            libc::_exit(status)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_table() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("ls", "/usr/bin:/bin", &["/usr/bin/ls", "/bin/ls"]),
            ("ls", "/usr/bin/:", &["/usr/bin/ls", "./ls"]),
            ("./x", "/usr/bin", &["./x"]),
            ("/bin/sh", "/usr/bin", &["/bin/sh"]),
            ("a/b", "", &["a/b"]),
            ("ls", "", &["./ls"]),
        ];
        for (program, path, want) in cases {
            assert_eq!(candidates(program, path), *want, "{program} in {path}");
        }
    }
}
