//! Moving an admitted connection's bytes: a CONNECT tunnel (spliced in
//! the kernel, both ways, until both ends are done or it idles) and a
//! plain HTTP request forwarded with exactly its declared body.

use super::http::Plain;
use super::upstream::Upstream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const BUFFER: usize = 64 * 1024;
/// How much one splice may move: a large pipe means fewer wake-ups.
const PIPE_SIZE: usize = 1 << 20;

/// What a connection moved, and how it ended (`eof`, `reset`, `idle`,
/// or who was gone).
#[derive(Debug, Default)]
pub(super) struct Moved {
    pub(super) up: u64,
    pub(super) down: u64,
    pub(super) status: Option<u16>,
    pub(super) end: &'static str,
}

impl Moved {
    fn ended(end: &'static str) -> Moved {
        Moved {
            end,
            ..Moved::default()
        }
    }
}

/// A CONNECT tunnel: the client is told it is established, what it sent
/// early goes first, then the bytes flow both ways.
pub(super) async fn tunnel(
    mut client: TcpStream,
    mut upstream: Upstream,
    early: &[u8],
    idle: Duration,
) -> Moved {
    let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if client.write_all(established).await.is_err() {
        return Moved::ended("client gone");
    }
    if write_capped(&mut upstream, early).await.is_err() {
        return Moved::ended("upstream gone");
    }
    let mut moved = relay(client, upstream, idle).await;
    moved.up += early.len() as u64;
    moved.status = Some(200);
    moved
}

/// A plain HTTP request: the rewritten head, the declared body, and the
/// response until the origin closes.
pub(super) async fn forward(
    mut client: TcpStream,
    mut upstream: Upstream,
    plain: &Plain,
    early: &[u8],
    idle: Duration,
) -> Moved {
    if write_capped(&mut upstream, &plain.head).await.is_err() {
        return Moved::ended("upstream gone");
    }
    // Exactly the declared body is carried: whatever follows it (a
    // second, pipelined request, perhaps for another host) is not.
    let mut body_left = plain.body_len;
    let first = early.len().min(body_left as usize);
    if write_capped(&mut upstream, &early[..first]).await.is_err() {
        return Moved::ended("upstream gone");
    }
    body_left -= first as u64;
    let chunk = BUFFER.min(upstream.max_write);
    let (mut client_read, mut client_write) = client.split();
    let (mut up_read, mut up_write) = upstream.stream.split();
    let send_body = async {
        let sent = copy_limited(&mut client_read, &mut up_write, body_left, idle, chunk).await;
        let _ = up_write.shutdown().await;
        sent
    };
    let receive = copy_all(&mut up_read, &mut client_write, idle);
    let (sent, received) = tokio::join!(send_body, receive);
    let _ = client_write.shutdown().await;
    Moved {
        up: plain.head.len() as u64 + first as u64 + sent,
        down: received.0,
        status: None,
        end: received.1,
    }
}

/// Writes all of `bytes` to the upstream, at most its `max_write` per
/// write (a VM's vsock carries a page per packet).
async fn write_capped(upstream: &mut Upstream, bytes: &[u8]) -> std::io::Result<()> {
    for chunk in bytes.chunks(upstream.max_write.max(1)) {
        upstream.stream.write_all(chunk).await?;
    }
    Ok(())
}

/// Milliseconds since `origin`, for the shared idle clock.
fn now_ms(origin: Instant) -> u64 {
    origin.elapsed().as_millis() as u64
}

/// Carries bytes both ways until both sides are done or the tunnel has
/// been idle (no byte either way) for `idle`. The bytes never enter
/// warden: each direction splices socket to pipe to socket in the kernel.
async fn relay(client: TcpStream, upstream: Upstream, idle: Duration) -> Moved {
    let origin = Instant::now();
    let last = AtomicU64::new(0);
    let to_upstream = Pump {
        idle,
        origin,
        max_write: upstream.max_write,
    };
    let to_client = Pump {
        max_write: usize::MAX,
        ..to_upstream
    };
    let up = to_upstream.run(&client, &upstream.stream, &last);
    let down = to_client.run(&upstream.stream, &client, &last);
    let ((up, up_end), (down, down_end)) = tokio::join!(up, down);
    let end = if up_end == "idle" || down_end == "idle" {
        "idle"
    } else if up_end != "eof" {
        up_end
    } else {
        down_end
    };
    Moved {
        up,
        down,
        status: None,
        end,
    }
}

/// One direction of a tunnel: the shared idle clock, and the most one
/// write to its receiving side may carry.
#[derive(Clone, Copy)]
struct Pump {
    idle: Duration,
    origin: Instant,
    max_write: usize,
}

