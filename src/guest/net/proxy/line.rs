//! The `egress` audit line: what one connection through the proxy asked
//! for, what was decided, where it went and what it moved. Every decision
//! is one such line.

use super::relay::Moved;
use crate::guest::net::opened::exchange::Outcome;
use crate::shared::egress::refusal::Refused;
use crate::shared::egress::target::{Host, Target};
use serde_json::{json, Value};
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
    pub(super) origin: Option<Value>,
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
    pub(super) fn allowed(&self, started: Instant) -> Value {
        self.value(true, started)
    }

    /// The line of a refusal: its reason, status and stable word.
    pub(super) fn refused(&self, r: &Refused, started: Instant) -> Value {
        let mut line = self.value(false, started);
        line["reason"] = r.reason.as_str().into();
        line["status"] = r.status().into();
        line["refusal"] = r.kind.as_str().into();
        line
    }

    fn value(&self, allowed: bool, started: Instant) -> Value {
        let (host, port) = (self.host(), self.target.as_ref().map(|t| t.port));
        let mut line = json!({
            "allowed": allowed,
            "method": self.method,
            "host": host,
            "port": port,
            "client": self.peer.to_string(),
            "resolved": self.resolved.iter().map(|ip| ip.to_string()).collect::<Vec<_>>(),
            "address": self.address.map(|a| a.to_string()),
            "bytes_up": self.up,
            "bytes_down": self.down,
            "duration_ms": (started.elapsed().as_secs_f64() * 1e3 * 10.0).round() / 10.0,
        });
        if let Some(entry) = &self.entry {
            line["entry"] = entry.clone().into();
        }
        if self.runtime {
            line["list"] = "runtime_hosts".into();
        }
        if let Some(status) = self.status {
            line["status"] = status.into();
        }
        if !self.end.is_empty() {
            line["end"] = self.end.into();
        }
        if let Some(origin) = &self.origin {
            line["origin"] = origin.clone();
        }
        if let Some((path, credential, masked)) = &self.opened {
            line["opened"] = true.into();
            line["path"] = path.clone().into();
            if let Some(name) = credential {
                line["credential"] = name.clone().into();
            }
            if *masked > 0 {
                line["credential_echo_removed"] = (*masked).into();
            }
        }
        line
    }
}
