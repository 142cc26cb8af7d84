//! The egress proxy: HTTP CONNECT and absolute-URI plain HTTP, on loopback
//! only, to the hosts on the machine's list and nowhere else.
//!
//! For each request it decides on the name first (the list), then resolves
//! the name itself, refuses every resolved address that is not an ordinary
//! public one unless the policy lists it, and connects to an address it
//! checked: the name is never resolved a second time. Every decision is
//! one audit line.
//!
//! This file is the orchestration: accepting, and taking one connection
//! from its request head to its audit line. What is decided is pure and
//! lives apart (`shared::egress`, `http`); so do the rules (`rules`),
//! reaching the upstream (`shared::egress::reach`, or a VM's host relay:
//! `upstream`) and moving bytes (`relay`).

pub(crate) mod http;
mod line;
mod local;
pub mod opened;
mod relay;
mod rules;
mod runtime;
mod start;
pub(crate) mod upstream;

pub use http::{parse_request, Plain, Request};
pub use opened::Opener;
pub use rules::{Defaults, Rules, RulesError, Settings};
pub use runtime::{ClientUid, Runtime, Traffic};
pub use start::{bind, start, BindError, StartError};
pub use upstream::Through;

use crate::guest::audit::payload::{self, ProxyLine};
use crate::shared::egress::credential::Holder;
use crate::shared::egress::decide::pick;
use crate::shared::egress::hosts::HostList;
use crate::shared::egress::reach;
use crate::shared::egress::refusal::{Kind, Refused};
use crate::shared::policy::NetworkPolicy;
use hickory_resolver::TokioResolver;
use http::Head;
use line::Line;
use rules::Source;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Where audit lines go: warden's log, or stdout in the standalone mode.
pub type Recorder = Arc<dyn Fn(ProxyLine) + Send + Sync>;

/// Who opened a connection, given its client's address and the proxy's
/// own end: the command, as far as warden can tell (see `net::origin`).
pub type Origin = Arc<dyn Fn(SocketAddr, SocketAddr) -> Option<payload::Origin> + Send + Sync>;

/// What the proxy tells its owner: every decision, and where it can, who
/// asked.
#[derive(Clone)]
pub struct Hooks {
    pub record: Recorder,
    pub origin: Option<Origin>,
    /// Who the runtime is, for its own list (`runtime_hosts`) and the
    /// credentials of opened hosts.
    pub runtime: Option<Runtime>,
    /// What opens hosts with credentials or rules; None: such a host is
    /// refused (this proxy cannot open TLS).
    pub opener: Option<Arc<Opener>>,
}

pub struct Proxy {
    settings: Settings,
    source: Source,
    /// How upstreams are reached: resolved here, or by a VM's host.
    way: Way,
    record: Recorder,
    origin: Option<Origin>,
    runtime: Option<Runtime>,
    pub opener: Option<Arc<Opener>>,
    tunnels: Arc<Semaphore>,
    /// Connections carried and refused since start, for status.
    pub carried: AtomicU64,
    pub refused: AtomicU64,
    /// What the runtime moved, by host (with `runtime_hosts`).
    pub runtime_traffic: Traffic,
}

/// A connection the proxy will carry: its request, the open upstream,
/// and the tunnel slot it holds until it ends.
struct Admitted {
    head: Head,
    request: Request,
    upstream: upstream::Upstream,
    /// What a tunnel to an opened host will do.
    opened: Option<opened::Plan>,
    /// A provider's endpoint (the runtime's plain HTTP): its path prefix.
    local: Option<String>,
    permit: OwnedSemaphorePermit,
}

impl Proxy {
    /// `policy` is the network policy read at boot; `default_hosts` the
    /// list used when it names none.
    pub fn new(
        settings: Settings,
        policy: &NetworkPolicy,
        default_hosts: Defaults,
        hooks: Hooks,
    ) -> Result<Proxy, StartError> {
        let Hooks {
            record,
            origin,
            runtime,
            opener,
        } = hooks;
        let source = Source::new(&settings.policy_dir, policy, default_hosts, record.clone())?;
        Ok(Proxy {
            way: match &settings.through {
                Through::Direct => Way::Direct(Box::new(upstream::resolver()?)),
                Through::HostRelay { port, key } => Way::HostRelay(*port, key.clone()),
            },
            tunnels: Arc::new(Semaphore::new(settings.max_tunnels)),
            settings,
            source,
            record,
            origin,
            runtime,
            opener,
            carried: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            runtime_traffic: Traffic::default(),
        })
    }

