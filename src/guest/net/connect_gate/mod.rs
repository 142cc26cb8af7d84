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
//! - this thread reads the address once into its own copy
//!   (process_vm_readv), decides on the copy, and for the proxy takes the
//!   command's socket (pidfd_getfd) and connects it itself, to the copy.
//!   Landlock binds the command, not warden, so that connect goes through.
//!
//! So there is no window between check and use: the address warden acts
//! on is the one it checked, and a call it lets go on (a unix socket's)
//! cannot become a TCP connection. The socket stays the command's own,
//! with whatever it set on it (options, blocking mode), so the proxy
//! finds its owner as it finds any client's.
//!
//! Its filter sends listen(2) too, which it refuses on network sockets
//! but the callers' published ports (see `listen`); where the gate does not
//! stand in for the firewall, a thread of the same kind answers commands'
//! listens alone.
//!
//! What it needs: CAP_SETUID and CAP_SETGID (its thread takes the
//! commands' real ids, see `notify::take_callers_ids`), which warden needs
//! anyway, and to be PID 1 of its PID namespace, as a machine's warden is.

mod decide;
mod listen;
mod notify;

pub use decide::{decide, Decision};
pub use notify::Listener;
use notify::Threads;

use nix::errno::Errno;
use nix::sys::socket::{self, sockopt};
use notify::Notice;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How long warden waits for the proxy to take a blocking caller's
/// connection (it does at once unless flooded).
const PROXY_ACCEPT_MS: u16 = 2000;
/// The longest address connect(2) takes: a sockaddr_storage.
const MAX_ADDRESS: usize = std::mem::size_of::<libc::sockaddr_storage>();

/// Whom the gate serves: the proxy's port on loopback, and the user
/// whose processes it reads (the commands').
#[derive(Debug, Clone)]
pub struct Settings {
    pub proxy_port: u16,
    pub uid: u32,
    pub gid: u32,
    /// The TCP ports its callers may listen on (the runtime's published
    /// ones; none for commands).
    pub listen_ports: Vec<u16>,
}

/// What the gate has done since it started, and for whom the sockets it
/// connected to the proxy are.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Commands' sockets warden connected to the proxy.
    pub to_proxy: AtomicU64,
    /// Connects refused.
    pub refused: AtomicU64,
    /// Calls let go on as made (unix and routing sockets).
    pub passed_on: AtomicU64,
    /// The sockets connected to the proxy whose caller the proxy has not
    /// asked for yet: by their local address (the proxy's client).
    made: Mutex<HashMap<SocketAddr, u32>>,
    /// Where warden's own probe is knocking right now: refused and
    /// counted, not audited (a status would add lines every time).
    probe_knocks: Mutex<Vec<SocketAddr>>,
}

/// Connections remembered for the proxy at most; past it they are
/// forgotten (the proxy then finds their caller by the socket table).
const REMEMBERED: usize = 4096;

