//! How many connections one of the API's doors holds at once, so that no
//! peer can spend warden's memory or descriptors: a cap on all of them,
//! and a smaller one on those that have not yet said a good hello, where
//! a newcomer sheds the oldest waiting one instead of being turned away
//! (a flood of idle connections then costs the flood, not the owner).

use crate::wire::{ErrorCode, Event};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::Notify;

/// Connections one door holds at once; more are closed as they arrive.
pub const MAX_CONNECTIONS: usize = 512;
/// Connections one door holds that have not yet been let in.
pub const MAX_UNAUTHENTICATED: usize = 32;

#[derive(Default)]
struct Book {
    open: usize,
    next: u64,
    /// Not yet let in, oldest first: (ticket, how to shed it).
    waiting: VecDeque<(u64, Arc<Notify>)>,
}

#[derive(Default)]
pub struct Admission {
    book: Mutex<Book>,
}

/// One admitted connection; dropping it frees its place.
pub struct Pass {
    admission: Arc<Admission>,
    ticket: u64,
    /// Notified when a newer connection sheds this one.
    pub shed: Arc<Notify>,
}

impl Admission {
    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new connection, or None when the door is full.
    pub fn admit(self: &Arc<Self>) -> Option<Pass> {
        let mut book = self.book();
        if book.open >= MAX_CONNECTIONS {
            return None;
        }
        if book.waiting.len() >= MAX_UNAUTHENTICATED {
            if let Some((_, oldest)) = book.waiting.pop_front() {
                oldest.notify_one();
            }
        }
        book.open += 1;
        book.next += 1;
        let ticket = book.next;
        let shed = Arc::new(Notify::new());
        book.waiting.push_back((ticket, shed.clone()));
        Some(Pass {
            admission: self.clone(),
            ticket,
            shed,
        })
    }

    pub fn open(&self) -> usize {
        self.book().open
    }
}

impl Pass {
    /// The peer was let in: it can no longer be shed.
    pub fn let_in(&self) {
        let mut book = self.admission.book();
        book.waiting.retain(|(t, _)| *t != self.ticket);
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut book = self.admission.book();
        book.open -= 1;
        book.waiting.retain(|(t, _)| *t != self.ticket);
    }
}

/// Who is at the other end, as SO_PEERCRED says in warden's namespaces.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub uid: u32,
    /// 0: a process outside warden's PID namespace (the host's).
    pub pid: i32,
}

impl Peer {
    /// A peer without credentials (TCP): the machine's key decides.
    pub const UNKNOWN: Peer = Peer {
        uid: u32::MAX,
        pid: 0,
    };

    pub fn of(stream: &UnixStream) -> Peer {
        match stream.peer_cred() {
            Ok(c) => Peer {
                uid: c.uid(),
                pid: c.pid().unwrap_or(0),
            },
            // vsock: no credentials; the key decides.
            Err(_) => Peer {
                uid: u32::MAX,
                pid: 0,
            },
        }
    }
}

/// How long a refused peer is heard out (its writes read and dropped)
/// before its connection is closed.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends a refused peer why, then reads and drops what it had begun to
/// send (so its writes do not fail before it reads the reason), for at
/// most LINGER and 64 KiB. At most LINGERING peers are heard out
/// at once; the rest are closed after the reason, at once.
pub async fn turn_away(stream: UnixStream, reason: String) {
    static LINGERING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(16);
    let (mut rd, mut wr) = stream.into_split();
    let refused = Event::Error {
        code: ErrorCode::Refused,
        message: reason,
    };
    let frame = crate::guest::command::output::event_frame(0, &refused);
    let sent = tokio::time::timeout(LINGER, wr.write_all(&frame)).await;
    if !matches!(sent, Ok(Ok(()))) {
        return;
    }
    let _ = wr.shutdown().await;
    let Ok(_hearing) = LINGERING.try_acquire() else {
        return;
    };
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; 4096];
        let mut left: usize = 64 * 1024;
        while left > 0 {
            match rd.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_waiting_is_shed_and_the_door_has_a_cap() {
        let door = Arc::new(Admission::default());
        let first = door.admit().unwrap();
        first.let_in();
        let mut waiting: Vec<Pass> = (0..MAX_UNAUTHENTICATED)
            .map(|_| door.admit().unwrap())
            .collect();
        // One more waiting sheds the oldest waiting, never one let in.
        let newest = door.admit().unwrap();
        let oldest = waiting.remove(0);
        let shed = oldest.shed.clone();
        assert!(futures_ready(&shed), "the oldest was told to go");
        assert!(!futures_ready(&first.shed));
        drop(oldest);
        drop(newest);
        drop(waiting);
        assert_eq!(door.open(), 1);
        // Past the cap, a newcomer is turned away.
        let held: Vec<Pass> = (1..MAX_CONNECTIONS)
            .map(|_| {
                let p = door.admit().unwrap();
                p.let_in();
                p
            })
            .collect();
        assert!(door.admit().is_none());
        drop(held);
        drop(first);
        assert_eq!(door.open(), 0);
    }

    /// Whether a permit is stored in `n` (notify_one before any waiter).
    fn futures_ready(n: &Notify) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_millis(1), n.notified())
                .await
                .is_ok()
        })
    }
}
