//! Waking a machine behind `warden machine serve`, measured side by side in
//! one run on rootful podman: a frozen machine thawed by a connection
//! against `podman unpause` of the same container and its first answer; a
//! stopped one started by a connection, and by `warden machine up`, against
//! `podman start` of the same container and its first answer; and the hop
//! serve adds while the machine is up (small requests, a bulk download)
//! against the engine's port directly.
//!
//! serve itself puts the machines to sleep, as it does for anyone: their
//! definitions say an idle time of one second (`idle_stop_minutes` 0.017),
//! and each round waits until serve has frozen or stopped the machine. The
//! `podman unpause` contender freezes it again by hand (`podman pause`)
//! once answered, so that the container is as serve left it (frozen, its
//! `paused` marker kept); the `podman start` contender's machine is stopped
//! again by serve's idle.
//!
//! Needs root and the image localhost/warden-machine:latest (`machine/build`),
//! and no other `warden machine serve` of root's (it starts its own); without
//! them it says why and does nothing. `scripts/bench` runs it; by itself:
//! `sudo cargo bench --bench wake` (see docs/benchmarks.md).

#[path = "../tests/common/mod.rs"]
mod common;
mod timing;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use timing::{ok, podman};
use warden::host::machine as m;

const IMAGE: &str = "localhost/warden-machine:latest";
/// Rounds of each wake contender.
const ROUNDS: usize = 7;
/// Small requests through serve and directly, in turn, each.
const HOP_RUNS: usize = 300;
/// Bulk downloads through serve and directly, in turn, each.
const BULK_RUNS: usize = 12;
/// The bulk page, in MiB.
const BULK_MIB: usize = 8;
/// `podman port` and `podman container inspect` runs, to tell what a
/// wake spends asking them.
const PORT_RUNS: usize = 5;

/// The runtime: a small page on port 3000 at `/`, `BULK_MIB` MiB at `/big`.
fn runtime() -> String {
    format!(
        r#"cd /tmp && exec python3 -c '
import http.server
big = b"x" * ({BULK_MIB} * 1024 * 1024)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = big if self.path == "/big" else b"ok\n"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 3000), H).serve_forever()
'"#
    )
}

fn warden() -> &'static str {
    env!("CARGO_BIN_EXE_warden")
}

/// Why the bench cannot run here, if it cannot.
fn unable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("the wake bench needs root (rootful podman)".into());
    }
    match podman()
        .args(["image", "exists", IMAGE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Err(e) => return Some(format!("cannot run podman: {e}")),
        Ok(s) if !s.success() => {
            return Some(format!("no image {IMAGE}: build it with machine/build"))
        }
        Ok(_) => {}
    }
    if warden::host::machine::serve::running() {
        return Some(
            "another warden machine serve fronts root's machines (one per owner and engine); \
             this bench needs its own: stop that one first"
                .into(),
        );
    }
    None
}

/// A machine of the bench's, thawed and removed with its volumes when
/// dropped (also on a panic).
struct Machine {
    id: String,
    name: String,
    definition: PathBuf,
}

impl Drop for Machine {
    fn drop(&mut self) {
        // A frozen container is thawed first: its removal must not wait on it.
        let _ = podman()
            .args(["unpause", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let out = Command::new(warden())
            .args(["machine", "rm", &self.id, "--volumes"])
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "warden machine rm {} --volumes: {}: {}",
                self.id,
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => eprintln!("warden machine rm {} --volumes: {e}", self.id),
        }
    }
}

impl Machine {
    /// Defines machine `tag` in `dir`, its port 3000 fronted by serve from
    /// `from` on; `extra` laid over the definition.
    fn define(dir: &std::path::Path, tag: &str, from: u16, extra: serde_json::Value) -> Machine {
        let id = format!("wakeb{}-{tag}", std::process::id());
        let mut definition = serde_json::json!({
            "id": id, "image": IMAGE, "network": "private",
            "ports": [{"port": 3000, "host": "auto", "from": from}],
            "serve": true, "command": ["sh", "-c", runtime()], "ready_port": 3000,
        });
        if let (Some(d), Some(e)) = (definition.as_object_mut(), extra.as_object()) {
            d.extend(e.clone());
        }
        let path = dir.join(format!("{tag}.json"));
        std::fs::write(&path, definition.to_string()).unwrap();
        Machine {
            name: m::container(&id),
            id,
            definition: path,
        }
    }

