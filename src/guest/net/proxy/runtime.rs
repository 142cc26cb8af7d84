//! The runtime's own list (`runtime_hosts`): telling its connections
//! apart, by the uid of the client's socket as the kernel has it, and what
//! it moved through the proxy, host by host, for `status`.

use crate::wire::HostTraffic;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The uid owning the client socket of a connection, given the client's
/// address and the proxy's own end; None when the kernel no longer knows it.
pub type ClientUid = Arc<dyn Fn(SocketAddr, SocketAddr) -> Option<u32> + Send + Sync>;

/// Who the runtime is, and how to ask who a client is.
#[derive(Clone)]
pub struct Runtime {
    pub uid: u32,
    pub client_uid: ClientUid,
}

/// The runtime's traffic through the proxy, by host.
#[derive(Default)]
pub struct Traffic(Mutex<BTreeMap<String, HostTraffic>>);

impl Traffic {
    pub fn carried(&self, host: String, up: u64, down: u64, took: Duration) {
        self.with(host, |t| {
            t.connections += 1;
            t.bytes_up += up;
            t.bytes_down += down;
            t.duration_ms += took.as_millis() as u64;
        });
    }

    pub fn refused(&self, host: String) {
        self.with(host, |t| t.refused += 1);
    }

    fn with(&self, host: String, f: impl FnOnce(&mut HostTraffic)) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let entry = all.entry(host.clone()).or_insert_with(|| HostTraffic {
            host,
            ..Default::default()
        });
        f(entry);
    }

    pub fn hosts(&self) -> Vec<HostTraffic> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_adds_up_by_host() {
        let t = Traffic::default();
        t.carried("a.test".into(), 10, 100, Duration::from_millis(5));
        t.carried("a.test".into(), 1, 2, Duration::from_millis(7));
        t.refused("b.test".into());
        let hosts = t.hosts();
        assert_eq!(hosts.len(), 2);
        let a = &hosts[0];
        assert_eq!(
            (
                a.host.as_str(),
                a.connections,
                a.refused,
                a.bytes_up,
                a.bytes_down,
                a.duration_ms
            ),
            ("a.test", 2, 0, 11, 102, 12)
        );
        assert_eq!((hosts[1].host.as_str(), hosts[1].refused), ("b.test", 1));
    }
}
