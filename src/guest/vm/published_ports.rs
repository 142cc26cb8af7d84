//! A VM's published ports, guest side. The VM has no network device: the
//! host's relay carries each connection to a published port over vsock,
//! to port `FORWARD_BASE + port`, where warden takes it and hands it to
//! the runtime's server on the guest's loopback. Only the host reaches a
//! guest's vsock listeners; only warden (root) connects onward. Each
//! connection is the machine in use while it is open (`InUse`), so that
//! neither its idle stop nor a freeze takes it away mid-answer.

use super::vsock::Capped;
use crate::wire::vsock_ports::vsock_port;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};

/// Told when a carried connection begins (true) and ends (false).
pub type InUse = std::sync::Arc<dyn Fn(bool) + Send + Sync>;

/// Listens on vsock for each of `ports` and carries every connection to
/// 127.0.0.1 in the guest. Call inside the async runtime, in a VM that
/// warden booted only. Returns what could not be listened on.
pub fn serve(ports: &[u16], in_use: InUse) -> Vec<String> {
    let mut failed = Vec::new();
    for &port in ports {
        match crate::guest::vm::vsock::bind_any(vsock_port(port)) {
            Ok(listener) => {
                tokio::spawn(accept_loop(listener, port, in_use.clone()));
            }
            Err(e) => failed.push(format!("published port {port}: {e}")),
        }
    }
    failed
}

async fn accept_loop(listener: crate::guest::vm::vsock::Listener, port: u16, in_use: InUse) {
    loop {
        match listener.accept().await {
            Ok((stream, _peer)) => {
                let in_use = in_use.clone();
                tokio::spawn(async move {
                    in_use(true);
                    carry(stream, port).await;
                    in_use(false);
                });
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}

/// One connection: vsock to the runtime's server and back. Nothing
/// listening there closes the host's end at once. When the server is done
/// sending, the whole connection ends: the host's vsock device does not
/// pass a half-close on, so a client waiting for the end would wait for
/// ever.
async fn carry(from_host: UnixStream, port: u16) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (mut host_read, host_write) = from_host.into_split();
    // A page per vsock write (see `vsock::Capped`).
    let mut host_write = Capped::new(host_write, crate::guest::vm::vsock::MAX_WRITE);
    let (mut server_read, mut server_write) = server.into_split();
    let inbound = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut host_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });
    let _ = tokio::io::copy(&mut server_read, &mut host_write).await;
    inbound.abort();
    let _ = inbound.await;
}
