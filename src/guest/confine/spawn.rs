//! Starting a child and exec'ing it, at the syscall edge.
//!
//! The child is started as `posix_spawn` starts one, with `clone(CLONE_VM |
//! CLONE_VFORK)`: it runs in warden's memory, on a stack of its own, while
//! the thread that started it waits. Everything it needs is prepared
//! before (C strings, pointer arrays, candidate paths), and between clone
//! and exec it only makes raw async-signal-safe syscalls: no allocation,
//! no locks, no glibc wrapper that would act for warden's threads. The
//! child reports a failure through a close-on-exec pipe as (stage, errno);
//! an empty read means exec succeeded.

use super::capabilities;
use super::probe::{self, NetProbe, Probe};
use crate::guest::process::reaper::{Exit, Reaper};
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
#[derive(Debug)]
pub enum Workdir {
    At(CString),
    /// A folder warden opened (and made) without following links.
    Fd(OwnedFd),
}

/// The layers a command gets between fork and exec, prepared by warden.
pub struct Confine {
    /// The command's Landlock ruleset (None: no Landlock in this kernel).
    pub landlock: Option<OwnedFd>,
    /// (resource, soft, hard) for setrlimit.
    pub rlimits: Vec<(u32, u64, u64)>,
    /// The highest capability number of this kernel.
    pub last_cap: u32,
    /// Instead of exec, test every layer and report (see `Probe`).
    pub probe: bool,
    /// Instead of exec, test the firewall and report (see `NetProbe`).
    pub net_probe: Option<NetProbe>,
    /// The command's cgroup's `cgroup.procs`, which the child joins first.
    pub cgroup: Option<OwnedFd>,
    /// The spawning thread's bounding set is empty already (the shell
    /// spawner's, see spawner.rs): the child has none to drop, and reads
    /// it back before exec all the same.
    pub bounding_set_empty: bool,
}

impl Confine {
    /// Puts the child in a cgroup (`procs`: its `cgroup.procs`). Its
    /// pids.max then bounds the command's processes, and RLIMIT_NPROC,
    /// which counts every process of the user, goes: it would refuse a
    /// fork before the cgroup could count it.
    pub fn join_cgroup(&mut self, procs: OwnedFd) {
        self.cgroup = Some(procs);
        self.rlimits
            .retain(|&(resource, _, _)| resource != libc::RLIMIT_NPROC);
    }
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
    /// The layers of a `shell` command; None for the (trusted) main process.
    confine: Option<Confine>,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("empty argv")]
    EmptyArgv,
    #[error("NUL byte in argument or environment")]
    Nul(#[from] NulError),
    #[error(transparent)]
    Confinement(#[from] super::ConfineError),
}

impl Launch {
    /// Says the thread that will spawn it has an empty bounding set.
    pub fn inherits_empty_bounding_set(&mut self) {
        if let Some(c) = self.confine.as_mut() {
            c.bounding_set_empty = true;
        }
    }

    /// `path` is the PATH used to find argv[0] when it has no '/'.
    pub fn new(
        argv: &[String],
        env: &[(String, String)],
        path: &str,
        identity: Identity,
        grouping: Grouping,
        workdir: Workdir,
        confine: Option<Confine>,
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
            confine,
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
    Limits = 7,
    Capabilities = 8,
    Landlock = 9,
    Terminal = 10,
    /// Not a failure: a probe's report.
    Probe = 11,
    Cgroup = 12,
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
            7 => Stage::Limits,
            8 => Stage::Capabilities,
            9 => Stage::Landlock,
            10 => Stage::Terminal,
            11 => Stage::Probe,
            12 => Stage::Cgroup,
            _ => return None,
        })
    }

    fn describe(self) -> &'static str {
        match self {
            Stage::Stdio => "cannot set up stdio",
            Stage::Session => "cannot make a new session",
            Stage::Terminal => "cannot take the terminal as the controlling one",
            Stage::Credentials => "cannot switch user",
            Stage::NoNewPrivs => "cannot set no_new_privs",
            Stage::Workdir => "cannot make or enter the working folder",
            Stage::Exec => "cannot execute",
            Stage::Limits => "cannot set resource limits",
            Stage::Capabilities => "cannot empty the capability sets",
            Stage::Landlock => "cannot enforce Landlock",
            Stage::Probe => "probe",
            Stage::Cgroup => "cannot join the command's cgroup",
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
    #[error("the spawner thread is gone")]
    SpawnerGone,
}

