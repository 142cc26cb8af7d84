//! Shaped links: the origin in a network namespace of its own, behind a
//! veth pair shaped with tbf (this kernel has no netem); the proxies and
//! the client in another. The bench makes both and both go with it: the
//! host's network is never touched. At each rate every contender downloads
//! through 1 and through 16 tunnels at once, contenders in turn; printed
//! as the share of the direct download, and each proxy's CPU time per GiB
//! it carried.

use super::{at_once, direct, gib_s, run_origin, tinyproxy, warden, Contender};
use nix::sched::CloneFlags;
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

/// The argument that runs the part inside its namespaces.
pub const INSIDE: &str = "shaped-inside";
/// The link's rates, as tc says them and in bits per second.
const RATES: [(&str, u64); 2] = [("1gbit", 1_000_000_000), ("10gbit", 10_000_000_000)];
const TUNNELS: [usize; 2] = [1, 16];
/// Bytes a round, all tunnels together.
const BYTES: u64 = 128 << 20;
const ROUNDS: usize = 3;
/// The link: the client's end and the origin's, and the origin's name.
const CLIENT: &str = "10.77.0.1/30";
const ORIGIN: &str = "10.77.0.2";
const LINK: &str = "10.77.0.0/30";
const NAME: &str = "origin.bench";

/// Runs the bench again as `INSIDE`, in new network and mount namespaces.
pub fn run() {
    if !nix::unistd::geteuid().is_root() {
        println!(
            "\nshaped link: skipped: it makes network namespaces and a veth pair, which needs root"
        );
        return;
    }
    let status = Command::new("unshare")
        .args(["--net", "--mount"])
        .arg(std::env::current_exe().unwrap())
        .arg(INSIDE)
        .status()
        .expect("unshare (util-linux)");
    assert!(status.success(), "the shaped-link run failed: {status}");
}

pub fn inside() {
    sh(&["ip", "link", "set", "lo", "up"]);
    let (origin, tid) = start_origin_apart();
    name_the_origin();
    let scratch = tempfile::tempdir().unwrap();
    let mut cs = vec![
        direct(origin),
        tinyproxy(scratch.path(), origin, Some(NAME)),
        warden(scratch.path(), origin, (NAME, LINK)),
    ];
    for c in &cs {
        c.download(c.tunnel(), 1 << 20);
    }
    println!(
        "\nshaped link: a veth pair with tbf on both ends, the origin {ORIGIN} in a network namespace of its own; \
         {} MiB a round through 1 or 16 tunnels at once, {ROUNDS} rounds, contenders in turn",
        BYTES >> 20
    );
    println!(
        "{:<8} {:>7} {:>14} {:>14} {:>8} {:>14} {:>8}",
        "rate", "tunnels", "direct MiB/s", "tinyproxy", "% dir", "warden", "% dir"
    );
    let cpu_before: Vec<Option<u64>> = cs.iter().map(cpu_ticks).collect();
    let mut carried = 0u64;
    for (rate, bits) in RATES {
        shape(rate, bits, tid);
        for tunnels in TUNNELS {
            let mut time = [Duration::ZERO; 3];
            for _ in 0..ROUNDS {
                for (i, c) in cs.iter().enumerate() {
                    time[i] += at_once(c, tunnels, BYTES / tunnels as u64);
                }
            }
            carried += BYTES * ROUNDS as u64;
            let mib = |d: Duration| gib_s(BYTES * ROUNDS as u64, d) * 1024.0;
            let (d, t, w) = (mib(time[0]), mib(time[1]), mib(time[2]));
            println!(
                "{rate:<8} {tunnels:>7} {d:>14.1} {t:>14.1} {:>7.1}% {w:>14.1} {:>7.1}%",
                100.0 * t / d,
                100.0 * w / d
            );
        }
        cs.iter_mut().for_each(Contender::check);
    }
    let gib = carried as f64 / (1u64 << 30) as f64;
    let per_gib: Vec<Option<f64>> = cs
        .iter()
        .zip(&cpu_before)
        .map(|(c, before)| {
            let spent = cpu_ticks(c)? - (*before)?;
            Some(spent as f64 / ticks_per_second() / gib)
        })
        .collect();
    if let (Some(t), Some(w)) = (per_gib[1], per_gib[2]) {
        println!(
            "CPU time per GiB carried (user + system, all threads): {} {t:.3} s, warden {w:.3} s; warden/tinyproxy {:.2}",
            cs[1].name,
            w / t
        );
    }
}

/// The origin on a thread of its own in a new network namespace, joined to
/// this one by the veth pair; its address and that thread's id.
fn start_origin_apart() -> (SocketAddr, i32) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (addr_tx, addr_rx) = mpsc::channel();
    std::thread::spawn(move || {
        // A network namespace is a thread's own: the runtime's threads,
        // made from this one, share it.
        nix::sched::unshare(CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
        go_rx.recv().unwrap();
        let listener = TcpListener::bind((ORIGIN, 0)).unwrap();
        addr_tx.send(listener.local_addr().unwrap()).unwrap();
        run_origin(listener);
    });
    let tid = tid_rx.recv().unwrap();
    let there = format!("--net=/proc/{tid}/ns/net");
    sh(&[
        "ip", "link", "add", "wb0", "type", "veth", "peer", "name", "wb1",
    ]);
    sh(&["ip", "link", "set", "wb1", "netns", &tid.to_string()]);
    sh(&["ip", "addr", "add", CLIENT, "dev", "wb0"]);
    sh(&["ip", "link", "set", "wb0", "up"]);
    let origin = format!("{ORIGIN}/30");
    for args in [
        vec!["ip", "addr", "add", &origin, "dev", "wb1"],
        vec!["ip", "link", "set", "wb1", "up"],
        vec!["ip", "link", "set", "lo", "up"],
    ] {
        let mut all = vec!["nsenter", &there];
        all.extend(args);
        sh(&all);
    }
    go_tx.send(()).unwrap();
    (addr_rx.recv().unwrap(), tid)
}

/// `NAME` means the origin, for both proxies (tinyproxy and warden read
/// /etc/hosts): a copy bound over it in this mount namespace only.
fn name_the_origin() {
    use nix::mount::{mount, MsFlags};
    let text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let copy = std::env::temp_dir().join(format!("warden-bench-hosts-{}", std::process::id()));
    std::fs::write(&copy, format!("{text}\n{ORIGIN} {NAME}\n")).unwrap();
    mount(
        Some(&copy),
        "/etc/hosts",
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .expect("bind a hosts file over /etc/hosts");
    let _ = std::fs::remove_file(&copy);
}

/// tbf at `rate` on both ends; a burst of 10 ms at that rate.
fn shape(rate: &str, bits: u64, tid: i32) {
    let burst = (bits / 8 / 100).to_string();
    let tbf = |dev: &'static str| {
        vec![
            "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", &burst,
            "latency", "50ms",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    };
    let here = tbf("wb0");
    sh(&here.iter().map(String::as_str).collect::<Vec<_>>());
    let there = format!("--net=/proc/{tid}/ns/net");
    let mut all = vec!["nsenter".to_string(), there];
    all.extend(tbf("wb1"));
    sh(&all.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The proxy's CPU time so far (user and system, every thread), in ticks.
fn cpu_ticks(c: &Contender) -> Option<u64> {
    let pid = c.process.as_ref()?.child.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's name (which may hold spaces): the state
    // is field 3, utime field 14 and stime field 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
