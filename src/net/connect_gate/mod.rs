//! The connect gate: where the firewall cannot hold (no CAP_NET_ADMIN, a
//! rootless engine's host network), warden itself decides every TCP
//! connect a command makes.
//!
//! Three layers make it, none needing NET_ADMIN or SYS_PTRACE:
//! - a seccomp filter on the spawner thread sends every connect(2) of a
//!   command to warden as a user notification (`seccomp::gate_program`);
//! - Landlock refuses every TCP connect a command makes itself (no port
//!   is granted), so nothing the kernel carries out on the command's
//!   behalf can open a TCP connection, whatever its memory says by then;
//! - this thread reads the address once into its own copy, decides on the
//!   copy, and for the proxy connects a socket of its own to the copy and
//!   puts it in the command's place (at the same descriptor number, with
//!   the same non-blocking and close-on-exec flags).
//!
//! So there is no window between check and use: the address warden acts
//! on is the one it checked, and a call it lets go on (a unix socket's)
//! cannot become a TCP connection. What the command set on its own socket
//! before connecting (a bound port, buffer sizes) is not carried over;
//! TCP_NODELAY is set, loopback having no use for Nagle's delay.

mod decide;
mod notify;

pub use decide::{decide, Decision};
pub use notify::Listener;

use nix::errno::Errno;
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage};
use notify::Notice;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How long warden waits for the proxy to accept on a blocking caller's
/// behalf (it accepts at once unless flooded).
const PROXY_ACCEPT_MS: u16 = 2000;
/// The longest address connect(2) takes: a sockaddr_storage.
const MAX_ADDRESS: usize = std::mem::size_of::<libc::sockaddr_storage>();

/// Whom the gate serves: the proxy's port on loopback, and the user
/// whose processes it reads (the commands').
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub proxy_port: u16,
    pub uid: u32,
    pub gid: u32,
}

/// What the gate has done since it started, and for whom its
/// connections to the proxy are.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Connections warden made to the proxy for a command.
    pub to_proxy: AtomicU64,
    /// Connects refused.
    pub refused: AtomicU64,
    /// Calls let go on as made (unix and routing sockets).
    pub passed_on: AtomicU64,
    /// The connections made to the proxy whose caller the proxy has not
    /// asked for yet: by their local address (the proxy's client).
    made: Mutex<HashMap<SocketAddr, u32>>,
    /// Where warden's own probe is knocking right now: refused and
    /// counted, not audited (a status would add lines every time).
    probe_knocks: Mutex<Vec<SocketAddr>>,
}

/// Connections remembered for the proxy at most; past it the oldest are
/// forgotten (the proxy then finds their caller by the socket table).
const REMEMBERED: usize = 4096;

impl Ledger {
    /// Which thread a connection the gate made to the proxy was made for,
    /// by its local address; asked once, by the proxy, when it accepts it.
    pub fn caller_of(&self, local: SocketAddr) -> Option<u32> {
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&local)
    }

    /// The probe knocks on `addresses` until `probe_done`.
    pub fn probe_knocking(&self, addresses: Vec<SocketAddr>) {
        *self.probe_knocks.lock().unwrap_or_else(|e| e.into_inner()) = addresses;
    }

    pub fn probe_done(&self) {
        self.probe_knocking(Vec::new());
    }

    fn is_probe_knock(&self, address: Option<SocketAddr>) -> bool {
        address.is_some_and(|a| {
            self.probe_knocks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&a)
        })
    }

    fn remember(&self, local: SocketAddr, tid: u32) {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if made.len() >= REMEMBERED {
            made.clear();
        }
        made.insert(local, tid);
    }

    pub fn said(&self) -> String {
        format!(
            "{} connections made to the proxy for commands, {} connects refused, {} other connects (unix sockets, the probe's Landlock witness) let through to the kernel",
            self.to_proxy.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.passed_on.load(Ordering::Relaxed)
        )
    }
}

/// One refused connect, for the audit log.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub tid: u32,
    /// The caller's /proc status, read before it was answered (its groups
    /// name its command).
    pub status: Option<String>,
    pub address: Option<SocketAddr>,
    pub reason: String,
}

