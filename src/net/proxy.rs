//! The egress proxy: HTTP CONNECT and absolute-URI plain HTTP, on loopback
//! only, to the hosts on the machine's list and nowhere else.
//!
//! For each request it decides on the name first (the list), then resolves
//! the name itself (no NSS in a static binary: hickory reads
//! /etc/resolv.conf and /etc/hosts), refuses every resolved address that
//! is not an ordinary public one unless the policy lists it, and connects
//! to an address it checked: the name is never resolved a second time.
//! Every decision is one audit line.

use crate::confine::policy::{NetworkPolicy, PolicyError};
use crate::net::addr::{self, Cidr};
use crate::net::hosts::HostList;
use crate::net::target::{self, Host, Target};
use hickory_resolver::config::{LookupIpStrategy, ResolveHosts};
use hickory_resolver::TokioResolver;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most a request head may hold (request line and headers).
const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// How long a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
const BUFFER: usize = 64 * 1024;

/// Where audit lines go: warden's log, or stdout in the standalone mode.
pub type Recorder = Arc<dyn Fn(&str, Value) + Send + Sync>;

/// What the proxy may reach, as of the last good read of the policy.
#[derive(Debug)]
pub struct Rules {
    pub hosts: HostList,
    pub allow: Vec<Cidr>,
    /// "network.json" or "default": where the host list came from.
    pub from: &'static str,
}

impl Rules {
    /// None while the policy names no list and the default one is still
    /// being worked out (asking the machine's tools takes a second or two).
    pub fn new(
        policy: &NetworkPolicy,
        default_hosts: Option<&[String]>,
    ) -> Result<Option<Rules>, String> {
        let (list, from) = match (&policy.hosts, default_hosts) {
            (Some(list), _) => (list.as_slice(), "network.json"),
            (None, Some(defaults)) => (defaults, "default"),
            (None, None) => return Ok(None),
        };
        Ok(Some(Rules {
            hosts: HostList::parse(list, &policy.ports)?,
            allow: policy.allow_addresses.clone(),
            from,
        }))
    }
}

/// The default host list, filled in once by whoever works it out.
pub type Defaults = Arc<std::sync::OnceLock<Vec<String>>>;

/// What identifies a version of network.json: a change to any of these
/// means the file must be read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

