//! The API server: accepts connections on the unix socket, checks who is
//! connecting, and runs commands as `shell`, streaming their output.
//!
//! Per connection: one task reads frames, one task writes them (fed by a
//! bounded queue, so a slow client slows its commands instead of growing
//! warden's memory), and one task per command.

pub mod admission;
mod audit_read;
mod commands;
mod credentials;
mod detached;
mod gate;
mod lifecycle;
mod runs;
mod runtime_keys;
mod setup;
mod status;
mod terminal;

pub use runs::end_all as end_runs;

use crate::guest::api::admission::{
    turn_away, Admission, Pass, Peer, MAX_CONNECTIONS, MAX_UNAUTHENTICATED,
};
use crate::guest::audit::payload;
use crate::guest::command::detached::Registry;
use crate::guest::command::output::{write_frames, Out};
use crate::guest::command::request;

use crate::guest::supervisor::Supervisor;
use crate::guest::vm::vsock::Capped;
use crate::wire::{
    ErrorCode, Event, Header, Kind, Request, HEADER_LEN, MAX_FRAME, SUPPORTED_VERSIONS,
};
use nix::sys::signal::Signal;
use nix::sys::socket::sockopt::SndBufForce;
use nix::unistd::Pid;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

/// Frames waiting for the writer, per connection.
const OUT_QUEUE: usize = 32;
/// A frame, once begun, must arrive whole within this time.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a frame may carry before the peer is let in: a hello is small,
/// and nothing is allocated for what a stranger announces beyond this.
const MAX_HELLO: u32 = 16 * 1024;
/// A new connection must say hello within this time.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// A wrong or missing key is answered after this long, one refusal at a
/// time for all connections together: guessing is slowed to one try per
/// REFUSAL_DELAY, and a flood of tries cannot flood the audit log faster.
const REFUSAL_DELAY: Duration = Duration::from_millis(500);
static REFUSALS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// How many refused connections may wait their turn; more are closed at
/// once and counted into the next audit line, so that a flood costs
/// neither the log nor PID 1's descriptors.
const WAITING_REFUSALS: usize = 16;
static WAITING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(WAITING_REFUSALS);
static UNAUDITED: AtomicU64 = AtomicU64::new(0);
/// The send buffer of every API socket.
const SOCKET_BUFFER: usize = 4 << 20;

/// Which socket a connection came through, and so how it is let in.
#[derive(Clone)]
pub enum Door {
    /// The machine's own socket: file mode and SO_PEERCRED (root and the
    /// runtime only).
    Local,
    /// The host's way in (a socket in a folder lent to it, or vsock in a
    /// VM): whoever presents the machine's key in the hello. The `&str`
    /// names the transport in audit lines.
    Host(Arc<crate::shared::machine_key::Key>, &'static str),
}

/// Where connections come from.
pub enum Listener {
    Unix(UnixListener),
    /// Only ever made inside a VM (see `vsock`).
    Vsock(crate::guest::vm::vsock::Listener),
    /// The TCP door, on a loopback address (`tcp_door`): for the owner,
    /// through `kubectl port-forward` into the pod.
    Tcp(tokio::net::TcpListener),
}

impl Listener {
    /// The next connection, the most bytes one write to it may carry, and
    /// who is at its other end.
    async fn accept(&self) -> std::io::Result<(UnixStream, usize, Peer)> {
        match self {
            Listener::Unix(l) => l.accept().await.map(|(s, _)| {
                let peer = Peer::of(&s);
                (s, usize::MAX, peer)
            }),
            Listener::Vsock(l) => l.accept().await.map(|(s, _peer)| {
                let peer = Peer::of(&s);
                (s, crate::guest::vm::vsock::MAX_WRITE, peer)
            }),
            Listener::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                Ok((tcp_as_stream(stream)?, usize::MAX, Peer::UNKNOWN))
            }
        }
    }
}

