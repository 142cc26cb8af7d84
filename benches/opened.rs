//! Opened hosts against a plain tunnel, a direct TLS connection and
//! mitmproxy, measured side by side in one run: download throughput of a
//! large body over HTTPS, time to first byte of a small one, and each
//! proxy's CPU time per GiB it carried; on loopback, then with the origin
//! behind a veth link shaped to 1 Gbit/s (`link`, as the proxy bench's).
//!
//! Everything runs in network and mount namespaces the bench makes (it
//! runs itself again inside them): the origin is a TLS server in this
//! process (a test authority of its own, names in a hosts file bound over
//! /etc/hosts there), the client is curl, and the proxies are `warden
//! proxy --opened-ca` (one process: a plain tunnel for `origin.*`, an
//! opened host with a credential added and its echo masked for
//! `opened.*`) and mitmdump (streaming, with an addon that adds the same
//! credential and masks it in what comes back). Root only.
//!
//! And the metered path (a model provider's host) against the opened one
//! without metering, the same streamed answer through both (`metered`).
//!
//! `cargo bench --bench opened [-- throughput|ttfb|shaped|metered]` (see
//! docs/benchmarks.md).

mod link;
#[path = "opened/metered.rs"]
mod metered;
mod timing;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use timing::{interleaved_with, us, Stats};

/// The argument that runs the bench inside its namespaces.
const INSIDE: &str = "opened-inside";
const PARTS: [&str; 4] = ["throughput", "ttfb", "shaped", "metered"];
/// On loopback: each contender downloads LOOP_BYTES, LOOP_ROUNDS times.
const LOOP_BYTES: u64 = 1 << 30;
const LOOP_ROUNDS: usize = 3;
/// On the shaped link (1 Gbit/s: about 4.5 s a download).
const LINK_BYTES: u64 = 512 << 20;
const LINK_ROUNDS: usize = 3;
const RATE: (&str, u64) = ("1gbit", 1_000_000_000);
/// Fresh connections per contender for the first byte, and its body.
const TTFB_RUNS: usize = 200;
const TTFB_BYTES: u64 = 1024;
/// The longest one curl may take (a download at 10 MB/s would still end).
const CURL_LIMIT: &str = "300";
/// The credential both proxies add; its echo must come back masked.
const KEY: &str = "BENCH_TOKEN";
const SECRET: &str = "wdn-bench-s3cr3t-5e7a1c9b3d2f4a68";
/// The origin's port on both sides, and its names: `origin.*` goes through
/// plain tunnels (and directly), `opened.*` is opened by warden; `*.bench`
/// is the origin on loopback, `*.link` the one behind the shaped link.
const PORT: u16 = 443;
const NAMES: [&str; 4] = ["origin.bench", "opened.bench", "origin.link", "opened.link"];
/// Bytes per write of the origin.
const CHUNK: usize = 256 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        return; // cargo bench asks benches to list themselves
    }
    let parts: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| PARTS.contains(a))
        .collect();
    if args.iter().any(|a| a == INSIDE) {
        return inside(&parts);
    }
    // Another bench's filter (scripts/bench passes the same to each).
    if parts.is_empty() && args.iter().any(|a| !a.starts_with('-')) {
        println!(
            "opened hosts: nothing asked (its parts: {})",
            PARTS.join(", ")
        );
        return;
    }
    for (tool, why) in [
        ("curl", "the client"),
        ("unshare", "the bench's namespaces (util-linux)"),
        ("ip", "the shaped link (iproute2)"),
        ("tc", "the shaped link (iproute2)"),
        ("nsenter", "the shaped link (util-linux)"),
    ] {
        if which(tool).is_none() {
            println!("\nopened hosts: skipped: no {tool} ({why})");
            return;
        }
    }
    let mut all = vec![INSIDE];
    all.extend(&parts);
    link::unshared(&all, "opened hosts");
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

// ---------------------------------------------------------------------------
// The origin: HTTPS with a test authority of the bench's own. `GET
// /bytes/N` answers N bytes with a Content-Length (`?chunked`: chunked);
// the body begins with the Authorization the request came with (an echo:
// the proxies must mask it), then text that looks like base64. `POST
// /v1/messages` answers a stream of events (`metered`).

