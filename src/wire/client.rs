//! A blocking client of the API, for `warden run`, `warden status`, the
//! tests and the benchmarks.

use crate::wire::{
    ErrorCode, Event, ExitReport, Header, Kind, Request, RunRequest, Status, HEADER_LEN,
    SUPPORTED_VERSIONS,
};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// What arrives from warden.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Event(u32, Event),
    Output(Kind, u32, Vec<u8>),
}

pub struct Client {
    reader: BufReader<UnixStream>,
    writer: Arc<Mutex<UnixStream>>,
    pub version: u32,
    pub server: String,
    /// Whatever must live as long as the connection (a machine held
    /// awake while it is open); dropped with it.
    alongside: Option<Box<dyn std::any::Any + Send>>,
}

/// The whole result of one command.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: ExitReport,
}

/// What a `read_audit` sent, as its `audit_end` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditRead {
    /// The first line's seq (None: no line was sent).
    pub first_seq: Option<u64>,
    /// The log's last line when warden began reading.
    pub last_seq: u64,
    pub lines: u64,
    pub bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("warden said {code:?}: {message}")]
    Warden { code: ErrorCode, message: String },
    #[error("unexpected reply: {0}")]
    Unexpected(String),
    #[error("hybrid vsock: {0}")]
    Vsock(String),
}

/// How long the host's vsock device may take to answer a CONNECT, and
/// warden its hello (a guest that hangs must not hang the host's tools).
const VSOCK_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// One line, read a byte at a time so that nothing after it is consumed;
/// at most `max` bytes, without its newline.
pub fn read_line(stream: &mut impl Read, max: usize) -> io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() <= max {
        if stream.read(&mut byte)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if byte[0] == b'\n' {
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
        line.push(byte[0]);
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, "line too long"))
}

/// Connects to vsock `port` in a VM through the host's end of a hybrid
/// vsock (a unix socket, `path`, kept by the VM's vsock device:
/// Firecracker, Cloud Hypervisor and vhost-device-vsock keep one): sends
/// `CONNECT <port>`, waits (at most `VSOCK_CONNECT_TIMEOUT`) for `OK <host
/// port>`; the stream then carries the guest's bytes, without a timeout.
pub fn hybrid_vsock_connect(path: &Path, port: u32) -> Result<UnixStream, ClientError> {
    let mut stream = UnixStream::connect(path)?;
    stream.set_read_timeout(Some(VSOCK_CONNECT_TIMEOUT))?;
    stream.write_all(format!("CONNECT {port}\n").as_bytes())?;
    let answer = read_line(&mut stream, 64).map_err(|e| {
        ClientError::Vsock(format!(
            "{}: CONNECT {port}: no answer ({e}); is the VM up and listening?",
            path.display()
        ))
    })?;
    let ok = answer
        .strip_prefix("OK ")
        .is_some_and(|n| n.parse::<u32>().is_ok());
    if !ok {
        return Err(ClientError::Vsock(format!(
            "{}: CONNECT {port}: answered {answer:?}, not OK <port>",
            path.display()
        )));
    }
    stream.set_read_timeout(None)?;
    Ok(stream)
}

