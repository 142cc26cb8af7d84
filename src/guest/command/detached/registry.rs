//! The detached commands a machine holds: each one's output backlog, its
//! attached connections and its exit (`Detached`), and the registry of
//! them all (`Registry`), which the API keeps, one for all its doors
//! (`boot` makes it). Starting one is `detached::start`'s.

use super::backlog::Backlog;
use crate::guest::command::output::{Out, CHUNK};
use crate::wire::{DetachedCommand, Event, ExitReport, Kind};
use nix::unistd::Pid;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Output kept for whoever attaches later, per command.
pub const BACKLOG_BYTES: usize = 1 << 20;

/// Detached commands running at once.
pub const MAX_RUNNING: usize = 64;

/// Ended detached commands kept.
pub const MAX_ENDED: usize = 64;

/// How long an attached connection may keep a command's output waiting
/// before it is let go (the command goes on).
const ATTACHED_PATIENCE: Duration = Duration::from_secs(5);

/// One detached command.
pub struct Detached {
    pub command: u64,
    pub pid: Pid,
    pub tag: Option<String>,
    pub argv: Vec<String>,
    pub folder: Option<String>,
    pub started_ms: u64,
    /// Where attached connections' stdin frames go (a pipe or its
    /// terminal); the only sender kept, so that closing it is end of file.
    stdin: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    pub terminal: Option<Arc<crate::guest::command::pty::Terminal>>,
    state: tokio::sync::Mutex<State>,
    ended: watch::Sender<Option<ExitReport>>,
}

struct State {
    backlog: Backlog,
    dropped: u64,
    /// Each attached connection's queue and the frame id it follows on.
    attached: Vec<(mpsc::Sender<Out>, u32)>,
    exit: Option<ExitReport>,
}

impl Default for State {
    fn default() -> State {
        State {
            backlog: Backlog::new(BACKLOG_BYTES),
            dropped: 0,
            attached: Vec::new(),
            exit: None,
        }
    }
}

impl Detached {
    /// The detached command `command` (process `pid`), as it starts.
    pub fn new(
        (command, pid): (u64, Pid),
        terminal: Option<Arc<crate::guest::command::pty::Terminal>>,
        tag: Option<String>,
        argv: Vec<String>,
        folder: Option<String>,
        stdin: Option<mpsc::Sender<Vec<u8>>>,
    ) -> Detached {
        let (ended, _) = watch::channel(None);
        Detached {
            command,
            pid,
            tag,
            argv,
            folder,
            started_ms: crate::shared::idle::now_ms(),
            stdin: Mutex::new(stdin),
            terminal,
            state: Default::default(),
            ended,
        }
    }

    /// A chunk of output: kept, and sent to whoever is attached (one that
    /// cannot take it in time is let go).
    pub(super) async fn push(&self, kind: Kind, bytes: Vec<u8>) {
        let mut state = self.state.lock().await;
        let mut kept = Vec::with_capacity(state.attached.len());
        for (tx, id) in std::mem::take(&mut state.attached) {
            let sent = tokio::time::timeout(
                ATTACHED_PATIENCE,
                tx.send(Out::Data(kind, id, bytes.clone())),
            )
            .await;
            if matches!(sent, Ok(Ok(()))) {
                kept.push((tx, id));
            }
        }
        state.attached = kept;
        // Copied into the ring: the chunk itself, however small, is let go.
        state.dropped += state.backlog.push(kind, &bytes);
    }

    /// The command has ended: every attached connection gets its exit.
    pub(super) async fn end(&self, report: ExitReport) {
        let mut state = self.state.lock().await;
        for (tx, id) in std::mem::take(&mut state.attached) {
            let _ = tx.send(Out::Event(id, Event::Exit(report.clone()))).await;
        }
        state.exit = Some(report.clone());
        self.ended.send_replace(Some(report));
    }

    /// Follows the command on frame `id` of a connection: the backlog, then
    /// live output, then the exit. Returns the bytes let go before.
    pub async fn attach(&self, tx: &mpsc::Sender<Out>, id: u32) -> u64 {
        let mut state = self.state.lock().await;
        let hello = Event::Attached {
            command: self.command,
            dropped_bytes: state.dropped,
        };
        let _ = tx.send(Out::Event(id, hello)).await;
        for (kind, bytes) in state.backlog.chunks(CHUNK) {
            let _ = tx.send(Out::Data(kind, id, bytes)).await;
        }
        match &state.exit {
            Some(report) => {
                let _ = tx.send(Out::Event(id, Event::Exit(report.clone()))).await;
            }
            None => state.attached.push((tx.clone(), id)),
        }
        state.dropped
    }

    /// A connection that is gone stops following it.
    pub async fn let_go(&self, tx: &mpsc::Sender<Out>) {
        let mut state = self.state.lock().await;
        state.attached.retain(|(t, _)| !t.same_channel(tx));
    }

    /// Resolves with the exit report once the command has ended.
    pub async fn wait(&self) -> ExitReport {
        let mut ended = self.ended.subscribe();
        loop {
            if let Some(report) = ended.borrow_and_update().clone() {
                return report;
            }
            if ended.changed().await.is_err() {
                return ExitReport::default();
            }
        }
    }

    /// Sends bytes to the command's stdin; empty bytes close it (end of
    /// file). False when it has no open stdin.
    pub async fn stdin(&self, bytes: Vec<u8>) -> bool {
        let sender = {
            let mut stdin = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
            if bytes.is_empty() {
                return stdin.take().is_some();
            }
            stdin.clone()
        };
        match sender {
            Some(tx) => tx.send(bytes).await.is_ok(),
            None => false,
        }
    }

    pub fn running(&self) -> bool {
        self.ended.borrow().is_none()
    }

    async fn describe(&self) -> DetachedCommand {
        let state = self.state.lock().await;
        DetachedCommand {
            command: self.command,
            tag: self.tag.clone(),
            argv: self.argv.clone(),
            folder: self.folder.clone(),
            pid: self.pid.as_raw(),
            started_ms: self.started_ms,
            state: if state.exit.is_some() {
                "exited"
            } else {
                "running"
            }
            .into(),
            exit: state.exit.clone(),
            attached: state.attached.len(),
            dropped_bytes: state.dropped,
        }
    }
}

/// The machine's detached commands.
#[derive(Default)]
pub struct Registry {
    by_command: Mutex<HashMap<u64, Arc<Detached>>>,
    /// Ended ones, oldest first, to let go beyond `MAX_ENDED`.
    ended: Mutex<VecDeque<u64>>,
}

impl Registry {
    pub(super) fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Detached>>> {
        self.by_command.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, command: u64) -> Option<Arc<Detached>> {
        self.map().get(&command).cloned()
    }

    pub fn running_count(&self) -> usize {
        self.map().values().filter(|d| d.running()).count()
    }

    pub async fn list(&self) -> Vec<DetachedCommand> {
        let all: Vec<Arc<Detached>> = self.map().values().cloned().collect();
        let mut out = Vec::with_capacity(all.len());
        for d in all {
            out.push(d.describe().await);
        }
        out.sort_by_key(|d| d.command);
        out
    }

    pub(super) fn ended(&self, command: u64) {
        let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        ended.push_back(command);
        while ended.len() > MAX_ENDED {
            if let Some(old) = ended.pop_front() {
                self.map().remove(&old);
            }
        }
    }
}
