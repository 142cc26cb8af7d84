//! A VM's way out, on the host: the egress relay. The VM has no network
//! device; its warden's proxy asks this relay, over vsock (here the unix
//! socket `vsock.sock_1025` that the VM's vhost-device-vsock connects to),
//! to reach `host:port` (see `shared::egress::link`).
//!
//! The relay trusts nothing the guest says. A guest whose kernel is no
//! longer warden's could ask anything, so the relay decides again before it
//! connects: the machine's key; the name on the machine's own lists (its
//! `hosts` and `runtime_hosts`, as handed to the VM); no IP address as a
//! name; every address the name resolves to checked against the classes
//! the proxy refuses (loopback, private, link-local, metadata...) unless the
//! definition's `allow_addresses` lists it; a bounded number of
//! connections. It connects from the machine's network: the host's own, or
//! the namespace the definition names. One line per decision goes to its
//! log (`relay.log`).

use super::relay::{log, RelayError};
use crate::shared::egress::decide::pick;
use crate::shared::egress::hosts::HostList;
use crate::shared::egress::link::{self, Ask, MAX_LINE};
use crate::shared::egress::reach;
use crate::shared::egress::refusal::{Kind, Refused};
use crate::shared::policy::NetworkPolicy;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// How long the guest has to say what it wants.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// The egress side of `relay.json` (written by `up`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressConfig {
    /// The unix socket the VM's vsock device connects to.
    pub listen: PathBuf,
    /// The machine's key (the host's copy).
    pub key_file: PathBuf,
    /// The folder of the network.json handed to the VM: its lists, ports,
    /// allowed addresses, timeouts and tunnel bound.
    pub policy_dir: PathBuf,
    /// The machine's `dns`; none: the host's /etc/resolv.conf.
    pub dns: Vec<IpAddr>,
    /// The network namespace to connect from; none: the host's.
    pub netns: Option<PathBuf>,
}

/// What the relay decides with.
pub(super) struct Relay {
    key: crate::shared::machine_key::Key,
    hosts: HostList,
    allow: Vec<crate::shared::egress::addr::Cidr>,
    connect_timeout: Duration,
    resolver: hickory_resolver::TokioResolver,
    tunnels: Arc<tokio::sync::Semaphore>,
}

impl Relay {
    /// The relay `config` describes: the machine's key, lists and bounds.
    pub(super) fn new(config: &EgressConfig) -> Result<Relay, RelayError> {
        let policy = NetworkPolicy::load(&config.policy_dir)?;
        Ok(Relay {
            key: crate::shared::machine_key::Key::load(&config.key_file)?,
            hosts: machine_list(&policy)?,
            allow: policy.allow_addresses.clone(),
            connect_timeout: Duration::from_millis(policy.connect_timeout_ms),
            resolver: reach::resolver_with(&config.dns)?,
            tunnels: Arc::new(tokio::sync::Semaphore::new(policy.max_tunnels)),
        })
    }

    /// Serves the guest's connections on `listener` until the end.
    pub(super) async fn serve_all(self: Arc<Self>, listener: tokio::net::UnixListener) {
        log(serde_json::json!({"relay": "listening", "hosts": self.hosts.entries()}));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let relay = self.clone();
            tokio::spawn(async move { relay.serve(stream).await });
        }
    }
}

/// The names the machine may reach at all: its host list and its
/// runtime's, on the policy's ports. A VM with a network has a list of
/// its own (the launcher refuses one without), so none is a refusal.
fn machine_list(policy: &NetworkPolicy) -> Result<HostList, RelayError> {
    let Some(hosts) = &policy.hosts else {
        return Err(RelayError::NoHosts);
    };
    let mut entries = hosts.clone();
    entries.extend(policy.runtime_hosts.iter().flatten().cloned());
    Ok(HostList::parse(&entries, &policy.ports)?)
}

