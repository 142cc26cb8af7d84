//! The API's requests on detached commands (protocol version 4): a
//! detached run, `attach`, `wait` and `signal_command` (`list` is
//! answered in `mod.rs`). Each only translates frames; the work is
//! `command::detached`'s.

use super::{error, Conn, Slot};
use crate::guest::audit::payload::{self, DetachedAction};
use crate::guest::command::request;
use crate::wire::{ErrorCode, Event, StdinMode};
use std::sync::Arc;
use tokio::sync::mpsc;

impl Conn {
    /// A detached run: warden runs it to its end whoever is connected; this
    /// id is answered with `detached` (or the exit, if it cannot start).
    pub(super) fn start_detached(&self, id: u32, run: request::ValidRun) -> Option<Event> {
        if self.detached.running_count() >= crate::guest::command::detached::MAX_RUNNING {
            return Some(error(
                ErrorCode::BadRequest,
                format!(
                    "{} detached commands run already, the most at once",
                    crate::guest::command::detached::MAX_RUNNING
                ),
            ));
        }
        let stdin = (run.stdin == StdinMode::Pipe || run.pty.is_some()).then(|| mpsc::channel(8));
        let requester = crate::guest::command::detached::Requester {
            tx: self.tx.clone(),
            id,
            uid: self.requester(),
        };
        crate::guest::command::detached::start(
            self.sup.clone(),
            self.detached.clone(),
            run,
            requester,
            stdin,
        );
        None
    }

    /// `attach` (version 4): this frame id follows a detached command; its
    /// stdin frames and `resize` reach it; closing the connection leaves it
    /// running.
    pub(super) async fn attach(self: &Arc<Self>, id: u32, command: u64) -> Option<Event> {
        if let Some(e) = self.needs(4, "attach") {
            return Some(e);
        }
        let Some(detached) = self.detached.get(command) else {
            return Some(error(
                ErrorCode::UnknownId,
                format!("no detached command {command}"),
            ));
        };
        {
            let mut slots = self.slots();
            if id == 0 || slots.by_id.contains_key(&id) {
                return Some(error(
                    ErrorCode::DuplicateId,
                    format!("id {id} is taken (attach needs a free non-zero id)"),
                ));
            }
            slots.by_id.insert(
                id,
                Slot {
                    pid: None,
                    stdin: None,
                    terminal: detached.terminal.clone(),
                    attached: Some(detached.clone()),
                },
            );
        }
        self.sup.audit.record(&payload::OnDetached {
            kind: DetachedAction::Attached,
            command,
            requester_uid: self.requester(),
            signal: None,
        });
        detached.attach(&self.tx, id).await;
        // The id is free again once the command has ended.
        let conn = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = detached.wait() => {
                    conn.slots().by_id.remove(&id);
                }
                _ = conn.until_gone() => {}
            }
        });
        None
    }

    /// `wait` (version 4): this frame id gets the detached command's exit
    /// once it has ended.
    pub(super) fn wait(self: &Arc<Self>, id: u32, command: u64) -> Option<Event> {
        if let Some(e) = self.needs(4, "wait") {
            return Some(e);
        }
        let Some(detached) = self.detached.get(command) else {
            return Some(error(
                ErrorCode::UnknownId,
                format!("no detached command {command}"),
            ));
        };
        self.sup.audit.record(&payload::OnDetached {
            kind: DetachedAction::Waited,
            command,
            requester_uid: self.requester(),
            signal: None,
        });
        let conn = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                report = detached.wait() => conn.send(id, Event::Exit(report)).await,
                _ = conn.until_gone() => {}
            }
        });
        None
    }

    /// `signal_command` (version 4): a detached command's whole group.
    pub(super) fn signal_command(&self, command: u64, name: &str) -> Event {
        if let Some(e) = self.needs(4, "signal_command") {
            return e;
        }
        let sig = match request::parse_signal(name) {
            Ok(sig) => sig,
            Err(e) => return error(ErrorCode::BadRequest, e.to_string()),
        };
        match self.detached.get(command) {
            Some(d) if d.running() && self.sup.reaper.signal(d.pid, sig, true) => {
                let signal = sig.as_str().to_string();
                self.sup.audit.record(&payload::OnDetached {
                    kind: DetachedAction::Signalled,
                    command,
                    requester_uid: self.requester(),
                    signal: Some(&signal),
                });
                Event::CommandSignalled { command, signal }
            }
            _ => error(
                ErrorCode::UnknownId,
                format!("no running detached command {command}"),
            ),
        }
    }
}
