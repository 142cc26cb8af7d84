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
}

/// Where the firewall probe knocks: loopback ports warden holds open
/// (none of them the proxy), and the proxy's port. The `v6` ports are
/// tried on ::1 when set.
#[derive(Debug, Clone, Copy)]
pub struct NetProbe {
    pub tcp_v4: u16,
    pub tcp_v6: Option<u16>,
    pub udp_v4: u16,
    pub udp_v6: Option<u16>,
    pub proxy: u16,
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

/// What a probe child found, having applied every layer as a command would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe(pub u32);

impl Probe {
    /// Every capability set is empty (effective, permitted, inheritable,
    /// bounding; ambient cleared).
    pub const NO_CAPABILITIES: u32 = 1;
    pub const NO_NEW_PRIVS: u32 = 1 << 1;
    /// Opening "/" (granted to nobody) was refused with EACCES.
    pub const LANDLOCK_FILESYSTEM: u32 = 1 << 2;
    /// personality(2), harmless and denied, failed with EPERM.
    pub const SECCOMP: u32 = 1 << 3;
    /// A TCP connect to a port not granted was refused with EACCES.
    pub const LANDLOCK_TCP: u32 = 1 << 4;
    /// The uid is the command's.
    pub const IDENTITY: u32 = 1 << 5;
    /// The firewall probe: TCP connects to loopback ports that are not the
    /// proxy failed (on ::1 as well, when asked).
    pub const NET_TCP_REFUSED: u32 = 1 << 6;
    /// ... and they failed at once, not by timing out.
    pub const NET_REFUSED_FAST: u32 = 1 << 7;
    /// The proxy's port answered (on ::1 as well, when asked).
    pub const NET_PROXY_REACHED: u32 = 1 << 8;

    pub fn has(self, bit: u32) -> bool {
        self.0 & bit != 0
    }
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
        terminal: stdio.terminal,
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

/// Empties the effective, permitted and inheritable sets (capset) and the
/// ambient set, then reads them back with the bounding set: true only if
/// nothing at all is left.
///
/// # Safety
/// Only for a forked child: raw syscalls on stack memory.
unsafe fn empty_capabilities(last_cap: u32) -> bool {
    const VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let zero = Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [zero; 2];
    libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL,
        0,
        0,
        0,
    );
    if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) < 0 {
        return false;
    }
    data = [Data {
        effective: 1,
        permitted: 1,
        inheritable: 1,
    }; 2];
    if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) < 0 {
        return false;
    }
    let sets_empty = data
        .iter()
        .all(|d| d.effective == 0 && d.permitted == 0 && d.inheritable == 0);
    let bounding_empty = (0..=last_cap)
        .all(|cap| libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) == 0);
    // The ambient set is always within permitted and inheritable, both
    // read back empty above; asking each bit once more costs little.
    let ambient_empty = (0..=last_cap).all(|cap| {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_IS_SET,
            cap as libc::c_ulong,
            0,
            0,
        ) == 0
    });
    sets_empty && bounding_empty && ambient_empty
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
struct ChildPlan<'a> {
    launch: &'a Launch,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    groups: &'a [libc::gid_t],
    stdio: [RawFd; 3],
    terminal: bool,
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
            // warden reset every other disposition at boot
            // (`default_signal_dispositions`); SIGPIPE it ignores itself.
            set_default(libc::SIGPIPE);
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
            if self.terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                failed(Stage::Terminal);
            }

            let confine = self.launch.confine.as_ref();
            if confine.is_some() {
                // First in line for the OOM killer: a confined command
                // before the runtime and warden (raising needs no
                // privilege; a failure leaves the default, as in status).
                let path = c"/proc/self/oom_score_adj";
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd >= 0 {
                    libc::write(fd, OOM_FIRST.as_ptr().cast(), OOM_FIRST.len());
                    libc::close(fd);
                }
            }
            if let Some(c) = confine {
                // Limits first, while still root (a hard limit can only be
                // lowered), and the bounding set (dropping needs CAP_SETPCAP).
                for &(resource, soft, hard) in &c.rlimits {
                    let limit = libc::rlimit {
                        rlim_cur: soft,
                        rlim_max: hard,
                    };
                    if libc::syscall(
                        libc::SYS_prlimit64,
                        0,
                        resource,
                        &limit,
                        std::ptr::null::<u8>(),
                    ) < 0
                    {
                        failed(Stage::Limits);
                    }
                }
                for cap in 0..=c.last_cap {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                        failed(Stage::Capabilities);
                    }
                }
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
            if let Some(c) = confine {
                if !empty_capabilities(c.last_cap) {
                    self.fail(Stage::Capabilities, Errno::EPERM);
                }
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                    failed(Stage::NoNewPrivs);
                }
            }

            libc::umask(0o022);
            let entered = match &self.launch.workdir {
                Workdir::At(dir) => libc::chdir(dir.as_ptr()),
                Workdir::Fd(fd) => libc::fchdir(fd.as_raw_fd()),
            };
            if entered < 0 {
                failed(Stage::Workdir);
            }

            if let Some(c) = confine {
                if let Some(ruleset) = &c.landlock {
                    if libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32)
                        < 0
                    {
                        failed(Stage::Landlock);
                    }
                }
                // The seccomp filter needs no installing: this child was
                // forked by the spawner thread, which carries it (spawner.rs).
                if c.probe {
                    self.report_probe(c.last_cap);
                }
                if let Some(p) = c.net_probe {
                    self.report_net_probe(p);
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

    /// Tests, from inside, every layer just applied, and reports.
    ///
    /// # Safety
    /// Only for the child, after the layers are applied; never returns.
    unsafe fn report_probe(&self, last_cap: u32) -> ! {
        let mut bits = 0u32;
        if empty_capabilities(last_cap) {
            bits |= Probe::NO_CAPABILITIES;
        }
        if libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 {
            bits |= Probe::NO_NEW_PRIVS;
        }
        let root = c"/";
        let fd = libc::open(
            root.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd < 0 && Errno::last() == Errno::EACCES {
            bits |= Probe::LANDLOCK_FILESYSTEM;
        }
        if libc::syscall(libc::SYS_personality, 0xffff_ffffu32) < 0 && Errno::last() == Errno::EPERM
        {
            bits |= Probe::SECCOMP;
        }
        let sock = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if sock >= 0 {
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 1u16.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
                },
                sin_zero: [0; 8],
            };
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let rc = libc::connect(sock, (&addr as *const libc::sockaddr_in).cast(), len);
            if rc < 0 && Errno::last() == Errno::EACCES {
                bits |= Probe::LANDLOCK_TCP;
            }
        }
        if libc::getuid() == self.launch.identity.uid && libc::geteuid() == self.launch.identity.uid
        {
            bits |= Probe::IDENTITY;
        }
        self.report(Stage::Probe, bits as i32, 0)
    }

    /// Knocks where the firewall must refuse, and where it must let
    /// through, and reports; the UDP datagrams' fate is judged by warden,
    /// which holds the receiving sockets.
    ///
    /// # Safety
    /// Only for the child, after its credentials are dropped; never returns.
    unsafe fn report_net_probe(&self, p: NetProbe) -> ! {
        let mut refused = true;
        let mut fast = true;
        let mut reached = true;
        let mut knock = |v6: bool, port: u16, must_connect: bool| match tcp_connect(v6, port) {
            Knock::Connected if must_connect => {}
            Knock::Connected => refused = false,
            Knock::Refused if must_connect => reached = false,
            Knock::Refused => {}
            Knock::TimedOut => {
                fast = false;
                if must_connect {
                    reached = false;
                }
            }
        };
        knock(false, p.tcp_v4, false);
        knock(false, p.proxy, true);
        if let Some(port) = p.tcp_v6 {
            knock(true, port, false);
            knock(true, p.proxy, true);
        }
        udp_send(false, p.udp_v4);
        if let Some(port) = p.udp_v6 {
            udp_send(true, port);
        }
        let mut bits = 0u32;
        if refused {
            bits |= Probe::NET_TCP_REFUSED;
        }
        if fast {
            bits |= Probe::NET_REFUSED_FAST;
        }
        if reached {
            bits |= Probe::NET_PROXY_REACHED;
        }
        if libc::getuid() == self.launch.identity.uid {
            bits |= Probe::IDENTITY;
        }
        self.report(Stage::Probe, bits as i32, 0)
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
            libc::write(self.err_fd, msg.as_ptr().cast(), msg.len());
            libc::_exit(status)
        }
    }
}