/// A TCP connection, served as a vsock one is (see `vsock`): the API only
/// reads, writes, splices and waits on its socket, the same system calls
/// for every connected stream socket, so the descriptor is handed to tokio
/// as a stream socket of the unix kind and the protocol code is shared.
/// Its peer has no credentials: the machine's key decides.
fn tcp_as_stream(stream: tokio::net::TcpStream) -> std::io::Result<UnixStream> {
    // Small control frames go at once: loopback has no use for Nagle.
    let _ = stream.set_nodelay(true);
    let fd: std::os::fd::OwnedFd = stream.into_std()?.into();
    let std = std::os::unix::net::UnixStream::from(fd);
    std.set_nonblocking(true)?;
    UnixStream::from_std(std)
}

/// Serves `door` on `listener`. Every door of the machine shares `detached`:
/// a command detached through one is listed and attached through another.
pub async fn serve(sup: Arc<Supervisor>, detached: Arc<Registry>, listener: Listener, door: Door) {
    let admission = Arc::new(Admission::default());
    loop {
        match listener.accept().await {
            Ok((stream, max_write, peer)) => {
                // Who may not use this door at all is turned away before
                // taking a place: a refused peer never crowds out the owner.
                if let Some(reason) = sup_refuses(&sup, &door, peer) {
                    refuse_peer(&sup, &door, peer, &reason);
                    tokio::spawn(turn_away(stream, reason));
                    continue;
                }
                match admission.admit() {
                    Some(pass) => {
                        // The own door's peers were vetted by their uid just
                        // above: nothing is left to wait for, and a burst of
                        // them (parallel `warden run`s) must not shed each
                        // other. The cap on all connections still holds.
                        if matches!(door, Door::Local) {
                            pass.let_in();
                        }
                        let conn = connection(
                            sup.clone(),
                            detached.clone(),
                            stream,
                            max_write,
                            peer,
                            door.clone(),
                            pass,
                        );
                        tokio::spawn(conn);
                    }
                    None => {
                        let reason = format!(
                            "this door holds {MAX_CONNECTIONS} connections at once; closed unheard"
                        );
                        refuse_peer(&sup, &door, peer, &reason);
                    }
                }
            }
            Err(e) => {
                // Out of descriptors or memory: wait and go on, never exit.
                crate::say!("api: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

type Failure = (ErrorCode, String);

/// Audits a peer turned away before a word was read (at most a burst per
/// uid and window; the rest are counted).
fn refuse_peer(sup: &Supervisor, door: &Door, peer: Peer, reason: &str) {
    let (door, via) = match door {
        Door::Local => ("local", "socket"),
        Door::Host(_, via) => ("host", *via),
    };
    sup.audit.record_refusal(
        &format!("uid {}", peer.uid),
        &payload::ConnectionRefused {
            door,
            via,
            uid: Some(peer.uid),
            pid: Some(peer.pid),
            reason,
            also_refused_unaudited: None,
        },
    );
}

struct Conn {
    sup: Arc<Supervisor>,
    /// The machine's detached commands (every door's).
    detached: Arc<Registry>,
    /// Who asks, for the audit log: the peer's uid on the machine's own
    /// socket; on the host's ways in, the peer's until the key lets it in,
    /// then 0 (the owner, by the key).
    uid: std::sync::atomic::AtomicU32,
    door: Door,
    /// The protocol version agreed in the hello (0 before it).
    version: std::sync::atomic::AtomicU32,
    tx: mpsc::Sender<Out>,
    slots: Mutex<Slots>,
    /// This connection's place at its door.
    pass: Pass,
    /// Set once the client is gone: what waits on a detached command for
    /// it lets go.
    gone: tokio::sync::watch::Sender<bool>,
    /// A `read_audit` is under way on this connection.
    reading_audit: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Slots {
    by_id: HashMap<u32, Slot>,
    /// The client is gone: commands still starting must be killed.
    closed: bool,
}

struct Slot {
    /// The command this id runs, when this connection started it (killed
    /// when the connection goes; an attached one is not).
    pid: Option<Pid>,
    stdin: Option<mpsc::Sender<Vec<u8>>>,
    /// The command's terminal, when it runs on one.
    terminal: Option<Arc<crate::guest::command::pty::Terminal>>,
    /// The detached command this id is attached to.
    attached: Option<Arc<crate::guest::command::detached::Detached>>,
}

async fn connection(
    sup: Arc<Supervisor>,
    detached: Arc<Registry>,
    stream: UnixStream,
    max_write: usize,
    peer: Peer,
    door: Door,
    pass: Pass,
) {
    // Spliced output is accounted in the socket's send buffer; the default
    // (about 200 KiB) holds too few pages to keep the pipe moving. Root may
    // raise it past the system's limit; failing leaves only slower output.
    let _ = nix::sys::socket::setsockopt(&stream, SndBufForce, &SOCKET_BUFFER);
    let (rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel(OUT_QUEUE);
    let writer = tokio::spawn(write_frames(Capped::new(wr, max_write), rx));
    let conn = Arc::new(Conn {
        sup,
        detached,
        uid: peer.uid.into(),
        door,
        version: Default::default(),
        tx,
        slots: Mutex::default(),
        pass,
        gone: tokio::sync::watch::channel(false).0,
        reading_audit: Default::default(),
    });
    let shed = conn.pass.shed.clone();
    let read = tokio::select! {
        read = conn.read_frames(rd) => read,
        // A newer connection needed this one's place before it said a
        // good hello.
        _ = shed.notified() => Err((
            ErrorCode::Refused,
            format!("too many connections waiting to be let in (at most {MAX_UNAUTHENTICATED}); this one was the oldest"),
        )),
    };
    if let Err((code, message)) = read {
        conn.send(0, error(code, message)).await;
    }
    conn.abandon();
    drop(conn);
    let _ = writer.await;
}

/// Why `peer` may not use `door` at all, if it may not. The machine's own
/// socket is for root and the runtime. The host's ways in are for the
/// owner outside the machine: a process inside it (its pid is seen in
/// warden's PID namespace) other than root or the runtime is refused
/// before anything it sends is read, whatever the socket file's mode
/// (under keep-id the owner's uid is shell's, so the mode cannot tell).
fn sup_refuses(sup: &Supervisor, door: &Door, peer: Peer) -> Option<String> {
    match door {
        Door::Local if !sup.may_connect(peer.uid) => Some(format!(
            "uid {} may not use this socket: only root and {} may",
            peer.uid, sup.runtime.name
        )),
        Door::Host(..) if peer.pid != 0 && !sup.may_connect(peer.uid) => Some(format!(
            "uid {} is inside the machine: the host's way in is for the owner; the runtime uses the machine's own socket",
            peer.uid
        )),
        _ => None,
    }
}

fn error(code: ErrorCode, message: impl Into<String>) -> Event {
    Event::Error {
        code,
        message: message.into(),
    }
}

impl Conn {
    /// Who asks, for the audit log (see `uid`).
    fn requester(&self) -> u32 {
        self.uid.load(Ordering::Relaxed)
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends an event; error texts have the machine's secrets hidden.
    async fn send(&self, id: u32, event: Event) {
        let event = match event {
            Event::Error { code, message } => {
                let message = self.sup.audit.redact(&message).into_owned();
                let uid = self.requester();
                self.sup.audit.record_refusal(
                    &format!("uid {uid}"),
                    &payload::RequestRefused {
                        requester_uid: uid,
                        id,
                        code,
                        message: &message,
                    },
                );
                Event::Error { code, message }
            }
            Event::Exit(mut report) => {
                report.error = report.error.map(|e| self.sup.audit.redact(&e).into_owned());
                if self.version.load(Ordering::SeqCst) < 4 {
                    // A client only ever receives its version's messages.
                    (report.cpu_user_ms, report.cpu_system_ms, report.max_rss_kb) =
                        (None, None, None);
                }
                Event::Exit(report)
            }
            other => other,
        };
        let _ = self.tx.send(Out::Event(id, event)).await;
    }

    /// Reads frames until the client closes, or a fatal error.
    async fn read_frames(self: &Arc<Self>, rd: OwnedReadHalf) -> Result<(), Failure> {
        // Small: a peer not yet let in costs little, and larger payloads
        // are read past the buffer anyway.
        let mut rd = BufReader::with_capacity(8 * 1024, rd);
        let hello = read_frame(&mut rd, MAX_HELLO);
        let first = match tokio::time::timeout(HELLO_TIMEOUT, hello).await {
            Err(_) => return Err((ErrorCode::HelloRequired, "no hello within 10 s".into())),
            Ok(frame) => frame?,
        };
        match first {
            None => return Ok(()),
            Some((header, payload)) => self.hello(header, &payload).await?,
        }
        while let Some((header, payload)) = read_frame(&mut rd, MAX_FRAME).await? {
            match header.kind {
                Kind::Control => self.control(header.id, &payload).await?,
                Kind::Stdin => self.stdin(header.id, payload).await,
                Kind::Stdout | Kind::Stderr => {
                    return Err((
                        ErrorCode::BadFrame,
                        "clients do not send output frames".into(),
                    ))
                }
            }
        }
        Ok(())
    }

    async fn hello(&self, header: Header, payload: &[u8]) -> Result<(), Failure> {
        let request = match header.kind {
            Kind::Control => serde_json::from_slice::<Request>(payload).ok(),
            _ => None,
        };
        let Some(Request::Hello { versions, key, .. }) = request else {
            return Err((
                ErrorCode::HelloRequired,
                "the first frame must be a hello".into(),
            ));
        };
        if let Door::Host(machine_key, via) = &self.door {
            let reason = match key.as_deref() {
                None => Some("no key: the host's way in needs the machine's key"),
                Some(k) if !machine_key.matches(k) => Some("wrong key"),
                Some(_) => None,
            };
            if let Some(reason) = reason {
                let Ok(_waiting) = WAITING.try_acquire() else {
                    UNAUDITED.fetch_add(1, Ordering::Relaxed);
                    return Err((ErrorCode::Refused, reason.into()));
                };
                let _one_at_a_time = REFUSALS.lock().await;
                let also = UNAUDITED.swap(0, Ordering::Relaxed);
                self.sup.audit.record(&payload::ConnectionRefused {
                    door: "host",
                    via,
                    uid: None,
                    pid: None,
                    reason,
                    also_refused_unaudited: Some(also),
                });
                tokio::time::sleep(REFUSAL_DELAY).await;
                return Err((ErrorCode::Refused, reason.into()));
            }
            self.sup.audit.record(&payload::Connection {
                door: "host",
                via,
                key: "accepted",
                peer_uid: self.requester(),
            });
            // From here the owner asks, by the key.
            self.uid.store(0, Ordering::Relaxed);
        }
        let Some(version) = SUPPORTED_VERSIONS
            .iter()
            .rev()
            .find(|v| versions.contains(v))
        else {
            return Err((
                ErrorCode::UnsupportedVersion,
                format!(
                    "no common version: warden speaks {SUPPORTED_VERSIONS:?}, client {versions:?}"
                ),
            ));
        };
        self.version.store(*version, Ordering::SeqCst);
        self.pass.let_in();
        let server = format!("warden {}", env!("CARGO_PKG_VERSION"));
        self.send(
            header.id,
            Event::Hello {
                version: *version,
                server,
            },
        )
        .await;
        Ok(())
    }

    async fn control(self: &Arc<Self>, id: u32, payload: &[u8]) -> Result<(), Failure> {
        let request = match serde_json::from_slice::<Request>(payload) {
            Ok(r) => r,
            Err(e) => {
                let code = match e.classify() {
                    serde_json::error::Category::Data => ErrorCode::BadRequest,
                    _ => ErrorCode::BadJson,
                };
                self.send(id, error(code, e.to_string())).await;
                return Ok(());
            }
        };
        // Reading the status only looks: a host that watches its machines
        // (`warden machine ps`) neither keeps them awake nor resets the
        // idle time it reads.
        if !matches!(request, Request::Status) {
            self.sup.activity.touch();
        }
        let reply = match request {
            Request::Hello { .. } => Some(error(ErrorCode::BadRequest, "hello was already said")),
            Request::Status => Some(self.status().await),
            Request::Reload => Some(self.reload()),
            Request::Signal { target, signal } => Some(self.signal(target, &signal)),
            Request::Audit { kind, fields } => Some(self.runtime_event(&kind, fields)),
            Request::Run(run) => self.start(id, run),
            Request::StopShell { signal } => Some(self.stop_shell(&signal).await),
            Request::CloseGate { reason } => Some(self.gate(Some(reason))),
            Request::OpenGate => Some(self.gate(None)),
            Request::HandKeys { text } => Some(self.hand_keys(&text)),
            Request::HandCredentials { text } => Some(self.hand_credentials(&text)),
            Request::BeginRun { run, budget_usd } => Some(self.begin_run(&run, budget_usd)),
            Request::EndRun { run } => Some(self.end_run(&run)),
            Request::Ready => Some(self.ready()),
            Request::Wake { cause } => Some(self.wake(&cause)),
            Request::Pause { idle_ms } => Some(self.pause(idle_ms)),
            Request::NextJob { at_ms } => Some(self.next_job(at_ms)),
            Request::Card { run } => Some(self.card(&run)),
            Request::RunSetup { script } => self.run_setup(id, script),
            Request::Resize { target, rows, cols } => Some(self.resize(target, rows, cols)),
            Request::List => Some(match self.needs(4, "list") {
                Some(e) => e,
                None => Event::Commands {
                    commands: self.detached.list().await,
                },
            }),
            Request::Attach { command } => self.attach(id, command).await,
            Request::Wait { command } => self.wait(id, command),
            Request::SignalCommand { command, signal } => {
                Some(self.signal_command(command, &signal))
            }
            Request::Hold { until_ms } => Some(self.hold(until_ms)),
            Request::ReadAudit { from_seq } => self.read_audit(id, from_seq),
            Request::Shutdown => {
                // Answered first: the stop begins once the answer is queued.
                let reply = self.shutdown();
                let stopping = matches!(reply, Event::ShuttingDown);
                self.send(id, reply).await;
                if stopping {
                    self.sup.request_stop();
                }
                None
            }
        };
        if let Some(event) = reply {
            self.send(id, event).await;
        }
        Ok(())
    }

    /// An error unless this connection speaks `version`, the one that
    /// brought `what`.
    fn needs(&self, version: u32, what: &str) -> Option<Event> {
        (self.version.load(Ordering::SeqCst) < version).then(|| {
            error(
                ErrorCode::BadRequest,
                format!("{what} is a protocol version {version} request"),
            )
        })
    }

    /// Checks and records a `shutdown` request (version 2).
    fn shutdown(&self) -> Event {
        if let Some(refused) = self.needs(2, "shutdown") {
            return refused;
        }
        let door = match &self.door {
            Door::Local => "local",
            Door::Host(_, via) => via,
        };
        self.sup.audit.record(&payload::ShutdownRequested {
            requester_uid: self.requester(),
            door,
        });
        Event::ShuttingDown
    }

    /// Signals every process of shell (version 3), on a blocking thread:
    /// it walks /proc, round after round.
    async fn stop_shell(&self, name: &str) -> Event {
        if let Some(refused) = self.needs(3, "stop_shell") {
            return refused;
        }
        let sig = match request::parse_signal(name) {
            Ok(sig) => sig,
            Err(e) => return error(ErrorCode::BadRequest, e.to_string()),
        };
        let sup = self.sup.clone();
        let (signalled, left) = tokio::task::spawn_blocking(move || {
            crate::guest::process::shell_procs::stop(&sup.reaper, sup.shell.uid, sup.shell.gid, sig)
        })
        .await
        .unwrap_or((0, usize::MAX));
        if left == 0 {
            // Nothing kept is left: the kept commands' tags are free again.
            self.sup.free_kept_tags();
        }
        self.sup.audit.record(&payload::ShellStopped {
            requester_uid: self.requester(),
            signal: sig.as_str(),
            signalled,
            left,
        });
        Event::ShellStopped { signalled, left }
    }

    /// Closes (with a reason) or opens the runtime's gate (version 3).
    /// An event of the runtime's own, marked as such in the log.
    fn runtime_event(&self, kind: &str, fields: serde_json::Value) -> Event {
        let name_ok = !kind.is_empty()
            && kind.len() <= 64
            && kind
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !name_ok {
            return error(ErrorCode::BadRequest, "an audit kind is [a-z0-9_]{1,64}");
        }
        let line = payload::Runtime {
            from_uid: self.requester(),
            event: kind,
            fields,
        };
        match self.sup.audit.record_seq(&line) {
            Some(seq) => Event::Recorded { seq },
            None => error(ErrorCode::AuditFailing, "the audit log cannot be written"),
        }
    }

    /// The client is gone: kill every command it started.
    fn abandon(&self) {
        let mut slots = self.slots();
        slots.closed = true;
        for slot in slots.by_id.values() {
            if let Some(pid) = slot.pid {
                self.sup.reaper.signal(pid, Signal::SIGKILL, true);
            }
            // A detached command it followed goes on, without it.
            if let Some(detached) = slot.attached.clone() {
                let tx = self.tx.clone();
                tokio::spawn(async move { detached.let_go(&tx).await });
            }
        }
        self.gone.send_replace(true);
    }

    /// Resolves once the client is gone.
    async fn until_gone(&self) {
        let mut gone = self.gone.subscribe();
        let _ = gone.wait_for(|g| *g).await;
    }
}

/// Reads one frame of at most `max` payload bytes (the format's own
/// limit, or less before the peer is let in).
async fn read_frame(
    rd: &mut BufReader<OwnedReadHalf>,
    max: u32,
) -> Result<Option<(Header, Vec<u8>)>, Failure> {
    let mut raw = [0u8; HEADER_LEN];
    // A client may be idle between frames as long as it likes; once a
    // frame has begun, it must arrive whole in time (no slow-loris).
    if rd.read_exact(&mut raw[..1]).await.is_err() {
        return Ok(None);
    }
    match tokio::time::timeout(FRAME_TIMEOUT, rd.read_exact(&mut raw[1..])).await {
        Err(_) => {
            return Err((
                ErrorCode::BadFrame,
                "a frame header took too long to arrive".into(),
            ))
        }
        Ok(Err(_)) => return Ok(None),
        Ok(Ok(_)) => {}
    }
    let header = Header::decode(&raw).map_err(|e| {
        let code = match e {
            crate::wire::FrameError::TooLarge(_) => ErrorCode::FrameTooLarge,
            _ => ErrorCode::BadFrame,
        };
        (code, e.to_string())
    })?;
    if header.len > max {
        return Err((
            ErrorCode::FrameTooLarge,
            format!(
                "a frame of {} bytes before the hello was answered; the limit there is {max}",
                header.len
            ),
        ));
    }
    let mut payload = vec![0u8; header.len as usize];
    match tokio::time::timeout(FRAME_TIMEOUT, rd.read_exact(&mut payload)).await {
        Err(_) => Err((
            ErrorCode::BadFrame,
            "a frame took too long to arrive".into(),
        )),
        Ok(Err(_)) => Ok(None),
        Ok(Ok(_)) => Ok(Some((header, payload))),
    }
}
