//! A machine on an agent's first turn: `warden machine up --warm 1`,
//! which takes a spare made ahead (stopped, or with `--paused` frozen),
//! against a cold `warden machine up` of a new machine, side by side in
//! one run; with podman's own `run -d` of a new container, `start` of a
//! stopped one and `unpause` of a paused one (what each does at least),
//! all of the same image on the engine's bridge.
//!
//! Each contender is timed alone: the pool's fill, which runs in the
//! background after a take, is waited for (untimed) before the next one
//! starts, and each machine or container is removed untimed.
//!
//! Needs root and the image localhost/warden-machine:latest (`machine/build`);
//! without them it says why and does nothing. `scripts/bench` runs it; by
//! itself: `sudo cargo bench --bench warm` (see docs/benchmarks.md).

mod timing;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use timing::{interleaved_with, ok, podman, table, Stats};

const IMAGE: &str = "localhost/warden-machine:latest";
/// Rounds, each contender in turn; a tenth more first to warm up.
const RUNS: usize = 10;
/// How long a pool may take to have its spare again.
const FILL_LIMIT: Duration = Duration::from_secs(60);

fn warden() -> &'static str {
    env!("CARGO_BIN_EXE_warden")
}

/// Why the bench cannot run here, if it cannot.
fn unable() -> Option<String> {
    timing::machine_bench_unable("warm", IMAGE)
}

/// Everything the bench made, removed when dropped (a panic included).
struct Made {
    tag: String,
    dir: tempfile::TempDir,
    machines: Vec<String>,
    containers: Vec<String>,
}

impl Drop for Made {
    fn drop(&mut self) {
        for pool in [self.tag.clone(), format!("{}p", self.tag)] {
            let def = self.def(&pool);
            let def = def.to_str().unwrap();
            let _ = warden_ok(&["machine", "up", "--warm", "0", "--fill", def]);
            if let Some(pools) = pools_root() {
                let _ = std::fs::remove_dir_all(pools.join(&pool));
            }
        }
        for id in &self.machines {
            let _ = warden_ok(&["machine", "rm", id, "--volumes"]);
        }
        for name in &self.containers {
            let _ = podman().args(["rm", "-f", "-t", "0", name]).output();
        }
    }
}

impl Made {
    /// A definition named `id` (written once).
    fn def(&self, id: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{id}.json"));
        if !path.exists() {
            let text = serde_json::json!({"id": id, "image": IMAGE, "network": "private"});
            std::fs::write(&path, text.to_string()).unwrap();
        }
        path
    }
}

