//! A shaped link for the benches, shared by `proxy` and `opened`: an
//! origin on a thread of its own in a network namespace the bench makes,
//! joined to the bench's by a veth pair shaped with tbf (this kernel has no
//! netem); names for it in a hosts file bound over /etc/hosts in the
//! bench's mount namespace; a process's CPU time. The bench makes all of it
//! in namespaces of its own (`unshared`), and all of it goes with them: the
//! host's network and files are never touched.

#![allow(dead_code)]

use nix::sched::CloneFlags;
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::mpsc;

/// The link: the bench's end, the origin's, and both as a block.
pub const CLIENT: &str = "10.77.0.1/30";
pub const ORIGIN: &str = "10.77.0.2";
pub const LINK: &str = "10.77.0.0/30";

/// Runs this bench again with `args`, in new network and mount
/// namespaces; false (having said why) when not root.
pub fn unshared(args: &[&str], what: &str) -> bool {
    if !nix::unistd::geteuid().is_root() {
        println!(
            "\n{what}: skipped: it makes network namespaces and a veth pair, which needs root"
        );
        return false;
    }
    let status = Command::new("unshare")
        .args(["--net", "--mount"])
        .arg(std::env::current_exe().unwrap())
        .args(args)
        .status()
        .expect("unshare (util-linux)");
    assert!(status.success(), "{what}: the run failed: {status}");
    true
}

/// The origin on a thread of its own in a new network namespace, joined
/// to this one by the veth pair, listening on `port` of `ORIGIN` (0: any);
/// `serve` runs there for ever. Returns its address and that thread's id.
pub fn origin_apart(
    port: u16,
    serve: impl FnOnce(TcpListener) + Send + 'static,
) -> (SocketAddr, i32) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (addr_tx, addr_rx) = mpsc::channel();
    std::thread::spawn(move || {
        // A network namespace is a thread's own: the runtime's threads,
        // made from this one, share it.
        nix::sched::unshare(CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
        go_rx.recv().unwrap();
        let listener = TcpListener::bind((ORIGIN, port)).unwrap();
        addr_tx.send(listener.local_addr().unwrap()).unwrap();
        serve(listener);
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

/// Each `(address, name)` in /etc/hosts for every process of this mount
/// namespace (what the proxies and the clients read): a copy with them
/// added, bound over it here only.
pub fn name_hosts(names: &[(&str, &str)]) {
    use nix::mount::{mount, MsFlags};
    let mut text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    text.push('\n');
    for (address, name) in names {
        text.push_str(&format!("{address} {name}\n"));
    }
    let copy = std::env::temp_dir().join(format!("warden-bench-hosts-{}", std::process::id()));
    std::fs::write(&copy, text).unwrap();
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
pub fn shape(rate: &str, bits: u64, tid: i32) {
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

/// A process's CPU time so far (user and system, every thread), in ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's name (which may hold spaces): the state
    // is field 3, utime field 14 and stime field 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

pub fn ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

/// A process's resident memory now, and its peak (`VmRSS`, `VmHWM`).
pub fn memory(pid: u32) -> Option<(String, String)> {
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

pub fn sh(args: &[&str]) {
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
