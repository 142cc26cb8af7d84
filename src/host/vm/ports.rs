//! A VM's published ports, host side: the relay listens on the host's
//! 127.0.0.1 for each, and carries every connection into the guest over
//! its vsock (vhost-device-vsock's `CONNECT <port>`), where the guest's
//! warden hands it to the runtime's server on the guest's loopback
//! (`guest::vm::published_ports`). The VM has no network device to
//! publish on. A connection to a VM that serve froze thaws it first.

use super::relay::{log, RelayError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream, UnixStream};

/// Held while a connection to a published port is open: thaws the VM
/// first when it is frozen, and keeps a freeze off until dropped. The
/// relay is given it (the launcher's sleep lock is above the VM backend).
pub type KeepAwake = fn(&str) -> Result<Box<dyn Send>, String>;

/// One published port: the host's (on 127.0.0.1) and the guest's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Forward {
    pub host: u16,
    pub guest: u16,
}

/// Binds each forward's host port on 127.0.0.1 (in the host's network,
/// before the relay joins another).
pub(super) fn bind(forwards: &[Forward]) -> Result<Vec<(std::net::TcpListener, u16)>, RelayError> {
    forwards
        .iter()
        .map(|f| {
            let failed = |source| RelayError::Bind {
                port: f.host,
                source,
            };
            let listener = std::net::TcpListener::bind(("127.0.0.1", f.host)).map_err(failed)?;
            listener.set_nonblocking(true).map_err(failed)?;
            Ok((listener, f.guest))
        })
        .collect()
}

/// Carries every connection on `listener` to the guest's `guest` port,
/// thawing the VM `machine` first when it is frozen.
pub(super) async fn serve(
    listener: TcpListener,
    vsock: PathBuf,
    guest: u16,
    machine: Option<String>,
    keep_awake: KeepAwake,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let vsock = vsock.clone();
        let machine = machine.clone();
        tokio::spawn(async move {
            if let Err(e) = carry(client, vsock, guest, machine, keep_awake).await {
                log(serde_json::json!({"port": guest, "error": e}));
            }
        });
    }
}

async fn carry(
    mut client: TcpStream,
    vsock: PathBuf,
    guest: u16,
    machine: Option<String>,
    keep_awake: KeepAwake,
) -> Result<(), String> {
    let port = crate::wire::vsock_ports::vsock_port(guest);
    let (into, _awake) = tokio::task::spawn_blocking(move || {
        // Awake while the connection is open: thawed first if frozen,
        // and no freeze begins meanwhile.
        let awake = machine.as_deref().map(keep_awake).transpose()?;
        let into = crate::wire::client::hybrid_vsock_connect(&vsock, port)
            .map_err(|e| format!("the guest did not take port {guest}: {e}"))?;
        Ok::<_, String>((into, awake))
    })
    .await
    .map_err(|e| e.to_string())??;
    into.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut into = UnixStream::from_std(into).map_err(|e| e.to_string())?;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut into).await;
    Ok(())
}

/// The machine's published ports, as `podman port` says a container's:
/// `3000/tcp -> 127.0.0.1:3100`; none while it is stopped.
pub fn published(id: &str) -> Vec<String> {
    if !super::running(id) {
        return Vec::new();
    }
    let file = super::dir(id).join("relay.json");
    let Ok(text) = std::fs::read_to_string(file) else {
        return Vec::new();
    };
    let Ok(config) = serde_json::from_str::<super::relay::RelayConfig>(&text) else {
        return Vec::new();
    };
    config
        .ports
        .iter()
        .map(|f| format!("{}/tcp -> 127.0.0.1:{}", f.guest, f.host))
        .collect()
}
