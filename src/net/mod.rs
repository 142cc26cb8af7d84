//! The network layer: the firewall that leaves `shell` only the egress
//! proxy, and the proxy itself, which reaches only listed hosts.

pub mod connect_gate;
pub mod firewall;
pub mod netlink;
pub mod nft_netlink;
pub mod nft_readback;
pub mod opened;
pub mod origin;
pub mod proxy;
pub mod registries;
pub mod tunnel;
pub mod userns;
