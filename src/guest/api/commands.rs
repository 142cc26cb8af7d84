//! A command's requests on a connection: a `run` checked and started
//! (attached here, detached in `detached.rs`), what is typed into it, and
//! the signals sent to it.

use super::{error, Conn, Slot};
use crate::guest::audit::payload;
use crate::guest::command::request::{self, ValidRun};
use crate::guest::command::{self, Running, Sink};
use crate::wire::{ErrorCode, Event, RunRequest, StdinMode};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;

/// What is typed into a command, when it takes input.
type Input = Option<mpsc::Receiver<Vec<u8>>>;

impl Conn {
    /// Checks a run request and starts its task; returns an error event if
    /// it cannot start.
    pub(super) fn start(self: &Arc<Self>, id: u32, run: RunRequest) -> Option<Event> {
        if let Some(refused) = self.refusal(id, &run) {
            return Some(refused);
        }
        let run = match request::validate(run) {
            Ok(run) => run,
            Err(e) => return Some(error(ErrorCode::BadRequest, e.to_string())),
        };
        if run.detach.is_some() {
            return self.start_detached(id, run);
        }
        match self.take_slot(id, &run) {
            Some(input) => {
                self.launch(id, run, input);
                None
            }
            None => Some(error(
                ErrorCode::DuplicateId,
                format!("id {id} is already running"),
            )),
        }
    }

    /// Why no command may start now, or this one not on this connection;
    /// the machine's own refusals (a closed gate, a layer that does not
    /// hold) are audit lines too.
    fn refusal(&self, id: u32, run: &RunRequest) -> Option<Event> {
        if id == 0 {
            return Some(error(
                ErrorCode::BadRequest,
                "a run needs a non-zero frame id",
            ));
        }
        if self.sup.shutting_down() {
            return Some(error(ErrorCode::ShuttingDown, "warden is shutting down"));
        }
        if let Some(reason) = self.sup.audit_refusal() {
            return Some(error(ErrorCode::AuditFailing, reason));
        }
        if let Some(reason) = self.sup.gate().reason {
            let reason = format!("the gate is closed: {reason}");
            return Some(self.refused(ErrorCode::GateClosed, &reason, reason.clone()));
        }
        if let Some(reason) = self.sup.confinement.refusal() {
            let message = format!("commands are refused: {reason}");
            return Some(self.refused(ErrorCode::NotConfined, &reason, message));
        }
        let version = self.version.load(Ordering::SeqCst);
        if run.pty.is_some() && version < 4 {
            return Some(error(
                ErrorCode::BadRequest,
                "pty is a protocol version 4 field",
            ));
        }
        if (run.detach || run.tag.is_some()) && version < 4 {
            return Some(error(
                ErrorCode::BadRequest,
                "detach is a protocol version 4 field",
            ));
        }
        None
    }

    /// A refusal by the machine's state: its audit line, and its error.
    fn refused(&self, code: ErrorCode, reason: &str, message: String) -> Event {
        self.sup.audit.record(&payload::CommandRefused {
            requester_uid: self.requester(),
            reason,
        });
        error(code, message)
    }

    /// The command's place on the connection under its frame id, with the
    /// way its input comes (a terminal always takes input: it is what is
    /// typed); None if the id is taken.
    fn take_slot(&self, id: u32, run: &ValidRun) -> Option<Input> {
        let (stdin_tx, stdin_rx) = match (run.stdin, &run.pty) {
            (StdinMode::Pipe, _) | (_, Some(_)) => {
                let (tx, rx) = mpsc::channel(8);
                (Some(tx), Some(rx))
            }
            (StdinMode::Null, None) => (None, None),
        };
        let mut slots = self.slots();
        if slots.by_id.contains_key(&id) {
            return None;
        }
        let slot = Slot {
            pid: None,
            stdin: stdin_tx,
            terminal: None,
            attached: None,
        };
        slots.by_id.insert(id, slot);
        Some(stdin_rx)
    }

    /// The command's task: it runs, and its exit is the frame's last event.
    fn launch(self: &Arc<Self>, id: u32, run: ValidRun, stdin: Input) {
        let conn = self.clone();
        tokio::spawn(async move {
            let sink = Sink {
                tx: conn.tx.clone(),
                id,
            };
            let requester = conn.requester();
            let report = command::execute(&conn.sup, run, requester, sink, stdin, |running| {
                conn.spawned(id, running)
            })
            .await;
            conn.slots().by_id.remove(&id);
            conn.send(id, Event::Exit(report)).await;
        });
    }

    /// Records the running command under its frame id; false when the
    /// client is already gone (the command is then killed).
    fn spawned(&self, id: u32, running: &Running) -> bool {
        let mut slots = self.slots();
        if let Some(slot) = slots.by_id.get_mut(&id) {
            slot.pid = Some(running.pid);
            slot.terminal = running.terminal.clone();
        }
        !slots.closed
    }

    pub(super) async fn stdin(&self, id: u32, bytes: Vec<u8>) {
        let attached = self.slots().by_id.get(&id).and_then(|s| s.attached.clone());
        if let Some(detached) = attached {
            if !detached.stdin(bytes).await {
                let msg = format!("id {id} has no open stdin");
                self.send(id, error(ErrorCode::UnknownId, msg)).await;
            }
            return;
        }
        let sender = {
            let mut slots = self.slots();
            match slots.by_id.get_mut(&id) {
                None => None,
                Some(slot) if bytes.is_empty() => {
                    slot.stdin = None;
                    return;
                }
                Some(slot) => slot.stdin.clone(),
            }
        };
        match sender {
            Some(tx) => {
                let _ = tx.send(bytes).await;
            }
            None => {
                let msg = format!("id {id} has no open stdin");
                self.send(id, error(ErrorCode::UnknownId, msg)).await;
            }
        }
    }

    pub(super) fn signal(&self, target: u32, name: &str) -> Event {
        let sig = match request::parse_signal(name) {
            Ok(sig) => sig,
            Err(e) => return error(ErrorCode::BadRequest, e.to_string()),
        };
        let pid = self.slots().by_id.get(&target).and_then(|s| s.pid);
        match pid {
            Some(pid) if self.sup.reaper.signal(pid, sig, true) => Event::Signalled {
                target,
                signal: sig.as_str().to_string(),
            },
            _ => error(
                ErrorCode::UnknownId,
                format!("no running command with id {target}"),
            ),
        }
    }
}
