//! Frames on their way to a client: one writer task per connection owns the
//! socket, and every command's output reaches it through a bounded queue.
//!
//! Bulk output is spliced: the bytes a command wrote into its pipe move to
//! the socket by page reference, never copied through warden's memory. A
//! kernel that cannot splice into a unix socket gets the copying path.

use crate::guest::vm::vsock::Capped;
use crate::wire::{Event, Header, Kind};
use nix::fcntl::SpliceFFlags;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncWriteExt, BufWriter, Interest};
use tokio::net::unix::{pipe, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, Notify};

/// A connection's socket, as frames are written to it.
type Writer = Capped<OwnedWriteHalf>;

/// The most output one frame carries.
pub const CHUNK: usize = 256 * 1024;

/// Cleared the first time the kernel refuses to splice into a socket.
static SPLICE_WORKS: AtomicBool = AtomicBool::new(true);

pub enum Out {
    Event(u32, Event),
    Data(Kind, u32, Vec<u8>),
    /// Move `len` bytes, already waiting in `pipe`, to the socket as one
    /// frame; `done` says whether they all went.
    Splice {
        kind: Kind,
        id: u32,
        pipe: Arc<pipe::Receiver>,
        len: usize,
        done: oneshot::Sender<bool>,
    },
}

/// The connection's writer: drains the queue, flushing when it runs dry.
pub async fn write_frames(wr: Writer, mut rx: mpsc::Receiver<Out>) {
    let mut w = BufWriter::with_capacity(64 * 1024, wr);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(out) = next {
            if write_frame(&mut w, out).await.is_err() {
                return;
            }
            next = rx.try_recv().ok();
        }
        if w.flush().await.is_err() {
            return;
        }
    }
}

async fn write_frame(w: &mut BufWriter<Writer>, out: Out) -> io::Result<()> {
    let (kind, id, body) = match out {
        Out::Event(id, event) => (Kind::Control, id, serde_json::to_vec(&event)?),
        Out::Data(kind, id, bytes) => (kind, id, bytes),
        Out::Splice {
            kind,
            id,
            pipe,
            len,
            done,
        } => {
            let moved = splice_frame(w, kind, id, &pipe, len).await;
            let _ = done.send(moved.is_ok());
            return moved;
        }
    };
    w.write_all(&header(kind, id, body.len())).await?;
    w.write_all(&body).await
}

/// One control frame, whole, for a connection written outside the writer
/// task (a refusal at the door).
pub fn event_frame(id: u32, event: &Event) -> Vec<u8> {
    let body = serde_json::to_vec(event).unwrap_or_default();
    let mut frame = header(Kind::Control, id, body.len()).to_vec();
    frame.extend_from_slice(&body);
    frame
}

fn header(kind: Kind, id: u32, len: usize) -> [u8; crate::wire::HEADER_LEN] {
    Header {
        kind,
        id,
        len: len as u32,
    }
    .encode()
}

async fn splice_frame(
    w: &mut BufWriter<Writer>,
    kind: Kind,
    id: u32,
    pipe: &pipe::Receiver,
    len: usize,
) -> io::Result<()> {
    w.write_all(&header(kind, id, len)).await?;
    w.flush().await?;
    let (sock, max) = (w.get_ref().inner().as_ref(), w.get_ref().max());
    let mut left = len;
    while left > 0 {
        sock.writable().await?;
        let moved = sock.try_io(Interest::WRITABLE, || {
            let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
            Ok(nix::fcntl::splice(
                pipe,
                None,
                sock,
                None,
                left.min(max),
                flags,
            )?)
        });
        match moved {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => left -= n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if left == len && e.raw_os_error() == Some(libc::EINVAL) => {
                // This kernel cannot splice into a unix socket: copy.
                SPLICE_WORKS.store(false, Ordering::Relaxed);
                let mut body = vec![0u8; len];
                let mut got = 0;
                while got < len {
                    got += pipe.try_read(&mut body[got..])?;
                }
                return w.get_mut().write_all(&body).await;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The output a command may still send (stdout and stderr together).
pub struct Budget {
    used: AtomicU64,
    limit: u64,
    /// Fires when the command tried to send more than its limit.
    pub exceeded: Notify,
    /// Set then, for good (a command that exits before the watch hears
    /// the notification still reached its limit).
    was_exceeded: AtomicBool,
}

impl Budget {
    pub fn new(limit: Option<u64>) -> Arc<Budget> {
        Arc::new(Budget {
            used: AtomicU64::new(0),
            limit: limit.unwrap_or(u64::MAX),
            exceeded: Notify::new(),
            was_exceeded: AtomicBool::new(false),
        })
    }

    /// Grants up to `want` bytes: fewer once the limit is reached, and
    /// then `exceeded` fires.
    pub fn grant(&self, want: usize) -> usize {
        let before = self.used.fetch_add(want as u64, Ordering::SeqCst);
        let left = self.limit.saturating_sub(before);
        let granted = want.min(usize::try_from(left).unwrap_or(usize::MAX));
        if granted < want {
            self.was_exceeded.store(true, Ordering::SeqCst);
            self.exceeded.notify_one();
        }
        granted
    }

    /// Whether the command ever tried to send more than its limit.
    pub fn was_exceeded(&self) -> bool {
        self.was_exceeded.load(Ordering::SeqCst)
    }
}

/// Streams one output pipe to the client until end of file (or the end of
/// its budget), counting bytes.
pub async fn pump(
    rx: pipe::Receiver,
    kind: Kind,
    id: u32,
    tx: mpsc::Sender<Out>,
    count: Arc<AtomicU64>,
    budget: Arc<Budget>,
) {
    let rx = Arc::new(rx);
    loop {
        if rx.readable().await.is_err() {
            return;
        }
        let waiting = pending_bytes(&rx);
        if waiting > 0 && SPLICE_WORKS.load(Ordering::Relaxed) {
            let wanted = waiting.min(CHUNK);
            let len = budget.grant(wanted);
            if len == 0 {
                return;
            }
            let (done, moved) = oneshot::channel();
            let frame = Out::Splice {
                kind,
                id,
                pipe: rx.clone(),
                len,
                done,
            };
            if tx.send(frame).await.is_err() || moved.await != Ok(true) {
                return;
            }
            count.fetch_add(len as u64, Ordering::Relaxed);
            if len < wanted {
                return;
            }
            continue;
        }
        // Nothing waiting means end of file (or a spurious wake-up).
        let mut buf = vec![0u8; waiting.clamp(4096, CHUNK)];
        match rx.try_read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let granted = budget.grant(n);
                buf.truncate(granted);
                count.fetch_add(granted as u64, Ordering::Relaxed);
                if granted > 0 && tx.send(Out::Data(kind, id, buf)).await.is_err() {
                    return;
                }
                if granted < n {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// How many bytes wait in a pipe (FIONREAD).
fn pending_bytes(pipe: &pipe::Receiver) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the pointer we pass.
    let rc = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc < 0 {
        0
    } else {
        n as usize
    }
}
