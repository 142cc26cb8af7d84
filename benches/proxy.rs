//! The egress proxy: warden's (`warden proxy`, its standalone mode) against
//! tinyproxy and a direct TCP connection, measured side by side in one run:
//! CONNECT tunnel throughput (upload and download), time to first byte on a
//! fresh connection (CONNECT, and plain HTTP with an absolute URI), and many
//! tunnels at once. Loopback only: the origin is a server in this process on
//! 127.0.0.1, and each proxy may reach nothing else; then the same origin
//! behind a shaped veth link, in network namespaces the bench makes
//! (`proxy/shaped.rs`).
//!
//! `scripts/bench` runs it (it installs tinyproxy); by itself:
//! `cargo bench --bench proxy [-- throughput|ttfb|parallel|shaped]` (see
//! docs/benchmarks.md).

mod link;
#[path = "proxy/shaped.rs"]
mod shaped;
mod timing;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use timing::{interleaved_with, us, Stats};

/// Bytes per read and write, on both ends.
const CHUNK: usize = 256 * 1024;
/// One tunnel, each way: ROUNDS rounds of ROUND_BYTES, contenders in turn.
const ROUNDS: usize = 4;
const ROUND_BYTES: u64 = 256 << 20;
/// Fresh connections per contender for time to first byte.
const TTFB_RUNS: usize = 300;
/// Tunnels at once, and what each one downloads; rounds, contenders in turn.
const TUNNELS: usize = 64;
const TUNNEL_BYTES: u64 = 16 << 20;
const PARALLEL_ROUNDS: usize = 3;
/// How long any read or write may block before the bench fails.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

const BODY: &[u8] = b"hello from the origin\n";

// ---------------------------------------------------------------------------
// The origin: one port, three kinds of request, told apart by the first line.
//   GET ... (HTTP)   -> a small 200 response, then close
//   UP <n>\n         -> read n bytes, answer "k"
//   DOWN <n>\n       -> write n zero bytes, then close

fn start_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || run_origin(listener));
    addr
}

/// Serves the origin on `listener` for ever, from this thread (and the
/// runtime's, which share its network namespace).
fn run_origin(listener: TcpListener) {
    listener.set_nonblocking(true).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        loop {
            if let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Err(e) = serve(stream).await {
                        eprintln!("origin: {e}");
                    }
                });
            }
        }
    });
}

async fn serve(mut s: tokio::net::TcpStream) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.set_nodelay(true)?;
    let mut buf = vec![0u8; CHUNK];
    let mut have = 0;
    let eol = loop {
        if let Some(i) = buf[..have].iter().position(|&b| b == b'\n') {
            break i;
        }
        if have == buf.len() {
            return Err(std::io::Error::other("no first line"));
        }
        match s.read(&mut buf[have..]).await? {
            0 => return Ok(()),
            n => have += n,
        }
    };
    let line = String::from_utf8_lossy(&buf[..eol]).trim_end().to_string();
    if line.starts_with("GET ") {
        while !buf[..have].windows(4).any(|w| w == b"\r\n\r\n") {
            if have == buf.len() {
                return Err(std::io::Error::other("request head too long"));
            }
            match s.read(&mut buf[have..]).await? {
                0 => return Ok(()),
                n => have += n,
            }
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            BODY.len()
        );
        s.write_all(&[head.as_bytes(), BODY].concat()).await?;
        return s.shutdown().await;
    }
    let bad = || std::io::Error::other(format!("bad request line {line:?}"));
    let (verb, n) = line.split_once(' ').ok_or_else(bad)?;
    let n: u64 = n.parse().map_err(|_| bad())?;
    match verb {
        "UP" => {
            let mut left = n.saturating_sub((have - eol - 1) as u64);
            while left > 0 {
                match s.read(&mut buf).await? {
                    0 => return Err(std::io::Error::other(format!("UP: {left} bytes short"))),
                    k => left = left.saturating_sub(k as u64),
                }
            }
            s.write_all(b"k").await
        }
        "DOWN" => {
            buf.fill(0);
            let mut left = n;
            while left > 0 {
                let k = left.min(CHUNK as u64) as usize;
                s.write_all(&buf[..k]).await?;
                left -= k as u64;
            }
            s.shutdown().await
        }
        _ => Err(bad()),
    }
}

// ---------------------------------------------------------------------------
// The contenders.

