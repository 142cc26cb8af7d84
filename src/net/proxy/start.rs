//! The proxy's loopback listeners, bound at boot.

use std::net::SocketAddr;

/// Binds the proxy on loopback: 127.0.0.1 always, ::1 when this machine
/// has an IPv6 loopback. Returns the listeners and what could not be bound.
pub fn bind(port: u16) -> Result<(Vec<std::net::TcpListener>, Option<String>), String> {
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let first = std::net::TcpListener::bind(v4).map_err(|e| format!("proxy on {v4}: {e}"))?;
    first
        .set_nonblocking(true)
        .map_err(|e| format!("proxy on {v4}: {e}"))?;
    let mut listeners = vec![first];
    let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    let missing = match std::net::TcpListener::bind(v6) {
        Ok(l) => {
            let _ = l.set_nonblocking(true);
            listeners.push(l);
            None
        }
        Err(e) => Some(format!("proxy on {v6}: {e}")),
    };
    Ok((listeners, missing))
}
