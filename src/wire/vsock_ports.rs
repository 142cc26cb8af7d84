//! Where a VM's guest and its host meet on vsock: the API's port, the
//! egress relay's, and the port each published TCP port is carried on.
//! Both sides must agree on these numbers; nothing else of vsock is here.

/// The API's vsock port by default (`vsock_port` in the machine config).
pub const DEFAULT_PORT: u32 = 1024;

/// The egress relay's vsock port (the host's end: the unix socket
/// `<vsock.sock>_1025` beside the VM's vsock socket; see
/// `shared::egress::link`).
pub const RELAY_PORT: u32 = 1025;

/// Where a published port listens on the guest's vsock.
pub const FORWARD_BASE: u32 = 100_000;

/// The vsock port that carries the guest's TCP `port`.
pub fn vsock_port(port: u16) -> u32 {
    FORWARD_BASE + u32::from(port)
}