impl Client {
    /// Connects and says hello.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        Client::connect_with(path, None)
    }

    /// Connects and says hello, sending `first` in the same write, without
    /// waiting for warden's hello (a command starts one round trip sooner).
    pub fn connect_with(
        path: &Path,
        first: Option<(u32, &Request)>,
    ) -> Result<Client, ClientError> {
        Client::connect_keyed(path, None, first)
    }

    /// Connects with the machine's key (needed on the host socket).
    pub fn connect_keyed(
        path: &Path,
        key: Option<&str>,
        first: Option<(u32, &Request)>,
    ) -> Result<Client, ClientError> {
        Client::hello(UnixStream::connect(path)?, key, first)
    }

    /// Says hello over a stream connected earlier (a caller that connects
    /// first and speaks later, as a pool of clients does).
    pub fn over(stream: UnixStream, key: Option<&str>) -> Result<Client, ClientError> {
        Client::hello(stream, key, None)
    }

    /// Connects to warden's TCP door (`tcp_door`; on a cluster, the local
    /// end of `kubectl port-forward`) with the machine's key. The stream
    /// is used as the unix one is: reads and writes are the same calls.
    pub fn connect_tcp(
        address: &str,
        key: Option<&str>,
        first: Option<(u32, &Request)>,
    ) -> Result<Client, ClientError> {
        use std::net::ToSocketAddrs;
        let mut last = io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{address}: no address"),
        );
        for addr in address.to_socket_addrs()? {
            match std::net::TcpStream::connect_timeout(&addr, VSOCK_CONNECT_TIMEOUT) {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    let fd: std::os::fd::OwnedFd = stream.into();
                    let stream = UnixStream::from(fd);
                    // A door that takes the connection but never answers
                    // (a port-forward to a pod not yet up) must not hang.
                    stream.set_read_timeout(Some(VSOCK_CONNECT_TIMEOUT))?;
                    let client = Client::hello(stream, key, first)?;
                    client.set_read_timeout(None)?;
                    return Ok(client);
                }
                Err(e) => last = e,
            }
        }
        Err(last.into())
    }

    /// Connects to warden's vsock `port` in a VM through the host's end of
    /// a hybrid vsock (`hybrid_vsock_connect`) and from then on carries
    /// warden's protocol. The machine's key is required there.
    pub fn connect_hybrid_vsock(
        path: &Path,
        port: u32,
        key: &str,
        first: Option<(u32, &Request)>,
    ) -> Result<Client, ClientError> {
        let stream = hybrid_vsock_connect(path, port)?;
        stream.set_read_timeout(Some(VSOCK_CONNECT_TIMEOUT))?;
        let client = Client::hello(stream, Some(key), first)?;
        client.set_read_timeout(None)?;
        Ok(client)
    }

    /// Keeps `held` for as long as the connection lives.
    pub fn keep_alongside(&mut self, held: Box<dyn std::any::Any + Send>) {
        self.alongside = Some(held);
    }

    /// Bounds every later read (None: wait as long as it takes).
    pub fn set_read_timeout(&self, limit: Option<std::time::Duration>) -> io::Result<()> {
        self.reader.get_ref().set_read_timeout(limit)
    }

    /// Says hello on a connected stream (with `first` in the same write).
    fn hello(
        stream: UnixStream,
        key: Option<&str>,
        first: Option<(u32, &Request)>,
    ) -> Result<Client, ClientError> {
        let writer = Arc::new(Mutex::new(stream.try_clone()?));
        let mut client = Client {
            reader: BufReader::with_capacity(256 * 1024, stream),
            writer,
            version: 0,
            server: String::new(),
            alongside: None,
        };
        let hello = Request::Hello {
            versions: SUPPORTED_VERSIONS.to_vec(),
            client: Some(format!("warden-client {}", env!("CARGO_PKG_VERSION"))),
            key: key.map(str::to_string),
        };
        let mut frames = frame_bytes(
            Kind::Control,
            0,
            &serde_json::to_vec(&hello).map_err(io::Error::from)?,
        );
        if let Some((id, request)) = first {
            frames.extend(frame_bytes(
                Kind::Control,
                id,
                &serde_json::to_vec(request).map_err(io::Error::from)?,
            ));
        }
        client
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .write_all(&frames)?;
        match client.receive()? {
            Message::Event(_, Event::Hello { version, server }) => {
                client.version = version;
                client.server = server;
                Ok(client)
            }
            other => Err(unexpected(other)),
        }
    }

    pub fn send(&self, id: u32, request: &Request) -> io::Result<()> {
        self.sender().send(id, request)
    }

    /// Sends a raw frame (an empty Stdin frame closes the command's stdin).
    pub fn send_frame(&self, kind: Kind, id: u32, body: &[u8]) -> io::Result<()> {
        self.sender().frame(kind, id, body)
    }

    /// A handle that can send frames from another thread (e.g. stdin).
    pub fn sender(&self) -> Sender {
        Sender {
            writer: self.writer.clone(),
        }
    }

    /// The next message; an error event with frame id 0 ends the connection.
    pub fn receive(&mut self) -> Result<Message, ClientError> {
        let mut raw = [0u8; HEADER_LEN];
        self.reader.read_exact(&mut raw)?;
        let header =
            Header::decode(&raw).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut body = Vec::with_capacity(header.len as usize);
        (&mut self.reader)
            .take(header.len as u64)
            .read_to_end(&mut body)?;
        if body.len() != header.len as usize {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        match header.kind {
            Kind::Control => {
                let event: Event = serde_json::from_slice(&body)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                Ok(Message::Event(header.id, event))
            }
            kind => Ok(Message::Output(kind, header.id, body)),
        }
    }

    /// Runs a command to its end, collecting its output.
    pub fn run(&mut self, request: RunRequest) -> Result<Output, ClientError> {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let exit = self.run_streaming(request, |kind, bytes| match kind {
            Kind::Stderr => stderr.extend_from_slice(bytes),
            _ => stdout.extend_from_slice(bytes),
        })?;
        Ok(Output {
            stdout,
            stderr,
            exit,
        })
    }

    /// Runs a command to its end; `on_output` sees each chunk as it comes.
    pub fn run_streaming(
        &mut self,
        request: RunRequest,
        mut on_output: impl FnMut(Kind, &[u8]),
    ) -> Result<ExitReport, ClientError> {
        const ID: u32 = 1;
        self.send(ID, &Request::Run(request))?;
        loop {
            match self.receive()? {
                Message::Output(kind, ID, bytes) => on_output(kind, &bytes),
                Message::Event(ID, Event::Started { .. }) => {}
                Message::Event(ID, Event::Exit(report)) => return Ok(report),
                other => return Err(unexpected(other)),
            }
        }
    }

    /// Has warden read its network policy again; returns what holds.
    pub fn reload(&mut self) -> Result<crate::wire::ProxyState, ClientError> {
        self.ask(&Request::Reload, |event| match event {
            Event::Reloaded(state) => Some(state.clone()),
            _ => None,
        })
    }

    /// Signals every process of shell (protocol version 3); returns how
    /// many were signalled and how many are left.
    pub fn stop_shell(&mut self, signal: &str) -> Result<(usize, usize), ClientError> {
        let request = Request::StopShell {
            signal: signal.into(),
        };
        self.ask(&request, |event| match event {
            Event::ShellStopped { signalled, left } => Some((*signalled, *left)),
            _ => None,
        })
    }

    /// Appends an event of the runtime's own to the audit log; returns its
    /// line's sequence number.
    pub fn audit(&mut self, kind: &str, fields: serde_json::Value) -> Result<u64, ClientError> {
        let request = Request::Audit {
            kind: kind.into(),
            fields,
        };
        self.ask(&request, |event| match event {
            Event::Recorded { seq } => Some(*seq),
            _ => None,
        })
    }

    /// Closes the runtime's gate (`Some(reason)`: every shell command is
    /// refused, saying it) or opens it (protocol version 3).
    pub fn gate(&mut self, reason: Option<&str>) -> Result<crate::wire::GateState, ClientError> {
        let request = match reason {
            Some(r) => Request::CloseGate { reason: r.into() },
            None => Request::OpenGate,
        };
        self.ask(&request, |event| match event {
            Event::Gate(state) => Some(state.clone()),
            _ => None,
        })
    }

    /// Hands the runtime its keys, a `.env` text (protocol version 4, the
    /// host's door only); returns their names.
    pub fn hand_keys(&mut self, text: &str) -> Result<Vec<String>, ClientError> {
        self.ask(
            &Request::HandKeys { text: text.into() },
            |event| match event {
                Event::KeysHanded { names } => Some(names.clone()),
                _ => None,
            },
        )
    }

    /// Hands warden the values of the credentials its proxy adds
    /// (protocol version 7, the host's door only); returns their names.
    pub fn hand_credentials(&mut self, text: &str) -> Result<Vec<String>, ClientError> {
        self.ask(
            &Request::HandCredentials { text: text.into() },
            |event| match event {
                Event::CredentialsHanded { names } => Some(names.clone()),
                _ => None,
            },
        )
    }

    /// Opens a run with its budget (protocol version 8; None: the
    /// machine's default); returns the budget in micro-dollars.
    pub fn begin_run(&mut self, run: &str, budget_usd: Option<f64>) -> Result<u64, ClientError> {
        let request = Request::BeginRun {
            run: run.into(),
            budget_usd,
        };
        self.ask(&request, |event| match event {
            Event::RunBegun {
                budget_micro_usd, ..
            } => Some(*budget_micro_usd),
            _ => None,
        })
    }

    /// Ends a run; returns what it spent (micro-dollars) and how it ended.
    pub fn end_run(&mut self, run: &str) -> Result<(u64, String), ClientError> {
        self.ask(&Request::EndRun { run: run.into() }, |event| match event {
            Event::RunEnded {
                spent_micro_usd,
                how,
                ..
            } => Some((*spent_micro_usd, how.clone())),
            _ => None,
        })
    }

    /// A run's card (protocol version 8).
    pub fn card(&mut self, run: &str) -> Result<serde_json::Value, ClientError> {
        self.ask(&Request::Card { run: run.into() }, |event| match event {
            Event::Card { card } => Some(card.clone()),
            _ => None,
        })
    }

    /// Runs the machine's setup script as the runtime (protocol version 6,
    /// the host's door only); returns its exit status and the end of its
    /// output. Waits as long as the script runs.
    pub fn run_setup(&mut self, script: &str) -> Result<(i32, String), ClientError> {
        self.ask(
            &Request::RunSetup {
                script: script.into(),
            },
            |event| match event {
                Event::SetupEnded { status, output } => Some((*status, output.clone())),
                _ => None,
            },
        )
    }

    /// Keeps the machine awake until `until_ms` (Unix ms; protocol
    /// version 4); returns the hold in force (0: none).
    pub fn hold(&mut self, until_ms: u64) -> Result<u64, ClientError> {
        self.ask(&Request::Hold { until_ms }, |event| match event {
            Event::Held { until_ms } => Some(*until_ms),
            _ => None,
        })
    }

    /// Says the machine is ready (protocol version 9, the runtime's);
    /// returns since when, in ms after warden started.
    pub fn ready(&mut self) -> Result<u64, ClientError> {
        self.ask(&Request::Ready, |event| match event {
            Event::ReadyNoted { after_ms } => Some(*after_ms),
            _ => None,
        })
    }

    /// Tells warden the launcher woke the machine, for `cause` (protocol
    /// version 9, the host's door only).
    pub fn wake(&mut self, cause: &str) -> Result<(), ClientError> {
        let request = Request::Wake {
            cause: cause.into(),
        };
        self.ask(&request, |event| {
            matches!(event, Event::Noted).then_some(())
        })
    }

    /// Tells warden the launcher is about to freeze the machine (protocol
    /// version 9, the host's door only).
    pub fn pause(&mut self, idle_ms: u64) -> Result<(), ClientError> {
        let request = Request::Pause { idle_ms };
        self.ask(&request, |event| {
            matches!(event, Event::Noted).then_some(())
        })
    }

    /// Says when the runtime's next job is due (Unix ms; 0: none; protocol
    /// version 9); returns it as warden holds it.
    pub fn next_job(&mut self, at_ms: u64) -> Result<u64, ClientError> {
        self.ask(&Request::NextJob { at_ms }, |event| match event {
            Event::NextJobAt { at_ms } => Some(*at_ms),
            _ => None,
        })
    }

    /// Sends one request and reads its one answer: `pick` takes the event
    /// it expects, warden's error becomes `ClientError::Warden`.
    fn ask<T>(
        &mut self,
        request: &Request,
        pick: impl FnOnce(&Event) -> Option<T>,
    ) -> Result<T, ClientError> {
        self.send(0, request)?;
        match self.receive()? {
            Message::Event(_, Event::Error { code, message }) => {
                Err(ClientError::Warden { code, message })
            }
            Message::Event(id, event) => match pick(&event) {
                Some(answer) => Ok(answer),
                None => Err(unexpected(Message::Event(id, event))),
            },
            other => Err(unexpected(other)),
        }
    }

    /// Reads the audit log from `from_seq` on (protocol version 5): its
    /// lines, as on disk, go to `out` as they come; returns `audit_end`'s
    /// account of them (first seq, last seq, lines, bytes).
    pub fn read_audit(
        &mut self,
        from_seq: u64,
        out: &mut impl Write,
    ) -> Result<AuditRead, ClientError> {
        const ID: u32 = 1;
        if self.version < 5 {
            return Err(ClientError::Unexpected(format!(
                "{} speaks protocol version {}: reading the audit log needs 5",
                self.server, self.version
            )));
        }
        self.send(ID, &Request::ReadAudit { from_seq })?;
        let mut bytes = 0u64;
        loop {
            match self.receive()? {
                Message::Output(Kind::Stdout, ID, chunk) => {
                    bytes += chunk.len() as u64;
                    out.write_all(&chunk)?;
                }
                Message::Event(
                    ID,
                    Event::AuditEnd {
                        first_seq,
                        last_seq,
                        lines,
                        bytes: said,
                    },
                ) => {
                    if said != bytes {
                        return Err(ClientError::Unexpected(format!(
                            "audit_end says {said} bytes, {bytes} came"
                        )));
                    }
                    return Ok(AuditRead {
                        first_seq,
                        last_seq,
                        lines,
                        bytes,
                    });
                }
                Message::Event(_, Event::Error { code, message }) => {
                    return Err(ClientError::Warden { code, message })
                }
                other => return Err(unexpected(other)),
            }
        }
    }

    pub fn status(&mut self) -> Result<Status, ClientError> {
        self.ask(&Request::Status, |event| match event {
            Event::Status(status) => Some((**status).clone()),
            _ => None,
        })
    }
}

