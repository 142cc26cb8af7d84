//! The bodies of an exchange through an opened host: the request's sent
//! exactly as framed (a metered one gathered first, its model read from
//! it), the answer's masked as it comes and cut where a metered stream
//! crosses its budget; and the reads and writes both files make, with why an exchange stops.

use super::http1::{self, Body, Chunked, HeadError};
use super::scrub::Scrubber;
use crate::shared::spend::meter::Meter;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub(super) const BUFFER: usize = 64 * 1024;
/// How long an answer's last bytes may be held back to catch a secret
/// cut across two reads: once the origin is this quiet, they go on (a
/// stream of events or WebSocket frames is not held for its next piece).
pub(super) const HOLD: Duration = Duration::from_millis(50);
/// The most of a metered request's body warden reads before it leaves
/// (its model is read from it).
pub(super) const MAX_METERED_BODY: u64 = 32 << 20;

/// Why an exchange stopped short.
#[derive(Debug, thiserror::Error)]
pub(super) enum Stop {
    #[error("{0}")]
    Head(#[from] HeadError),
    #[error("{0}")]
    Chunk(#[from] http1::ChunkError),
    #[error("the client sent no request")]
    Quiet,
    #[error("{0} was silent for too long")]
    Idle(&'static str),
    #[error("{side}: {error}")]
    Io {
        side: &'static str,
        error: std::io::Error,
    },
    #[error("{0} closed before the message's end")]
    Cut(&'static str),
    #[error("a metered request's body is over {MAX_METERED_BODY} bytes")]
    TooLarge,
}

pub(super) async fn read<R: AsyncRead + Unpin>(
    from: &mut R,
    buf: &mut [u8],
    idle: Duration,
    side: &'static str,
) -> Result<usize, Stop> {
    match tokio::time::timeout(idle, from.read(buf)).await {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(error)) => Err(Stop::Io { side, error }),
        Err(_) => Err(Stop::Idle(side)),
    }
}

pub(super) async fn write<W: AsyncWrite + Unpin>(
    to: &mut W,
    bytes: &[u8],
    side: &'static str,
) -> Result<(), Stop> {
    to.write_all(bytes)
        .await
        .map_err(|error| Stop::Io { side, error })
}

/// The request's body, exactly as framed: nothing after its end is sent.
pub(super) async fn send_body<C, U>(
    client: &mut C,
    upstream: &mut U,
    body: Body,
    early: Vec<u8>,
    idle: Duration,
) -> Result<u64, Stop>
where
    C: AsyncRead + Unpin,
    U: AsyncWrite + Unpin,
{
    let mut chunked = Chunked::default();
    let mut left = match body {
        Body::None | Body::Close => return Ok(0),
        Body::Length(n) => n,
        Body::Chunked => u64::MAX,
    };
    let mut sent = 0u64;
    let mut piece = early;
    let mut buf = vec![0u8; BUFFER];
    loop {
        let take = match body {
            Body::Chunked => chunked.feed(&piece)?.1,
            _ => piece.len().min(left as usize),
        };
        write(upstream, &piece[..take], "the origin").await?;
        sent += take as u64;
        left -= take as u64;
        if left == 0 || chunked.done {
            return Ok(sent);
        }
        let n = read(client, &mut buf, idle, "the client").await?;
        if n == 0 {
            return Err(Stop::Cut("the client"));
        }
        piece = buf[..n].to_vec();
    }
}

pub(super) fn lock(meter: &Mutex<Meter>) -> std::sync::MutexGuard<'_, Meter> {
    meter.lock().unwrap_or_else(|e| e.into_inner())
}

/// A metered request's whole body (a chunked one decoded), read before
/// anything of it leaves.
pub(super) async fn gather<C: AsyncRead + Unpin>(
    client: &mut C,
    body: Body,
    early: Vec<u8>,
    idle: Duration,
) -> Result<Vec<u8>, Stop> {
    let mut chunked = Chunked::default();
    let length = match body {
        Body::None | Body::Close => return Ok(Vec::new()),
        Body::Length(n) if n > MAX_METERED_BODY => return Err(Stop::TooLarge),
        Body::Length(n) => n,
        Body::Chunked => u64::MAX,
    };
    let mut out = Vec::new();
    let mut piece = early;
    let mut buf = vec![0u8; BUFFER];
    loop {
        match body {
            Body::Chunked => out.extend(chunked.feed(&piece)?.0),
            _ => out
                .extend_from_slice(&piece[..piece.len().min((length - out.len() as u64) as usize)]),
        }
        if out.len() as u64 > MAX_METERED_BODY {
            return Err(Stop::TooLarge);
        }
        if out.len() as u64 == length || chunked.done {
            return Ok(out);
        }
        let n = read(client, &mut buf, idle, "the client").await?;
        if n == 0 {
            return Err(Stop::Cut("the client"));
        }
        piece = buf[..n].to_vec();
    }
}

/// The answer's body, masked, sent to the client as it comes; a chunked
/// one decoded (the client reads it until the close). A metered stream
/// that crosses its budget ends at that event.
pub(super) async fn answer_body<U, C>(
    (upstream, client): (&mut U, &mut C),
    body: Body,
    early: Vec<u8>,
    scrubber: &mut Scrubber,
    idle: Duration,
    meter: Option<&Mutex<Meter>>,
) -> Result<u64, Stop>
where
    U: AsyncRead + Unpin,
    C: AsyncWrite + Unpin,
{
    let mut chunked = Chunked::default();
    let mut left = match body {
        Body::None => return Ok(0),
        Body::Length(n) => n,
        Body::Chunked | Body::Close => u64::MAX,
    };
    let mut moved = 0u64;
    let mut piece = early;
    let mut buf = vec![0u8; BUFFER];
    loop {
        let mut payload = match body {
            Body::Chunked => chunked.feed(&piece)?.0,
            _ => piece[..piece.len().min(left as usize)].to_vec(),
        };
        if body != Body::Chunked {
            left -= payload.len() as u64;
        }
        let cut = meter.and_then(|m| lock(m).answer_piece(&payload));
        if let Some(end) = cut {
            payload.truncate(end);
        }
        let out = scrubber.push(&payload);
        write(client, &out, "the client").await?;
        moved += out.len() as u64;
        if left == 0 || chunked.done || cut.is_some() {
            break;
        }
        let n = read_or_release(upstream, client, &mut buf, scrubber, idle, &mut moved).await?;
        if n == 0 {
            match body {
                Body::Close => break,
                _ => return Err(Stop::Cut("the origin")),
            }
        }
        piece = buf[..n].to_vec();
    }
    let rest = scrubber.finish();
    write(client, &rest, "the client").await?;
    Ok(moved + rest.len() as u64)
}

/// Reads the origin's next piece; if it stays quiet for `HOLD`, what the
/// scrubber held back goes to the client first (counted in `moved`).
pub(super) async fn read_or_release<U, C>(
    upstream: &mut U,
    client: &mut C,
    buf: &mut [u8],
    scrubber: &mut Scrubber,
    idle: Duration,
    moved: &mut u64,
) -> Result<usize, Stop>
where
    U: AsyncRead + Unpin,
    C: AsyncWrite + Unpin,
{
    if !scrubber.holding() {
        return read(upstream, buf, idle, "the origin").await;
    }
    if let Ok(read) = tokio::time::timeout(HOLD, upstream.read(buf)).await {
        return read.map_err(|error| Stop::Io {
            side: "the origin",
            error,
        });
    }
    let held = scrubber.finish();
    write(client, &held, "the client").await?;
    *moved += held.len() as u64;
    read(upstream, buf, idle, "the origin").await
}