fn file_key(path: &std::path::Path) -> Option<FileKey> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileKey {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

struct Loaded {
    key: Option<FileKey>,
    /// The last network policy that parsed.
    policy: NetworkPolicy,
    rules: Option<Arc<Rules>>,
}

pub struct Settings {
    pub policy_dir: PathBuf,
    pub max_tunnels: usize,
    pub idle: Duration,
    pub connect_timeout: Duration,
}

impl Settings {
    pub fn from_policy(policy: &NetworkPolicy, policy_dir: &std::path::Path) -> Settings {
        Settings {
            policy_dir: policy_dir.to_path_buf(),
            max_tunnels: policy.max_tunnels,
            idle: Duration::from_millis(policy.idle_timeout_ms),
            connect_timeout: Duration::from_millis(policy.connect_timeout_ms),
        }
    }
}

pub struct Proxy {
    settings: Settings,
    default_hosts: Defaults,
    loaded: Mutex<Loaded>,
    resolver: TokioResolver,
    record: Recorder,
    tunnels: Arc<Semaphore>,
    /// Connections carried and refused since start, for status.
    pub carried: AtomicU64,
    pub refused: AtomicU64,
}

impl Proxy {
    /// `policy` is the network policy read at boot; `default_hosts` the
    /// list used when it names none.
    pub fn new(
        settings: Settings,
        policy: &NetworkPolicy,
        default_hosts: Defaults,
        record: Recorder,
    ) -> Result<Proxy, String> {
        let rules = Rules::new(policy, default_hosts.get().map(Vec::as_slice))?;
        // A machine without a nameserver (a container with no network)
        // still gets its proxy: every name then fails to resolve, with
        // that reason, instead of every command being refused.
        let mut builder = TokioResolver::builder_tokio().unwrap_or_else(|e| {
            crate::say!("proxy: no nameserver from /etc/resolv.conf ({e}); names will not resolve");
            TokioResolver::builder_with_config(
                hickory_resolver::config::ResolverConfig::from_name_servers(Vec::new()),
                hickory_resolver::net::runtime::TokioRuntimeProvider::default(),
            )
        });
        let opts = builder.options_mut();
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.use_hosts_file = ResolveHosts::Always;
        let resolver = builder.build().map_err(|e| format!("resolver: {e}"))?;
        let key = file_key(&settings.policy_dir.join("network.json"));
        Ok(Proxy {
            tunnels: Arc::new(Semaphore::new(settings.max_tunnels)),
            settings,
            default_hosts,
            loaded: Mutex::new(Loaded {
                key,
                policy: policy.clone(),
                rules: rules.map(Arc::new),
            }),
            resolver,
            record,
            carried: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    fn path(&self) -> PathBuf {
        self.settings.policy_dir.join("network.json")
    }

    /// The rules for the next connection: network.json is read again when
    /// it changed. A file that no longer parses keeps the last good rules,
    /// and says why once per version of the file. None while the default
    /// list is not known yet.
    pub fn rules(&self) -> Option<Arc<Rules>> {
        let key = file_key(&self.path());
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if key != loaded.key {
            loaded.key = key;
            if let Err(e) = self.load(&mut loaded) {
                crate::say!("network policy not reloaded, the last good one holds: {e}");
            }
        }
        if loaded.rules.is_none() {
            let defaults = self.default_hosts.get().map(Vec::as_slice);
            if let Ok(Some(rules)) = Rules::new(&loaded.policy, defaults) {
                loaded.rules = Some(Arc::new(rules));
            }
        }
        loaded.rules.clone()
    }

    /// The rules, waiting (at most 15 s, at boot) for the default list.
    async fn wait_rules(&self) -> Option<Arc<Rules>> {
        for _ in 0..750 {
            if let Some(rules) = self.rules() {
                return Some(rules);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Reads network.json now (the API's `reload`); the answer says what
    /// holds.
    pub fn reload(&self) -> Result<Option<Arc<Rules>>, String> {
        {
            let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
            loaded.key = file_key(&self.path());
            self.load(&mut loaded)?;
        }
        Ok(self.rules())
    }

    fn load(&self, loaded: &mut Loaded) -> Result<(), String> {
        let parsed = NetworkPolicy::load(&self.settings.policy_dir)
            .map_err(|e: PolicyError| e.to_string())
            .and_then(|policy| {
                let rules = Rules::new(&policy, self.default_hosts.get().map(Vec::as_slice))?;
                Ok((policy, rules))
            });
        match parsed {
            Ok((policy, rules)) => {
                let hosts = rules.as_ref().map(|r| r.hosts.entries());
                (self.record)(
                    "policy_reload",
                    json!({"file": self.path(), "hosts_from": if policy.hosts.is_some() { "network.json" } else { "default" },
                           "hosts": hosts, "allow_addresses": policy.allow_addresses.iter().map(|c| c.to_string()).collect::<Vec<_>>()}),
                );
                loaded.policy = policy;
                loaded.rules = rules.map(Arc::new);
                Ok(())
            }
            Err(e) => {
                (self.record)(
                    "policy_reload_failed",
                    json!({"file": self.path(), "error": e, "kept": "the last good network policy"}),
                );
                Err(e)
            }
        }
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
        let mut decision = Decision::new(peer);
        let (head, request, upstream, _permit) = match self.admit(&mut client, &mut decision).await
        {
            Ok(Some(admitted)) => admitted,
            // Connected and closed without a word: the firewall probe.
            Ok(None) => return,
            Err(refusal) => {
                self.refuse(&mut client, &decision, refusal, started).await;
                return;
            }
        };
        self.carried.fetch_add(1, Ordering::Relaxed);
        let early = &head.bytes[head.len..];
        let moved = match &request.plain {
            None => self.tunnel(client, upstream, early).await,
            Some(plain) => self.forward(client, upstream, plain, early).await,
        };
        decision.up = moved.up;
        decision.down = moved.down;
        decision.status = moved.status;
        decision.end = moved.end;
        (self.record)("egress", decision.line(true, None, started));
    }

    /// Everything up to an open upstream connection: the request read and
    /// parsed, a tunnel slot taken, the target decided on and reached.
    async fn admit(
        &self,
        client: &mut TcpStream,
        decision: &mut Decision,
    ) -> Result<Option<(Head, Request, TcpStream, OwnedSemaphorePermit)>, Refusal> {
        let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(client)).await {
            Ok(Ok(Some(head))) => head,
            Ok(Ok(None)) => return Ok(None),
            Ok(Err(refusal)) => return Err(refusal),
            Err(_) => return Err(Refusal::new(408, "no complete request head within 10 s")),
        };
        let request = parse_request(&head.bytes)?;
        decision.method = request.method.clone();
        decision.target = Some(request.target.clone());
        let permit = self
            .tunnels
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal::new(503, "too many connections through the proxy at once"))?;
        let upstream = self.open(&request.target, decision).await?;
        Ok(Some((head, request, upstream, permit)))
    }

    /// Decides on the name, resolves it, checks each address, and connects
    /// to the first that passes.
    async fn open(&self, t: &Target, decision: &mut Decision) -> Result<TcpStream, Refusal> {
        let Some(rules) = self.wait_rules().await else {
            return Err(Refusal::new(503, "the default host list is not known yet"));
        };
        let name = match &t.host {
            Host::Ip(_) => {
                return Err(Refusal::new(
                    403,
                    "an IP address as the target: the proxy reaches hosts by name",
                ))
            }
            Host::Name(name) => name,
        };
        match rules.hosts.allowing(name, t.port) {
            Some(entry) => decision.entry = Some(entry.to_string()),
            None => {
                return Err(Refusal::new(
                    403,
                    format!("{name}:{} is not on the host list", t.port),
                ))
            }
        }
        let found =
            match tokio::time::timeout(RESOLVE_TIMEOUT, self.resolver.lookup_ip(name.as_str()))
                .await
            {
                Ok(Ok(found)) => found.iter().collect::<Vec<IpAddr>>(),
                Ok(Err(e)) => return Err(Refusal::new(502, format!("cannot resolve {name}: {e}"))),
                Err(_) => {
                    return Err(Refusal::new(
                        504,
                        format!("resolving {name} took over 10 s"),
                    ))
                }
            };
        decision.resolved = found.clone();
        let mut last_refusal = None;
        let mut last_error = None;
        for ip in found {
            if let Err(r) = addr::check(ip, &rules.allow) {
                last_refusal = Some(format!("{name} resolves to {ip}, a {r} address"));
                continue;
            }
            let to = SocketAddr::new(ip, t.port);
            match tokio::time::timeout(self.settings.connect_timeout, TcpStream::connect(to)).await
            {
                Ok(Ok(stream)) => {
                    decision.address = Some(to);
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Ok(Err(e)) => last_error = Some(format!("connect to {to}: {e}")),
                Err(_) => last_error = Some(format!("connect to {to}: timed out")),
            }
        }
        Err(match (last_error, last_refusal) {
            (Some(e), _) => Refusal::new(502, e),
            (None, Some(r)) => Refusal::new(403, r),
            (None, None) => Refusal::new(502, format!("{name} has no address")),
        })
    }

    async fn tunnel(&self, mut client: TcpStream, mut upstream: TcpStream, early: &[u8]) -> Moved {
        let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
        if client.write_all(established).await.is_err() {
            return Moved::ended("client gone");
        }
        if !early.is_empty() && upstream.write_all(early).await.is_err() {
            return Moved::ended("upstream gone");
        }
        let mut moved = relay(client, upstream, self.settings.idle).await;
        moved.up += early.len() as u64;
        moved.status = Some(200);
        moved
    }

    async fn forward(
        &self,
        mut client: TcpStream,
        mut upstream: TcpStream,
        plain: &Plain,
        early: &[u8],
    ) -> Moved {
        if upstream.write_all(&plain.head).await.is_err() {
            return Moved::ended("upstream gone");
        }
        // Exactly the declared body is carried: whatever follows it (a
        // second, pipelined request, perhaps for another host) is not.
        let mut body_left = plain.body_len;
        let first = early.len().min(body_left as usize);
        if upstream.write_all(&early[..first]).await.is_err() {
            return Moved::ended("upstream gone");
        }
        body_left -= first as u64;
        let (mut client_read, mut client_write) = client.split();
        let (mut up_read, mut up_write) = upstream.split();
        let idle = self.settings.idle;
        let send_body = async {
            let sent = copy_limited(&mut client_read, &mut up_write, body_left, idle).await;
            let _ = up_write.shutdown().await;
            sent
        };
        let receive = copy_all(&mut up_read, &mut client_write, idle);
        let (sent, received) = tokio::join!(send_body, receive);
        let _ = client_write.shutdown().await;
        Moved {
            up: plain.head.len() as u64 + first as u64 + sent,
            down: received.0,
            status: None,
            end: received.1,
        }
    }

    async fn refuse(
        &self,
        client: &mut TcpStream,
        decision: &Decision,
        r: Refusal,
        started: Instant,
    ) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let body = format!("warden: refused: {}\n", r.reason);
        // The reason goes in a header too, made safe for one: a reason
        // quotes the client's own words, which must not end the header.
        let header: String = r
            .reason
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        let response = format!(
            "HTTP/1.1 {} {}\r\nWarden-Reason: {header}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            r.status,
            reason_phrase(r.status),
            body.len()
        );
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            client.write_all(response.as_bytes()),
        )
        .await;
        let _ = client.shutdown().await;
        let mut line = decision.line(false, Some(&r.reason), started);
        line["status"] = r.status.into();
        (self.record)("egress", line);
    }
}

/// An HTTP refusal: the status and the reason (for the client, in a
/// `Warden-Reason` header and the body, and for the audit line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub reason: String,
}

impl Refusal {
    fn new(status: u16, reason: impl Into<String>) -> Refusal {
        Refusal {
            status,
            reason: reason.into(),
        }
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Refused",
    }
}

/// What one audit line says of a connection.
struct Decision {
    peer: SocketAddr,
    method: String,
    target: Option<Target>,
    entry: Option<String>,
    resolved: Vec<IpAddr>,
    address: Option<SocketAddr>,
    up: u64,
    down: u64,
    status: Option<u16>,
    end: &'static str,
}

impl Decision {
    fn new(peer: SocketAddr) -> Decision {
        Decision {
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
        }
    }

    fn line(&self, allowed: bool, reason: Option<&str>, started: Instant) -> Value {
        let (host, port) = match &self.target {
            Some(t) => (
                Some(match &t.host {
                    Host::Name(n) => n.clone(),
                    Host::Ip(ip) => ip.to_string(),
                }),
                Some(t.port),
            ),
            None => (None, None),
        };
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
        if let Some(reason) = reason {
            line["reason"] = reason.into();
        }
        if let Some(status) = self.status {
            line["status"] = status.into();
        }
        if !self.end.is_empty() {
            line["end"] = self.end.into();
        }
        line
    }
}

struct Head {
    bytes: Vec<u8>,
    /// Where the head ends (after the blank line); what follows is early
    /// payload the client sent without waiting.
    len: usize,
}

/// Reads up to the end of the request head. None: the client closed
/// without sending anything.
async fn read_head(client: &mut TcpStream) -> Result<Option<Head>, Refusal> {
    let mut bytes = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|e| Refusal::new(400, format!("reading the request: {e}")))?;
        if n == 0 {
            if bytes.is_empty() {
                return Ok(None);
            }
            return Err(Refusal::new(400, "the request head was cut short"));
        }
        // Only the new bytes (and the three before them) can complete the
        // blank line.
        let from = bytes.len().saturating_sub(3);
        bytes.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&bytes[from..], b"\r\n\r\n") {
            let len = from + end + 4;
            if len > MAX_HEAD {
                break;
            }
            return Ok(Some(Head { bytes, len }));
        }
        if bytes.len() > MAX_HEAD {
            break;
        }
    }
    Err(Refusal::new(431, "the request head is over 16 KiB"))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A request the proxy understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub target: Target,
    /// None for CONNECT; for plain HTTP, what to send upstream.
    pub plain: Option<Plain>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plain {
    /// The request head for the origin server: origin-form target, the
    /// client's headers without hop-by-hop ones, `Connection: close`.
    pub head: Vec<u8>,
    pub body_len: u64,
}

/// Headers that concern only the hop to the proxy, never sent on.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Pure: parses and checks a request head. Malformed targets, a Host
/// header that disagrees with the request line, and bodies the proxy would
/// have to re-frame are refused.
pub fn parse_request(head: &[u8]) -> Result<Request, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(Refusal::new(400, "incomplete request head")),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Refusal::new(431, "over 64 header fields"))
        }
        Err(e) => return Err(Refusal::new(400, format!("malformed request: {e}"))),
    }
    let method = req.method.unwrap_or_default().to_string();
    let path = req.path.unwrap_or_default();
    let bad =
        |e: target::TargetError| Refusal::new(400, format!("bad target {}: {e}", printable(path)));
    let mut host_header = None;
    let mut body_len = 0u64;
    let mut lengths = 0;
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| Refusal::new(400, format!("header {} is not UTF-8", printable(h.name))))?;
        if h.name.eq_ignore_ascii_case("host") {
            if host_header.is_some() {
                return Err(Refusal::new(400, "more than one Host header"));
            }
            host_header = Some(value.trim().to_string());
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Refusal::new(
                411,
                "a request body without Content-Length is not carried; use HTTPS (CONNECT)",
            ));
        } else if h.name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            body_len =
                content_length(value).ok_or_else(|| Refusal::new(400, "bad Content-Length"))?;
        }
    }
    if lengths > 1 {
        return Err(Refusal::new(400, "more than one Content-Length"));
    }
    if method == "CONNECT" {
        let target = target::parse_authority(path).map_err(bad)?;
        check_host_header(host_header.as_deref(), &target, target.port)?;
        return Ok(Request {
            method,
            target,
            plain: None,
        });
    }
    if path.starts_with('/') {
        return Err(Refusal::new(
            400,
            "not a proxy request: the target must be an absolute http:// URI, or use CONNECT",
        ));
    }
    let (target, origin) = target::parse_absolute_uri(path).map_err(bad)?;
    check_host_header(host_header.as_deref(), &target, 80)?;
    let mut out = format!("{method} {origin} HTTP/1.1\r\n").into_bytes();
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&name.as_str()) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    if host_header.is_none() {
        out.extend_from_slice(format!("Host: {}\r\n", host_value(&target)).as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Request {
        method,
        target,
        plain: Some(Plain {
            head: out,
            body_len,
        }),
    })
}

