//! The network layer as a whole: the firewall applied at boot and proven
//! by behaviour (at boot and on every status), and the egress proxy that
//! is the one way out for `shell`.
//!
//! Beside it: the nftables table (`firewall`, written over netlink by
//! `nft_netlink` and read back by `nft_readback`), the connect gate where
//! the firewall cannot hold (`connect_gate`), the proxy (`proxy`) and the
//! hosts it opens (`opened`), who opened a connection (`origin`), the
//! default host list's registries (`registries`, asked of package tools
//! through `tool`), the uid the rules must name (`userns`), and `warden
//! proxy`, the proxy alone outside a machine (`standalone`). What the
//! proxy decides with is `shared::egress`, which a VM's relay on the host
//! uses too.

pub mod connect_gate;
pub mod firewall;
pub mod netlink;
pub mod nft_netlink;
pub mod nft_readback;
pub mod opened;
pub mod origin;
pub mod proxy;
pub mod registries;
mod standalone;
pub mod tool;
pub mod userns;

pub use standalone::{standalone, StandaloneError};

use crate::guest::confine::spawn::Identity;
use crate::guest::process::reaper::Reaper;
use crate::shared::policy::{NetworkPolicy, Requirement};
use crate::wire::{LayerState, ProxyState};
use connect_gate::OpenError;
use firewall::{Findings, Scope, Verdict};
use nft_netlink::BatchError;
use opened::trust::{Published, TrustError};
use opened::OpenerError;
use proxy::{Proxy, Rules, RulesError};
use std::io;
use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Why warden's table is not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FirewallError {
    /// Until the boot applies it; for good with the firewall off.
    #[error("not applied")]
    NotApplied,
    #[error("over netlink: {0}")]
    Netlink(#[source] BatchError),
}

