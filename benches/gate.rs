//! warden's connect gate against the kernel's own connect, side by side in
//! one run: two machines on the benches' own internet, one whose firewall
//! is nftables (the kernel connects), one without CAP_NET_ADMIN, held by
//! the gate (warden connects for the command). Measured from inside a
//! command: the time of one connect to the proxy, and a download through
//! the proxy.
//!
//! Run as root: `scripts/bench gate` (see docs/benchmarks.md).

#[path = "../tests/common/mod.rs"]
mod common;
mod timing;

use common::internet::Internet;
use common::{Machine, Options};
use serde_json::json;
use warden::wire::RunRequest;

/// Connects per round, rounds per machine (alternating).
const CONNECTS: usize = 500;
const ROUNDS: usize = 8;
/// Bytes per download, downloads per machine (alternating).
const DOWNLOAD: u64 = 200_000_000;
const DOWNLOADS: usize = 7;

/// Times `n` connects to a loopback port (the connect alone, refused or
/// not), one a line, in ns.
const CONNECT_LOOP: &str = r#"
import socket, sys, time
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    t = time.perf_counter_ns()
    try:
        s.connect(("127.0.0.1", int(sys.argv[2])))
    except OSError:
        pass
    print(time.perf_counter_ns() - t)
    s.close()
"#;

fn boot(internet: &Internet, gated: bool) -> Machine {
    let policy_dir = internet
        .dir
        .path()
        .join(if gated { "gated" } else { "nft" });
    std::fs::create_dir_all(&policy_dir).unwrap();
    let policy = json!({"hosts": ["allowed.test"],
                        "allow_addresses": [format!("{}/32", internet.v4)]});
    std::fs::write(policy_dir.join("network.json"), policy.to_string()).unwrap();
    let m = Machine::boot(Options {
        config: json!({"policy_dir": policy_dir}),
        netns: Some(internet.machine_ns.clone()),
        binds: vec![
            (internet.resolv_conf(), "/etc/resolv.conf".into()),
            (internet.hosts(), "/etc/hosts".into()),
        ],
        drop_caps: if gated {
            vec!["net_admin".into()]
        } else {
            Vec::new()
        },
        ..Options::default()
    });
    let status = m.client().status().unwrap();
    let fw = common::layer(&status, "firewall");
    let by_gate = fw.detail.contains("connect gate");
    assert!(fw.holds && by_gate == gated, "{fw:?}");
    m
}

fn run(m: &Machine, line: &str) -> String {
    let out = m
        .client()
        .run(RunRequest {
            shell: Some(line.into()),
            timeout_ms: Some(300_000),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        out.exit.status,
        0,
        "{line}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One connect from a command, in both machines: interleaved rounds.
fn connects(machines: &[(&str, Machine); 2], what: &str, port: u16) {
    let script = format!("python3 -c '{CONNECT_LOOP}' {CONNECTS} {port}");
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for (i, (_, m)) in machines.iter().enumerate() {
            let out = run(m, &script);
            let us = out
                .lines()
                .filter_map(|l| l.parse::<f64>().ok())
                .map(|ns| ns / 1e3);
            times[i].extend(us);
        }
    }
    println!(
        "\none connect {what} from a command ({} each, interleaved rounds of {CONNECTS})",
        CONNECTS * ROUNDS
    );
    println!("{:<14} {:>10} {:>10}", "", "p50 µs", "p99 µs");
    let mut p50 = [0.0; 2];
    for (i, (name, _)) in machines.iter().enumerate() {
        times[i].sort_by(f64::total_cmp);
        p50[i] = percentile(&times[i], 50);
        println!(
            "{name:<14} {:>10.1} {:>10.1}",
            p50[i],
            percentile(&times[i], 99)
        );
    }
    println!(
        "the gate's cost at p50: {:.1} µs ({:.2}x the kernel's)",
        p50[1] - p50[0],
        p50[1] / p50[0]
    );
}

fn percentile(sorted: &[f64], p: usize) -> f64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("bench gate: skipped: needs root (scripts/bench runs it)");
        return;
    }
    let internet = Internet::start();
    let machines = [
        ("nftables", boot(&internet, false)),
        ("connect gate", boot(&internet, true)),
    ];
    for (what, port) in [("to the proxy", 3128), ("refused (127.0.0.1:9)", 9)] {
        connects(&machines, what, port);
    }

    let curl = format!(
        "curl -sS -o /dev/null -w '%{{size_download}} %{{time_total}}' http://allowed.test/bytes/{DOWNLOAD}"
    );
    let mut rates = [Vec::new(), Vec::new()];
    for _ in 0..DOWNLOADS {
        for (i, (_, m)) in machines.iter().enumerate() {
            let out = run(m, &curl);
            let mut it = out.split_whitespace();
            let size: f64 = it.next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
            let secs: f64 = it.next().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
            assert_eq!(size as u64, DOWNLOAD, "{out}");
            rates[i].push(size / secs / 1e6);
        }
    }
    println!(
        "\na {} MB download through the proxy (plain HTTP, {DOWNLOADS} each, interleaved)",
        DOWNLOAD / 1_000_000
    );
    let mut median = [0.0; 2];
    for (i, (name, _)) in machines.iter().enumerate() {
        median[i] = timing::median(rates[i].clone());
        println!("{name:<14} {:>8.0} MB/s (median)", median[i]);
    }
    println!(
        "through the gate: {:.1}% of the nftables machine's",
        median[1] / median[0] * 100.0
    );
}