pub type OnRefusal = Arc<dyn Fn(Refusal) + Send + Sync>;

/// Starts the gate's thread on `listener`; its ledger, or why it could
/// not start (then the listener is closed, and every gated connect fails
/// with ENOSYS: closed, not open).
pub fn start(
    listener: Listener,
    settings: Settings,
    on_refusal: OnRefusal,
) -> Result<Arc<Ledger>, String> {
    let ledger = Arc::new(Ledger::default());
    let mine = ledger.clone();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("connect-gate".into())
        .spawn(move || {
            let acting = notify::act_as(settings.uid, settings.gid);
            let failed = acting.is_err();
            let _ = ready_tx.send(acting);
            if !failed {
                serve(&listener, settings, &mine, &on_refusal);
            }
        })
        .map_err(|e| format!("cannot start the connect gate's thread: {e}"))?;
    ready
        .recv()
        .map_err(|_| "the connect gate's thread died".to_string())??;
    Ok(ledger)
}

fn serve(listener: &Listener, settings: Settings, ledger: &Ledger, on_refusal: &OnRefusal) {
    loop {
        let notice = match listener.recv() {
            Ok(n) => n,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ENOENT)) => continue,
            Err(e) => {
                crate::say!("connect gate: cannot receive: {e}; gated connects now fail");
                return;
            }
        };
        let outcome = handle(listener, &notice, settings, ledger);
        match outcome {
            Outcome::ToProxy => ledger.to_proxy.fetch_add(1, Ordering::Relaxed),
            Outcome::PassedOn => ledger.passed_on.fetch_add(1, Ordering::Relaxed),
            Outcome::Refused(refusal) => {
                if !ledger.is_probe_knock(refusal.address) {
                    on_refusal(refusal);
                }
                ledger.refused.fetch_add(1, Ordering::Relaxed)
            }
            Outcome::Gone => 0,
        };
    }
}

enum Outcome {
    ToProxy,
    PassedOn,
    Refused(Refusal),
    /// The caller was gone before it could be answered.
    Gone,
}

/// Decides one call and answers it.
fn handle(listener: &Listener, n: &Notice, settings: Settings, ledger: &Ledger) -> Outcome {
    let refuse = |errno: i32, address: Option<SocketAddr>, reason: String| {
        // Read while the caller waits: it may be gone once answered.
        let status = std::fs::read_to_string(format!("/proc/{}/status", n.tid)).ok();
        match listener.answer(n.id, -1, errno) {
            Ok(()) => Outcome::Refused(Refusal {
                tid: n.tid,
                status,
                address,
                reason,
            }),
            Err(_) => Outcome::Gone,
        }
    };
    if i64::from(n.nr) != libc::SYS_connect {
        return refuse(libc::ENOSYS, None, format!("syscall {} is not gated", n.nr));
    }
    let (fd, at, len) = (n.args[0] as i32, n.args[1], n.args[2] as u32 as usize);
    if len > MAX_ADDRESS {
        // What the kernel answers too.
        return refuse(libc::EINVAL, None, "an address longer than any".into());
    }
    let read = notify::Caller::open(n.tid).and_then(|c| Ok((c.read_memory(at, len)?, c)));
    let (addr, caller) = match read {
        Ok(addr) => addr,
        Err(e) => return unreadable(listener, n, e, refuse),
    };
    match decide(&addr, settings.proxy_port) {
        Decision::Continue => match listener.carry_on(n.id) {
            Ok(()) => Outcome::PassedOn,
            Err(_) => Outcome::Gone,
        },
        Decision::Refuse {
            errno,
            address,
            reason,
        } => refuse(errno, address, reason.into()),
        Decision::Proxy(target) => match to_proxy(listener, n, &caller, fd, target, ledger) {
            Ok(()) => Outcome::ToProxy,
            Err(Some(errno)) => refuse(errno, Some(target), "the proxy did not accept".into()),
            Err(None) => Outcome::Gone,
        },
    }
}