impl Relay {
    /// One guest connection: its line, the decision, then its bytes.
    async fn serve(&self, stream: UnixStream) {
        let mut stream = BufReader::new(stream);
        let asked = read_ask(&mut stream).await;
        let host = asked.as_ref().map(|a| (a.host.clone(), a.port)).ok();
        let permit = self.tunnels.clone().try_acquire_owned();
        let decided = match (asked, permit) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(_)) => Err(Refused::new(
                Kind::TooManyConnections,
                "too many connections through the relay at once",
            )),
            (Ok(ask), Ok(permit)) => self.reach(&ask).await.map(|r| (r, permit)),
        };
        let answer = decided
            .as_ref()
            .map(|((_, to), _)| *to)
            .map_err(Clone::clone);
        log(decision_line(host.as_ref(), &answer));
        let mut stream = stream.into_inner();
        if stream
            .write_all(link::answer_line(&answer).as_bytes())
            .await
            .is_err()
        {
            return;
        }
        let Ok(((mut upstream, _), _permit)) = decided else {
            let _ = stream.shutdown().await;
            return;
        };
        let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
    }

    /// Decides on `ask` and connects, or says why not.
    async fn reach(&self, ask: &Ask) -> Result<(tokio::net::TcpStream, SocketAddr), Refused> {
        if !self.key.matches(&ask.key) {
            return Err(Refused::new(Kind::BadRequest, "the machine's key is wrong"));
        }
        if ask.host.parse::<IpAddr>().is_ok() {
            return Err(Refused::new(
                Kind::IpTarget,
                format!("{} is an address, not a name", ask.host),
            ));
        }
        if self.hosts.allowing(&ask.host, ask.port).is_none() {
            return Err(Refused::new(
                Kind::NotListed,
                format!("{}:{} is not on the machine's list", ask.host, ask.port),
            ));
        }
        let found = reach::resolve(&self.resolver, &ask.host).await?;
        let addresses = pick(&ask.host, &found, ask.port, &self.allow)?;
        reach::connect(&addresses, self.connect_timeout).await
    }
}

/// The guest's line, read within `ASK_TIMEOUT` and `MAX_LINE` bytes.
async fn read_ask(stream: &mut BufReader<UnixStream>) -> Result<Ask, Refused> {
    let mut line = Vec::new();
    let mut limited = stream.take(MAX_LINE as u64);
    let read = tokio::time::timeout(ASK_TIMEOUT, limited.read_until(b'\n', &mut line)).await;
    let bad = |why: &str| Refused::new(Kind::BadRequest, why);
    match read {
        Err(_) => return Err(bad("no line in time")),
        Ok(Err(_)) => return Err(bad("the line could not be read")),
        Ok(Ok(_)) if line.last() != Some(&b'\n') => return Err(bad("no whole line")),
        Ok(Ok(_)) => {}
    }
    let text = std::str::from_utf8(&line[..line.len() - 1]).map_err(|_| bad("not UTF-8"))?;
    link::parse_ask(text).map_err(|e| bad(&e.to_string()))
}

/// Pure: the log line of one decision (never the key).
fn decision_line(
    asked: Option<&(String, u16)>,
    answer: &Result<SocketAddr, Refused>,
) -> serde_json::Value {
    let mut line = serde_json::json!({
        "host": asked.map(|a| a.0.as_str()),
        "port": asked.map(|a| a.1),
        "allowed": answer.is_ok(),
    });
    match answer {
        Ok(to) => line["address"] = to.to_string().into(),
        Err(r) => {
            line["refusal"] = r.kind.as_str().into();
            line["reason"] = r.reason.clone().into();
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machines_list_is_its_hosts_and_its_runtimes() {
        let policy = |json: &str| {
            NetworkPolicy::parse(&(PathBuf::from("network.json"), json.to_string())).unwrap()
        };
        let list = machine_list(&policy(
            r#"{"hosts": ["allowed.test"], "runtime_hosts": ["api.test:8443"]}"#,
        ))
        .unwrap();
        let cases = [
            ("allowed.test", 443, true),
            ("allowed.test", 8443, false),
            ("api.test", 8443, true),
            ("api.test", 443, false),
            ("denied.test", 443, false),
        ];
        for (name, port, allowed) in cases {
            assert_eq!(
                list.allowing(name, port).is_some(),
                allowed,
                "{name}:{port}"
            );
        }
        let none = machine_list(&policy("{}")).err().unwrap();
        assert!(none.to_string().contains("lists no hosts"), "{none}");
    }

    #[test]
    fn a_decision_line_never_holds_the_key() {
        let asked = ("allowed.test".to_string(), 443);
        let to: SocketAddr = "10.200.1.1:443".parse().unwrap();
        let ok = decision_line(Some(&asked), &Ok(to));
        assert_eq!(ok["allowed"], true);
        assert_eq!(ok["address"], "10.200.1.1:443");
        let refused = Refused::new(Kind::NotListed, "x");
        let no = decision_line(None, &Err(refused));
        assert_eq!(
            (no["refusal"].as_str(), no["host"].is_null()),
            (Some("not_listed"), true)
        );
    }
}