fn host_value(t: &Target) -> String {
    match (&t.host, t.port) {
        (Host::Name(n), 80) => n.clone(),
        (Host::Ip(IpAddr::V6(ip)), 80) => format!("[{ip}]"),
        (Host::Ip(ip), 80) => ip.to_string(),
        _ => t.to_string(),
    }
}

/// Pure: a Content-Length value, digits only (no sign, no inner space).
fn content_length(value: &str) -> Option<u64> {
    let v = value.trim_matches([' ', '\t']);
    match !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        true => v.parse().ok(),
        false => None,
    }
}

/// A Host header, when there is one, must name the target of the request
/// line: else the origin might serve another host than the one checked.
fn check_host_header(header: Option<&str>, t: &Target, default_port: u16) -> Result<(), Refusal> {
    let Some(value) = header else { return Ok(()) };
    let said = target::parse_host_header(value, default_port)
        .map_err(|e| Refusal::new(400, format!("bad Host header {}: {e}", printable(value))))?;
    if said != *t {
        return Err(Refusal::new(
            400,
            format!(
                "the Host header ({}) disagrees with the request line ({t})",
                said
            ),
        ));
    }
    Ok(())
}

/// The client's text, cut and made printable for a reason.
fn printable(s: &str) -> String {
    let cut: String = s.chars().take(200).collect();
    cut.escape_debug().to_string()
}

