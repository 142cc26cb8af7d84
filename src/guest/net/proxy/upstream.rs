//! How the proxy reaches an upstream: it resolves and connects itself
//! (`shared::egress::reach`), or, in a VM with a network, asks the host's
//! relay to connect for it.

use crate::shared::egress::reach::{resolver_with, RESOLVE_TIMEOUT};
use crate::shared::egress::refusal::{Kind, Refused};
use hickory_resolver::TokioResolver;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;

/// How the proxy reaches an upstream.
#[derive(Clone, Default)]
pub enum Through {
    /// It resolves and connects itself.
    #[default]
    Direct,
    /// A VM's warden: its host's relay, at this vsock port, with the
    /// machine's key, resolves and connects (see `shared::egress::link`).
    HostRelay { port: u32, key: String },
}

/// An open upstream, and the most bytes one write to it may carry.
pub(super) struct Upstream {
    pub stream: TcpStream,
    pub max_write: usize,
}

/// The resolver for every name the proxy reaches: IPv4 and IPv6, and the
/// machine's /etc/hosts first.
pub(super) fn resolver() -> Result<TokioResolver, super::StartError> {
    resolver_with(&[]).map_err(super::StartError::Resolver)
}

/// Asks the host's relay (over vsock, from inside a VM) to reach
/// `name:port`; it decides again, resolves and connects, and answers with
/// the address it reached or why it would not.
pub(super) async fn through_host(
    relay_port: u32,
    key: &str,
    name: &str,
    port: u16,
    timeout: Duration,
) -> Result<(Upstream, SocketAddr), Refused> {
    let ask = crate::shared::egress::link::Ask {
        key: key.into(),
        host: name.into(),
        port,
    };
    // The relay resolves, then tries each address: its answer may take
    // as long as both.
    let wait = RESOLVE_TIMEOUT + timeout + Duration::from_secs(2);
    let asked = tokio::task::spawn_blocking(move || ask_host(relay_port, &ask, wait)).await;
    let (fd, to) = asked.unwrap_or_else(|e| Err(relay_failed(e)))?;
    // A vsock stream socket, driven as a TCP one: the tunnel only reads,
    // writes, splices, waits on and shuts down its upstream, which are
    // the same calls for every connected stream socket.
    let std_stream = std::net::TcpStream::from(fd);
    std_stream.set_nonblocking(true).map_err(relay_failed)?;
    let stream = TcpStream::from_std(std_stream).map_err(relay_failed)?;
    Ok((
        Upstream {
            stream,
            max_write: crate::guest::vm::vsock::MAX_WRITE,
        },
        to,
    ))
}

/// The blocking part of `through_host`: connect, ask, read the answer
/// line (a byte at a time: the upstream's own bytes may follow it).
fn ask_host(
    relay_port: u32,
    ask: &crate::shared::egress::link::Ask,
    wait: Duration,
) -> Result<(std::os::fd::OwnedFd, SocketAddr), Refused> {
    use crate::shared::egress::link::{ask_line, parse_answer, MAX_LINE};
    use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
    use std::io::Write;
    let line = ask_line(ask).map_err(relay_failed)?;
    let fd = crate::guest::vm::vsock::connect_host(relay_port).map_err(relay_failed)?;
    let timeout = nix::sys::time::TimeVal::new(wait.as_secs() as i64, 0);
    setsockopt(&fd, ReceiveTimeout, &timeout).map_err(relay_failed)?;
    let mut socket = std::fs::File::from(fd);
    socket.write_all(line.as_bytes()).map_err(relay_failed)?;
    let answer = crate::wire::client::read_line(&mut socket, MAX_LINE)
        .map_err(|e| relay_failed(format!("no answer: {e}")))?;
    let to = parse_answer(&answer)?;
    let fd = std::os::fd::OwnedFd::from(socket);
    let forever = nix::sys::time::TimeVal::new(0, 0);
    setsockopt(&fd, ReceiveTimeout, &forever).map_err(relay_failed)?;
    Ok((fd, to))
}

/// A failure to reach or hear the host's relay.
fn relay_failed(e: impl std::fmt::Display) -> Refused {
    Refused::new(Kind::ConnectFailed, format!("the host's relay: {e}"))
}
