//! A command in a running podman machine: `warden machine exec` (what a
//! user types) and warden's API in-process (what the launcher library
//! costs) against `podman exec` (what a user would otherwise use), measured
//! side by side in one run on one machine; plus `warden machine up` of an
//! unchanged, stopped machine and warden's own boot time from its audit log.
//!
//! Needs root and the image localhost/warden-machine:latest (`machine/build`);
//! without them it says why and does nothing. `scripts/bench` runs it; by
//! itself: `sudo cargo bench --bench machine` (see docs/benchmarks.md).

mod timing;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use timing::{interleaved, ok, podman, print_phases, table};
use warden::host::machine as m;
use warden::wire::client::Client;
use warden::wire::RunRequest;

const IMAGE: &str = "localhost/warden-machine:latest";
/// Rounds of the command contenders, in turn; a tenth more to warm up.
const RUNS: usize = 100;
/// Stop-then-up runs of the unchanged machine.
const UP_RUNS: usize = 5;

/// Why the bench cannot run here, if it cannot.
fn unable() -> Option<String> {
    timing::machine_bench_unable("machine", IMAGE)
}

/// The machine, removed with its volumes when dropped (also on a panic).
struct Machine {
    id: String,
    definition: PathBuf,
}

impl Drop for Machine {
    fn drop(&mut self) {
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

fn warden() -> &'static str {
    env!("CARGO_BIN_EXE_warden")
}

impl Machine {
    fn up(&self) {
        ok(Command::new(warden())
            .args(["machine", "up"])
            .arg(&self.definition));
    }
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
    let dir = tempfile::tempdir().unwrap();
    let id = format!("bench{}", std::process::id());
    let definition = dir.path().join("machine.json");
    std::fs::write(
        &definition,
        serde_json::json!({"id": id, "image": IMAGE}).to_string(),
    )
    .unwrap();
    let machine = Machine {
        id: id.clone(),
        definition,
    };
    let first_up = Instant::now();
    machine.up();
    let first_up = first_up.elapsed();
    let name = m::container(&id);
    let socket: PathBuf = m::socket(&id);
    let key = m::key(&id).unwrap();

    let run_true = |socket: &Path| {
        let mut client = Client::connect_keyed(socket, Some(&key), None).unwrap();
        let out = client
            .run(RunRequest {
                argv: Some(vec!["true".into()]),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(out.exit.status, 0, "API: true failed");
    };
    let names = [
        "warden machine exec ID -- true",
        "API in-process: connect + run true",
        "podman exec warden-ID true",
        "podman exec warden-ID warden run -- true",
    ];
    let stats = interleaved(
        RUNS,
        [
            &mut || ok(Command::new(warden()).args(["machine", "exec", &id, "--", "true"])),
            &mut || run_true(&socket),
            &mut || ok(podman().args(["exec", &name, "true"])),
            &mut || ok(podman().args(["exec", &name, "/sbin/warden", "run", "--", "true"])),
        ],
    );
    let podman_p50 = stats[2].p50.as_secs_f64();
    println!(
        "\n`true` in a running machine, {RUNS} runs, contenders in turn (podman/x: podman exec's p50 over this one's)"
    );
    table(&names, &stats, "podman/x", |s| {
        podman_p50 / s.p50.as_secs_f64()
    });
    for (i, what) in [(0, "warden machine exec"), (1, "API in-process")] {
        println!(
            "podman exec / {what:<20} p50 {:>6.1}x   mean {:>6.1}x   (target: at least 20x)",
            podman_p50 / stats[i].p50.as_secs_f64(),
            stats[2].mean.as_secs_f64() / stats[i].mean.as_secs_f64()
        );
    }

    // `up` of the unchanged machine: the start-only path.
    // Alternating with `podman start` of the same stopped container (what
    // a user would otherwise type; it returns before warden answers).
    let mut ups = Vec::with_capacity(UP_RUNS);
    let mut starts = Vec::with_capacity(UP_RUNS);
    let mut boots = Vec::with_capacity(UP_RUNS);
    let mut phases = Vec::with_capacity(UP_RUNS);
    for _ in 0..UP_RUNS {
        ok(Command::new(warden()).args(["machine", "stop", &id]));
        let t = Instant::now();
        machine.up();
        ups.push(t.elapsed());
        if let Some(line) = timing::boot_line(&id) {
            boots.extend(line["boot_ms"].as_f64());
            phases.push(line["boot_phases_ms"].clone());
        }
        ok(Command::new(warden()).args(["machine", "stop", &id]));
        let t = Instant::now();
        ok(podman().args(["start", &name]));
        starts.push(t.elapsed());
    }
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut up_ms: Vec<f64> = ups.iter().map(ms).collect();
    println!(
        "\nwarden machine up, first (create + start): {:.0} ms",
        ms(&first_up)
    );
    println!(
        "warden machine up, unchanged and stopped ({UP_RUNS} runs, ms): {}",
        list(&up_ms)
    );
    up_ms.sort_by(f64::total_cmp);
    println!(
        "  median {:.0} ms, min {:.0} ms, max {:.0} ms",
        up_ms[UP_RUNS / 2],
        up_ms[0],
        up_ms[UP_RUNS - 1]
    );
    let mut start_ms: Vec<f64> = starts.iter().map(ms).collect();
    println!(
        "podman start of the same stopped container, alternating ({UP_RUNS} runs, ms): {}",
        list(&start_ms)
    );
    start_ms.sort_by(f64::total_cmp);
    println!(
        "  median {:.0} ms; up / podman start {:.2}x at the median (target: at most 1.2x)",
        start_ms[UP_RUNS / 2],
        up_ms[UP_RUNS / 2] / start_ms[UP_RUNS / 2]
    );
    if boots.is_empty() {
        println!("warden's boot_ms: no boot line in its audit log");
    } else {
        println!(
            "warden's own boot (boot_ms of the last boot line after each up, ms): {}",
            list(&boots)
        );
        boots.sort_by(f64::total_cmp);
        println!("  median {:.1} ms", boots[boots.len() / 2]);
        print_phases(&phases);
    }
    println!("(measured in {:.0} s)", started.elapsed().as_secs_f64());
}