#[derive(Debug, Default)]
struct Moved {
    up: u64,
    down: u64,
    status: Option<u16>,
    end: &'static str,
}

impl Moved {
    fn ended(end: &'static str) -> Moved {
        Moved {
            end,
            ..Moved::default()
        }
    }
}

/// Milliseconds since `origin`, for the shared idle clock.
fn now_ms(origin: Instant) -> u64 {
    origin.elapsed().as_millis() as u64
}

/// Carries bytes both ways until both sides are done or the tunnel has
/// been idle (no byte either way) for `idle`. The bytes never enter
/// warden: each direction splices socket to pipe to socket in the kernel.
async fn relay(client: TcpStream, upstream: TcpStream, idle: Duration) -> Moved {
    let origin = Instant::now();
    let last = AtomicU64::new(0);
    let up = splice_pump(&client, &upstream, idle, origin, &last);
    let down = splice_pump(&upstream, &client, idle, origin, &last);
    let ((up, up_end), (down, down_end)) = tokio::join!(up, down);
    let end = if up_end == "idle" || down_end == "idle" {
        "idle"
    } else if up_end != "eof" {
        up_end
    } else {
        down_end
    };
    Moved {
        up,
        down,
        status: None,
        end,
    }
}

/// How much one splice may move: a large pipe means fewer wake-ups.
const PIPE_SIZE: usize = 1 << 20;