/// Sends frames on a client's connection from another thread.
#[derive(Clone)]
pub struct Sender {
    writer: Arc<Mutex<UnixStream>>,
}

impl Sender {
    pub fn send(&self, id: u32, request: &Request) -> io::Result<()> {
        let body = serde_json::to_vec(request)?;
        self.frame(Kind::Control, id, &body)
    }

    /// One frame, written with one write so small frames cost one syscall.
    pub fn frame(&self, kind: Kind, id: u32, body: &[u8]) -> io::Result<()> {
        let frame = frame_bytes(kind, id, body);
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        w.write_all(&frame)
    }
}

/// One frame: header and body, ready for a single write.
fn frame_bytes(kind: Kind, id: u32, body: &[u8]) -> Vec<u8> {
    let header = Header {
        kind,
        id,
        len: body.len() as u32,
    };
    let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
    frame.extend_from_slice(&header.encode());
    frame.extend_from_slice(body);
    frame
}

fn unexpected(message: Message) -> ClientError {
    match message {
        Message::Event(_, Event::Error { code, message }) => ClientError::Warden { code, message },
        other => ClientError::Unexpected(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A host-side vsock device that answers the CONNECT line with
    /// `answer`, then (after OK) plays warden's hello.
    fn device(answer: &'static str) -> (tempfile::TempDir, std::thread::JoinHandle<String>) {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join("vsock.sock")).unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let line = read_line(&mut conn, 64).unwrap();
            conn.write_all(answer.as_bytes()).unwrap();
            if answer.starts_with("OK") {
                let mut raw = [0u8; HEADER_LEN];
                conn.read_exact(&mut raw).unwrap();
                let header = Header::decode(&raw).unwrap();
                let mut body = vec![0u8; header.len as usize];
                conn.read_exact(&mut body).unwrap();
                let hello: Request = serde_json::from_slice(&body).unwrap();
                assert!(matches!(hello, Request::Hello { key: Some(ref k), .. } if k == "the-key"));
                let event = Event::Hello {
                    version: 2,
                    server: "warden test".into(),
                };
                let body = serde_json::to_vec(&event).unwrap();
                conn.write_all(&frame_bytes(Kind::Control, 0, &body))
                    .unwrap();
            }
            line
        });
        (dir, server)
    }

    #[test]
    fn hybrid_vsock_connect_then_hello() {
        let (dir, server) = device("OK 1073741824\n");
        let client =
            Client::connect_hybrid_vsock(&dir.path().join("vsock.sock"), 1024, "the-key", None)
                .unwrap();
        assert_eq!((client.version, client.server.as_str()), (2, "warden test"));
        assert_eq!(server.join().unwrap(), "CONNECT 1024");
    }

    #[test]
    fn hybrid_vsock_refused_connect_is_a_clear_error() {
        for answer in ["", "NO\n"] {
            let (dir, server) = device(answer);
            let err = Client::connect_hybrid_vsock(&dir.path().join("vsock.sock"), 7, "k", None)
                .err()
                .unwrap();
            assert!(matches!(err, ClientError::Vsock(_)), "{err}");
            assert!(err.to_string().contains("CONNECT 7"), "{err}");
            server.join().unwrap();
        }
    }
}
