//! The machine's life as its launcher and runtime tell it: `hold`
//! (protocol version 4: keep the machine awake until a time), and, in
//! version 9, `ready` (the runtime serves what it serves), `next_job`
//! (when the runtime's next job is due), and through the host's door
//! `wake` and `pause` (the launcher started or thawed the machine, or is
//! about to freeze it), each an audit line.

use super::{error, Conn, Door};
use crate::guest::audit::payload;
use crate::wire::{ErrorCode, Event};

/// The causes a wake may give.
const WAKE_CAUSES: [&str; 4] = ["port", "job", "start", "door"];

impl Conn {
    /// Refuses a version 9 request on an older connection, or one of the
    /// host's door's on the machine's own socket.
    fn v9(&self, what: &str, host_only: bool) -> Option<Event> {
        if let Some(refused) = self.needs(9, what) {
            return Some(refused);
        }
        (host_only && matches!(self.door, Door::Local)).then(|| {
            error(
                ErrorCode::Refused,
                format!("{what} comes through the host's door only: it is the launcher's"),
            )
        })
    }

    pub(super) fn ready(&self) -> Event {
        if let Some(refused) = self.v9("ready", false) {
            return refused;
        }
        let after_ms = self.sup.note_ready("runtime");
        Event::ReadyNoted { after_ms }
    }

    pub(super) fn wake(&self, cause: &str) -> Event {
        if let Some(refused) = self.v9("wake", true) {
            return refused;
        }
        if !WAKE_CAUSES.contains(&cause) {
            let known = WAKE_CAUSES.join(", ");
            return error(
                ErrorCode::BadRequest,
                format!("wake: cause {cause:?} is none of {known}"),
            );
        }
        self.sup.audit.record(&payload::Wake { cause });
        Event::Noted
    }

    pub(super) fn pause(&self, idle_ms: u64) -> Event {
        if let Some(refused) = self.v9("pause", true) {
            return refused;
        }
        self.sup.audit.record(&payload::Pause { idle_ms });
        Event::Noted
    }

    pub(super) fn next_job(&self, at_ms: u64) -> Event {
        if let Some(refused) = self.v9("next_job", false) {
            return refused;
        }
        let week = crate::shared::idle::now_ms()
            .saturating_add(crate::guest::supervisor::activity::MAX_HOLD_MS);
        if at_ms > week {
            return error(
                ErrorCode::BadRequest,
                format!("next_job: at_ms {at_ms} is more than a week from now"),
            );
        }
        self.sup.activity.set_next_job(at_ms);
        self.sup.audit.record(&payload::NextJob {
            at_ms,
            requester_uid: self.requester(),
        });
        Event::NextJobAt { at_ms }
    }

    /// `hold` (version 4): keeps the machine awake until a time.
    pub(super) fn hold(&self, until_ms: u64) -> Event {
        if let Some(refused) = self.needs(4, "hold") {
            return refused;
        }
        match self.sup.activity.hold(until_ms) {
            Ok(until_ms) => {
                self.sup.audit.record(&payload::Hold {
                    until_ms,
                    requester_uid: self.requester(),
                });
                Event::Held { until_ms }
            }
            Err(e) => error(ErrorCode::BadRequest, format!("hold: {e}")),
        }
    }
}