impl Ledger {
    /// Which thread a socket the gate connected to the proxy was
    /// connected for, by its local address; asked once, by the proxy,
    /// once the client has spoken, which it can only do after the gate
    /// answered it, so after it was remembered.
    pub fn caller_of(&self, local: SocketAddr) -> Option<u32> {
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&local)
    }

    fn remember(&self, local: SocketAddr, tid: u32) {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if made.len() >= REMEMBERED {
            made.clear();
        }
        made.insert(local, tid);
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

    pub fn said(&self) -> String {
        format!(
            "{} sockets connected to the proxy, {} connects refused, {} other connects (unix sockets, the probe's Landlock witness) let through to the kernel",
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
    /// name its command), as bytes: a name need not be UTF-8.
    pub status: Option<Vec<u8>>,
    pub address: Option<SocketAddr>,
    pub reason: String,
    /// A listen(2) refused, not a connect(2).
    pub listen: bool,
}

pub type OnRefusal = Arc<dyn Fn(Refusal) + Send + Sync>;

/// Why the gate's thread could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("warden is not PID 1 of its PID namespace, so the commands could end it through the gate's thread, which has their real ids")]
    NotPid1,
    #[error("the connect gate cannot block signals: {0}")]
    Signals(#[source] io::Error),
    #[error("the connect gate cannot take the commands' real ids: {0}")]
    Ids(#[source] io::Error),
    #[error("cannot start the connect gate's thread: {0}")]
    Thread(#[source] io::Error),
    #[error("the connect gate's thread died")]
    Died,
}

/// Why a gate (the commands', the runtime's, or the guard of commands'
/// listens) could not open. What confinement says (Landlock, the seccomp
/// programs, the spawner threads) comes as it says it.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("it needs Landlock's TCP rules (ABI 4), which do not hold here")]
    NoLandlockTcp,
    #[error(transparent)]
    Landlock(#[from] crate::guest::confine::landlock::LandlockError),
    #[error(transparent)]
    Filter(#[from] crate::guest::confine::seccomp::SeccompError),
    #[error(transparent)]
    Spawner(#[from] crate::guest::confine::spawner::SpawnerError),
    #[error("cannot start the connect gate's audit thread: {0}")]
    AuditThread(#[source] io::Error),
    #[error(transparent)]
    Start(#[from] StartError),
    /// The commands' filter is installed, and no thread answers it.
    #[error("{0}; commands can make no TCP connection at all")]
    Closed(#[source] StartError),
}

/// Starts the gate's thread on `listener`; its ledger, or why it could
/// not start (then the listener is closed, and every gated connect fails
/// with ENOSYS: closed, not open).
pub fn start(
    listener: Listener,
    settings: Settings,
    on_refusal: OnRefusal,
) -> Result<Arc<Ledger>, StartError> {
    if std::process::id() != 1 {
        return Err(StartError::NotPid1);
    }
    let ledger = Arc::new(Ledger::default());
    let mine = ledger.clone();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("connect-gate".into())
        .spawn(move || {
            notify::short_slices();
            // Signals first: once it has the commands' ids, they may send some.
            let ready = notify::block_signals()
                .map_err(StartError::Signals)
                .and_then(|()| {
                    notify::take_callers_ids(settings.uid, settings.gid).map_err(StartError::Ids)
                });
            let failed = ready.is_err();
            let _ = ready_tx.send(ready);
            if !failed {
                serve(&listener, &settings, &mine, &on_refusal);
            }
        })
        .map_err(StartError::Thread)?;
    ready.recv().map_err(|_| StartError::Died)??;
    Ok(ledger)
}

fn serve(listener: &Listener, settings: &Settings, ledger: &Ledger, on_refusal: &OnRefusal) {
    let mut threads = Threads::default();
    loop {
        let notice = match listener.recv() {
            Ok(n) => n,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ENOENT)) => continue,
            Err(e) => {
                crate::say!("connect gate: cannot receive: {e}; gated connects now fail");
                return;
            }
        };
        match handle(
            listener,
            &notice,
            (settings, &mut threads),
            ledger,
            on_refusal,
        ) {
            Outcome::ToProxy => ledger.to_proxy.fetch_add(1, Ordering::Relaxed),
            Outcome::PassedOn => ledger.passed_on.fetch_add(1, Ordering::Relaxed),
            Outcome::Refused => ledger.refused.fetch_add(1, Ordering::Relaxed),
            Outcome::Listened | Outcome::Gone => 0,
        };
    }
}

enum Outcome {
    ToProxy,
    PassedOn,
    Refused,
    /// A unix socket warden listened on for its caller.
    Listened,
    /// The caller was gone before it could be answered.
    Gone,
}

/// Decides one call and answers it.
fn handle(
    listener: &Listener,
    n: &Notice,
    (settings, threads): (&Settings, &mut Threads),
    ledger: &Ledger,
    on_refusal: &OnRefusal,
) -> Outcome {
    let refuse = |errno: i32, address: Option<SocketAddr>, reason: String| {
        // Told while the caller waits: once answered, it and its command
        // may be gone before they are named.
        if !ledger.is_probe_knock(address) {
            let status = crate::guest::process::proc_status::read(n.tid as i32).ok();
            on_refusal(Refusal {
                tid: n.tid,
                status,
                address,
                reason,
                listen: i64::from(n.nr) == libc::SYS_listen,
            });
        }
        match listener.answer(n.id, -1, errno) {
            Ok(()) => Outcome::Refused,
            Err(_) => Outcome::Gone,
        }
    };
    if i64::from(n.nr) == libc::SYS_listen {
        return listen::handle(listener, n, (threads, settings), |errno, reason| {
            refuse(errno, None, reason)
        });
    }
    let proxy_port = settings.proxy_port;
    if i64::from(n.nr) != libc::SYS_connect {
        let reason = format!("syscall {} is not gated", n.nr);
        return refuse(libc::ENOSYS, None, reason);
    }
    let (fd, at, len) = (n.args[0] as i32, n.args[1], n.args[2] as u32 as usize);
    if len > MAX_ADDRESS {
        // What the kernel answers too.
        return refuse(libc::EINVAL, None, "an address longer than any".into());
    }
    let addr = match notify::read_memory(n.tid, at, len) {
        Ok(addr) => addr,
        Err(e) => return unreadable(listener, n, e, refuse),
    };
    match decide(&addr, proxy_port) {
        Decision::Continue => match listener.carry_on(n.id) {
            Ok(()) => Outcome::PassedOn,
            Err(_) => Outcome::Gone,
        },
        Decision::Refuse {
            errno,
            address,
            reason,
        } => refuse(errno, address, reason.into()),
        Decision::Proxy(target) => match to_proxy(listener, n, (fd, &addr), threads, ledger) {
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
        Some(libc::EFAULT) => {
            refuse(libc::EFAULT, None, "the address is not in its memory".into())
        }
        _ => refuse(
            libc::EACCES,
            None,
            format!("warden cannot read the address it gave ({e}): a process that hides its memory gets no connection"),
        ),
    }
}

/// Takes the caller's socket `fd` and connects it to `addr` (the copy
/// the gate checked). Err(Some(errno)) to refuse with, Err(None) if the
/// caller is gone.
fn to_proxy(
    listener: &Listener,
    n: &Notice,
    (fd, addr): (i32, &[u8]),
    threads: &mut Threads,
    ledger: &Ledger,
) -> Result<(), Option<i32>> {
    let errno = |e: io::Error| Some(e.raw_os_error().unwrap_or(libc::EBADF));
    let sock = threads.take(n.tid, fd).map_err(errno)?;
    // The pidfd pins the thread: if the call is still waiting, the socket
    // was taken from the caller and not from whoever took its tid since.
    if !listener.still_waiting(n.id) {
        return Err(None);
    }
    let pending = connect(&sock, addr).map_err(|e| Some(e as i32))?;
    // Its local address is chosen by now, even while it is connecting.
    let local = socket::getsockname::<socket::SockaddrStorage>(sock.as_raw_fd());
    if let Some(local) = local.ok().as_ref().and_then(std_addr) {
        ledger.remember(local, n.tid);
    }
    let answered = match pending {
        true => listener.answer(n.id, -1, libc::EINPROGRESS),
        false => listener.answer(n.id, 0, 0),
    };
    answered.map_err(|_| None)
}

/// Connects the caller's socket to `addr` as its own blocking mode asks:
/// a non-blocking socket is left connecting (true: EINPROGRESS); for a
/// blocking one warden waits, bounded, without blocking the gate: the
/// socket is non-blocking for the moment of the connect.
fn connect(sock: &OwnedFd, addr: &[u8]) -> Result<bool, Errno> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(sock.as_raw_fd(), FcntlArg::F_GETFL)?);
    let blocking = !flags.contains(OFlag::O_NONBLOCK);
    if blocking {
        fcntl(
            sock.as_raw_fd(),
            FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK),
        )?;
    }
    let connected = match notify::connect_raw(sock, addr) {
        Ok(()) => Ok(false),
        Err(e) => match Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)) {
            Errno::EINPROGRESS => Ok(true),
            errno => Err(errno),
        },
    };
    if !blocking {
        return connected;
    }
    let waited = match connected {
        Ok(true) => wait_connected(sock).map(|()| false),
        other => other,
    };
    fcntl(sock.as_raw_fd(), FcntlArg::F_SETFL(flags))?;
    waited
}

fn wait_connected(sock: &OwnedFd) -> Result<(), Errno> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLOUT)];
    if poll(&mut fds, PollTimeout::from(PROXY_ACCEPT_MS))? == 0 {
        return Err(Errno::ETIMEDOUT);
    }
    // Writable and nothing else (no error, no hang-up): connected.
    if fds[0].revents() == Some(PollFlags::POLLOUT) {
        return Ok(());
    }
    match socket::getsockopt(sock, sockopt::SocketError)? {
        0 => Ok(()),
        e => Err(Errno::from_raw(e)),
    }
}

/// As the proxy sees it: an IPv4 address mapped into IPv6 is IPv4.
fn std_addr(a: &socket::SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    let v6: std::net::SocketAddrV6 = (*a.as_sockaddr_in6()?).into();
    Some(SocketAddr::new(v6.ip().to_canonical(), v6.port()))
}