fn warden_ok(args: &[&str]) -> Result<String, String> {
    let out = Command::new(warden())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    match out.status.success() {
        true => Ok(said),
        false => Err(format!(
            "warden {}: {}{}",
            args.join(" "),
            said,
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

fn pools_root() -> Option<PathBuf> {
    let machines = warden::host::this_host::state_root().ok()?;
    Some(machines.parent()?.join("pools"))
}

/// Waits (bounded) until the pool has a spare and no fill holds its lock.
fn wait_for_spare(pool: &Path) {
    let deadline = Instant::now() + FILL_LIMIT;
    loop {
        let spares = std::fs::read_dir(pool.join("spares"))
            .map(|d| d.count())
            .unwrap_or(0);
        let idle = std::fs::File::open(pool.join("fill.lock"))
            .ok()
            .and_then(|f| {
                nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).ok()
            })
            .is_some();
        if spares >= 1 && idle {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the pool {} has no spare after {FILL_LIMIT:?}",
            pool.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The id `up` says it brought up.
fn brought(said: &str) -> String {
    said.lines()
        .find_map(|l| {
            l.strip_prefix("machine ")?
                .split_once(" up in ")
                .map(|(id, _)| id.to_string())
        })
        .unwrap_or_else(|| panic!("no `machine ID up in` line: {said}"))
}

/// A spare taken from the pool of `def` (waited for first), timed; the
/// machine then removed and the pool's fill waited for, untimed.
fn take(def: &Path, pool: &Path, paused: bool) -> Duration {
    let mut args = vec!["machine", "up", "--warm", "1", def.to_str().unwrap()];
    if paused {
        args.push("--paused");
    }
    wait_for_spare(pool);
    let t = Instant::now();
    let said = warden_ok(&args).unwrap();
    let took = t.elapsed();
    assert!(
        said.contains("a spare of pool"),
        "a spare was ready: {said}"
    );
    warden_ok(&["machine", "rm", &brought(&said), "--volumes"]).unwrap();
    wait_for_spare(pool);
    took
}

/// A pool of one spare, its first machine made cold (and kept in `made`).
fn pool_of_one(made: &mut Made, id: &str, paused: bool) -> (PathBuf, PathBuf) {
    let def = made.def(id);
    let mut args = vec!["machine", "up", "--warm", "1", def.to_str().unwrap()];
    if paused {
        args.push("--paused");
    }
    made.machines.push(brought(&warden_ok(&args).unwrap()));
    (def, pools_root().unwrap().join(id))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // cargo bench asks benches to list themselves
    }
    if let Some(why) = unable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let started = Instant::now();
    let tag = format!("warm{}", std::process::id());
    let mut made = Made {
        tag: tag.clone(),
        dir: tempfile::tempdir().unwrap(),
        machines: Vec::new(),
        containers: Vec::new(),
    };
    let (stopped_def, stopped_pool) = pool_of_one(&mut made, &tag, false);
    let (paused_def, paused_pool) = pool_of_one(&mut made, &format!("{tag}p"), true);
    let ulimits = warden::host::this_host::get().unwrap().ulimits.clone();
    let plain = |name: &str, verb: &[&str]| {
        let mut command = podman();
        command
            .args(verb)
            .args(["--name", name])
            .args(&ulimits)
            .args(["--entrypoint=", IMAGE, "sleep", "infinity"]);
        command
    };
    let (stopped, paused) = (format!("{tag}-stopped"), format!("{tag}-paused"));
    ok(&mut plain(&stopped, &["create"]));
    ok(&mut plain(&paused, &["create"]));
    ok(podman().args(["start", &paused]));
    ok(podman().args(["pause", &paused]));
    made.containers.extend([stopped.clone(), paused.clone()]);
    let mut n = 0;
    let stats: Vec<Stats> = interleaved_with(6, RUNS, |i| {
        n += 1;
        let timed = |command: &mut Command| {
            let t = Instant::now();
            ok(command);
            t.elapsed()
        };
        match i {
            0 => {
                let id = format!("{tag}-cold{n}");
                let def = made.def(&id);
                let t = Instant::now();
                warden_ok(&["machine", "up", def.to_str().unwrap()]).unwrap();
                let took = t.elapsed();
                warden_ok(&["machine", "rm", &id, "--volumes"]).unwrap();
                took
            }
            1 => take(&stopped_def, &stopped_pool, false),
            2 => take(&paused_def, &paused_pool, true),
            3 => {
                let name = format!("{tag}-run{n}");
                let took = timed(&mut plain(&name, &["run", "-d"]));
                ok(podman().args(["rm", "-f", "-t", "0", &name]));
                took
            }
            4 => {
                let took = timed(podman().args(["start", &stopped]));
                ok(podman().args(["stop", "-t", "0", &stopped]));
                took
            }
            _ => {
                let took = timed(podman().args(["unpause", &paused]));
                ok(podman().args(["pause", &paused]));
                took
            }
        }
    });
    let names = [
        "warden machine up (a new machine)",
        "warden machine up --warm 1 (a stopped spare)",
        "warden machine up --warm 1 --paused",
        "podman run -d (a new container)",
        "podman start (a stopped container)",
        "podman unpause (a paused container)",
    ];
    println!("\na machine on first asking, {RUNS} rounds, contenders in turn (x/spare: this one's p50 over the stopped spare's)");
    let spare = stats[1].p50.as_secs_f64();
    table(&names, &stats, "x/spare", |s| s.p50.as_secs_f64() / spare);
    let p = |i: usize| stats[i].p50.as_secs_f64();
    println!(
        "a stopped spare: {:.2}x faster than a cold up, {:.2}x podman start; a paused one: {:.2}x faster than a cold up, {:.2}x podman unpause; a cold up {:.2}x podman run -d",
        p(0) / p(1),
        p(1) / p(4),
        p(0) / p(2),
        p(2) / p(5),
        p(0) / p(3)
    );
    drop(made);
    println!("(measured in {:.0} s)", started.elapsed().as_secs_f64());
}
