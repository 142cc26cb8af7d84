//! `resize` (protocol version 4): the terminal of a running command of a
//! connection takes a new size (`command::pty` does the work).

use super::{error, Conn};
use crate::wire::{ErrorCode, Event};

impl Conn {
    /// `resize` (version 4): the terminal of a running command of this
    /// connection takes a new size.
    pub(super) fn resize(&self, target: u32, rows: u16, cols: u16) -> Event {
        if let Some(refused) = self.needs(4, "resize") {
            return refused;
        }
        if let Err(e) = crate::guest::command::pty::valid_size(rows, cols) {
            return error(ErrorCode::BadRequest, e);
        }
        let terminal = self
            .slots()
            .by_id
            .get(&target)
            .and_then(|slot| slot.terminal.clone());
        match terminal {
            None => error(
                ErrorCode::UnknownId,
                format!("id {target} runs no command on a terminal"),
            ),
            Some(terminal) => match terminal.resize(rows, cols) {
                Ok(()) => Event::Resized { target, rows, cols },
                Err(e) => error(ErrorCode::Internal, format!("resize: {e}")),
            },
        }
    }
}
