//! The metered path against the opened one, side by side: a model
//! provider's host (`providers` in network.json: opened and metered, each
//! request's model priced before it leaves, its streamed answer read event
//! by event and charged) against an opened host that is not metered
//! (`opened.*`: a credential added, its secret masked), both the same
//! origin answering `POST /v1/messages` with an Anthropic-shaped stream of
//! server-sent events. The provider's key is handed to the proxy too, so
//! that both mask one secret's forms: what differs is the metering alone
//! (the standalone proxy has no runtime, so the provider's key, the
//! runtime's, is not added).
//!
//! The client is the bench itself (rustls through a CONNECT to `warden
//! proxy`, a fresh connection and full handshake each request, as curl
//! does), so that the first byte of the stream's body is timed, not only
//! the answer's head.

use super::link;
use crate::timing::{interleaved_with, us, Stats};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The provider's hosts: on loopback, behind the shaped link.
pub const NAMES: [&str; 2] = ["metered.bench", "metered.link"];
/// The providers (one host each), as network.json names them.
const PROVIDERS: [&str; 2] = ["bench", "bench-link"];
/// The provider's key and its value (handed to the proxy, never added by
/// the standalone one: masked in what comes back, as `opened.*`'s is).
pub const KEY: &str = "BENCH_PROVIDER_KEY";
pub const SECRET: &str = "wdn-bench-pr0v1der-9c4e2a7f1b3d5e60";
const MODEL: &str = "bench-model";
/// Bytes of text in each `content_block_delta`, and the tokens it counts
/// for (four bytes a token, as warden's estimate).
const TEXT: usize = 1024;
const TOKENS_PER_DELTA: u64 = (TEXT / 4) as u64;
/// About this many bytes of events in the long stream.
const STREAM_BYTES: usize = 10_000_000;
/// The origin writes whole events, up to this many bytes a chunk.
const BATCH: usize = 16 * 1024;
/// Deltas in the short stream the first byte is timed on.
const SHORT: u64 = 4;
/// Requests per contender for the first byte (after a tenth more to warm
/// up); rounds of the long stream, on loopback and on the shaped link.
const TTFB_RUNS: usize = 200;
pub const ROUNDS: usize = 40;
pub const LINK_ROUNDS: usize = 20;
/// The longest any read or write of the client may wait.
const LIMIT: Duration = Duration::from_secs(60);

/// network.json gains the providers (their hosts listed) and budgets a
/// bench never reaches; the policy folder gains prices.json.
pub fn policy(network: &mut Value, policy_dir: &Path, port: u16) {
    let providers: Vec<Value> = NAMES
        .iter()
        .zip(PROVIDERS)
        .map(|(host, name)| {
            json!({"name": name, "host": host, "api": "anthropic-messages", "key": KEY})
        })
        .collect();
    network["providers"] = json!(providers);
    network["spend"] = json!({"per_run_usd": 1000, "per_day_usd": 1_000_000});
    let hosts = network["hosts"].as_array_mut().expect("hosts");
    hosts.extend(NAMES.iter().map(|n| json!(format!("{n}:{port}"))));
    let prices = json!({"models": {MODEL: {
        "input": 1, "output": 10, "date": "2026-12-04", "source": "bench"
    }}});
    std::fs::write(policy_dir.join("prices.json"), prices.to_string()).unwrap();
}

// ---------------------------------------------------------------------------
// The origin's side: `POST /v1/messages`.

struct Events {
    /// message_start and content_block_start.
    start: Vec<u8>,
    /// One content_block_delta with TEXT bytes of text.
    delta: Vec<u8>,
    /// As many deltas as fit in BATCH, framed as one chunk.
    batch: Vec<u8>,
    per_batch: u64,
}