impl Pump {
    /// Moves bytes until an end. It gives up when the whole tunnel (not just
    /// this direction) has been idle for `idle`.
    async fn run(self, from: &TcpStream, to: &TcpStream, last: &AtomicU64) -> (u64, &'static str) {
        let Pump {
            idle,
            origin,
            max_write,
        } = self;
        use nix::fcntl::{splice, SpliceFFlags};
        use tokio::io::Interest;
        let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
        let Ok((pipe_out, pipe_in)) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
        else {
            return (0, "no pipe");
        };
        // A bigger pipe where allowed; the default (64 KiB) works too.
        let _ = nix::fcntl::fcntl(
            pipe_in.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as i32),
        );
        let idle_ms = idle.as_millis() as u64;
        let mut total = 0u64;
        let end = loop {
            if let Err(end) = readable_or_idle(from, idle_ms, origin, last).await {
                break end;
            }
            let filled = from.try_io(Interest::READABLE, || {
                Ok(splice(from, None, &pipe_in, None, PIPE_SIZE, flags)?)
            });
            let in_pipe = match filled {
                Ok(0) => break "eof",
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break "reset",
            };
            last.store(now_ms(origin), Ordering::Relaxed);
            // A side that cannot take what was read ends the pump at once,
            // without passing an end of file on.
            if !drain(&pipe_out, to, in_pipe, max_write, &mut total).await {
                return (total, "reset");
            }
        };
        // Pass the end on: the other side sees end of file, as it would
        // have without the proxy.
        let _ = nix::sys::socket::shutdown(to.as_raw_fd(), nix::sys::socket::Shutdown::Write);
        (total, end)
    }
}

/// Waits until `from` is readable; `idle` once the whole tunnel has been
/// quiet for `idle_ms`, `reset` when the socket failed.
async fn readable_or_idle(
    from: &TcpStream,
    idle_ms: u64,
    origin: Instant,
    last: &AtomicU64,
) -> Result<(), &'static str> {
    loop {
        let quiet = now_ms(origin).saturating_sub(last.load(Ordering::Relaxed));
        let wait = Duration::from_millis(idle_ms.saturating_sub(quiet).max(1));
        match tokio::time::timeout(wait, from.readable()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(_)) => return Err("reset"),
            Err(_) => {
                // The other direction may have moved bytes meanwhile.
                let quiet = now_ms(origin).saturating_sub(last.load(Ordering::Relaxed));
                if quiet >= idle_ms {
                    return Err("idle");
                }
            }
        }
    }
}

/// Splices the `in_pipe` bytes waiting in the pipe into `to`, counting
/// them in `total`, at most `max_write` per splice. False when `to` failed.
async fn drain(
    pipe_out: &OwnedFd,
    to: &TcpStream,
    mut in_pipe: usize,
    max_write: usize,
    total: &mut u64,
) -> bool {
    use nix::fcntl::{splice, SpliceFFlags};
    use tokio::io::Interest;
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    while in_pipe > 0 {
        if to.writable().await.is_err() {
            return false;
        }
        let drained = to.try_io(Interest::WRITABLE, || {
            Ok(splice(
                pipe_out,
                None,
                to,
                None,
                in_pipe.min(max_write),
                flags,
            )?)
        });
        match drained {
            Ok(n) => {
                in_pipe -= n;
                *total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
    }
    true
}

/// Copies at most `limit` bytes (a plain request's body), `chunk` at most
/// per write.
async fn copy_limited<R, W>(
    from: &mut R,
    to: &mut W,
    limit: u64,
    idle: Duration,
    chunk: usize,
) -> u64
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; chunk.max(1)];
    let mut left = limit;
    while left > 0 {
        let want = buf.len().min(left as usize);
        match tokio::time::timeout(idle, from.read(&mut buf[..want])).await {
            Ok(Ok(n)) if n > 0 => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                left -= n as u64;
            }
            _ => break,
        }
    }
    limit - left
}

/// Copies until end of file (a plain request's response).
async fn copy_all<R, W>(from: &mut R, to: &mut W, idle: Duration) -> (u64, &'static str)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER];
    let mut total = 0u64;
    loop {
        match tokio::time::timeout(idle, from.read(&mut buf)).await {
            Ok(Ok(0)) => return (total, "eof"),
            Ok(Ok(n)) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return (total, "reset");
                }
                total += n as u64;
            }
            Ok(Err(_)) => return (total, "reset"),
            Err(_) => return (total, "idle"),
        }
    }
}
