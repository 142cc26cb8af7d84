//! `status` and `reload`: what warden reports of itself (its layers proven
//! again, by behaviour), as the asker's protocol version may receive it,
//! and its files read again.

use super::{error, Conn};
use crate::wire::{ErrorCode, Event, Status};
use std::sync::atomic::Ordering;

impl Conn {
    pub(super) async fn status(&self) -> Event {
        // Status proves the layers again, by behaviour: probe children and
        // nft, waited for on a blocking thread, not on one of the
        // runtime's two workers.
        let sup = self.sup.clone();
        if tokio::task::spawn_blocking(move || sup.probe())
            .await
            .is_err()
        {
            crate::say!("status: the probe thread failed");
        }
        let status = for_version(self.sup.status(), self.version.load(Ordering::SeqCst));
        Event::Status(Box::new(status))
    }

    /// `reload`: the network policy, the commands' limits and the idle
    /// stop read again; a file that cannot be read or is invalid changes
    /// nothing, and the answer says which and that the last good ones hold.
    pub(super) fn reload(&self) -> Event {
        let refused = |e: String| {
            let held =
                "the last good network policy holds, and the limits and idle stop as they were";
            error(ErrorCode::BadRequest, format!("reload: {e}; {held}"))
        };
        let settings = match self.sup.read_settings() {
            Ok(settings) => settings,
            Err(e) => return refused(e.to_string()),
        };
        match self.sup.network.reload() {
            Ok(state) => {
                self.sup.apply_settings(settings);
                Event::Reloaded(state)
            }
            Err(e) => refused(e.to_string()),
        }
    }
}

/// Pure: `status` as a client of `version` may receive it (a client only
/// ever receives its version's messages).
fn for_version(mut status: Status, version: u32) -> Status {
    if version < 3 {
        status.shell_processes = None;
        status.shell_process_count = None;
        status.gate = None;
    }
    if version < 4 {
        status.activity = None;
        status.spent = None;
    }
    if version < 9 {
        status.ready = None;
        if let Some(activity) = status.activity.as_mut() {
            activity.next_job_at_ms = None;
            activity.running = None;
        }
    }
    status
}
