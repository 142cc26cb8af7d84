//! Commands that outlive their connection (`detach` on a run, protocol
//! version 4). Such a command's output goes to a buffer of its own (the
//! last `BACKLOG_BYTES` in one ring, the oldest let go and counted) and to every
//! connection attached to it; any authorised client may `list` them,
//! `attach` (the backlog, then live, then the exit), `signal_command` and
//! `wait`. They end as every command does: by exiting, by their timeout
//! or output limit, by a signal, and with the machine. At most
//! `MAX_RUNNING` run at once; the last `MAX_ENDED` that ended are kept for
//! `list`, `attach` and `wait`.

pub mod backlog;
pub mod registry;

pub use backlog::Backlog;
pub use registry::{Detached, Registry, BACKLOG_BYTES, MAX_ENDED, MAX_RUNNING};

use crate::guest::command::output::Out;
use crate::guest::command::request::ValidRun;
use crate::guest::command::{self, Running, Sink};
use crate::guest::supervisor::Supervisor;
use crate::wire::{Event, ExitReport};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// A command's stdin: the side attached connections write to, and the
/// side the command is fed from.
pub type StdinChannel = (mpsc::Sender<Vec<u8>>, mpsc::Receiver<Vec<u8>>);

/// What the requester of a detached run is answered on.
pub struct Requester {
    pub tx: mpsc::Sender<Out>,
    pub id: u32,
    pub uid: u32,
}

/// Starts a detached run: answers `detached` (or the exit, when it could
/// not start) on the requester's frame id, and runs it to its end whoever
/// is connected.
pub fn start(
    sup: Arc<Supervisor>,
    registry: Arc<Registry>,
    run: ValidRun,
    requester: Requester,
    stdin: Option<StdinChannel>,
) {
    let (hub_tx, hub_rx) = mpsc::channel::<Out>(16);
    let (stdin_tx, stdin_rx) = match stdin {
        Some((tx, rx)) => (Some(tx), Some(rx)),
        None => (None, None),
    };
    let tag = run.detach.clone().flatten();
    let hub = Hub {
        made: Arc::default(),
        answer_to: Mutex::new(Some(requester.tx)),
        requester_id: requester.id,
        tag: tag.clone(),
    };
    let on_spawn = {
        let (registry, made) = (registry.clone(), hub.made.clone());
        let (argv, folder) = (run.argv.clone(), run.folder_text());
        move |running: &Running| {
            let detached = Arc::new(Detached::new(
                (running.command, running.pid),
                running.terminal.clone(),
                tag,
                argv,
                folder,
                stdin_tx,
            ));
            registry.map().insert(running.command, detached.clone());
            *lock(&made) = Some(detached);
            true
        }
    };
    tokio::spawn(async move {
        let sink = Sink { tx: hub_tx, id: 0 };
        let life = command::execute(&sup, run, requester.uid, sink, stdin_rx, on_spawn);
        // The hub ends once the command's output is all in: then its end.
        let (mut report, ()) = tokio::join!(life, hub.carry(hub_rx));
        report.error = report.error.map(|e| sup.audit.redact(&e).into_owned());
        hub.end(report, &registry).await;
    });
}

/// Where a detached command's output goes: into its buffer (and so to
/// every attached connection), and its first answer to the requester.
struct Hub {
    /// The command, once it is spawned.
    made: Arc<Mutex<Option<Arc<Detached>>>>,
    /// The requester's queue, held only until it is answered, so that its
    /// connection can close while the command runs on.
    answer_to: Mutex<Option<mpsc::Sender<Out>>>,
    requester_id: u32,
    tag: Option<String>,
}

impl Hub {
    /// Carries the command's output until it is all in.
    async fn carry(&self, mut from: mpsc::Receiver<Out>) {
        while let Some(out) = from.recv().await {
            let detached = lock(&self.made).clone();
            let Some(detached) = detached else { continue };
            match out {
                Out::Event(_, Event::Started { command, pid }) => {
                    let tag = self.tag.clone();
                    self.answer(Event::Detached { command, pid, tag }).await;
                }
                Out::Event(..) => {}
                Out::Data(kind, _, bytes) => detached.push(kind, bytes).await,
                Out::Splice {
                    kind,
                    pipe,
                    len,
                    done,
                    ..
                } => {
                    let bytes = read_exactly(&pipe, len).await;
                    let whole = bytes.len() == len;
                    detached.push(kind, bytes).await;
                    let _ = done.send(whole);
                }
            }
        }
    }

    /// The command's end: kept for `list`, `attach` and `wait`; or, when
    /// it never started, the requester hears why, as for any run.
    async fn end(&self, report: ExitReport, registry: &Registry) {
        let detached = lock(&self.made).clone();
        match detached {
            Some(detached) => {
                detached.end(report).await;
                registry.ended(detached.command);
            }
            None => self.answer(Event::Exit(report)).await,
        }
    }

    /// Answers the requester, once.
    async fn answer(&self, event: Event) {
        let tx = lock(&self.answer_to).take();
        if let Some(tx) = tx {
            let _ = tx.send(Out::Event(self.requester_id, event)).await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads `len` bytes waiting in a pipe (the splice path's bytes, copied
/// here into the backlog).
async fn read_exactly(pipe: &tokio::net::unix::pipe::Receiver, len: usize) -> Vec<u8> {
    let mut body = vec![0u8; len];
    let mut got = 0;
    while got < len {
        if pipe.readable().await.is_err() {
            break;
        }
        match pipe.try_read(&mut body[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => break,
        }
    }
    body.truncate(got);
    body
}