struct Proc {
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Contender {
    name: String,
    /// None: straight to the origin.
    proxy: Option<SocketAddr>,
    /// The origin's host name as this contender is asked for it.
    host: String,
    origin: SocketAddr,
    process: Option<Proc>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn timeouts(s: &TcpStream) {
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
}

/// Reads a response head (through the blank line), after the bytes
/// already read; returns it and whatever came after it.
fn read_head(s: &mut TcpStream, what: &str, mut got: Vec<u8>) -> (String, Vec<u8>) {
    let mut buf = [0u8; 1024];
    loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = got.split_off(i + 4);
            return (String::from_utf8_lossy(&got).into_owned(), rest);
        }
        assert!(got.len() < 64 * 1024, "{what}: endless response head");
        match s.read(&mut buf) {
            Ok(0) => panic!("{what}: connection closed after {got:?}"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{what}: {e} after {got:?}"),
        }
    }
}

fn status(head: &str) -> Option<&str> {
    let line = head.lines().next()?;
    line.starts_with("HTTP/1.")
        .then(|| line.split_whitespace().nth(1))
        .flatten()
}

impl Contender {
    fn target(&self) -> String {
        format!("{}:{}", self.host, self.origin.port())
    }

    fn connect(&self) -> TcpStream {
        let to = self.proxy.unwrap_or(self.origin);
        let s =
            TcpStream::connect(to).unwrap_or_else(|e| panic!("{}: connect {to}: {e}", self.name));
        timeouts(&s);
        s
    }

    /// A byte stream to the origin: a CONNECT tunnel, or a plain connection.
    fn tunnel(&self) -> TcpStream {
        let mut s = self.connect();
        if self.proxy.is_some() {
            let target = self.target();
            s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
                .unwrap();
            // The origin says nothing until asked: nothing may follow.
            let (head, rest) = read_head(&mut s, &self.name, Vec::new());
            if status(&head) != Some("200") || !rest.is_empty() {
                panic!(
                    "{}: CONNECT {target} was answered {head:?} {rest:?}",
                    self.name
                );
            }
        }
        s
    }

    /// A GET of the origin's small response: through a tunnel, or (plain)
    /// with an absolute URI to the proxy. Times connect to first byte,
    /// then checks the whole response.
    fn get(&self, plain: bool) -> Duration {
        let start = Instant::now();
        let (mut s, uri) = if plain && self.proxy.is_some() {
            (self.connect(), format!("http://{}/", self.target()))
        } else {
            (self.tunnel(), "/".to_string())
        };
        let host = self.target();
        s.write_all(
            format!("GET {uri} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut first = [0u8; 1];
        if let Err(e) = s.read_exact(&mut first) {
            panic!("{}: GET {uri}: no response: {e}", self.name);
        }
        let elapsed = start.elapsed();
        // Read it all: the head, then Content-Length bytes (or to the end).
        let (head, mut body) = read_head(&mut s, &self.name, first.to_vec());
        let length = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())
                .flatten()
        });
        match length {
            Some(n) => {
                let mut more = vec![0u8; n.saturating_sub(body.len())];
                s.read_exact(&mut more)
                    .unwrap_or_else(|e| panic!("{}: GET {uri}: short body: {e}", self.name));
                body.extend_from_slice(&more);
            }
            None => {
                s.read_to_end(&mut body).unwrap();
            }
        }
        if status(&head) != Some("200") || body != BODY {
            panic!(
                "{}: GET {uri} was answered {head:?} with {:?}",
                self.name,
                String::from_utf8_lossy(&body)
            );
        }
        elapsed
    }

    /// Sends `bytes` to the origin through a fresh tunnel; the time from the
    /// first byte sent to the origin's receipt of the last.
    fn upload(&self, bytes: u64) -> Duration {
        let mut s = self.tunnel();
        let zeros = vec![0u8; CHUNK];
        let start = Instant::now();
        s.write_all(format!("UP {bytes}\n").as_bytes()).unwrap();
        let mut left = bytes;
        while left > 0 {
            let k = left.min(CHUNK as u64) as usize;
            s.write_all(&zeros[..k])
                .unwrap_or_else(|e| panic!("{}: upload: {e}", self.name));
            left -= k as u64;
        }
        let mut ack = [0u8; 1];
        s.read_exact(&mut ack)
            .unwrap_or_else(|e| panic!("{}: upload: no receipt: {e}", self.name));
        assert_eq!(&ack, b"k", "{}: upload: bad receipt", self.name);
        start.elapsed()
    }