struct Authority {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

fn authority() -> Authority {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "warden bench origin authority");
    let key = KeyPair::generate().unwrap();
    let ca = params.self_signed(&key).unwrap();
    let issuer = Issuer::new(params, key);
    let names: Vec<String> = NAMES
        .iter()
        .chain(&metered::NAMES)
        .map(|n| n.to_string())
        .collect();
    let mut leaf = CertificateParams::new(names).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "origin.bench");
    let leaf_key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Authority {
        ca_pem: ca.pem(),
        server: Arc::new(server),
    }
}

/// Serves HTTPS on `listener` for ever, from this thread (and the
/// runtime's, which share its network namespace).
fn run_origin(listener: TcpListener, tls: Arc<rustls::ServerConfig>) {
    listener.set_nonblocking(true).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_io()
        .build()
        .unwrap();
    let filler = Arc::new(filler());
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let filler = filler.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                if let Err(e) = serve(tls, &filler).await {
                    eprintln!("origin: {e}");
                }
            });
        }
    });
}

/// CHUNK bytes of text that looks like base64 (what an API's answers
/// are made of more than zeros are), from a fixed seed.
fn filler() -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..CHUNK)
        .map(|i| {
            if i % 77 == 76 {
                return b'\n';
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x % 64) as usize]
        })
        .collect()
}

async fn serve<S>(mut s: S, filler: &[u8]) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > 64 * 1024 {
            return Err(std::io::Error::other("request head too long"));
        }
        match s.read(&mut buf).await? {
            0 => return Ok(()),
            n => head.extend_from_slice(&buf[..n]),
        }
    }
    let end = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let rest = head.split_off(end);
    let head = String::from_utf8_lossy(&head).into_owned();
    if head.starts_with("POST /v1/messages ") {
        return metered::messages(&mut s, &head, rest).await;
    }
    let target = head.split_whitespace().nth(1).unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let Some(n) = path
        .strip_prefix("/bytes/")
        .and_then(|n| n.parse::<u64>().ok())
    else {
        let answer = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        s.write_all(answer.as_bytes()).await?;
        return s.shutdown().await;
    };
    let chunked = query == "chunked";
    let authorization = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("authorization")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| "none".into());
    let framing = match chunked {
        true => "Transfer-Encoding: chunked".to_string(),
        false => format!("Content-Length: {n}"),
    };
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{framing}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(answer.as_bytes()).await?;
    let mut first = format!("authorization: {authorization}\n").into_bytes();
    first.extend_from_slice(filler);
    first.truncate(CHUNK);
    let mut left = n;
    let mut piece: &[u8] = &first;
    while left > 0 {
        let k = left.min(piece.len() as u64) as usize;
        if chunked {
            s.write_all(format!("{k:x}\r\n").as_bytes()).await?;
            s.write_all(&piece[..k]).await?;
            s.write_all(b"\r\n").await?;
        } else {
            s.write_all(&piece[..k]).await?;
        }
        left -= k as u64;
        piece = filler;
    }
    if chunked {
        s.write_all(b"0\r\n\r\n").await?;
    }
    s.shutdown().await
}

// ---------------------------------------------------------------------------
// The proxies.

struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn spawn(name: &str, command: &mut Command, log: PathBuf) -> Proc {
        let child = command
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::options().append(true).open(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        Proc {
            name: name.into(),
            child,
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (10 s at most) for `ready`, failing with the log if it exits.
    fn wait_ready(&mut self, ready: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready() {
            if let Some(st) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited at start ({st}); its log:\n{}",
                    self.name,
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} was not ready after 10 s; its log:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Panics, with the log, if it has exited.
    fn check(&mut self) {
        if let Some(st) = self.child.try_wait().unwrap() {
            panic!("{} exited ({st}); its log:\n{}", self.name, self.log());
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `warden proxy`, opening `opened.*` with the credential and tunnelling
/// `origin.*`; its authority's certificate is written to `ca`.
fn warden(dir: &Path, origin_ca: &Path, ca: &Path) -> (Proc, u16) {
    let bin = env!("CARGO_BIN_EXE_warden");
    let policy = dir.join("warden-policy");
    let audit = dir.join("warden-audit");
    std::fs::create_dir_all(&policy).unwrap();
    std::fs::create_dir_all(&audit).unwrap();
    let hosts: Vec<String> = NAMES.iter().map(|n| format!("{n}:{PORT}")).collect();
    let credentials: Vec<serde_json::Value> = NAMES
        .iter()
        .filter(|n| n.starts_with("opened."))
        .map(|n| serde_json::json!({"host": format!("{n}:{PORT}"), "key": KEY, "for": ["shell"]}))
        .collect();
    let mut network = serde_json::json!({
        "hosts": hosts,
        "allow_addresses": ["127.0.0.1/32", link::LINK],
        "upstream_ca": [origin_ca],
        "credentials": credentials,
    });
    metered::policy(&mut network, &policy, PORT);
    std::fs::write(policy.join("network.json"), network.to_string()).unwrap();
    let values = dir.join("credentials.env");
    let text = format!("{KEY}={SECRET}\n{}={}\n", metered::KEY, metered::SECRET);
    std::fs::write(&values, text).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut p = Proc::spawn(
        "warden proxy",
        Command::new(bin)
            .args(["proxy", "--listen", &listen, "--policy-dir"])
            .arg(&policy)
            .arg("--audit-dir")
            .arg(&audit)
            .arg("--opened-ca")
            .arg(ca)
            .arg("--credentials")
            .arg(&values),
        dir.join("warden.log"),
    );
    let line = format!("warden: proxy listening on {listen}");
    let log = p.log.clone();
    p.wait_ready(|| std::fs::read_to_string(&log).is_ok_and(|l| l.contains(&line)));
    (p, port)
}

/// mitmdump, streaming every answer through an addon that adds the same
/// credential to `origin.*` and masks it in what comes back; its
/// authority's certificate is written in `dir`. None (having said why)
/// when mitmproxy is not installed.
fn mitmproxy(dir: &Path, origin_ca: &Path) -> Option<(Proc, u16, PathBuf, String)> {
    let bin = std::env::var_os("MITMDUMP")
        .map(PathBuf::from)
        .or_else(|| which("mitmdump"));
    let Some(bin) = bin else {
        println!(
            "mitmproxy: skipped: no mitmdump on PATH (`python3 -m pip install mitmproxy`, or MITMDUMP=path)"
        );
        return None;
    };
    let version = Command::new(&bin).arg("--version").output().ok()?;
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|v| format!("mitmproxy {v}"))
        .unwrap_or_else(|| "mitmproxy".into());
    let addon = dir.join("credential.py");
    std::fs::write(
        &addon,
        r#"# The credential warden's opened host adds, added by mitmproxy: the
# header on each request to the bench's tunnelled origin, and the secret
# masked in each answer as it streams (the raw form only, and only within
# a piece: warden masks eight forms, across pieces).
import os

SECRET = os.environ["BENCH_SECRET"].encode()
MASK = b"*" * len(SECRET)


def requestheaders(flow):
    if flow.request.pretty_host.startswith("origin."):
        flow.request.headers["Authorization"] = "Bearer " + SECRET.decode()
        flow.request.headers["Accept-Encoding"] = "identity"


def responseheaders(flow):
    flow.response.stream = lambda chunk: chunk.replace(SECRET, MASK)
"#,
    )
    .unwrap();
    let confdir = dir.join("mitmproxy");
    let port = free_port();
    let mut p = Proc::spawn(
        &version,
        Command::new(&bin)
            .args(["-q", "--listen-host", "127.0.0.1", "--listen-port"])
            .arg(port.to_string())
            .arg("--set")
            .arg(format!("confdir={}", confdir.display()))
            .arg("--set")
            .arg(format!(
                "ssl_verify_upstream_trusted_ca={}",
                origin_ca.display()
            ))
            .args(["--set", "stream_large_bodies=1m", "-s"])
            .arg(&addon)
            .env("BENCH_SECRET", SECRET),
        dir.join("mitmproxy.log"),
    );
    let ca = confdir.join("mitmproxy-ca-cert.pem");
    let at = SocketAddr::from(([127, 0, 0, 1], port));
    p.wait_ready(|| ca.exists() && TcpStream::connect(at).is_ok());
    Some((p, port, ca, version))
}

// ---------------------------------------------------------------------------
// The contenders: how curl reaches the origin.

#[derive(Clone)]
struct Contender {
    name: String,
    /// The proxy's port on 127.0.0.1; None: straight to the origin.
    proxy: Option<u16>,
    /// The origin's name on loopback and behind the link.
    names: [&'static str; 2],
    /// After the path: `?chunked` for a chunked answer.
    query: &'static str,
    /// The proxy's process, for its CPU time (None: no proxy).
    pid: Option<u32>,
    /// Whether the origin's echo of the credential must come back masked
    /// (a proxy added it), else as "none".
    adds: bool,
}

/// What curl said of one request.
struct Got {
    bytes: u64,
    /// Bytes a second over the whole transfer.
    speed: f64,
    first_byte: Duration,
}

impl Contender {
    /// curl fetches `/bytes/N` into `out` and says how it went.
    fn get(&self, bundle: &Path, linked: bool, n: u64, out: &Path) -> Got {
        let url = format!(
            "https://{}/bytes/{n}{}",
            self.names[linked as usize], self.query
        );
        let mut curl = Command::new("curl");
        curl.args(["-sS", "--fail", "--http1.1", "--max-time", CURL_LIMIT])
            .arg("--cacert")
            .arg(bundle)
            .arg("-o")
            .arg(out)
            .args([
                "-w",
                "%{size_download} %{speed_download} %{time_starttransfer}",
            ]);
        for var in ["http_proxy", "https_proxy", "all_proxy", "no_proxy"] {
            curl.env_remove(var).env_remove(var.to_uppercase());
        }
        match self.proxy {
            Some(port) => curl.arg("--proxy").arg(format!("http://127.0.0.1:{port}")),
            None => curl.args(["--noproxy", "*"]),
        };
        let done = curl.arg(&url).stdin(Stdio::null()).output().unwrap();
        let said = String::from_utf8_lossy(&done.stdout);
        assert!(
            done.status.success(),
            "{}: curl {url}: {}: {said} {}",
            self.name,
            done.status,
            String::from_utf8_lossy(&done.stderr)
        );
        let fields: Vec<&str> = said.split_whitespace().collect();
        let number = |i: usize| -> f64 {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("{}: curl said {said:?}", self.name))
        };
        let got = Got {
            bytes: number(0) as u64,
            speed: number(1),
            first_byte: Duration::from_secs_f64(number(2)),
        };
        assert_eq!(got.bytes, n, "{}: {url}: short", self.name);
        got
    }

    /// One small request, its body read: the echo masked if a proxy added
    /// the credential, and the secret nowhere.
    fn check(&self, bundle: &Path, linked: bool, dir: &Path) {
        let out = dir.join("check.body");
        self.get(bundle, linked, 4096, &out);
        let body = std::fs::read(&out).unwrap();
        let first = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        let first = first.lines().next().unwrap_or("");
        let expected = match self.adds {
            true => format!("authorization: Bearer {}", "*".repeat(SECRET.len())),
            false => "authorization: none".to_string(),
        };
        assert_eq!(first, expected, "{}: the origin's echo", self.name);
        assert!(
            !String::from_utf8_lossy(&body).contains(SECRET),
            "{}: the secret came back",
            self.name
        );
    }

    fn ticks(&self) -> Option<u64> {
        link::cpu_ticks(self.pid?)
    }
}

// ---------------------------------------------------------------------------
// Measuring and printing.

/// CPU seconds so far: the proxy's (None: no proxy), curl's (the
/// children waited for), the origin's (this process: its main thread only
/// waits for curl meanwhile).
fn cpu(c: &Contender) -> [Option<f64>; 3] {
    use nix::sys::resource::{getrusage, UsageWho};
    let seconds = |who| {
        let u = getrusage(who).ok()?;
        let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
        Some(t(u.user_time()) + t(u.system_time()))
    };
    [
        c.ticks().map(|t| t as f64 / link::ticks_per_second()),
        seconds(UsageWho::RUSAGE_CHILDREN),
        seconds(UsageWho::RUSAGE_SELF),
    ]
}

/// Throughput and CPU time of `rounds` downloads of `bytes` each,
/// contenders in turn (each round one further on).
struct Carried {
    /// MB/s (10^6 bytes) of each download.
    speeds: Vec<Vec<f64>>,
    /// CPU seconds per GiB carried: the proxy's, the client's, the
    /// origin's (as `cpu`).
    cpu_per_gib: Vec<[Option<f64>; 3]>,
}

fn carry(cs: &[Contender], bundle: &Path, linked: bool, bytes: u64, rounds: usize) -> Carried {
    let mut speeds = vec![Vec::new(); cs.len()];
    let mut spent = vec![[Some(0f64); 3]; cs.len()];
    for round in 0..rounds {
        for k in 0..cs.len() {
            let i = (round + k) % cs.len();
            let c = &cs[i];
            let before = cpu(c);
            let got = c.get(bundle, linked, bytes, Path::new("/dev/null"));
            let after = cpu(c);
            speeds[i].push(got.speed / 1e6);
            for w in 0..3 {
                spent[i][w] = match (spent[i][w], before[w], after[w]) {
                    (Some(t), Some(b), Some(a)) => Some(t + a - b),
                    _ => None,
                };
            }
        }
    }
    let gib = (bytes * rounds as u64) as f64 / (1u64 << 30) as f64;
    Carried {
        speeds,
        cpu_per_gib: spent
            .into_iter()
            .map(|s| s.map(|t| t.map(|t| t / gib)))
            .collect(),
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The table of a throughput run; returns each contender's mean MB/s.
fn print_carried(cs: &[Contender], carried: &Carried, direct: usize) -> Vec<f64> {
    println!(
        "{:<40} {:>7} {:>7} {:>7} {:>8} {:>24}",
        "", "MB/s", "min", "max", "% direct", "CPU s/GiB proxy client origin"
    );
    let means: Vec<f64> = carried.speeds.iter().map(|s| mean(s)).collect();
    for (i, c) in cs.iter().enumerate() {
        let s = &carried.speeds[i];
        let min = s.iter().copied().fold(f64::INFINITY, f64::min);
        let max = s.iter().copied().fold(0.0, f64::max);
        let cpu: Vec<String> = carried.cpu_per_gib[i]
            .iter()
            .map(|s| s.map(|s| format!("{s:.2}")).unwrap_or_else(|| "-".into()))
            .collect();
        println!(
            "{:<40} {:>7.1} {:>7.1} {:>7.1} {:>7.1}% {:>16} {:>6} {:>6}",
            c.name,
            means[i],
            min,
            max,
            100.0 * means[i] / means[direct],
            cpu[0],
            cpu[1],
            cpu[2]
        );
    }
    means
}

fn verdict(met: bool) -> &'static str {
    match met {
        true => "met",
        false => "NOT met",
    }
}

/// Indices of the contenders by role.
struct Roles {
    direct: usize,
    tunnel: usize,
    opened: usize,
    mitm: Option<usize>,
}

fn ratios(label: &str, means: &[f64], r: &Roles, target: f64) {
    let opened_direct = means[r.opened] / means[r.direct];
    println!(
        "{label}: opened/direct TLS {:.2} (target ≥ {target:.2}: {}), opened/tunnel {:.2}{}",
        opened_direct,
        verdict(opened_direct >= target),
        means[r.opened] / means[r.tunnel],
        r.mitm
            .map(|m| format!(", mitmproxy/direct {:.2}", means[m] / means[r.direct]))
            .unwrap_or_default()
    );
}

fn ttfb(cs: &[Contender], bundle: &Path, r: &Roles) {
    let stats: Vec<Stats> = interleaved_with(cs.len(), TTFB_RUNS, |i| {
        cs[i]
            .get(bundle, false, TTFB_BYTES, Path::new("/dev/null"))
            .first_byte
    });
    println!(
        "\ntime to first byte on loopback (curl's time_starttransfer: connect, CONNECT, TLS, \
         request, first byte), a fresh connection each, {TTFB_RUNS} runs after {} to warm up, \
         contenders in turn, {TTFB_BYTES}-byte body",
        TTFB_RUNS / 10
    );
    println!(
        "{:<40} {:>8} {:>8} {:>8} {:>8} {:>12}",
        "", "p50 µs", "p90 µs", "p99 µs", "mean µs", "p50 - tunnel"
    );
    for (c, s) in cs.iter().zip(&stats) {
        println!(
            "{:<40} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>+12.0}",
            c.name,
            us(s.p50),
            us(s.p90),
            us(s.p99),
            us(s.mean),
            us(s.p50) - us(stats[r.tunnel].p50)
        );
    }
    let above = us(stats[r.opened].p50) - us(stats[r.tunnel].p50);
    println!(
        "opened above tunnel: p50 {above:+.0} µs (target ≤ 1000 µs: {}), p99 {:+.0} µs",
        verdict(above <= 1000.0),
        us(stats[r.opened].p99) - us(stats[r.tunnel].p99)
    );
}

fn print_cpu(cs: &[Contender], carried: &Carried, r: &Roles) {
    let per: Vec<String> = [Some(r.tunnel), Some(r.opened), r.mitm]
        .into_iter()
        .flatten()
        .filter_map(|i| {
            Some(format!(
                "{} {:.3} s",
                cs[i].name, carried.cpu_per_gib[i][0]?
            ))
        })
        .collect();
    println!(
        "proxy CPU time per GiB carried (user + system, all threads): {}",
        per.join(", ")
    );
}

fn inside(parts: &[&str]) {
    let run = |part: &str| parts.is_empty() || parts.contains(&part);
    link::sh(&["ip", "link", "set", "lo", "up"]);
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let authority = authority();
    let origin_ca = dir.join("origin-ca.pem");
    std::fs::write(&origin_ca, &authority.ca_pem).unwrap();
    let here = TcpListener::bind(("127.0.0.1", PORT)).unwrap();
    let tls = authority.server.clone();
    std::thread::spawn(move || run_origin(here, tls));
    let mut names = vec![
        ("127.0.0.1", NAMES[0]),
        ("127.0.0.1", NAMES[1]),
        ("127.0.0.1", metered::NAMES[0]),
    ];
    let linked = (run("shaped") || run("metered")).then(|| {
        let tls = authority.server.clone();
        let (_, tid) = link::origin_apart(PORT, move |l| run_origin(l, tls));
        names.extend([
            (link::ORIGIN, NAMES[2]),
            (link::ORIGIN, NAMES[3]),
            (link::ORIGIN, metered::NAMES[1]),
        ]);
        link::shape(RATE.0, RATE.1, tid);
    });
    link::name_hosts(&names);

    let warden_ca = dir.join("warden-ca.pem");
    let (mut warden, warden_port) = warden(dir, &origin_ca, &warden_ca);
    let mut mitm = mitmproxy(dir, &origin_ca);
    // One bundle for curl: the origin's authority, warden's, mitmproxy's.
    let bundle = dir.join("bundle.pem");
    let mut text = authority.ca_pem.clone();
    text.push_str(&std::fs::read_to_string(&warden_ca).unwrap());
    if let Some((_, _, ca, _)) = &mitm {
        text.push_str(&std::fs::read_to_string(ca).unwrap());
    }
    std::fs::write(&bundle, text).unwrap();

    let contender = |name: &str, proxy: Option<(u16, u32)>, opened: bool, query, adds| Contender {
        name: name.into(),
        proxy: proxy.map(|p| p.0),
        names: match opened {
            true => [NAMES[1], NAMES[3]],
            false => [NAMES[0], NAMES[2]],
        },
        query,
        pid: proxy.map(|p| p.1),
        adds,
    };
    let w = Some((warden_port, warden.child.id()));
    let mut cs = vec![
        contender("direct TLS (no proxy)", None, false, "", false),
        contender("warden, plain CONNECT tunnel", w, false, "", false),
        contender("warden, opened host", w, true, "", true),
    ];
    let mut roles = Roles {
        direct: 0,
        tunnel: 1,
        opened: 2,
        mitm: None,
    };
    if let Some((p, port, _, version)) = &mitm {
        roles.mitm = Some(cs.len());
        let name = format!("{version} (streaming, addon)");
        cs.push(contender(
            &name,
            Some((*port, p.child.id())),
            false,
            "",
            true,
        ));
    }
    for c in &cs {
        c.check(&bundle, false, dir);
    }
    // Chunked answers on loopback only: warden decodes them (the client
    // reads to the close).
    let chunked = contender(
        "warden, opened host, chunked answer",
        w,
        true,
        "?chunked",
        true,
    );
    chunked.check(&bundle, false, dir);
    println!(
        "\norigin: HTTPS on 127.0.0.1:{PORT} in the bench's own network namespace (rustls, \
         TLS 1.3, a test authority); client: curl --http1.1, a fresh process each request; \
         proxies: `warden proxy --opened-ca` (one process: tunnel for {}, opened for {} with \
         {KEY} added and masked), {}",
        NAMES[0],
        NAMES[1],
        mitm.as_ref()
            .map(|m| format!("{} (mitmdump, stream_large_bodies=1m, an addon adding and masking the same credential)", m.3))
            .unwrap_or_else(|| "no mitmproxy".into())
    );
    let started = Instant::now();
    if run("throughput") {
        let mut all = cs.clone();
        all.push(chunked);
        let carried = carry(&all, &bundle, false, LOOP_BYTES, LOOP_ROUNDS);
        println!(
            "\ndownload on loopback, {} MiB a request, {LOOP_ROUNDS} rounds, contenders in turn \
             (MB/s = 10^6 bytes/s, curl's speed_download; CPU time per GiB: the proxy process's utime + stime, curl's, the origin's)",
            LOOP_BYTES >> 20
        );
        let means = print_carried(&all, &carried, roles.direct);
        ratios("loopback", &means, &roles, 0.80);
        print_cpu(&all, &carried, &roles);
        warden.check();
        if let Some(m) = &mut mitm {
            m.0.check();
        }
    }
    if run("ttfb") {
        ttfb(&cs, &bundle, &roles);
        warden.check();
    }
    if run("metered") {
        let audit = dir.join("warden-audit");
        let opened = [NAMES[1], NAMES[3]];
        let mut m = metered::Bench::new(warden_port, warden.child.id(), audit, &warden_ca, opened);
        println!(
            "\nmetered: {} (a provider, anthropic-messages, its model priced in prices.json) \
             against {} (a credential added and masked), the same origin; client: the bench \
             (rustls, a fresh connection and full handshake each request)",
            metered::NAMES[0],
            NAMES[1]
        );
        m.check(false);
        m.ttfb();
        m.throughput(false, metered::ROUNDS);
        m.check(true);
        m.throughput(true, metered::LINK_ROUNDS);
        m.audited();
        warden.check();
    }
    if linked.is_some() && run("shaped") {
        for c in &cs {
            c.check(&bundle, true, dir);
        }
        let carried = carry(&cs, &bundle, true, LINK_BYTES, LINK_ROUNDS);
        println!(
            "\nshaped link: the origin {} in a network namespace of its own behind a veth pair \
             with tbf at {} on both ends; {} MiB a request, {LINK_ROUNDS} rounds, contenders in turn",
            link::ORIGIN,
            RATE.0,
            LINK_BYTES >> 20
        );
        let means = print_carried(&cs, &carried, roles.direct);
        ratios("shaped 1 Gbit/s", &means, &roles, 0.98);
        print_cpu(&cs, &carried, &roles);
        warden.check();
    }
    println!();
    let mut procs = vec![&warden];
    if let Some(m) = &mitm {
        procs.push(&m.0);
    }
    for p in procs {
        if let Some((rss, peak)) = link::memory(p.child.id()) {
            println!("{:<40} {rss} resident, peak {peak}", p.name);
        }
    }
    println!("(measured in {:.0} s)", started.elapsed().as_secs_f64());
}
