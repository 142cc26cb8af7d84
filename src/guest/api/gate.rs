//! `close_gate` and `open_gate` (protocol version 3): the runtime's gate
//! for shell commands, closed with a reason (refusing them) or opened.

use super::{error, Conn};
use crate::guest::audit::payload;
use crate::wire::{ErrorCode, Event};
use std::sync::atomic::Ordering;

impl Conn {
    pub(super) fn gate(&self, reason: Option<String>) -> Event {
        if self.version.load(Ordering::SeqCst) < 3 {
            return error(
                ErrorCode::BadRequest,
                "close_gate and open_gate are protocol version 3 requests",
            );
        }
        if let Some(r) = &reason {
            if r.trim().is_empty()
                || r.len() > 1024
                || r.chars().any(crate::shared::printable::hides_text)
            {
                return error(
                    ErrorCode::BadRequest,
                    "a gate's reason is 1 to 1024 bytes of plain text",
                );
            }
        }
        let state = self.sup.set_gate(reason);
        self.sup.audit.record(&payload::GateChanged {
            closed: state.closed,
            requester_uid: self.requester(),
            reason: &state.reason,
        });
        Event::Gate(state)
    }
}