    /// Has the origin send `bytes` through a tunnel (opened already, so
    /// that many can start at once); the time from asking to the last byte.
    fn download(&self, mut s: TcpStream, bytes: u64) -> Duration {
        let mut buf = vec![0u8; CHUNK];
        let start = Instant::now();
        s.write_all(format!("DOWN {bytes}\n").as_bytes()).unwrap();
        let mut got = 0u64;
        while got < bytes {
            match s.read(&mut buf) {
                Ok(0) => panic!(
                    "{}: download: closed after {got} of {bytes} bytes",
                    self.name
                ),
                Ok(n) => got += n as u64,
                Err(e) => panic!("{}: download: {e} after {got} of {bytes} bytes", self.name),
            }
        }
        assert_eq!(got, bytes, "{}: download: too many bytes", self.name);
        start.elapsed()
    }

    /// Panics, with the proxy's log, if it has exited.
    fn check(&mut self) {
        if let Some(p) = &mut self.process {
            if let Some(st) = p.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(&p.log).unwrap_or_default();
                panic!("{} exited ({st}); its log:\n{log}", self.name);
            }
        }
    }

    /// The proxy's resident memory now, and its peak.
    fn memory(&self) -> Option<(String, String)> {
        let pid = self.process.as_ref()?.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |f: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(f))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        Some((field("VmRSS:"), field("VmHWM:")))
    }
}

fn wait_ready(name: &str, p: &mut Proc, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready() {
        if let Some(st) = p.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(&p.log).unwrap_or_default();
            panic!("{name} exited at start ({st}); its log:\n{log}");
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(&p.log).unwrap_or_default();
            panic!("{name} was not ready after 10 s; its log:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn direct(origin: SocketAddr) -> Contender {
    Contender {
        name: "direct TCP (floor)".into(),
        proxy: None,
        host: "127.0.0.1".into(),
        origin,
        process: None,
    }
}

/// `name`: the origin's host name as tinyproxy is asked for it (None:
/// "localhost" where that can only mean 127.0.0.1, else the address).
fn tinyproxy(dir: &Path, origin: SocketAddr, name: Option<&str>) -> Contender {
    let bin = ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("tinyproxy is missing: run scripts/bench, which installs it");
    let version = Command::new(bin).arg("-v").output().unwrap().stdout;
    let version = String::from_utf8_lossy(&version).trim().to_string();
    let port = free_port();
    let conf = dir.join("tinyproxy.conf");
    std::fs::write(
        &conf,
        format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 600\nAllow 127.0.0.1\nConnectPort {}\n\
             MaxClients 256\nSyslog Off\nLogLevel Critical\nPidFile \"{}\"\n",
            origin.port(),
            dir.join("tinyproxy.pid").display()
        ),
    )
    .unwrap();
    let log = dir.join("tinyproxy.log");
    let child = Command::new(bin)
        .arg("-d")
        .arg("-c")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::options().append(true).open(&log).unwrap())
        .spawn()
        .unwrap();
    let mut p = Proc { child, log };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_ready("tinyproxy", &mut p, || TcpStream::connect(addr).is_ok());
    // tinyproxy resolves the name itself: "localhost" only if that can mean
    // nothing but 127.0.0.1 here.
    let only_v4_loopback = ("localhost", 0)
        .to_socket_addrs()
        .map(|mut a| a.all(|a| a.ip() == std::net::Ipv4Addr::LOCALHOST))
        .unwrap_or(false);
    Contender {
        name: version,
        proxy: Some(addr),
        host: match (name, only_v4_loopback) {
            (Some(name), _) => name,
            (None, true) => "localhost",
            (None, false) => "127.0.0.1",
        }
        .into(),
        origin,
        process: Some(p),
    }
}