pub struct Spawned {
    pub pid: Pid,
    pub exit: oneshot::Receiver<Exit>,
    /// A probe's findings (only when the launch was a probe).
    pub probe: Option<Probe>,
}

/// The three descriptors the child gets as 0, 1 and 2.
pub struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// stdin is a terminal the child takes as its controlling one (in the
    /// new session it leads).
    pub terminal: bool,
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
    let confine = launch.confine.as_ref();
    let plan = ChildPlan {
        launch,
        argv: &argv,
        envp: &envp,
        groups: &groups,
        fds: ChildFds {
            stdio: [
                stdio.stdin.as_raw_fd(),
                stdio.stdout.as_raw_fd(),
                stdio.stderr.as_raw_fd(),
            ],
            err: err_write.as_raw_fd(),
            cgroup: confine
                .and_then(|c| c.cgroup.as_ref())
                .map(|f| f.as_raw_fd()),
            landlock: confine
                .and_then(|c| c.landlock.as_ref())
                .map(|f| f.as_raw_fd()),
            workdir: match &launch.workdir {
                Workdir::Fd(fd) => Some(fd.as_raw_fd()),
                Workdir::At(_) => None,
            },
        },
        own_table_below: None,
        terminal: stdio.terminal,
    };
    // The firewall probe may wait up to 2 s for a connection that should
    // have been refused: it is forked, so that neither this thread nor the
    // reaper's lock (held while a child starts) waits with it. The layers
    // probe waits for nothing: it starts as a command does.
    let knocking = launch
        .confine
        .as_ref()
        .is_some_and(|c| c.net_probe.is_some());
    let (pid, exit) = reaper
        .spawn(kill_group, || match knocking {
            true => fork_child(&plan),
            false => super::child_stack::start(&plan),
        })
        .map_err(SpawnError::Fork)?;
    drop(err_write);
    drop(stdio);
    match read_failure(&err_read) {
        None => Ok(Spawned {
            pid,
            exit,
            probe: None,
        }),
        Some((Stage::Probe, bits)) => Ok(Spawned {
            pid,
            exit,
            probe: Some(Probe(bits as u32)),
        }),
        Some((stage, errno)) => Err(SpawnError::Child(ChildFailure {
            stage,
            errno: Errno::from_raw(errno),
            program: launch.argv[0].to_string_lossy().into_owned(),
        })),
    }
}

/// A forked child (a copy of warden's memory) that runs `plan`.
fn fork_child(plan: &ChildPlan) -> Result<Pid, Errno> {
    // SAFETY: the child only runs `plan.run()`, which makes raw
    // async-signal-safe syscalls on memory prepared before fork and never
    // returns (it execs or _exits).
    match unsafe { libc::fork() } {
        -1 => Err(Errno::last()),
        0 => plan.run(),
        pid => Ok(Pid::from_raw(pid)),
    }
}

fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The child's report: (stage, errno) of a failure, or (Probe, bits).
fn read_failure(fd: &OwnedFd) -> Option<(Stage, i32)> {
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
    let value = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
    Some((Stage::from_u8(buf[0])?, value))
}

/// Sets every signal but SIGPIPE (which warden itself ignores) to its
/// default action, so a child only has SIGPIPE left to reset. Called once,
/// at boot, before any thread exists.
pub fn default_signal_dispositions() {
    for sig in 1..=64 {
        if ![libc::SIGKILL, libc::SIGSTOP, libc::SIGPIPE].contains(&sig) {
            // SAFETY: rt_sigaction with a valid struct; no handler is set.
            unsafe { set_default(sig) };
        }
    }
}

/// The raw syscall: glibc's wrappers refuse the signals it reserves
/// (32, 33), which an inherited disposition may still ignore.
///
/// # Safety
/// A plain syscall on stack memory; async-signal-safe.
unsafe fn set_default(sig: i32) {
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    let act: *const KernelSigaction = &default;
    libc::syscall(
        libc::SYS_rt_sigaction,
        sig,
        act,
        std::ptr::null::<u8>(),
        8usize,
    );
}

/// The kernel's struct sigaction on x86_64 (not glibc's, which differs).
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// A confined command's oom_score_adj: the first the OOM killer takes.
const OOM_FIRST: &[u8] = b"1000";