/// Why the probe found nothing: the ports it knocks on could not be
/// opened, it did not run (as confinement says), or not as its user.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot open a loopback port to knock on: {0}")]
    Knock(#[source] io::Error),
    #[error("{0}")]
    Probe(#[source] crate::guest::confine::ProbeError),
    #[error("the probe did not run as the user it was forked as")]
    NotItsUser,
}

/// Why the loopback interface could not be brought up.
#[derive(Debug, thiserror::Error)]
pub enum LoopbackError {
    #[error("no socket to configure lo with: {0}")]
    Socket(#[source] io::Error),
    #[error("lo: {0}")]
    Flags(#[source] io::Error),
    #[error("cannot bring lo up: {0}")]
    Up(#[source] io::Error),
}

/// Why commands' listen(2) calls are not held.
#[derive(Debug, thiserror::Error)]
pub enum ListensError {
    /// Asked before the first proof.
    #[error("not set up yet")]
    NotSetUp,
    #[error("warden is not PID 1: commands' listen calls are not held")]
    NotPid1,
    #[error("warden cannot hold commands' listen calls: {0}")]
    Guard(#[source] OpenError),
}

/// What `listens` says before the first proof.
static LISTENS_NOT_SET_UP: ListensError = ListensError::NotSetUp;

/// Why the network policy was not reloaded (the last good one holds).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the proxy is not running")]
    NotRunning,
    #[error(transparent)]
    Rules(#[from] RulesError),
}

pub struct Network {
    pub policy: NetworkPolicy,
    pub scope: Scope,
    /// How applying the rules went: applied, or why they are not there.
    applied: Mutex<Result<(), FirewallError>>,
    proxy: Mutex<Option<Arc<Proxy>>>,
    /// Where the proxy listens, and what it could not bind.
    pub listening: Vec<String>,
    /// The variables that point a command's tools at the proxy, made once.
    pub env: Vec<(String, String)>,
    /// What opens hosts (the machine's authority, the credentials'
    /// values), or why there is none: made at boot, before any command.
    pub opener: Result<Arc<crate::guest::net::proxy::Opener>, OpenerError>,
    /// The bundle that makes the machine's authority trusted (as tools
    /// see it), or why it could not be published: set at boot.
    pub trust: Result<Published, TrustError>,
    /// warden's connect gate, where it stands in for the firewall.
    gate: OnceLock<Gate>,
    gate_tried: std::sync::atomic::AtomicBool,
    /// Whether commands' listen(2) calls are held (by the gate or a guard
    /// of their own), or why not: set once, at the first proof.
    listens: OnceLock<Result<String, ListensError>>,
}

/// The connect gate, once open: what it has done, and why the firewall
/// could not hold (said with its verdict).
pub struct Gate {
    pub ledger: Arc<connect_gate::Ledger>,
    pub why_not_firewall: String,
    /// The runtime's own gate, where `runtime_hosts` limits it (or why it
    /// could not open); None when the runtime is not limited.
    pub runtime: Option<Result<RuntimeGate, OpenError>>,
}

/// The gate of the runtime's processes: they are forked from `spawner`,
/// whose filter sends their connects to a gate thread of their own.
pub struct RuntimeGate {
    pub spawner: crate::guest::confine::runtime_spawner::RuntimeSpawner,
    pub ledger: Arc<connect_gate::Ledger>,
}

impl Gate {
    /// Whose a socket the gates connected to the proxy is (by its local
    /// address), if a gate connected it.
    pub fn caller_of(&self, local: std::net::SocketAddr) -> Option<u32> {
        let runtime = || {
            self.runtime
                .as_ref()?
                .as_ref()
                .ok()?
                .ledger
                .caller_of(local)
        };
        self.ledger.caller_of(local).or_else(runtime)
    }

    pub fn runtime_gate(&self) -> Option<&RuntimeGate> {
        self.runtime.as_ref()?.as_ref().ok()
    }
}

impl Network {
    /// `runtime_uid` is limited too when the policy names `runtime_hosts`.
    pub fn new(policy: NetworkPolicy, shell_uid: u32, runtime_uid: u32) -> Network {
        // Where the network's namespace counts uids otherwise, the rules
        // must name each user by that count; when it cannot be found the
        // probe will show the rules missing them, and say so.
        let seen = |uid: u32, who: &str| {
            crate::guest::net::userns::seen_by_network(uid).unwrap_or_else(|e| {
                crate::say!("{who}'s uid as this network counts it: {e}; the rules name {uid}");
                uid
            })
        };
        let runtime_network_uid = policy
            .runtime_hosts
            .is_some()
            .then(|| seen(runtime_uid, "the runtime"));
        let scope = Scope {
            shell_uid,
            network_uid: seen(shell_uid, "shell"),
            runtime_network_uid,
            proxy_port: policy.proxy_port,
        };
        Network {
            env: proxy_env(policy.proxy_port),
            policy,
            scope,
            // Set once, by `apply`; with the firewall off it stays so.
            applied: Mutex::new(Err(FirewallError::NotApplied)),
            proxy: Mutex::new(None),
            listening: Vec::new(),
            opener: Err(OpenerError::NotMade),
            trust: Err(TrustError::NotPublished),
            gate: OnceLock::new(),
            gate_tried: Default::default(),
            listens: OnceLock::new(),
        }
    }

    /// Applies warden's table over netlink (unless the policy turns the
    /// firewall off: then None). No `nft` is run: the image need not have
    /// one, and the boot does not wait for a program's start.
    pub fn apply(&self) -> Option<Result<(), FirewallError>> {
        if self.policy.firewall == Requirement::Off {
            return None;
        }
        let result = nft_netlink::apply(self.scope).map_err(FirewallError::Netlink);
        *self.applied.lock().unwrap_or_else(|e| e.into_inner()) = result.clone();
        Some(result)
    }

    /// Removes warden's table at shutdown, once every command is gone: a
    /// warden that is not PID 1 must not leave rules in a namespace that
    /// outlives it.
    pub fn remove(&self) {
        if self
            .applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_err()
        {
            return;
        }
        if let Err(e) = nft_netlink::delete_table() {
            crate::say!("cannot remove its firewall table: {e}");
        }
    }

    /// Whether the connect gate should stand in for a firewall that did
    /// not hold: unless the policy turned the firewall off (asked the first
    /// time only, see `first_proof`).
    pub fn wants_gate(&self, firewall: &LayerState) -> bool {
        !firewall.holds && self.policy.firewall != Requirement::Off
    }

    /// True the first time only: the gate (or the listen guard) is set up
    /// once, at boot, before any command runs.
    pub fn first_proof(&self) -> bool {
        !self.gate_tried.swap(true, Ordering::SeqCst)
    }

    /// Records how commands' listen calls are held (first call only).
    pub fn set_listens(&self, held: Result<String, ListensError>) {
        let _ = self.listens.set(held);
    }

    /// How commands' listen calls are held; Err before the first proof.
    pub fn listens(&self) -> Result<String, &ListensError> {
        match self.listens.get() {
            Some(held) => held.as_ref().cloned(),
            None => Err(&LISTENS_NOT_SET_UP),
        }
    }

    pub fn set_gate(&self, gate: Gate) {
        let _ = self.gate.set(gate);
    }

    pub fn gate(&self) -> Option<&Gate> {
        self.gate.get()
    }

    /// The firewall layer where the gate stands in for the table: the
    /// probe, run as a command (so under the gate), must be refused but at
    /// the proxy, and reach the proxy.
    pub fn prove_gate(
        &self,
        gate: &Gate,
        probe: impl FnOnce(
            crate::guest::confine::probe::NetProbe,
        ) -> Result<
            crate::guest::confine::probe::Probe,
            crate::guest::confine::ProbeError,
        >,
    ) -> LayerState {
        let required = self.policy.firewall == Requirement::Required;
        let port = self.scope.proxy_port;
        let findings = knock(port, |plan| {
            gate.ledger.probe_knocking(plan.addresses());
            let found = probe(plan);
            gate.ledger.probe_done();
            found
        });
        match firewall::judge_gate(port, &gate.why_not_firewall, &findings) {
            Verdict::Holds(detail) => crate::guest::confine::state(
                "firewall",
                required,
                true,
                format!("{detail}. So far: {}", gate.ledger.said()),
            ),
            Verdict::DidNotHold(why) => {
                crate::guest::confine::state("firewall", required, false, why)
            }
        }
    }

    /// The runtime's network where `runtime_hosts` limits it (`entries`
    /// long): warden's table holds the runtime's uid as it holds shell's,
    /// proven by `probe` knocking as the runtime.
    pub fn prove_runtime(
        &self,
        entries: usize,
        runtime_uid: u32,
        probe: impl FnOnce(
            crate::guest::confine::probe::NetProbe,
        ) -> Result<
            crate::guest::confine::probe::Probe,
            crate::guest::confine::ProbeError,
        >,
    ) -> LayerState {
        let state =
            |holds, detail| crate::guest::confine::state("runtime_network", true, holds, detail);
        if let Err(e) = &*self.applied.lock().unwrap_or_else(|e| e.into_inner()) {
            return state(false, format!("warden's table is not applied ({e}): the runtime's connections are not limited"));
        }
        let port = self.scope.proxy_port;
        let problems = match knock(port, probe) {
            Ok(f) => firewall::problems_in(&f, port, "the runtime"),
            Err(e) => vec![format!("the probe failed: {e}")],
        };
        match problems.is_empty() {
            true => state(true, format!("the runtime's sockets (uid {runtime_uid}) reach only the proxy on loopback:{port}, which decides its requests on runtime_hosts ({entries} entries); a probe as the runtime was refused at once over TCP, its UDP datagram did not arrive, and it reached the proxy")),
            false => state(false, problems.join("; ")),
        }
    }

    /// The same where warden's connect gate decides the runtime's
    /// connects: the probe, forked as the main process is, must be
    /// refused but at the proxy, make no UDP socket, reach the proxy, and
    /// see Landlock refuse a connect of its own (which the gate relies on).
    pub fn prove_runtime_gated(
        &self,
        entries: usize,
        gate: &RuntimeGate,
        probe: impl FnOnce(
            crate::guest::confine::probe::NetProbe,
        ) -> Result<
            crate::guest::confine::probe::Probe,
            crate::guest::confine::ProbeError,
        >,
    ) -> LayerState {
        let state =
            |holds, detail| crate::guest::confine::state("runtime_network", true, holds, detail);
        let port = self.scope.proxy_port;
        let mut own_refused = false;
        let findings = knock(port, |plan| {
            gate.ledger.probe_knocking(plan.addresses());
            let found = probe(plan);
            gate.ledger.probe_done();
            own_refused = found
                .as_ref()
                .is_ok_and(|p| p.has(crate::guest::confine::probe::Probe::LANDLOCK_TCP));
            found
        });
        let mut problems = match findings {
            Ok(f) => firewall::problems_in(&f, port, "the runtime"),
            Err(e) => vec![format!("the probe failed: {e}")],
        };
        if !own_refused {
            problems.push("Landlock did not refuse the runtime a TCP connect of its own".into());
        }
        match problems.is_empty() {
            true => state(true, format!("held by warden's connect gate, without nftables: every TCP connect of the runtime's processes is decided by warden, which connects it to the proxy on loopback:{port} (deciding its requests on runtime_hosts, {entries} entries) and refuses the rest; Landlock refuses the runtime any TCP connect of its own and seccomp any UDP socket; a probe forked as the main process was refused at once over TCP, could make no UDP socket, and reached the proxy. So far: {}", gate.ledger.said())),
            false => state(false, problems.join("; ")),
        }
    }

    pub fn set_proxy(&self, proxy: Arc<Proxy>) {
        *self.proxy.lock().unwrap_or_else(|e| e.into_inner()) = Some(proxy);
    }

    pub fn proxy(&self) -> Option<Arc<Proxy>> {
        self.proxy.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The variables that point tools at the machine's bundle, once it
    /// is published.
    pub fn trust_env(&self) -> Vec<(String, String)> {
        match &self.trust {
            Ok(published) => crate::guest::net::opened::trust::env(&published.bundle),
            Err(_) => Vec::new(),
        }
    }

    /// The firewall layer, proven now: the table read back from the kernel
    /// and compared, and the probe's findings. `probe` runs the probe child as shell
    /// with the knocking ports it is given. With the layer, why the table
    /// does not hold, if it does not.
    pub fn prove(
        &self,
        (landlock_tcp, seccomp_sockets): (bool, bool),
        probe: impl FnOnce(
            crate::guest::confine::probe::NetProbe,
        ) -> Result<
            crate::guest::confine::probe::Probe,
            crate::guest::confine::ProbeError,
        >,
    ) -> (LayerState, Option<String>) {
        let required = self.policy.firewall == Requirement::Required;
        let port = self.scope.proxy_port;
        let without = firewall::without_firewall(port, landlock_tcp, seccomp_sockets);
        if self.policy.firewall == Requirement::Off {
            let off = "off by policy (network.json)".to_string();
            let detail = format!("{off}; {without}");
            return (
                crate::guest::confine::state("firewall", false, false, detail),
                Some(off),
            );
        }
        let applied = self
            .applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // Not applied: the verdict says so, and nothing is read back (the
        // verdict does not look at the readback then).
        let readback = match &applied {
            Ok(()) => nft_readback::read_back(self.scope),
            Err(_) => Ok(()),
        };
        let findings = knock(port, probe);
        match firewall::judge(self.scope, &applied, &readback, &findings) {
            Verdict::Holds(detail) => (
                crate::guest::confine::state("firewall", required, true, detail),
                None,
            ),
            Verdict::DidNotHold(why) => (
                crate::guest::confine::state(
                    "firewall",
                    required,
                    false,
                    format!("{why}; {without}"),
                ),
                Some(why),
            ),
        }
    }

    pub fn state(&self) -> Option<ProxyState> {
        let proxy = self.proxy()?;
        let rules = proxy.rules();
        Some(state_of(
            &proxy,
            rules.as_deref(),
            &self.listening,
            &self.trust,
        ))
    }

    /// Reloads the network policy for the proxy (the API's `reload`).
    pub fn reload(&self) -> Result<ProxyState, ReloadError> {
        let proxy = self.proxy().ok_or(ReloadError::NotRunning)?;
        let rules = proxy.reload()?;
        Ok(state_of(
            &proxy,
            rules.as_deref(),
            &self.listening,
            &self.trust,
        ))
    }
}

fn state_of(
    proxy: &Proxy,
    rules: Option<&Rules>,
    listening: &[String],
    trust: &Result<Published, TrustError>,
) -> ProxyState {
    ProxyState {
        listening: listening.to_vec(),
        hosts_from: rules
            .map_or("default (being worked out)", |r| r.from)
            .to_string(),
        hosts: rules.map(|r| r.hosts.entries()).unwrap_or_default(),
        allow_addresses: rules
            .map(|r| r.allow.iter().map(|c| c.to_string()).collect())
            .unwrap_or_default(),
        carried: proxy.carried.load(Ordering::Relaxed),
        refused: proxy.refused.load(Ordering::Relaxed),
        runtime_hosts: rules.and_then(|r| r.runtime.as_ref()).map(|l| l.entries()),
        runtime_traffic: rules
            .is_some_and(|r| r.runtime.is_some())
            .then(|| proxy.runtime_traffic.hosts()),
        opened: proxy
            .opener
            .as_ref()
            .map(|o| Box::new(o.state(rules, trust))),
    }
}

/// Holds loopback ports open (none of them the proxy's), has the probe
/// knock on them as shell, and sees what arrived.
fn knock(
    proxy_port: u16,
    probe: impl FnOnce(
        crate::guest::confine::probe::NetProbe,
    )
        -> Result<crate::guest::confine::probe::Probe, crate::guest::confine::ProbeError>,
) -> Result<Findings, ProbeError> {
    let bound = ProbeError::Knock;
    let tcp4 = TcpListener::bind("127.0.0.1:0").map_err(bound)?;
    let udp4 = UdpSocket::bind("127.0.0.1:0").map_err(bound)?;
    // IPv6 is tested where the machine has a loopback for it.
    let tcp6 = TcpListener::bind("[::1]:0").ok();
    let udp6 = UdpSocket::bind("[::1]:0").ok();
    let port = |a: std::io::Result<std::net::SocketAddr>| a.map(|a| a.port()).map_err(bound);
    let plan = crate::guest::confine::probe::NetProbe {
        tcp_v4: port(tcp4.local_addr())?,
        tcp_v6: tcp6
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.port()),
        udp_v4: port(udp4.local_addr())?,
        udp_v6: udp6
            .as_ref()
            .and_then(|s| s.local_addr().ok())
            .map(|a| a.port()),
        proxy: proxy_port,
    };
    let found = probe(plan).map_err(ProbeError::Probe)?;
    if !found.has(crate::guest::confine::probe::Probe::IDENTITY) {
        return Err(ProbeError::NotItsUser);
    }
    let arrived = |s: &UdpSocket| {
        let _ = s.set_nonblocking(true);
        let mut buf = [0u8; 64];
        s.recv(&mut buf).is_ok()
    };
    let udp_arrived = arrived(&udp4) || udp6.as_ref().is_some_and(arrived);
    Ok(Findings {
        tcp_refused: found.has(crate::guest::confine::probe::Probe::NET_TCP_REFUSED),
        refused_fast: found.has(crate::guest::confine::probe::Probe::NET_REFUSED_FAST),
        udp_blocked: !udp_arrived,
        udp_refused_at_socket: found
            .has(crate::guest::confine::probe::Probe::NET_UDP_SOCKET_REFUSED),
        proxy_reached: found.has(crate::guest::confine::probe::Probe::NET_PROXY_REACHED),
        v6: tcp6.is_some(),
    })
}

/// The default host list: GitHub's hosts, then every registry the
/// machine's tools are configured to use (their files, then the tools
/// themselves, asked as `shell`). Returns the list and where each came from.
pub fn default_hosts(
    reaper: &Reaper,
    shell: Identity,
    shell_home: &str,
    path: &str,
) -> (Vec<String>, Vec<registries::Found>) {
    let env: Vec<(String, String)> = std::env::vars().collect();
    // shell may write its own home: nothing there may widen the list.
    let shells = format!("{}/", shell_home.trim_end_matches('/'));
    let mut found: Vec<registries::Found> =
        registries::from_configuration(std::path::Path::new("/"), &env)
            .into_iter()
            .filter(|f| !f.source.contains(&shells))
            .collect();
    // The tools are asked with no home at all, for the same reason.
    let clean = [
        ("PATH".to_string(), path.to_string()),
        ("HOME".to_string(), "/nonexistent".to_string()),
    ];
    let mut ask = |argv: &[&str]| -> Option<String> {
        let exists = crate::guest::confine::spawn::candidates(argv[0], path)
            .iter()
            .any(|p| std::path::Path::new(p).is_file());
        if !exists {
            return None;
        }
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let out = crate::guest::net::tool::run(
            reaper,
            &argv,
            &clean,
            shell.clone(),
            b"",
            Duration::from_secs(5),
        )
        .ok()?;
        (out.status == 0).then_some(out.stdout)
    };
    found.extend(registries::from_tools(&mut ask));
    (host_list(&found), found)
}

/// GitHub's hosts, then each registry found, once.
fn host_list(found: &[registries::Found]) -> Vec<String> {
    let mut hosts: Vec<String> = registries::GITHUB.map(String::from).to_vec();
    for f in found {
        if !hosts.contains(&f.host) {
            hosts.push(f.host.clone());
        }
    }
    hosts
}

/// Brings the loopback interface up: a VM's init must, a container's is
/// up already. Returns whether it had to.
pub fn loopback_up() -> Result<bool, LoopbackError> {
    use std::os::fd::AsRawFd;
    let sock = UdpSocket::bind("0.0.0.0:0")
        .or_else(|_| UdpSocket::bind("[::]:0"))
        .map_err(LoopbackError::Socket)?;
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the named interface's flags into `req`,
    // which lives for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(LoopbackError::Flags(io::Error::last_os_error()));
    }
    // SAFETY: the union's flags member is what SIOCGIFFLAGS filled in.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short != 0 {
        return Ok(false);
    }
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads `req`, which lives for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(LoopbackError::Up(io::Error::last_os_error()));
    }
    Ok(true)
}

/// What points a command's tools at the proxy: the common variables
/// (curl, git, pip, apt, python, Go, node's fetch with a flag), and the
/// tools' own names for them. Loopback goes direct.
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let no_proxy = "localhost,127.0.0.1,::1".to_string();
    let mut env = Vec::new();
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "npm_config_proxy",
        "npm_config_https_proxy",
        "PIP_PROXY",
        "CARGO_HTTP_PROXY",
        "YARN_HTTP_PROXY",
        "YARN_HTTPS_PROXY",
    ] {
        env.push((name.to_string(), url.clone()));
    }
    env.push(("NO_PROXY".to_string(), no_proxy.clone()));
    env.push(("no_proxy".to_string(), no_proxy));
    env
}