/// `(name, allow)`: the origin's host name and the address block warden
/// must be allowed to reach it at.
fn warden(dir: &Path, origin: SocketAddr, (name, allow): (&str, &str)) -> Contender {
    let bin = env!("CARGO_BIN_EXE_warden");
    let help = Command::new(bin)
        .args(["proxy", "--help"])
        .output()
        .unwrap();
    if !help.status.success() {
        panic!(
            "{bin} has no `proxy` mode (`warden proxy --listen ADDR --policy-dir DIR`): {}",
            String::from_utf8_lossy(&help.stderr).trim()
        );
    }
    let policy = dir.join("warden-policy");
    let audit = dir.join("warden-audit");
    std::fs::create_dir_all(&policy).unwrap();
    std::fs::create_dir_all(&audit).unwrap();
    std::fs::write(
        policy.join("network.json"),
        serde_json::json!({
            "hosts": [format!("{name}:{}", origin.port())],
            "allow_addresses": [allow],
        })
        .to_string(),
    )
    .unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let log = dir.join("warden.log");
    let child = Command::new(bin)
        .args(["proxy", "--listen", &listen, "--policy-dir"])
        .arg(&policy)
        .arg("--audit-dir")
        .arg(&audit)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::options().append(true).open(&log).unwrap())
        .spawn()
        .unwrap();
    let mut p = Proc { child, log };
    let line = format!("warden: proxy listening on {listen}");
    let log = p.log.clone();
    wait_ready("warden proxy", &mut p, || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains(&line))
    });
    Contender {
        name: "warden proxy".into(),
        proxy: Some(listen.parse().unwrap()),
        host: name.into(),
        origin,
        process: Some(p),
    }
}

// ---------------------------------------------------------------------------
// Measuring and printing.

/// Contenders in turn; `f` times the part that counts.
fn by_contender(cs: &[Contender], runs: usize, f: impl Fn(&Contender) -> Duration) -> Vec<Stats> {
    interleaved_with(cs.len(), runs, |i| f(&cs[i]))
}

fn gib_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1u64 << 30) as f64 / d.as_secs_f64()
}

/// warden/direct and warden/tinyproxy of a figure, contenders in the order
/// direct, tinyproxy, warden.
fn ratios(label: &str, v: &[f64]) {
    if v.len() == 3 {
        println!(
            "{:<40} warden/direct {:.2}   warden/tinyproxy {:.2}",
            label,
            v[2] / v[0],
            v[2] / v[1]
        );
    }
}

fn throughput(cs: &[Contender]) {
    let mut up = vec![Duration::ZERO; cs.len()];
    let mut down = vec![Duration::ZERO; cs.len()];
    let mut best_up = vec![0f64; cs.len()];
    let mut best_down = vec![0f64; cs.len()];
    for _ in 0..ROUNDS {
        for (i, c) in cs.iter().enumerate() {
            let u = c.upload(ROUND_BYTES);
            let d = c.download(c.tunnel(), ROUND_BYTES);
            up[i] += u;
            down[i] += d;
            best_up[i] = best_up[i].max(gib_s(ROUND_BYTES, u));
            best_down[i] = best_down[i].max(gib_s(ROUND_BYTES, d));
        }
    }
    let total = ROUND_BYTES * ROUNDS as u64;
    println!(
        "\none CONNECT tunnel, {} MiB each way in {ROUNDS} rounds of {} MiB, contenders in turn (GiB/s: all bytes / all time, and the best round)",
        total >> 20,
        ROUND_BYTES >> 20
    );
    println!(
        "{:<40} {:>10} {:>10} {:>10} {:>10}",
        "", "upload", "best", "download", "best"
    );
    let up_rates: Vec<f64> = up.iter().map(|&d| gib_s(total, d)).collect();
    let down_rates: Vec<f64> = down.iter().map(|&d| gib_s(total, d)).collect();
    for (i, c) in cs.iter().enumerate() {
        println!(
            "{:<40} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            c.name, up_rates[i], best_up[i], down_rates[i], best_down[i]
        );
    }
    ratios("upload", &up_rates);
    ratios("download", &down_rates);
}

fn ttfb(cs: &[Contender]) {
    for (plain, title) in [
        (
            false,
            "CONNECT, 200, GET through the tunnel, first response byte",
        ),
        (
            true,
            "plain HTTP: GET http://localhost:PORT/, first response byte",
        ),
    ] {
        let stats = by_contender(cs, TTFB_RUNS, |c| c.get(plain));
        println!(
            "\ntime to first byte, a fresh connection each, {TTFB_RUNS} runs, contenders in turn: {title}"
        );
        println!(
            "{:<40} {:>8} {:>8} {:>8} {:>8} {:>9}",
            "", "p50 µs", "p90 µs", "p99 µs", "mean µs", "x direct"
        );
        for (c, s) in cs.iter().zip(&stats) {
            println!(
                "{:<40} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>9.2}",
                c.name,
                us(s.p50),
                us(s.p90),
                us(s.p99),
                us(s.mean),
                s.p50.as_secs_f64() / stats[0].p50.as_secs_f64()
            );
        }
        ratios("p50", &stats.iter().map(|s| us(s.p50)).collect::<Vec<_>>());
        ratios("p99", &stats.iter().map(|s| us(s.p99)).collect::<Vec<_>>());
    }
}