/// One direction of a tunnel. It gives up when the whole tunnel (not just
/// this direction) has been idle for `idle`.
async fn splice_pump(
    from: &TcpStream,
    to: &TcpStream,
    idle: Duration,
    origin: Instant,
    last: &AtomicU64,
) -> (u64, &'static str) {
    use nix::fcntl::{splice, SpliceFFlags};
    use tokio::io::Interest;
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    let Ok((pipe_out, pipe_in)) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
    else {
        return (0, "no pipe");
    };
    // A bigger pipe where allowed; the default (64 KiB) works too.
    let _ = nix::fcntl::fcntl(
        pipe_in.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as i32),
    );
    let idle_ms = idle.as_millis() as u64;
    let mut total = 0u64;
    let end = loop {
        let quiet = now_ms(origin).saturating_sub(last.load(Ordering::Relaxed));
        let wait = Duration::from_millis(idle_ms.saturating_sub(quiet).max(1));
        match tokio::time::timeout(wait, from.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break "reset",
            Err(_) => {
                let quiet = now_ms(origin).saturating_sub(last.load(Ordering::Relaxed));
                if quiet >= idle_ms {
                    break "idle";
                }
                continue;
            }
        }
        let filled = from.try_io(Interest::READABLE, || {
            Ok(splice(from, None, &pipe_in, None, PIPE_SIZE, flags)?)
        });
        let mut in_pipe = match filled {
            Ok(0) => break "eof",
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => break "reset",
        };
        last.store(now_ms(origin), Ordering::Relaxed);
        while in_pipe > 0 {
            if to.writable().await.is_err() {
                return (total, "reset");
            }
            let drained = to.try_io(Interest::WRITABLE, || {
                Ok(splice(&pipe_out, None, to, None, in_pipe, flags)?)
            });
            match drained {
                Ok(n) => {
                    in_pipe -= n;
                    total += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return (total, "reset"),
            }
        }
    };
    // Pass the end on: the other side sees end of file, as it would
    // have without the proxy.
    let _ = nix::sys::socket::shutdown(to.as_raw_fd(), nix::sys::socket::Shutdown::Write);
    (total, end)
}