fn events() -> &'static Events {
    static EVENTS: OnceLock<Events> = OnceLock::new();
    EVENTS.get_or_init(|| {
        let text: String = super::filler()
            .iter()
            .take(TEXT)
            .map(|&b| if b == b'\n' { ' ' } else { b as char })
            .collect();
        let start = concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_bench\",\"type\":\"message\",",
            "\"role\":\"assistant\",\"model\":\"bench-model\",\"content\":[],\"stop_reason\":null,",
            "\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\n",
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        );
        let delta = format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
        );
        let per_batch = (BATCH / delta.len()).max(1);
        Events {
            start: start.as_bytes().to_vec(),
            batch: chunk(&delta.as_bytes().repeat(per_batch)),
            delta: delta.into_bytes(),
            per_batch: per_batch as u64,
        }
    })
}

/// The stream's last events: its usage (the output counted as the text
/// streamed) and its stop.
fn end(deltas: u64) -> Vec<u8> {
    format!(
        concat!(
            "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n",
            "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\",",
            "\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{}}}}}\n\n",
            "event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
        ),
        deltas * TOKENS_PER_DELTA
    )
    .into_bytes()
}

fn chunk(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
    out
}

/// The whole stream of `deltas` text deltas, as a client must get it.
fn stream_of(deltas: u64) -> Vec<u8> {
    let e = events();
    let mut out = e.start.clone();
    out.extend(e.delta.repeat(deltas as usize));
    out.extend(end(deltas));
    out
}

/// Deltas in the long stream (about STREAM_BYTES of events).
fn long() -> u64 {
    let e = events();
    ((STREAM_BYTES - e.start.len()) / e.delta.len()) as u64
}

/// `POST /v1/messages` (its head read, `body` what came after it): the
/// request's body read whole, then a stream of `max_tokens / 256` text
/// deltas, chunked, whole events up to BATCH bytes a chunk.
pub async fn messages<S>(s: &mut S, head: &str, mut body: Vec<u8>) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut buf = [0u8; 4096];
    while body.len() < length {
        match s.read(&mut buf).await? {
            0 => return Err(std::io::Error::other("the request's body was cut")),
            n => body.extend_from_slice(&buf[..n]),
        }
    }
    let asked: Value = serde_json::from_slice(&body[..length]).map_err(std::io::Error::other)?;
    let deltas = asked["max_tokens"]
        .as_u64()
        .unwrap_or(0)
        .div_ceil(TOKENS_PER_DELTA);
    let e = events();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n\
                Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    s.write_all(head.as_bytes()).await?;
    s.write_all(&chunk(&e.start)).await?;
    let mut left = deltas;
    while left >= e.per_batch {
        s.write_all(&e.batch).await?;
        left -= e.per_batch;
    }
    let mut last = e.delta.repeat(left as usize);
    last.extend(end(deltas));
    s.write_all(&chunk(&last)).await?;
    s.write_all(b"0\r\n\r\n").await?;
    s.shutdown().await
}

// ---------------------------------------------------------------------------
// The client's side.

/// One request's answer, as the client saw it.
struct Answer {
    /// From before the connect: the answer's first byte (its head), the
    /// body's first byte (message_start), its last.
    head: Duration,
    first: Duration,
    end: Duration,
    bytes: u64,
    /// The body, when asked to keep it; else its last bytes.
    kept: Vec<u8>,
}

impl Answer {
    /// MB/s (10^6 bytes) from the body's first byte to its last.
    fn streamed(&self) -> f64 {
        self.bytes as f64 / (self.end - self.first).as_secs_f64() / 1e6
    }

