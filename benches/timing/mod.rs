//! Measuring side by side, shared by the benches: contenders run in turn
//! (A, B, C, A, B, C, ...) so that the machine's drifts hit them alike.

#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct Stats {
    pub runs: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub mean: Duration,
}

impl Stats {
    pub fn of(mut times: Vec<Duration>) -> Stats {
        times.sort();
        let runs = times.len();
        Stats {
            runs,
            p50: times[runs / 2],
            p90: times[runs * 90 / 100],
            p99: times[runs * 99 / 100],
            mean: times.iter().sum::<Duration>() / runs as u32,
        }
    }
}

/// `n` contenders, `runs` rounds, a tenth more first to warm up; `once(i)`
/// runs contender `i` once and says how long the part that counts took.
/// Each round begins one contender further on, so that each follows every
/// other equally often: what one leaves running after it returns (podman's
/// cleanup processes, say) is not charged to whichever comes next.
pub fn interleaved_with(
    n: usize,
    runs: usize,
    mut once: impl FnMut(usize) -> Duration,
) -> Vec<Stats> {
    for i in 0..n {
        for _ in 0..runs / 10 {
            once(i);
        }
    }
    let mut times = vec![Vec::with_capacity(runs); n];
    for round in 0..runs {
        for k in 0..n {
            let i = (round + k) % n;
            times[i].push(once(i));
        }
    }
    times.into_iter().map(Stats::of).collect()
}

/// Contenders timed whole, each call one run.
pub fn interleaved<const N: usize>(runs: usize, mut each: [&mut dyn FnMut(); N]) -> [Stats; N] {
    let mut stats = interleaved_with(N, runs, |i| {
        let start = Instant::now();
        each[i]();
        start.elapsed()
    })
    .into_iter();
    std::array::from_fn(|_| stats.next().expect("one Stats per contender"))
}

/// The container engine with the options the launcher found this host
/// needs (the machine benches compare against it).
pub fn podman() -> Command {
    let host = warden::host::this_host::get().unwrap_or_else(|e| panic!("{e}"));
    let mut c = Command::new(host.engine.program());
    c.args(&host.global);
    c
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs `cmd` to success, its output discarded (shown if it fails).
pub fn ok(cmd: &mut Command) {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Prints one row per contender: its percentiles in µs, and `ratio` of
/// its figures under the heading `label`.
pub fn table(names: &[&str], stats: &[Stats], label: &str, ratio: impl Fn(&Stats) -> f64) {
    println!(
        "{:<42} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "p50 µs", "p90 µs", "p99 µs", "mean µs", label
    );
    for (n, s) in names.iter().zip(stats) {
        println!(
            "{:<42} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>9.2}",
            n,
            us(s.p50),
            us(s.p90),
            us(s.p99),
            us(s.mean),
            ratio(s)
        );
    }
}

pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The last `boot` line in the audit log of the running machine `id`,
/// read through its warden as `warden machine audit` reads it.
pub fn boot_line(id: &str) -> Option<serde_json::Value> {
    let (files, _anchor) = warden::host::machine::copy_audit(id).ok()?;
    let text = std::fs::read_to_string(files.last()?).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["kind"] == "boot")
}

/// Each boot phase's median over the boots (each a boot line's
/// `boot_phases_ms`, `[{"phase", "ms"}]` in the order they ran).
pub fn print_phases(boots: &[serde_json::Value]) {
    let Some(first) = boots.first().and_then(|b| b.as_array()) else {
        println!("  boot_phases_ms: not in the boot line");
        return;
    };
    println!("  phase by phase (median ms over {} boots):", boots.len());
    for (i, phase) in first.iter().enumerate() {
        let mut ms: Vec<f64> = boots.iter().filter_map(|b| b[i]["ms"].as_f64()).collect();
        ms.sort_by(f64::total_cmp);
        if let (Some(name), Some(median)) = (phase["phase"].as_str(), ms.get(ms.len() / 2)) {
            println!("    {name:<24} {median:>8.2}");
        }
    }
}

/// Why a machine bench cannot run here, if it cannot: it needs root
/// (rootful podman) and `image` (`machine/build`).
pub fn machine_bench_unable(bench: &str, image: &str) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(format!("the {bench} bench needs root (rootful podman)"));
    }
    match podman()
        .args(["image", "exists", image])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Err(e) => Some(format!("cannot run podman: {e}")),
        Ok(s) if !s.success() => Some(format!("no image {image}: build it with machine/build")),
        Ok(_) => None,
    }
}