/// Copies at most `limit` bytes (a plain request's body).
async fn copy_limited<R, W>(from: &mut R, to: &mut W, limit: u64, idle: Duration) -> u64
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER];
    let mut left = limit;
    while left > 0 {
        let want = buf.len().min(left as usize);
        match tokio::time::timeout(idle, from.read(&mut buf[..want])).await {
            Ok(Ok(n)) if n > 0 => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                left -= n as u64;
            }
            _ => break,
        }
    }
    limit - left
}

/// Copies until end of file (a plain request's response).
async fn copy_all<R, W>(from: &mut R, to: &mut W, idle: Duration) -> (u64, &'static str)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER];
    let mut total = 0u64;
    loop {
        match tokio::time::timeout(idle, from.read(&mut buf)).await {
            Ok(Ok(0)) => return (total, "eof"),
            Ok(Ok(n)) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return (total, "reset");
                }
                total += n as u64;
            }
            Ok(Err(_)) => return (total, "reset"),
            Err(_) => return (total, "idle"),
        }
    }
}

/// Binds the proxy on loopback: 127.0.0.1 always, ::1 when this machine
/// has an IPv6 loopback. Returns the listeners and what could not be bound.
pub fn bind(port: u16) -> Result<(Vec<std::net::TcpListener>, Option<String>), String> {
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let first = std::net::TcpListener::bind(v4).map_err(|e| format!("proxy on {v4}: {e}"))?;
    first
        .set_nonblocking(true)
        .map_err(|e| format!("proxy on {v4}: {e}"))?;
    let mut listeners = vec![first];
    let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    let missing = match std::net::TcpListener::bind(v6) {
        Ok(l) => {
            let _ = l.set_nonblocking(true);
            listeners.push(l);
            None
        }
        Err(e) => Some(format!("proxy on {v6}: {e}")),
    };
    Ok((listeners, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> Result<Request, Refusal> {
        parse_request(text.as_bytes())
    }

    #[test]
    fn requests_table() {
        type Case<'a> = (&'a str, Result<&'a str, (u16, &'a str)>);
        let cases: &[Case] = &[
            ("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", Ok("example.com:443")),
            ("CONNECT example.com:443 HTTP/1.1\r\n\r\n", Ok("example.com:443")),
            ("CONNECT EXAMPLE.com.:443 HTTP/1.1\r\n\r\n", Ok("example.com:443")),
            ("CONNECT example.com:443 HTTP/1.1\r\nHost: other.example:443\r\n\r\n", Err((400, "disagrees"))),
            // A Host without a port agrees with CONNECT's (as clients send it).
            ("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", Ok("example.com:443")),
            ("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:80\r\n\r\n", Err((400, "disagrees"))),
            ("CONNECT example.com HTTP/1.1\r\n\r\n", Err((400, "bad target"))),
            ("CONNECT 2130706433:443 HTTP/1.1\r\n\r\n", Err((400, "bad target"))),
            ("CONNECT user@example.com:443 HTTP/1.1\r\n\r\n", Err((400, "bad target"))),
            ("CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", Err((400, "bad target"))),
            ("GET http://example.com/a?b HTTP/1.1\r\nHost: example.com\r\n\r\n", Ok("example.com:80")),
            ("GET http://example.com:8080/ HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", Ok("example.com:8080")),
            ("GET http://example.com/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", Err((400, "disagrees"))),
            ("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nHost: example.com\r\n\r\n", Err((400, "more than one Host"))),
            ("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", Err((400, "not a proxy request"))),
            ("GET https://example.com/ HTTP/1.1\r\n\r\n", Err((400, "bad target"))),
            ("POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", Err((411, "Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", Err((400, "more than one Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", Err((400, "bad Content-Length"))),
            // Only digits: a sign or a space inside is read otherwise by
            // other servers (request smuggling).
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n", Err((400, "bad Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", Err((400, "bad Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", Err((400, "bad Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: \r\n\r\n", Err((400, "bad Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", Err((400, "bad Content-Length"))),
            ("GET http://exa\0mple.com/ HTTP/1.1\r\n\r\n", Err((400, ""))),
            ("GARBAGE\r\n\r\n", Err((400, "malformed"))),
        ];
        for (text, want) in cases {
            match (req(text), want) {
                (Ok(r), Ok(t)) => assert_eq!(r.target.to_string(), *t, "{text:?}"),
                (Err(r), Err((status, reason))) => {
                    assert_eq!(r.status, *status, "{text:?}: {r:?}");
                    assert!(r.reason.contains(reason), "{text:?}: {r:?}");
                }
                (got, want) => panic!("{text:?}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn plain_requests_go_upstream_in_origin_form() {
        let r = req("GET http://example.com/a?b HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nAccept: */*\r\nContent-Length: 3\r\n\r\n").unwrap();
        let plain = r.plain.unwrap();
        let head = String::from_utf8(plain.head).unwrap();
        assert_eq!(
            head,
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(plain.body_len, 3);
        // No Host header: one is written from the target.
        let r = req("GET http://example.com:8080/ HTTP/1.0\r\n\r\n").unwrap();
        let head = String::from_utf8(r.plain.unwrap().head).unwrap();
        assert!(head.contains("Host: example.com:8080\r\n"), "{head}");
    }
}