    /// MB/s over the whole request (connect, handshakes, request).
    fn whole(&self) -> f64 {
        self.bytes as f64 / self.end.as_secs_f64() / 1e6
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One contender: the proxy's host it asks for, on loopback and behind
/// the link.
pub struct Side {
    pub name: &'static str,
    pub hosts: [&'static str; 2],
    pub metered: bool,
}

pub struct Bench {
    pub proxy: u16,
    pub pid: u32,
    pub audit: PathBuf,
    tls: Arc<rustls::ClientConfig>,
    pub sides: [Side; 2],
    /// Requests made to the metered host so far (each must have its line).
    metered: usize,
}

impl Bench {
    /// `warden_ca`: the proxy's authority, the one the client trusts.
    pub fn new(
        proxy: u16,
        pid: u32,
        audit: PathBuf,
        warden_ca: &Path,
        opened: [&'static str; 2],
    ) -> Bench {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(warden_ca).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        // A full handshake each time, as a fresh curl makes.
        tls.resumption = rustls::client::Resumption::disabled();
        Bench {
            proxy,
            pid,
            audit,
            tls: Arc::new(tls),
            sides: [
                Side {
                    name: "opened host, not metered",
                    hosts: opened,
                    metered: false,
                },
                Side {
                    name: "provider's host, metered",
                    hosts: NAMES,
                    metered: true,
                },
            ],
            metered: 0,
        }
    }

    /// One streamed request of `deltas` text deltas through the proxy,
    /// read to its end.
    fn ask(&mut self, side: usize, linked: bool, deltas: u64, keep: bool) -> Answer {
        let s = &self.sides[side];
        let host = s.hosts[linked as usize];
        if s.metered {
            self.metered += 1;
        }
        let body = json!({
            "model": MODEL, "max_tokens": deltas * TOKENS_PER_DELTA, "stream": true,
            "messages": [{"role": "user", "content": "Write at length."}],
        })
        .to_string();
        let request = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Accept: text/event-stream\r\nAnthropic-Version: 2023-06-01\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let started = Instant::now();
        let mut tcp = TcpStream::connect(("127.0.0.1", self.proxy)).unwrap();
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(LIMIT)).unwrap();
        tcp.set_write_timeout(Some(LIMIT)).unwrap();
        write!(
            tcp,
            "CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n"
        )
        .unwrap();
        // Nothing follows the proxy's answer before the client's hello.
        let mut reply = Vec::new();
        let mut some = [0u8; 1024];
        while !reply.ends_with(b"\r\n\r\n") {
            assert!(reply.len() < 4096, "{}: CONNECT: {reply:?}", s.name);
            let n = tcp.read(&mut some).unwrap();
            let so_far = String::from_utf8_lossy(&reply);
            assert!(n > 0, "{}: CONNECT: closed after {so_far:?}", s.name);
            reply.extend_from_slice(&some[..n]);
        }
        assert!(
            reply.starts_with(b"HTTP/1.1 200"),
            "{}: CONNECT {host}: {}",
            s.name,
            String::from_utf8_lossy(&reply)
        );
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
        let conn = rustls::ClientConnection::new(self.tls.clone(), name).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        tls.write_all(request.as_bytes()).unwrap();
        tls.flush().unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut head = Vec::new();
        let mut head_at = None;
        let mut answer = Answer {
            head: Duration::ZERO,
            first: Duration::ZERO,
            end: Duration::ZERO,
            bytes: 0,
            kept: Vec::new(),
        };
        let mut in_body = false;
        loop {
            let n = match tls.read(&mut buf) {
                Ok(n) => n,
                // The origin's close carried on without a close_notify.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
                Err(e) => panic!("{}: reading the answer: {e}", s.name),
            };
            if n == 0 {
                break;
            }
            let now = started.elapsed();
            head_at.get_or_insert(now);
            let piece: Vec<u8> = match in_body {
                true => buf[..n].to_vec(),
                false => {
                    head.extend_from_slice(&buf[..n]);
                    let Some(end) = find(&head, b"\r\n\r\n") else {
                        assert!(head.len() < 65536, "{}: no head's end", s.name);
                        continue;
                    };
                    in_body = true;
                    head.split_off(end + 4)
                }
            };
            if piece.is_empty() {
                continue;
            }
            if answer.bytes == 0 {
                answer.first = now;
            }
            answer.bytes += piece.len() as u64;
            answer.kept.extend_from_slice(&piece);
            if !keep && answer.kept.len() > 4096 {
                answer.kept.drain(..answer.kept.len() - 256);
            }
        }
        answer.end = started.elapsed();
        answer.head = head_at.unwrap_or(answer.end);
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        assert!(
            text.starts_with("http/1.1 200") && text.contains("content-type: text/event-stream"),
            "{}: {host}: {text}",
            s.name
        );
        assert!(
            !text.contains("transfer-encoding"),
            "{}: the proxy decodes a chunked answer: {text}",
            s.name
        );
        let whole = stream_of(deltas);
        assert_eq!(
            answer.bytes,
            whole.len() as u64,
            "{}: {host}: the stream's length",
            s.name
        );
        assert!(
            whole.ends_with(&answer.kept),
            "{}: {host}: the stream's end differs",
            s.name
        );
        answer
    }

    /// Every provider_request line of the proxy's audit log so far.
    fn lines(&self) -> Vec<Value> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.audit)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        files
            .iter()
            .flat_map(|f| {
                let text = std::fs::read_to_string(f).unwrap_or_default();
                text.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(|v| v["kind"] == "provider_request")
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The provider_request lines, once there is one per metered request
    /// made (a line is written as the tunnel ends: 5 s at most).
    fn metered_lines(&self) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let lines = self.lines();
            if lines.len() >= self.metered || Instant::now() > deadline {
                assert_eq!(
                    lines.len(),
                    self.metered,
                    "provider_request lines, one per metered request (and none for the other host)"
                );
                return lines;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Before anything is measured: each side's short stream whole, and the
    /// metered side really metered (its line: the model, what it used, a
    /// cost), the other not.
    pub fn check(&mut self, linked: bool) {
        for side in 0..2 {
            let got = self.ask(side, linked, SHORT, true);
            assert!(
                got.kept == stream_of(SHORT),
                "{}: the stream differs",
                self.sides[side].name
            );
        }
        let lines = self.metered_lines();
        let line = lines.last().unwrap();
        let provider = PROVIDERS[linked as usize];
        let tokens = SHORT * TOKENS_PER_DELTA;
        assert!(
            line["provider"] == provider
                && line["model"] == MODEL
                && line["streamed"] == true
                && line["cut"] == false
                && line["status"] == 200
                && line["output_tokens"] == tokens
                && line["micro_usd"].as_u64().is_some_and(|m| m > 0),
            "the metered request's line: {line}"
        );
        println!(
            "metered: {} checked: its provider_request line says {} input and {} output tokens, {} micro-USD",
            self.sides[1].hosts[linked as usize], line["input_tokens"], line["output_tokens"], line["micro_usd"]
        );
    }

    /// Time to the first byte of a short stream, contenders in turn.
    pub fn ttfb(&mut self) {
        let mut heads = vec![Vec::new(); 2];
        let stats = interleaved_with(2, TTFB_RUNS, |i| {
            let got = self.ask(i, false, SHORT, false);
            heads[i].push(got.head);
            got.first
        });
        let head_stats: Vec<Stats> = heads
            .into_iter()
            .map(|h| Stats::of(h[TTFB_RUNS / 10..].to_vec()))
            .collect();
        println!(
            "\nmetered against opened, first byte on loopback: a fresh connection each (connect, \
             CONNECT, TLS to warden and warden's to the origin, the request; the metered one's \
             body read whole and priced before it leaves), {TTFB_RUNS} runs after {} to warm up, \
             contenders in turn, a stream of {SHORT} deltas ({} bytes)",
            TTFB_RUNS / 10,
            stream_of(SHORT).len()
        );
        println!(
            "{:<28} {:>10} {:>8} {:>8} {:>8} {:>10} {:>8}",
            "", "event p50", "p90", "p99", "mean", "head p50", "p99"
        );
        for i in 0..2 {
            let (s, h) = (&stats[i], &head_stats[i]);
            println!(
                "{:<28} {:>10.0} {:>8.0} {:>8.0} {:>8.0} {:>10.0} {:>8.0}",
                self.sides[i].name,
                us(s.p50),
                us(s.p90),
                us(s.p99),
                us(s.mean),
                us(h.p50),
                us(h.p99)
            );
        }
        let above = |f: fn(&Stats) -> Duration, s: &[Stats]| us(f(&s[1])) - us(f(&s[0]));
        let p50 = above(|s| s.p50, &stats);
        println!(
            "metered above opened (µs): first event p50 {p50:+.0} (target ≤ 1000: {}), p99 {:+.0}, \
             mean {:+.0}; head p50 {:+.0}, p99 {:+.0}",
            super::verdict(p50 <= 1000.0),
            above(|s| s.p99, &stats),
            above(|s| s.mean, &stats),
            above(|s| s.p50, &head_stats),
            above(|s| s.p99, &head_stats),
        );
    }

    /// The long stream, `rounds` times each, contenders in turn (each
    /// round starting with the other); MB/s and the proxy's CPU time.
    pub fn throughput(&mut self, linked: bool, rounds: usize) {
        let n = long();
        let bytes = stream_of(n).len() as u64;
        for side in 0..2 {
            self.ask(side, linked, n, false);
        }
        let mut streamed = vec![Vec::new(); 2];
        let mut whole = vec![Vec::new(); 2];
        let mut ticks = [0u64; 2];
        for round in 0..rounds {
            for k in 0..2 {
                let i = (round + k) % 2;
                let before = link::cpu_ticks(self.pid).unwrap_or(0);
                let got = self.ask(i, linked, n, false);
                ticks[i] += link::cpu_ticks(self.pid).unwrap_or(0) - before;
                streamed[i].push(got.streamed());
                whole[i].push(got.whole());
            }
        }
        let place = match linked {
            true => format!(
                "on the shaped {} link (the origin {})",
                super::RATE.0,
                link::ORIGIN
            ),
            false => "on loopback".to_string(),
        };
        println!(
            "\nmetered against opened, a stream of {n} deltas ({bytes} bytes of events, \
             {:.1} M output tokens) {place}, {rounds} rounds after one to warm up, contenders in turn \
             (MB/s = 10^6 bytes/s from the body's first byte to its last; whole: from before the connect)",
            (n * TOKENS_PER_DELTA) as f64 / 1e6
        );
        println!(
            "{:<28} {:>8} {:>8} {:>8} {:>8} {:>8} {:>16}",
            "", "MB/s", "median", "min", "max", "whole", "proxy CPU s/GiB"
        );
        let gib = (bytes * rounds as u64) as f64 / (1u64 << 30) as f64;
        let mut means = [0.0; 2];
        let mut medians = [0.0; 2];
        for i in 0..2 {
            let mut s = streamed[i].clone();
            s.sort_by(f64::total_cmp);
            means[i] = super::mean(&s);
            medians[i] = s[s.len() / 2];
            println!(
                "{:<28} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>16.2}",
                self.sides[i].name,
                means[i],
                medians[i],
                s[0],
                s[s.len() - 1],
                super::mean(&whole[i]),
                ticks[i] as f64 / link::ticks_per_second() / gib
            );
        }
        let ratio = means[1] / means[0];
        println!(
            "metered / opened: mean {ratio:.3} (target ≥ 0.95: {}), median {:.3}, whole {:.3}",
            super::verdict(ratio >= 0.95),
            medians[1] / medians[0],
            super::mean(&whole[1]) / super::mean(&whole[0])
        );
    }

    /// After the runs: one provider_request line per metered request, each
    /// charged, none cut.
    pub fn audited(&self) {
        let lines = self.metered_lines();
        let long_tokens = long() * TOKENS_PER_DELTA;
        for line in &lines {
            assert!(
                line["micro_usd"].as_u64().is_some_and(|m| m > 0) && line["cut"] == false,
                "{line}"
            );
        }
        let long_line = lines.iter().find(|l| l["output_tokens"] == long_tokens);
        println!(
            "metered: {} requests, {} provider_request lines, each charged, none cut{}",
            self.metered,
            lines.len(),
            long_line
                .map(|l| format!(
                    "; a long stream: {} output tokens, {} micro-USD, metered for {} ms",
                    l["output_tokens"], l["micro_usd"], l["duration_ms"]
                ))
                .unwrap_or_default()
        );
    }
}
