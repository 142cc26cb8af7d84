//! The version 7 request `hand_credentials` (the host's door only): the
//! owner hands warden the values of the credentials its proxy adds. They
//! stay in warden's memory (`net::opened::vault`), never in a file or an
//! environment; the audit log names them and hides their values should
//! any line ever hold one.

use super::{error, Conn, Door};
use crate::guest::audit::payload;
use crate::wire::{ErrorCode, Event};

impl Conn {
    pub(super) fn hand_credentials(&self, text: &str) -> Event {
        if let Some(refused) = self.needs(7, "hand_credentials") {
            return refused;
        }
        if matches!(self.door, Door::Local) {
            return error(
                ErrorCode::Refused,
                "hand_credentials comes through the host's door only: credentials are the owner's",
            );
        }
        let vault = match &self.sup.network.opener {
            Ok(opener) => &opener.vault,
            Err(why) => {
                return error(
                    ErrorCode::Internal,
                    format!("hand_credentials: this machine opens no host: {why}"),
                )
            }
        };
        let names = match vault.hand(text) {
            Ok(names) => names,
            Err(e) => return error(ErrorCode::BadRequest, format!("hand_credentials: {e}")),
        };
        self.sup.audit.hide_also(vault.all_text());
        self.sup.audit.record(&payload::CredentialsHanded {
            names: &names,
            from: None,
        });
        Event::CredentialsHanded { names }
    }
}