/// The call's address could not be read: an address the caller does not
/// have (EFAULT, as the kernel says), or a process that made itself
/// unreadable (non-dumpable), which is refused.
fn unreadable(
    listener: &Listener,
    n: &Notice,
    e: io::Error,
    refuse: impl Fn(i32, Option<SocketAddr>, String) -> Outcome,
) -> Outcome {
    if !listener.still_waiting(n.id) {
        return Outcome::Gone;
    }
    match e.raw_os_error() {
        Some(libc::EIO) | Some(libc::EFAULT) => {
            refuse(libc::EFAULT, None, "the address is not in its memory".into())
        }
        _ => refuse(
            libc::EACCES,
            None,
            format!("warden cannot read the address it gave ({e}): a process that hides its memory gets no connection"),
        ),
    }
}

/// Connects a socket of warden's to `target` and puts it at `fd` in the
/// caller's table; Err(Some(errno)) to refuse with, Err(None) if the
/// caller is gone.
fn to_proxy(
    listener: &Listener,
    n: &Notice,
    caller: &notify::Caller,
    fd: i32,
    target: SocketAddr,
    ledger: &Ledger,
) -> Result<(), Option<i32>> {
    let flags = caller.fd_flags(fd).map_err(|_| Some(libc::EBADF))?;
    if !listener.still_waiting(n.id) {
        return Err(None);
    }
    let nonblocking = flags & libc::O_NONBLOCK as u32 != 0;
    let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
    let remember = |local| ledger.remember(local, n.tid);
    let (sock, pending) = connect(target, nonblocking, remember).map_err(|e| Some(e as i32))?;
    listener
        .place(n.id, sock.as_fd(), fd, cloexec)
        .map_err(|_| None)?;
    let error = if pending { libc::EINPROGRESS } else { 0 };
    listener
        .answer(n.id, if pending { -1 } else { 0 }, error)
        .map_err(|_| None)
}

/// A TCP socket connected (or connecting, for a non-blocking caller) to
/// `target`, with the caller's blocking mode; whether it is still pending.
/// `remember` is told its local address before it connects.
fn connect(
    target: SocketAddr,
    nonblocking: bool,
    remember: impl FnOnce(SocketAddr),
) -> Result<(OwnedFd, bool), Errno> {
    let family = match target {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let sock = socket::socket(family, SockType::Stream, flags, None)?;
    let _ = socket::setsockopt(&sock, sockopt::TcpNoDelay, &true);
    // Bound first, so that its local address is known (and remembered)
    // before the proxy can accept it and ask whose it is.
    socket::bind(
        sock.as_raw_fd(),
        &SockaddrStorage::from(SocketAddr::new(target.ip(), 0)),
    )?;
    if let Ok(local) = socket::getsockname::<SockaddrStorage>(sock.as_raw_fd()) {
        if let Some(local) = std_addr(&local) {
            remember(local);
        }
    }
    let pending = match socket::connect(sock.as_raw_fd(), &SockaddrStorage::from(target)) {
        Ok(()) => false,
        Err(Errno::EINPROGRESS) => true,
        Err(e) => return Err(e),
    };
    if nonblocking {
        return Ok((sock, pending));
    }
    if pending {
        wait_connected(&sock)?;
    }
    let fl = nix::fcntl::fcntl(sock.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
    let fl = nix::fcntl::OFlag::from_bits_truncate(fl) & !nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(sock.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(fl))?;
    Ok((sock, false))
}

fn wait_connected(sock: &OwnedFd) -> Result<(), Errno> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLOUT)];
    if poll(&mut fds, PollTimeout::from(PROXY_ACCEPT_MS))? == 0 {
        return Err(Errno::ETIMEDOUT);
    }
    match socket::getsockopt(sock, sockopt::SocketError)? {
        0 => Ok(()),
        e => Err(Errno::from_raw(e)),
    }
}

/// As the proxy sees it: an IPv4 address mapped into IPv6 is IPv4.
fn std_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    let v6: std::net::SocketAddrV6 = (*a.as_sockaddr_in6()?).into();
    Some(SocketAddr::new(v6.ip().to_canonical(), v6.port()))
}
