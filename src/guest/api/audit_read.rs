//! The API's version 5 request: the audit log read through the API
//! (`read_audit`), so that the owner reads a running machine's log where
//! its files cannot be reached (a pod on a cluster, a VM whose disk the
//! guest has not yet written back). The lines go as they are on disk, as
//! stdout frames on the request's id, so the chain verifies on what
//! arrives; then `audit_end`.

use super::{error, Conn, Door};
use crate::guest::command::output::{Out, CHUNK};
use crate::wire::{ErrorCode, Event, Kind};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Logs read at once, all connections together: each holds a blocking
/// thread and the log's files while its client reads.
static READERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

impl Conn {
    /// `read_audit` (version 5): for whoever this connection let in (root
    /// and the runtime on the machine's own socket, the key's holder on
    /// the host's doors), never shell.
    pub(super) fn read_audit(self: &Arc<Self>, id: u32, from_seq: u64) -> Option<Event> {
        if let Some(refused) = self.needs(5, "read_audit") {
            return Some(refused);
        }
        if id == 0 {
            return Some(error(
                ErrorCode::BadRequest,
                "a read_audit needs a non-zero frame id",
            ));
        }
        // Shell never reaches a door that lets it this far; said again
        // here, where the log would leave the machine.
        if matches!(self.door, Door::Local) && self.requester() == self.sup.shell.uid {
            return Some(error(
                ErrorCode::Refused,
                "shell may not read the audit log",
            ));
        }
        if self.reading_audit.swap(true, Ordering::SeqCst) {
            return Some(error(
                ErrorCode::BadRequest,
                "this connection is reading the audit log already: one read at a time",
            ));
        }
        let mut reader = match self.sup.audit.reader(from_seq) {
            Ok(reader) => reader,
            Err(e) => {
                self.reading_audit.store(false, Ordering::SeqCst);
                return Some(error(
                    ErrorCode::Internal,
                    format!("cannot read the audit log: {e}"),
                ));
            }
        };
        let conn = self.clone();
        tokio::spawn(async move {
            let Ok(_reading) = READERS.acquire().await else {
                return;
            };
            let (tx, gone) = (conn.tx.clone(), conn.gone.subscribe());
            // Files are read on a blocking thread; the bounded queue makes
            // a slow client slow the reading, never grow warden's memory.
            let read = tokio::task::spawn_blocking(move || loop {
                if *gone.borrow() {
                    return Ok(None);
                }
                match reader.next_chunk(CHUNK)? {
                    Some(chunk) => {
                        if tx
                            .blocking_send(Out::Data(Kind::Stdout, id, chunk))
                            .is_err()
                        {
                            return Ok(None);
                        }
                    }
                    None => return Ok::<_, std::io::Error>(Some(reader)),
                }
            })
            .await;
            let end = match read {
                Ok(Ok(Some(r))) => Event::AuditEnd {
                    first_seq: r.first_seq,
                    last_seq: r.last_seq,
                    lines: r.lines,
                    bytes: r.bytes,
                },
                Ok(Ok(None)) => return,
                Ok(Err(e)) => error(ErrorCode::Internal, format!("reading the audit log: {e}")),
                Err(_) => error(ErrorCode::Internal, "the audit log's reader failed"),
            };
            conn.reading_audit.store(false, Ordering::SeqCst);
            conn.send(id, end).await;
        });
        None
    }
}
