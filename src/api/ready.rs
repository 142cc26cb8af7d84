//! `ready` (protocol version 9): the runtime says the machine is ready,
//! which the launcher's `up` and `--start` wait for where the definition
//! says `ready: "runtime"`.

use super::{error, Conn};
use crate::protocol::{ErrorCode, Event};
use std::sync::atomic::Ordering;

impl Conn {
    pub(super) fn ready(&self) -> Event {
        if self.version.load(Ordering::SeqCst) < 9 {
            return error(
                ErrorCode::BadRequest,
                "ready is a protocol version 9 request",
            );
        }
        let after_ms = self.sup.note_ready("runtime");
        Event::ReadyNoted { after_ms }
    }
}