/// TUNNELS tunnels opened first, then all downloading at once.
/// `tunnels` tunnels opened first, then each downloading `each` bytes at
/// once; the wall time from the start to the last byte.
fn at_once(c: &Contender, tunnels: usize, each: u64) -> Duration {
    let streams: Vec<TcpStream> = (0..tunnels).map(|_| c.tunnel()).collect();
    let go = Arc::new(Barrier::new(tunnels + 1));
    std::thread::scope(|scope| {
        let handles: Vec<_> = streams
            .into_iter()
            .map(|s| {
                let go = go.clone();
                scope.spawn(move || {
                    go.wait();
                    c.download(s, each)
                })
            })
            .collect();
        go.wait();
        let start = Instant::now();
        for h in handles {
            h.join().unwrap();
        }
        start.elapsed()
    })
}

fn parallel(cs: &[Contender]) {
    let each = TUNNELS as u64 * TUNNEL_BYTES;
    let mut times = vec![Duration::ZERO; cs.len()];
    let mut best = vec![0f64; cs.len()];
    for _ in 0..PARALLEL_ROUNDS {
        for (i, c) in cs.iter().enumerate() {
            let d = at_once(c, TUNNELS, TUNNEL_BYTES);
            times[i] += d;
            best[i] = best[i].max(gib_s(each, d));
        }
    }
    println!(
        "\n{TUNNELS} CONNECT tunnels at once, each downloading {} MiB ({} MiB a round), {PARALLEL_ROUNDS} rounds, contenders in turn",
        TUNNEL_BYTES >> 20,
        each >> 20
    );
    println!(
        "{:<40} {:>10} {:>10} {:>14}",
        "", "GiB/s", "best", "mean wall ms"
    );
    let total = each * PARALLEL_ROUNDS as u64;
    let rates: Vec<f64> = times.iter().map(|&d| gib_s(total, d)).collect();
    for i in 0..cs.len() {
        println!(
            "{:<40} {:>10.2} {:>10.2} {:>14.0}",
            cs[i].name,
            rates[i],
            best[i],
            times[i].as_secs_f64() * 1e3 / PARALLEL_ROUNDS as f64
        );
    }
    ratios("aggregate", &rates);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        return; // cargo bench asks benches to list themselves
    }
    if args.iter().any(|a| a == shaped::INSIDE) {
        return shaped::inside();
    }
    let wanted: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| ["throughput", "ttfb", "parallel", "shaped"].contains(a))
        .collect();
    let run = |part: &str| wanted.is_empty() || wanted.contains(&part);

    let scratch = tempfile::tempdir().unwrap();
    let origin = start_origin();
    let mut cs = vec![
        direct(origin),
        tinyproxy(scratch.path(), origin, None),
        warden(scratch.path(), origin, ("localhost", "127.0.0.1/32")),
    ];
    // Each works, or the bench stops here.
    for c in &cs {
        c.get(false);
        c.get(true);
        c.upload(1 << 20);
        c.download(c.tunnel(), 1 << 20);
    }
    println!(
        "\norigin: 127.0.0.1:{} (in the bench); CONNECT and GET name {}",
        origin.port(),
        cs.iter()
            .skip(1)
            .map(|c| format!("{} for {}", c.target(), c.name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let started = Instant::now();
    if run("throughput") {
        throughput(&cs);
        cs.iter_mut().for_each(Contender::check);
    }
    if run("ttfb") {
        ttfb(&cs);
        cs.iter_mut().for_each(Contender::check);
    }
    if run("parallel") {
        parallel(&cs);
        cs.iter_mut().for_each(Contender::check);
    }
    if run("shaped") {
        shaped::run();
    }
    println!();
    for c in &cs {
        if let Some((rss, peak)) = c.memory() {
            println!("{:<40} {rss} resident, peak {peak}", c.name);
        }
    }
    println!("(measured in {:.0} s)", started.elapsed().as_secs_f64());
}
