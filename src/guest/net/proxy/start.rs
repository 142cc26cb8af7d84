//! Starting the proxy, the same way in warden's boot and in `warden
//! proxy`: its loopback listeners, and the proxy built and serving on
//! them in the runtime.

use super::rules::RulesError;
use super::{Defaults, Hooks, Proxy, Settings, Through};
use crate::shared::policy::NetworkPolicy;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// An address the proxy could not listen on.
#[derive(Debug, thiserror::Error)]
#[error("proxy on {address}: {error}")]
pub struct BindError {
    pub address: SocketAddr,
    #[source]
    pub error: std::io::Error,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Rules(#[from] RulesError),
    /// The resolver, as reaching upstreams says.
    #[error("{0}")]
    Resolver(#[source] crate::shared::egress::reach::ResolverError),
    #[error("proxy: {0}")]
    Listener(#[source] std::io::Error),
}

/// Binds the proxy on loopback: 127.0.0.1 always, ::1 when this machine
/// has an IPv6 loopback. Returns the listeners and what could not be bound.
pub fn bind(port: u16) -> Result<(Vec<std::net::TcpListener>, Option<BindError>), BindError> {
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let failed = |address| move |error| BindError { address, error };
    let first = std::net::TcpListener::bind(v4).map_err(failed(v4))?;
    first.set_nonblocking(true).map_err(failed(v4))?;
    defer_accept(&first);
    let mut listeners = vec![first];
    let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    let missing = match std::net::TcpListener::bind(v6) {
        Ok(l) => {
            let _ = l.set_nonblocking(true);
            defer_accept(&l);
            listeners.push(l);
            None
        }
        Err(error) => Some(BindError { address: v6, error }),
    };
    Ok((listeners, missing))
}

/// The proxy's clients speak first (a CONNECT or a request line), so the
/// kernel hands a connection over only once its first bytes arrived: the
/// proxy is woken once per connection, not at the handshake too, which
/// on a loaded CPU ran ahead of the connecting command or of the connect
/// gate answering it. A client that says nothing is handed over after
/// about 5 s (the kernel's retransmitted handshake), and the proxy's own
/// deadline for its request runs from then.
fn defer_accept(l: &std::net::TcpListener) {
    use std::os::fd::AsRawFd;
    let secs: libc::c_int = 5;
    // SAFETY: setsockopt reads an int at a live address.
    let _ = unsafe {
        libc::setsockopt(
            l.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&secs as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Builds the proxy from the network policy read at boot and serves on
/// `listeners` (bound already, non-blocking) in `runtime`, reaching
/// upstreams `through` its own connections or a VM's host relay. Returns the
/// proxy, for status and reload, and the task that serves until the
/// runtime ends.
pub fn start(
    runtime: &Runtime,
    policy: &NetworkPolicy,
    policy_dir: &Path,
    defaults: Defaults,
    hooks: Hooks,
    listeners: Vec<std::net::TcpListener>,
    through: Through,
) -> Result<(Arc<Proxy>, JoinHandle<()>), StartError> {
    let settings = Settings {
        through,
        ..Settings::from_policy(policy, policy_dir)
    };
    // Tokio's sockets must be made inside its runtime.
    let _inside = runtime.enter();
    let proxy = Arc::new(Proxy::new(settings, policy, defaults, hooks)?);
    let listeners = listeners
        .into_iter()
        .map(tokio::net::TcpListener::from_std)
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(StartError::Listener)?;
    let serving = runtime.spawn(proxy.clone().serve(listeners));
    Ok((proxy, serving))
}