    /// `warden machine up`, which must succeed; the port serve fronts.
    fn up(&self) -> u16 {
        let out = Command::new(warden())
            .args(["machine", "up"])
            .arg(&self.definition)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "warden machine up {}: {}\n{said}{}",
            self.id,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        said.lines()
            .find_map(|l| {
                let (_, rest) = l.split_once("3000/tcp -> 127.0.0.1:")?;
                let (port, how) = rest.split_once(' ')?;
                how.contains("fronted by").then(|| port.parse().ok())?
            })
            .unwrap_or_else(|| panic!("up {}: no fronted port in: {said}", self.id))
    }

    /// Where the engine publishes the machine's port 3000 now.
    fn engine_port(&self) -> u16 {
        let out = podman()
            .args(["port", &self.name, "3000/tcp"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        said.lines()
            .next()
            .and_then(|l| l.rsplit(':').next())
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("podman port {}: {said:?}", self.name))
    }

    fn state(&self) -> String {
        let out = podman()
            .args(["inspect", "--format", "{{.State.Status}}", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits (a minute at most) until the container is `want`, as serve's
    /// idle leaves it; then a moment for the engine's own cleanup.
    fn wait_for(&self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = self.state();
            if now == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: still {now:?} after a minute, not {want:?} (serve's idle did not act)",
                self.id
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// One GET of `path` on 127.0.0.1:`port`, a fresh connection, read to its
/// end; the body's length, or why not.
fn get(port: u16, path: &str) -> Result<usize, String> {
    let attempt = || -> std::io::Result<Vec<u8>> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply)?;
        Ok(reply)
    };
    let reply = attempt().map_err(|e| e.to_string())?;
    let head_end = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no answer ({} bytes)", reply.len()))?;
    match reply.starts_with(b"HTTP/1.0 200") || reply.starts_with(b"HTTP/1.1 200") {
        true => Ok(reply.len() - head_end - 4),
        false => Err(String::from_utf8_lossy(&reply[..head_end]).into_owned()),
    }
}

/// GETs `/` until it answers, every 2 ms, 30 s at most.
fn first_answer(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match get(port, "/") {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(format!("no answer in 30 s: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A column of times: the runs in ms, and their median.
struct Column {
    name: &'static str,
    ms: Vec<f64>,
}

impl Column {
    fn new(name: &'static str) -> Column {
        Column {
            name,
            ms: Vec::new(),
        }
    }
    fn push(&mut self, d: Duration) {
        self.ms.push(ms(d));
    }
    fn median(&self) -> f64 {
        timing::median(self.ms.clone())
    }
    fn print(&self) {
        let runs: Vec<String> = self.ms.iter().map(|x| format!("{x:.0}")).collect();
        let (lo, hi) = self
            .ms
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        println!(
            "  {:<58} median {:>7.1} ms  (min {:.0}, max {:.0}; runs: {})",
            self.name,
            self.median(),
            lo,
            hi,
            runs.join(" ")
        );
    }
}

/// Wake from pause: serve's thaw at a connection against `podman unpause`.
fn from_pause(machine: &Machine, front: u16) -> (f64, f64, f64) {
    let engine = machine.engine_port();
    let mut unpause = Column::new("podman unpause (the command alone)");
    let mut after = Column::new("  then the first answer on the engine's port");
    let mut by_hand = Column::new("podman unpause + first answer on the engine's port");
    let mut served = Column::new("through serve: connect to the front port to first answer");
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        machine.wait_for("paused");
        let t = Instant::now();
        ok(podman().args(["unpause", &machine.name]));
        let thawed = t.elapsed();
        let answered = get(engine, "/");
        let total = t.elapsed();
        answered.unwrap_or_else(|e| panic!("round {round}: after podman unpause: {e}"));
        unpause.push(thawed);
        after.push(total - thawed);
        by_hand.push(total);
        // As serve left it: frozen, its marker kept.
        ok(podman().args(["pause", &machine.name]));
        std::thread::sleep(Duration::from_millis(500));
        let t = Instant::now();
        match get(front, "/") {
            Ok(_) => served.push(t.elapsed()),
            Err(e) => failed.push(format!("round {round}: {e}")),
        }
    }
    println!("\nWake from pause ({ROUNDS} rounds; each: serve's idle freezes it, podman unpause + answer, podman pause, a connection through serve):");
    for c in [&unpause, &after, &by_hand, &served] {
        c.print();
    }
    if !failed.is_empty() {
        println!("  through serve, failed: {}", failed.join("; "));
    }
    (served.median(), by_hand.median(), unpause.median())
}

/// Wake from stop: serve's start at a connection, and `up`, against
/// `podman start`.
fn from_stop(machine: &Machine, front: u16) -> (f64, f64, f64, f64) {
    let mut start = Column::new("podman start (the command alone)");
    let mut by_hand = Column::new("podman start + first answer on the engine's port");
    let mut served = Column::new("through serve: connect to the front port to first answer");
    let mut up = Column::new("warden machine up (unchanged, stopped) until it returns");
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        // Up now (since the first up, or the last round's): where the
        // engine publishes its port, which a stop and start keep.
        let engine = machine.engine_port();
        machine.wait_for("exited");
        let t = Instant::now();
        ok(podman().args(["start", &machine.name]));
        let started = t.elapsed();
        if let Err(e) = first_answer(engine) {
            panic!(
                "round {round}: after podman start, port {engine}: {e} (the engine's port is now {})",
                machine.engine_port()
            );
        }
        let total = t.elapsed();
        start.push(started);
        by_hand.push(total);
        machine.wait_for("exited");
        let t = Instant::now();
        match get(front, "/") {
            Ok(_) => served.push(t.elapsed()),
            Err(e) => failed.push(format!("round {round}: {e}")),
        }
        machine.wait_for("exited");
        let t = Instant::now();
        machine.up();
        up.push(t.elapsed());
    }
    println!(
        "\nWake from stop ({ROUNDS} rounds; each: serve's idle stops it before each contender):"
    );
    for c in [&start, &by_hand, &served, &up] {
        c.print();
    }
    if !failed.is_empty() {
        println!("  through serve, failed: {}", failed.join("; "));
    }
    (
        served.median(),
        up.median(),
        by_hand.median(),
        start.median(),
    )
}

/// The hop while up: small requests and a bulk download, through serve
/// and directly, in turn.
fn hop(machine: &Machine, front: u16) {
    let engine = machine.engine_port();
    let names = [
        "GET / through serve (fresh connection each)",
        "GET / on the engine's port directly",
    ];
    let ports = [front, engine];
    let stats = timing::interleaved_with(2, HOP_RUNS, |i| {
        let t = Instant::now();
        get(ports[i], "/").unwrap_or_else(|e| panic!("{}: {e}", names[i]));
        t.elapsed()
    });
    println!("\nThe hop while up: {HOP_RUNS} small GETs each, in turn (+ a tenth to warm up):");
    timing::table(&names, &stats, "x direct", |s| {
        s.p50.as_secs_f64() / stats[1].p50.as_secs_f64()
    });
    println!(
        "  serve's hop: p50 {:+.0} µs, p99 {:+.0} µs against direct",
        timing::us(stats[0].p50) - timing::us(stats[1].p50),
        timing::us(stats[0].p99) - timing::us(stats[1].p99)
    );
    let bulk = timing::interleaved_with(2, BULK_RUNS, |i| {
        let t = Instant::now();
        let got = get(ports[i], "/big").unwrap_or_else(|e| panic!("bulk {i}: {e}"));
        assert_eq!(got, BULK_MIB * 1024 * 1024);
        t.elapsed()
    });
    let rate = |d: Duration| BULK_MIB as f64 / d.as_secs_f64();
    println!(
        "Bulk: {BULK_MIB} MiB GET, {BULK_RUNS} each, in turn: through serve {:.0} MiB/s, directly {:.0} MiB/s at the median ({:.2} of direct)",
        rate(bulk[0].p50),
        rate(bulk[1].p50),
        rate(bulk[0].p50) / rate(bulk[1].p50)
    );
    let mut port = Column::new("podman port (what a wake asks the engine)");
    for _ in 0..PORT_RUNS {
        let t = Instant::now();
        machine.engine_port();
        port.push(t.elapsed());
    }
    port.print();
    let mut inspect = Column::new("podman container inspect (a start by serve asks it twice)");
    for _ in 0..PORT_RUNS {
        let t = Instant::now();
        ok(podman().args(["container", "inspect", &machine.name]));
        inspect.push(t.elapsed());
    }
    inspect.print();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // cargo bench asks benches to list themselves
    }
    if let Some(why) = unable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    // `-- pause`, `-- stop`, `-- hop`: those parts alone.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted =
        |part: &str| filters.is_empty() || filters.iter().any(|f| part.contains(f.as_str()));
    if !["pause", "stop", "hop"].iter().any(|p| wanted(p)) {
        eprintln!("bench wake: nothing matches {filters:?} (parts: pause, stop, hop)");
        return;
    }
    let began = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Command::new(warden());
    serve.args(["machine", "serve"]);
    let _serve = common::serve::serving(serve);
    // Each machine is dropped (removed) before serve ends.
    let idle = serde_json::json!({"idle_stop_minutes": 0.017});
    if wanted("hop") {
        let up = Machine::define(dir.path(), "h", 18740, serde_json::json!({}));
        let front = up.up();
        hop(&up, front);
    }
    let mut summary = Vec::new();
    if wanted("pause") {
        let mut definition = idle.clone();
        definition["idle"] = "pause".into();
        let machine = Machine::define(dir.path(), "p", 18700, definition);
        let front = machine.up();
        first_answer(front).unwrap();
        let (served, by_hand, unpause) = from_pause(&machine, front);
        summary.push(format!(
            "wake from pause through serve / podman unpause alone     {:.2}x  (goal: at most 1.2x)",
            served / unpause
        ));
        summary.push(format!(
            "wake from pause through serve / podman unpause + answer  {:.2}x",
            served / by_hand
        ));
        summary.push(format!(
            "wake from pause: first answer {:.0} ms after podman unpause's median (goal: within 50 ms)",
            served - unpause
        ));
    }
    if wanted("stop") {
        let machine = Machine::define(dir.path(), "s", 18720, idle);
        let front = machine.up();
        first_answer(front).unwrap();
        let (served, up, by_hand, start) = from_stop(&machine, front);
        summary.push(format!(
            "wake from stop through serve / podman start + answer     {:.2}x",
            served / by_hand
        ));
        summary.push(format!(
            "warden machine up / podman start + answer                {:.2}x",
            up / by_hand
        ));
        summary.push(format!(
            "wake from stop: first answer {:.0} ms after podman start's median",
            served - start
        ));
    }
    if !summary.is_empty() {
        println!("\nAt the medians:");
        summary.iter().for_each(|l| println!("  {l}"));
    }
    println!("(measured in {:.0} s)", began.elapsed().as_secs_f64());
}