/// How a TCP connect from the firewall probe ended.
enum Knock {
    Connected,
    Refused,
    TimedOut,
}

/// A loopback socket address on the stack: (storage, length).
fn loopback(v6: bool, port: u16) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = if v6 {
        let a = libc::sockaddr_in6 {
            sin6_family: libc::AF_INET6 as libc::sa_family_t,
            sin6_port: port.to_be(),
            sin6_flowinfo: 0,
            sin6_addr: libc::in6_addr {
                s6_addr: std::net::Ipv6Addr::LOCALHOST.octets(),
            },
            sin6_scope_id: 0,
        };
        // SAFETY: sockaddr_storage is larger than, and aligned for, any
        // socket address.
        unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), a) };
        std::mem::size_of::<libc::sockaddr_in6>()
    } else {
        let a = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: as above.
        unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), a) };
        std::mem::size_of::<libc::sockaddr_in>()
    };
    (storage, len as libc::socklen_t)
}

/// A non-blocking connect, given two seconds: a firewall that drops
/// instead of refusing shows as a timeout.
///
/// # Safety
/// Raw, async-signal-safe syscalls only: callable in a forked child.
unsafe fn tcp_connect(v6: bool, port: u16) -> Knock {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let fd = libc::socket(
        family,
        libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        0,
    );
    if fd < 0 {
        return Knock::Refused;
    }
    let (addr, len) = loopback(v6, port);
    let knock = if libc::connect(fd, (&addr as *const libc::sockaddr_storage).cast(), len) == 0 {
        Knock::Connected
    } else if Errno::last() != Errno::EINPROGRESS {
        Knock::Refused
    } else {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        if libc::poll(&mut pfd, 1, 2000) <= 0 {
            Knock::TimedOut
        } else {
            let mut err: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            );
            if err == 0 {
                Knock::Connected
            } else {
                Knock::Refused
            }
        }
    };
    libc::close(fd);
    knock
}

/// One datagram to a loopback port; whether it arrives is for warden to
/// see.
///
/// # Safety
/// Raw, async-signal-safe syscalls only: callable in a forked child.
unsafe fn udp_send(v6: bool, port: u16) {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let fd = libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if fd < 0 {
        return;
    }
    let (addr, len) = loopback(v6, port);
    let msg = b"warden firewall probe";
    libc::sendto(
        fd,
        msg.as_ptr().cast(),
        msg.len(),
        0,
        (&addr as *const libc::sockaddr_storage).cast(),
        len,
    );
    libc::close(fd);
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