    /// The rules for the next connection (network.json is read again when
    /// it changed); None while the default list is not known yet.
    pub fn rules(&self) -> Option<Arc<Rules>> {
        self.source.current()
    }

    /// Reads network.json now (the API's `reload`); the answer says what
    /// holds.
    pub fn reload(&self) -> Result<Option<Arc<Rules>>, RulesError> {
        self.source.reload()
    }

    /// Accepts on every listener until the runtime ends.
    pub async fn serve(self: Arc<Self>, listeners: Vec<TcpListener>) {
        let mut tasks = tokio::task::JoinSet::new();
        for listener in listeners {
            let proxy = self.clone();
            tasks.spawn(async move { proxy.accept_loop(listener).await });
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let proxy = self.clone();
                    tokio::spawn(async move { proxy.handle(stream, peer).await });
                }
                Err(e) => {
                    // Out of descriptors, most likely: wait rather than spin.
                    crate::say!("proxy: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    async fn handle(self: Arc<Self>, mut client: TcpStream, peer: SocketAddr) {
        let started = Instant::now();
        let _ = client.set_nodelay(true);
        let mut line = Line::new(peer);
        // Both ends, to ask the kernel who the client is if it must.
        let ends = client.local_addr().ok().map(|local| (peer, local));
        // Who asked: looked up once it has spoken (a connection closed
        // without a word, as the firewall's probe makes, needs no name),
        // while it surely waits for its answer; awaited only for the line.
        let mut origin = None;
        let admitted = self.admit(&mut client, &mut line, ends, &mut origin).await;
        if origin.is_none() && admitted.is_err() {
            origin = self.look_up(ends);
        }
        let admitted = match admitted {
            Ok(Some(admitted)) => admitted,
            Ok(None) => return,
            Err(refused) => {
                self.refuse(&mut client, &mut line, refused, started, origin)
                    .await;
                return;
            }
        };
        self.carried.fetch_add(1, Ordering::Relaxed);
        // The slot is held until the line is written.
        let Admitted {
            head,
            request,
            upstream,
            opened,
            local,
            permit: _permit,
        } = admitted;
        let idle = self.settings.idle;
        if let (Some(plan), Some(opener), Some(prefix)) = (&opened, &self.opener, &local) {
            // The head read already is the exchange's to read again.
            let again = [head.bytes.as_slice(), head.early()].concat();
            let mut client = crate::guest::net::opened::streams::Prefixed::new(again, client);
            let local = Some(prefix.as_str());
            let ended = opened::to_origin(opener, plan, &mut client, upstream, idle, local).await;
            line.origin = settle(origin).await;
            return self.record_opened(line, ended, started);
        }
        if let (Some(plan), Some(opener)) = (opened, &self.opener) {
            let ended = opened::carry(opener, &plan, client, upstream, head.early(), idle).await;
            line.origin = settle(origin).await;
            return self.record_opened(line, ended, started);
        }
        let moved = match &request.plain {
            None => relay::tunnel(client, upstream, head.early(), idle).await,
            Some(plain) => relay::forward(client, upstream, plain, head.early(), idle).await,
        };
        line.moved(moved);
        if line.runtime {
            let (host, up, down) = line.traffic();
            self.runtime_traffic
                .carried(host, up, down, started.elapsed());
        }
        line.origin = settle(origin).await;
        (self.record)(ProxyLine::Egress(line.allowed(started)));
    }

    /// The list that decides for this client: the runtime's own, when it
    /// has one and the client is the runtime; else the host list.
    async fn list_for<'r>(
        &self,
        rules: &'r Rules,
        ends: Ends,
        line: &mut Line,
    ) -> Result<(&'r HostList, &'static str), Refused> {
        let (Some(list), Some(runtime)) = (&rules.runtime, &self.runtime) else {
            return Ok((&rules.hosts, "the host list"));
        };
        // Asked only here, once the runtime's list is known to matter:
        // the client is waiting for its answer, so its socket is there.
        match self.client_uid(runtime, ends).await {
            Some(uid) if uid == runtime.uid => {
                line.runtime = true;
                Ok((list, "the runtime's host list"))
            }
            Some(_) => Ok((&rules.hosts, "the host list")),
            None => Err(Refused::new(
                Kind::UnknownAsker,
                "who asks could not be told, and the runtime has a list of its own",
            )),
        }
    }

    /// Everything up to an open upstream connection: the request read and
    /// parsed, a tunnel slot taken, the target decided on and reached.
    async fn admit(
        &self,
        client: &mut TcpStream,
        line: &mut Line,
        ends: Ends,
        origin: &mut Option<Lookup>,
    ) -> Result<Option<Admitted>, Refused> {
        let Some(head) = http::read_head_in_time(client).await? else {
            return Ok(None);
        };
        *origin = self.look_up(ends);
        let (request, local) = match local::provider_name(&head.bytes) {
            Some(name) => {
                let rules = self.source.wait().await.ok_or_else(|| {
                    Refused::new(Kind::ListNotKnown, "the default host list is not known yet")
                })?;
                let request = self.local_request(&rules, name, ends).await?;
                (request, Some(local::prefix(name)))
            }
            None => (parse_request(&head.bytes)?, None),
        };
        line.method = request.method.clone();
        line.target = Some(request.target.clone());
        let permit = self.tunnels.clone().try_acquire_owned().map_err(|_| {
            Refused::new(
                Kind::TooManyConnections,
                "too many connections through the proxy at once",
            )
        })?;
        let (upstream, opened) = self.open(&request, line, ends).await?;
        Ok(Some(Admitted {
            head,
            request,
            upstream,
            opened,
            local,
            permit,
        }))
    }

    /// Starts looking up who holds the client's end (see `Origin`).
    fn look_up(&self, ends: Ends) -> Option<Lookup> {
        let (peer, local) = ends?;
        let origin = self.origin.clone()?;
        Some(tokio::task::spawn_blocking(move || origin(peer, local)))
    }

    /// Decides on the name, resolves it, checks each address, and connects
    /// to the first that passes (or, in a VM, has its host's relay do it).
    async fn open(
        &self,
        request: &Request,
        line: &mut Line,
        ends: Ends,
    ) -> Result<(upstream::Upstream, Option<opened::Plan>), Refused> {
        let t = &request.target;
        let Some(rules) = self.source.wait().await else {
            return Err(Refused::new(
                Kind::ListNotKnown,
                "the default host list is not known yet",
            ));
        };
        let (hosts, list) = self.list_for(&rules, ends, line).await?;
        let allowed = crate::shared::egress::decide::decide_on(hosts, list, t)?;
        line.entry = Some(allowed.entry.to_string());
        let plan = self
            .opening(&rules, request, allowed.name, line, ends)
            .await?;
        let timeout = self.settings.connect_timeout;
        let resolver = match &self.way {
            Way::Direct(resolver) => resolver,
            Way::HostRelay(port, key) => {
                let (upstream, to) =
                    upstream::through_host(*port, key, allowed.name, t.port, timeout).await?;
                line.address = Some(to);
                return Ok((upstream, plan));
            }
        };
        let found = reach::resolve(resolver, allowed.name).await?;
        line.resolved = found.clone();
        let addresses = pick(allowed.name, &found, t.port, &rules.allow)?;
        let (stream, to) = reach::connect(&addresses, timeout).await?;
        line.address = Some(to);
        let upstream = upstream::Upstream {
            stream,
            max_write: usize::MAX,
        };
        Ok((upstream, plan))
    }

    /// For a host warden opens: a plain request checked against its rules
    /// (never given a credential), a CONNECT's plan made for who asks.
    async fn opening(
        &self,
        rules: &Rules,
        request: &Request,
        name: &str,
        line: &mut Line,
        ends: Ends,
    ) -> Result<Option<opened::Plan>, Refused> {
        let port = request.target.port;
        if let Some(plain) = &request.plain {
            return match opened::plain_refusal(rules, name, port, &request.method, &plain.path) {
                Some(refused) => Err(refused),
                None => Ok(None),
            };
        }
        if !opened::is_opened(rules, name, port) {
            return Ok(None);
        }
        // Who asks is asked of the kernel only where the answer changes
        // what is added.
        let holder = match opened::same_for_both(rules, name, port) {
            true => Holder::Shell,
            false => self.holder(rules, ends, line).await?,
        };
        opened::plan(rules, self.opener.as_deref(), name, port, holder).map(Some)
    }

    /// Who asks, for an opened host's credentials: the runtime or shell
    /// (any other user of the machine counts as shell). Without a runtime
    /// to tell apart (the standalone proxy), everyone is shell.
    async fn holder(&self, rules: &Rules, ends: Ends, line: &Line) -> Result<Holder, Refused> {
        if line.runtime {
            return Ok(Holder::Runtime);
        }
        let Some(runtime) = &self.runtime else {
            return Ok(Holder::Shell);
        };
        if rules.runtime.is_some() {
            // Asked already for the runtime's list: not the runtime.
            return Ok(Holder::Shell);
        }
        match self.client_uid(runtime, ends).await {
            Some(uid) if uid == runtime.uid => Ok(Holder::Runtime),
            Some(_) => Ok(Holder::Shell),
            None => Err(Refused::new(
                Kind::UnknownAsker,
                "who asks could not be told, and the host's credential depends on it",
            )),
        }
    }

    /// The uid holding the client's end, asked of the kernel.
    async fn client_uid(&self, runtime: &Runtime, ends: Ends) -> Option<u32> {
        let (peer, local) = ends?;
        let client_uid = runtime.client_uid.clone();
        tokio::task::spawn_blocking(move || client_uid(peer, local))
            .await
            .ok()
            .flatten()
    }

    /// The line of a tunnel to an opened host: its request's method, path
    /// and status, the credential added, what was masked.
    fn record_opened(&self, mut line: Line, ended: opened::Ended, started: Instant) {
        let outcome = match ended {
            opened::Ended::Failed(refused) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return (self.record)(ProxyLine::Egress(line.refused(&refused, started)));
            }
            opened::Ended::Carried(outcome) => outcome,
        };
        line.carried_request(&outcome);
        let host = line.traffic().0;
        if let Some((provider, api, charged)) = &outcome.metered {
            let metered = crate::shared::spend::audit_line(provider, *api, charged, outcome.status);
            (self.record)(ProxyLine::ProviderRequest(payload::ProviderRequest {
                metered,
                origin: line.origin.clone(),
            }));
        }
        if outcome.masked > 0 {
            (self.record)(ProxyLine::CredentialEchoRemoved(
                payload::CredentialEchoRemoved {
                    host,
                    path: outcome.path.clone(),
                    count: outcome.masked,
                    origin: line.origin.clone(),
                },
            ));
        }
        let value = match &outcome.refused {
            Some(why) if outcome.ruled_out => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                line.refused(&Refused::new(Kind::RuleRefused, why.clone()), started)
            }
            _ => line.allowed(started),
        };
        (self.record)(ProxyLine::Egress(value));
    }

    /// Writes the refusal's line and answers the refused client (best
    /// effort: it may be gone).
    async fn refuse(
        &self,
        client: &mut TcpStream,
        line: &mut Line,
        r: Refused,
        started: Instant,
        origin: Option<Lookup>,
    ) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if line.runtime {
            self.runtime_traffic.refused(line.traffic().0);
        }
        // Who asked is settled while it waits for its answer, its socket
        // surely there: a refusal's line is counted by who asked.
        line.origin = settle(origin).await;
        // The line first: whoever was refused may read the log at once.
        (self.record)(ProxyLine::Egress(line.refused(&r, started)));
        let response = http::refusal_response(&r);
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            client.write_all(response.as_bytes()),
        )
        .await;
        let _ = client.shutdown().await;
    }
}

/// How the proxy reaches upstreams: its own resolver, or a VM's host
/// relay (vsock port, machine key), which resolves there.
enum Way {
    Direct(Box<TokioResolver>),
    HostRelay(u32, String),
}

/// A connection's origin, being looked up.
type Lookup = tokio::task::JoinHandle<Option<payload::Origin>>;
/// A connection's two ends: the client's, then the proxy's.
pub(super) type Ends = Option<(SocketAddr, SocketAddr)>;

/// The origin, once its lookup is done (None when there was none).
pub(super) async fn settle(origin: Option<Lookup>) -> Option<payload::Origin> {
    match origin {
        Some(lookup) => lookup.await.ok().flatten(),
        None => None,
    }
}
