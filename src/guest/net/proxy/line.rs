//! The `egress` audit line: what one connection through the proxy asked
//! for, what was decided, where it went and what it moved. Every decision
//! is one such line.

use super::relay::Moved;
use crate::guest::audit::payload::{Egress, Origin};
use crate::guest::net::opened::exchange::Outcome;
use crate::shared::egress::refusal::Refused;
use crate::shared::egress::target::{Host, Target};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

/// What is known of a connection so far; filled in as it goes.
pub(super) struct Line {
    peer: SocketAddr,
    pub(super) method: String,
    pub(super) target: Option<Target>,
    pub(super) entry: Option<String>,
    pub(super) resolved: Vec<IpAddr>,
    pub(super) address: Option<SocketAddr>,
    up: u64,
    down: u64,
    status: Option<u16>,
    end: &'static str,
    /// Who opened it (the command), when warden could tell.
    pub(super) origin: Option<Origin>,
    /// Decided on the runtime's own list (the runtime asked).
    pub(super) runtime: bool,
    /// An opened host's request: its path, the credential added, how
    /// many forms of a secret were masked in its answer.
    opened: Option<(String, Option<String>, u64)>,
}

impl Line {
    pub(super) fn new(peer: SocketAddr) -> Line {
        Line {
            peer,
            method: String::new(),
            target: None,
            entry: None,
            resolved: Vec::new(),
            address: None,
            up: 0,
            down: 0,
            status: None,
            end: "",
            origin: None,
            runtime: false,
            opened: None,
        }
    }

    /// What a carried connection moved, and how it ended.
    pub(super) fn moved(&mut self, moved: Moved) {
        self.up = moved.up;
        self.down = moved.down;
        self.status = moved.status;
        self.end = moved.end;
    }

    /// What the one request through an opened host did: the line names
    /// it (method, path, status) rather than its tunnel.
    pub(super) fn carried_request(&mut self, outcome: &Outcome) {
        self.method = outcome.method.clone();
        self.up = outcome.up;
        self.down = outcome.down;
        self.status = outcome.status;
        self.end = "eof";
        self.opened = Some((
            outcome.path.clone(),
            outcome.credential.clone(),
            outcome.masked,
        ));
    }

    /// The host asked for (a name, or an address as written), and what
    /// was moved: for the runtime's traffic in `status`.
    pub(super) fn traffic(&self) -> (String, u64, u64) {
        (self.host().unwrap_or_default(), self.up, self.down)
    }

    /// The host asked for, as written: a name or an address.
    fn host(&self) -> Option<String> {
        self.target.as_ref().map(|t| match &t.host {
            Host::Name(n) => n.clone(),
            Host::Ip(ip) => ip.to_string(),
        })
    }

    /// The line of a connection that was carried.
    pub(super) fn allowed(&self, started: Instant) -> Egress {
        self.value(true, started)
    }

    /// The line of a refusal: its reason, status and stable word.
    pub(super) fn refused(&self, r: &Refused, started: Instant) -> Egress {
        Egress {
            reason: Some(r.reason.clone()),
            status: Some(r.status()),
            refusal: Some(r.kind.as_str()),
            ..self.value(false, started)
        }
    }

    fn value(&self, allowed: bool, started: Instant) -> Egress {
        let opened = self.opened.as_ref();
        Egress {
            allowed,
            method: self.method.clone(),
            host: self.host(),
            port: self.target.as_ref().map(|t| t.port),
            client: self.peer.to_string(),
            resolved: self.resolved.iter().map(|ip| ip.to_string()).collect(),
            address: self.address.map(|a| a.to_string()),
            bytes_up: self.up,
            bytes_down: self.down,
            duration_ms: (started.elapsed().as_secs_f64() * 1e3 * 10.0).round() / 10.0,
            entry: self.entry.clone(),
            list: self.runtime.then_some("runtime_hosts"),
            status: self.status,
            end: Some(self.end).filter(|end| !end.is_empty()),
            origin: self.origin.clone(),
            opened: opened.map(|_| true),
            path: opened.map(|(path, _, _)| path.clone()),
            credential: opened.and_then(|(_, credential, _)| credential.clone()),
            credential_echo_removed: opened
                .map(|(_, _, masked)| *masked)
                .filter(|masked| *masked > 0),
            reason: None,
            refusal: None,
        }
    }
}
