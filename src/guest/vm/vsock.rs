//! The API's listener on vsock, for the host of a VM. Only ever made inside
//! a VM that warden boots as PID 1 (`init` asks `vm::detect` first): on a
//! host, vsock belongs to whatever runs that host.
//!
//! A connection accepted here is served exactly like one on a unix socket:
//! the API only reads, writes, splices and waits on its socket, which are
//! the same system calls for every connected stream socket, so the accepted
//! descriptor is handed to tokio as a stream socket of the unix kind and the
//! whole protocol code is shared. Nothing unix-specific is asked of it (its
//! peer's uid means nothing here; the machine's key decides).

use nix::sys::socket::{
    accept4, bind, getpeername, listen, socket, AddressFamily, Backlog, SockFlag, SockType,
    VsockAddr,
};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;

/// The most bytes one write to a vsock connection carries: one page, so
/// that every packet reaches the host's device in one descriptor (see
/// `Capped`, below).
pub const MAX_WRITE: usize = 4096;

pub struct Listener {
    fd: AsyncFd<OwnedFd>,
    pub port: u32,
}

/// Listens on `port` for any CID (in practice, the host's). Call inside
/// the async runtime, and only once `vm::boot` succeeded: this process is
/// then PID 1 of the kernel's initial PID namespace, in a VM.
pub fn bind_any(port: u32) -> io::Result<Listener> {
    let fd = socket(
        AddressFamily::Vsock,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    bind(fd.as_raw_fd(), &VsockAddr::new(libc::VMADDR_CID_ANY, port))?;
    listen(&fd, Backlog::new(128)?)?;
    // SAFETY: the OwnedFd is moved into the AsyncFd, which keeps it open,
    // and its as_raw_fd always returns that one descriptor, until dropped.
    let fd = unsafe { AsyncFd::register(fd) }.map_err(io::Error::from)?;
    Ok(Listener { fd, port })
}

impl Listener {
    /// The next connection, and its peer's CID and port.
    pub async fn accept(&self) -> io::Result<(UnixStream, String)> {
        loop {
            let mut ready = self.fd.readable().await?;
            let accepted = ready.try_io(|fd| {
                let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
                Ok(accept4(fd.as_raw_fd(), flags)?)
            });
            let raw = match accepted {
                Ok(result) => result?,
                Err(_would_block) => continue,
            };
            // SAFETY: accept4 just returned this descriptor; nothing else
            // owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            let peer = getpeername::<VsockAddr>(fd.as_raw_fd())
                .map(|a| format!("cid {} port {}", a.cid(), a.port()))
                .unwrap_or_else(|_| "unknown".into());
            let stream = UnixStream::from_std(std::os::unix::net::UnixStream::from(fd))?;
            return Ok((stream, peer));
        }
    }
}

/// Connects to `port` on the host (CID 2), blocking, within the kernel's
/// vsock connect timeout (2 s by default). Call only inside a VM that
/// warden booted (the egress proxy's way out, `shared::egress::link`).
pub fn connect_host(port: u32) -> io::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Vsock,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    nix::sys::socket::connect(fd.as_raw_fd(), &VsockAddr::new(libc::VMADDR_CID_HOST, port))?;
    Ok(fd)
}

/// A stream written at most `max` bytes per call: the API's connection,
/// and the proxy's upstream when it is the host's relay.
///
/// On vsock each write becomes one packet; a packet larger than a page is
/// built from page fragments by newer guest kernels and reaches the host's
/// device as several descriptors, which some devices (vhost-device-vsock
/// 0.3) cannot read, killing the connection. A page per write keeps every
/// packet in one descriptor. Unix sockets and TCP take any size.
pub struct Capped<S> {
    inner: S,
    max: usize,
}

impl<S> Capped<S> {
    pub fn new(inner: S, max: usize) -> Capped<S> {
        Capped {
            inner,
            max: max.max(1),
        }
    }

    /// The stream written to.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The most bytes one write carries.
    pub fn max(&self) -> usize {
        self.max
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Capped<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Capped<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = buf.len().min(self.max);
        Pin::new(&mut self.inner).poll_write(cx, &buf[..n])
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
