//! The API's ways in: the machine's own socket, the host's (its socket,
//! vsock in a VM, the TCP door on loopback), bound during the boot and
//! served once it is over.

use super::phases::BootError;
use crate::guest::api;
use crate::guest::command::detached::Registry;
use crate::guest::supervisor::Supervisor;
use crate::guest::vm::Vm;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

/// The API's ways in, bound (served only once the boot line is written).
pub(super) struct Doors {
    local: tokio::net::UnixListener,
    host: Option<(
        tokio::net::UnixListener,
        Arc<crate::shared::machine_key::Key>,
    )>,
    vsock: Option<(
        crate::guest::vm::vsock::Listener,
        Arc<crate::shared::machine_key::Key>,
    )>,
    pub(super) vsock_port: Option<u32>,
    tcp: Option<(
        tokio::net::TcpListener,
        Arc<crate::shared::machine_key::Key>,
    )>,
}

/// 9. The machine's own socket (root and the runtime's group), and the
///    host's ways in: its socket when the machine has one, vsock in a VM,
///    the TCP door on loopback when the config names one (a pod's).
///    Anyone who reaches those may try; only the machine's key, loaded
///    once for all, lets them in.
pub(super) fn open(
    sup: &Arc<Supervisor>,
    runtime: &tokio::runtime::Runtime,
    vm: Option<&Vm>,
) -> Result<Doors, BootError> {
    let socket = &sup.config.socket;
    let local = runtime
        .block_on(async { bind(socket, SocketOwner::Group(sup.runtime.gid), 0o660) })
        .map_err(|error| BootError::ApiSocket {
            path: socket.clone(),
            error,
        })?;
    let vsock_port = vm.and(sup.config.vsock_port);
    let key = match (&sup.config.host_socket, vsock_port, sup.config.tcp_door) {
        (None, None, None) => None,
        _ => Some(Arc::new(
            crate::shared::machine_key::Key::load(&sup.config.key_file)
                .map_err(|e| BootError::Key(e.to_string()))?,
        )),
    };
    let host = match (&sup.config.host_socket, &key) {
        // The owner's alone: shell cannot even connect (where keep-id
        // makes it the owner, the API refuses it by its pid).
        (Some(path), Some(key)) => {
            let listener = runtime
                .block_on(async { bind(path, SocketOwner::OfFolder, 0o600) })
                .map_err(|error| BootError::HostSocket {
                    path: path.clone(),
                    error,
                })?;
            Some((listener, key.clone()))
        }
        _ => None,
    };
    let vsock = match (vsock_port, &key) {
        (Some(port), Some(key)) => {
            let listener = runtime
                .block_on(async { crate::guest::vm::vsock::bind_any(port) })
                .map_err(|e| BootError::Vsock {
                    port,
                    error: e.to_string(),
                })?;
            Some((listener, key.clone()))
        }
        _ => None,
    };
    let vsock_port = vsock.as_ref().map(|(l, _)| l.port);
    // The config allows loopback addresses only: reached from inside the
    // machine's network (where shell's connects reach the proxy alone) or
    // through `kubectl port-forward`, never from the network.
    let tcp = match (sup.config.tcp_door, &key) {
        (Some(address), Some(key)) => {
            let listener = runtime
                .block_on(async { tokio::net::TcpListener::bind(address).await })
                .map_err(|error| BootError::TcpDoor { address, error })?;
            Some((listener, key.clone()))
        }
        _ => None,
    };
    Ok(Doors {
        local,
        host,
        vsock,
        vsock_port,
        tcp,
    })
}

/// 11. The doors are served (only once the boot line is written), one
///     registry of detached commands for all of them.
pub(super) fn serve(sup: &Arc<Supervisor>, runtime: &tokio::runtime::Runtime, doors: Doors) {
    let detached = Arc::new(Registry::default());
    let mut served = vec![(api::Listener::Unix(doors.local), api::Door::Local)];
    if let Some((host, key)) = doors.host {
        served.push((
            api::Listener::Unix(host),
            api::Door::Host(key, "host_socket"),
        ));
    }
    if let Some((listener, key)) = doors.vsock {
        served.push((
            api::Listener::Vsock(listener),
            api::Door::Host(key, "vsock"),
        ));
    }
    if let Some((listener, key)) = doors.tcp {
        served.push((api::Listener::Tcp(listener), api::Door::Host(key, "tcp")));
    }
    for (listener, door) in served {
        runtime.spawn(api::serve(sup.clone(), detached.clone(), listener, door));
    }
}

/// Who owns a socket file warden binds.
enum SocketOwner {
    /// root, with this group.
    Group(u32),
    /// Whoever owns the folder it is in: the host's folder lent for the
    /// host's way in belongs to the owner as the machine sees them (root,
    /// or shell's uid under keep-id).
    OfFolder,
}

/// Binds an API socket, owned as `owner` says, mode `mode` (0660 for the
/// machine's own: the runtime's group only).
fn bind(path: &Path, owner: SocketOwner, mode: u32) -> std::io::Result<tokio::net::UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let (uid, gid) = match owner {
        SocketOwner::Group(gid) => (0, gid),
        SocketOwner::OfFolder => {
            use std::os::unix::fs::MetadataExt;
            let dir = path.parent().unwrap_or(Path::new("/"));
            let meta = std::fs::metadata(dir)?;
            (meta.uid(), meta.gid())
        }
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::other(
                "exists and is not a socket; refusing to replace it",
            ))
        }
        Err(_) => {}
    }
    // The socket is made with its final mode at once: no moment where
    // anyone else could connect.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o777 & !mode));
    let bound = std::os::unix::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound?;
    std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    listener.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(listener)
}