/// What the child runs, borrowed from memory prepared before fork.
#[derive(Clone, Copy)]
pub(super) struct ChildPlan<'a> {
    pub(super) launch: &'a Launch,
    pub(super) argv: &'a [*const libc::c_char],
    pub(super) envp: &'a [*const libc::c_char],
    pub(super) groups: &'a [libc::gid_t],
    pub(super) fds: ChildFds,
    /// Set when the child starts sharing warden's descriptor table: it
    /// first makes its own, of the numbers below this one (`Slots`).
    pub(super) own_table_below: Option<u32>,
    pub(super) terminal: bool,
}

/// The descriptors a child uses before exec, by number.
#[derive(Clone, Copy)]
pub(super) struct ChildFds {
    pub(super) stdio: [RawFd; 3],
    /// The report pipe: a failure's stage and errno, or a probe's findings.
    pub(super) err: RawFd,
    /// Its cgroup's `cgroup.procs`.
    pub(super) cgroup: Option<RawFd>,
    /// Its Landlock ruleset.
    pub(super) landlock: Option<RawFd>,
    /// The working folder warden opened.
    pub(super) workdir: Option<RawFd>,
}

impl ChildPlan<'_> {
    /// The child's whole life before exec, step by step. Only raw
    /// syscalls: no allocation, no locks, no Rust std I/O.
    pub(super) fn run(&self) -> ! {
        let confine = self.launch.confine.as_ref();
        // SAFETY: every step is plain syscalls on memory prepared before
        // the child started (shared with warden, or a copy for the
        // firewall probe);
        // none allocates, locks or writes to warden's memory.
        unsafe {
            self.own_table();
            self.start_clean();
            self.take_stdio();
            self.enter_session();
            if let Some(c) = confine {
                self.bound_as_root(c);
            }
            self.become_identity();
            if let Some(c) = confine {
                self.give_up_privileges(c);
            }
            self.enter_workdir();
            if let Some(c) = confine {
                self.restrict(c);
            }
            self.exec()
        }
    }

    /// Its own descriptor table, first of all, where it started sharing
    /// warden's: only the numbers below the slots are copied (the
    /// kernel leaves the rest out), and nothing it does to a descriptor
    /// from here on touches warden's.
    ///
    /// # Safety
    /// Only in the child, before exec.
    unsafe fn own_table(&self) {
        if let Some(below) = self.own_table_below {
            let unshare = libc::CLOSE_RANGE_UNSHARE as libc::c_uint;
            if libc::syscall(libc::SYS_close_range, below, u32::MAX, unshare) < 0 {
                // The report goes through warden's own table: the pipe's
                // slot is there too, and nothing else is touched.
                self.fail(Stage::Stdio, Errno::last());
            }
        }
    }

    /// Signals: warden blocks them all and ignores SIGPIPE; a child starts
    /// clean (warden reset every other disposition at boot, see
    /// `default_signal_dispositions`).
    ///
    /// # Safety
    /// Only in the child, before exec.
    unsafe fn start_clean(&self) {
        set_default(libc::SIGPIPE);
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }

    /// Its stdio as 0, 1 and 2; nothing of warden's may leak into the
    /// child: every other descriptor closes at exec (the error pipe too).
    ///
    /// # Safety
    /// Only in the child, before exec.
    unsafe fn take_stdio(&self) {
        for (target, &fd) in self.fds.stdio.iter().enumerate() {
            if libc::dup2(fd, target as RawFd) < 0 {
                self.fail(Stage::Stdio, Errno::last());
            }
        }
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }

    /// A session (or process group) of its own, and its terminal.
    ///
    /// # Safety
    /// Only in the child, before exec.
    unsafe fn enter_session(&self) {
        let grouped = match self.launch.grouping {
            Grouping::Session => libc::setsid(),
            Grouping::ProcessGroup => libc::setpgid(0, 0),
        };
        if grouped < 0 {
            self.fail(Stage::Session, Errno::last());
        }
        if self.terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            self.fail(Stage::Terminal, Errno::last());
        }
    }

    /// What only root can do, done first: its cgroup (cgroup.procs is
    /// root's; everything it starts from here on is in it), first in line
    /// for the OOM killer (a failure leaves the default, as in status), its
    /// limits (a hard limit can only be lowered) and the bounding set
    /// (dropping needs CAP_SETPCAP), unless the spawning thread's is
    /// empty already (`give_up_privileges` reads it back either way).
    ///
    /// # Safety
    /// Only in the child, before exec.
    unsafe fn bound_as_root(&self, c: &Confine) {
        if let Some(procs) = self.fds.cgroup {
            if libc::write(procs, b"0".as_ptr().cast(), 1) != 1 {
                self.fail(Stage::Cgroup, Errno::last());
            }
        }
        let path = c"/proc/self/oom_score_adj";
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, OOM_FIRST.as_ptr().cast(), OOM_FIRST.len());
            libc::close(fd);
        }
        for &(resource, soft, hard) in &c.rlimits {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            let set = libc::syscall(
                libc::SYS_prlimit64,
                0,
                resource,
                &limit,
                std::ptr::null::<u8>(),
            );
            if set < 0 {
                self.fail(Stage::Limits, Errno::last());
            }
        }
        if !c.bounding_set_empty {
            for cap in 0..=c.last_cap {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                    self.fail(Stage::Capabilities, Errno::last());
                }
            }
        }
    }

    /// Its groups, gid and uid. Raw syscalls, not glibc's wrappers: those
    /// broadcast to threads that do not exist in this child.
    ///
    /// # Safety
    /// Only in the child, before exec.
    unsafe fn become_identity(&self) {
        let id = &self.launch.identity;
        if libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr()) < 0
            || libc::syscall(libc::SYS_setresgid, id.gid, id.gid, id.gid) < 0
            || libc::syscall(libc::SYS_setresuid, id.uid, id.uid, id.uid) < 0
        {
            self.fail(Stage::Credentials, Errno::last());
        }
    }

    /// Every capability emptied (and read back), and no_new_privs.
    ///
    /// # Safety
    /// Only in the child, before exec.
    unsafe fn give_up_privileges(&self, c: &Confine) {
        if !capabilities::empty(c.last_cap) {
            self.fail(Stage::Capabilities, Errno::EPERM);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            self.fail(Stage::NoNewPrivs, Errno::last());
        }
    }

    /// # Safety
    /// Only in the child, before exec.
    unsafe fn enter_workdir(&self) {
        libc::umask(0o022);
        let entered = match (&self.launch.workdir, self.fds.workdir) {
            (_, Some(fd)) => libc::fchdir(fd),
            (Workdir::At(dir), None) => libc::chdir(dir.as_ptr()),
            (Workdir::Fd(fd), None) => libc::fchdir(fd.as_raw_fd()),
        };
        if entered < 0 {
            self.fail(Stage::Workdir, Errno::last());
        }
    }

    /// Landlock, last before exec; a probe reports here instead of
    /// exec'ing. The seccomp filter needs no installing: this child was
    /// started by the spawner thread, which carries it (spawner.rs).
    ///
    /// # Safety
    /// Only in the child, before exec.
    unsafe fn restrict(&self, c: &Confine) {
        if let Some(ruleset) = self.fds.landlock {
            if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) < 0 {
                self.fail(Stage::Landlock, Errno::last());
            }
        }
        let uid = self.launch.identity.uid;
        let landlocked = c.landlock.is_some();
        if c.probe {
            let found = probe::layers(c.last_cap, uid, c.cgroup.is_some(), landlocked);
            self.report(Stage::Probe, found as i32, 0);
        }
        if let Some(p) = c.net_probe {
            self.report(Stage::Probe, probe::network(p, uid, landlocked) as i32, 0);
        }
    }

    /// Each candidate path in turn; a PATH folder it may not search only
    /// means the program is not there.
    ///
    /// # Safety
    /// Only in the child, before exec.
    unsafe fn exec(&self) -> ! {
        let mut denied = false;
        for path in &self.launch.candidates {
            libc::execve(path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr());
            match Errno::last() {
                Errno::ENOENT | Errno::ENOTDIR => {}
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

    fn fail(&self, stage: Stage, errno: Errno) -> ! {
        self.report(stage, errno as i32, failure_status(stage, errno))
    }

    fn report(&self, stage: Stage, value: i32, status: i32) -> ! {
        let e = value.to_ne_bytes();
        let msg = [stage as u8, e[0], e[1], e[2], e[3]];
        // SAFETY: write(2) and _exit(2) are async-signal-safe; `msg` is on
        // the child's stack.
        unsafe {
            libc::write(self.fds.err, msg.as_ptr().cast(), msg.len());
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
