//! `hand_keys` (protocol version 4, the host's door only): the runtime's
//! keys become its `.env` and the main process's (`accounts::runtime_keys`
//! does the work); only their names are audited.

use super::{error, Conn, Door};
use crate::guest::audit::payload;
use crate::wire::{ErrorCode, Event};

impl Conn {
    /// `hand_keys` (version 4, the host's door only): the runtime's keys
    /// become its `.env` and the main process's; only names are audited.
    pub(super) fn hand_keys(&self, text: &str) -> Event {
        if let Some(refused) = self.needs(4, "hand_keys") {
            return refused;
        }
        if matches!(self.door, Door::Local) {
            return error(
                ErrorCode::Refused,
                "hand_keys comes through the host's door only (the runtime writes its own .env)",
            );
        }
        let names = match crate::guest::accounts::runtime_keys::names(text) {
            Ok(names) => names,
            Err(e) => return error(ErrorCode::BadRequest, format!("hand_keys: {e}")),
        };
        let runtime = &self.sup.runtime;
        if let Err(e) = crate::guest::accounts::runtime_keys::write_env(
            &self.sup.paths.env_file,
            text,
            runtime.uid,
            runtime.gid,
        ) {
            self.sup.audit.record(&payload::KeysFailed {
                credentials_from: None,
                error: e.to_string(),
            });
            return error(ErrorCode::Internal, format!("hand_keys: {e}"));
        }
        self.sup.keys.arrive(text);
        self.sup
            .audit
            .record(&payload::KeysHanded { names: &names });
        Event::KeysHanded { names }
    }
}
