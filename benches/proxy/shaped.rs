//! Shaped links: the origin in a network namespace of its own, behind a
//! veth pair shaped with tbf (this kernel has no netem); the proxies and
//! the client in another. The bench makes both and both go with it: the
//! host's network is never touched. At each rate every contender downloads
//! through 1 and through 16 tunnels at once, contenders in turn; printed
//! as the share of the direct download, and each proxy's CPU time per GiB
//! it carried.

use super::{at_once, direct, gib_s, run_origin, tinyproxy, warden, Contender};
use crate::link::{self, cpu_ticks, name_hosts, sh, shape, ticks_per_second, LINK, ORIGIN};
use std::time::Duration;

/// The argument that runs the part inside its namespaces.
pub const INSIDE: &str = "shaped-inside";
/// The link's rates, as tc says them and in bits per second.
const RATES: [(&str, u64); 2] = [("1gbit", 1_000_000_000), ("10gbit", 10_000_000_000)];
const TUNNELS: [usize; 2] = [1, 16];
/// Bytes a round, all tunnels together.
const BYTES: u64 = 128 << 20;
const ROUNDS: usize = 3;
/// The origin's name.
const NAME: &str = "origin.bench";

/// Runs the bench again as `INSIDE`, in new network and mount namespaces.
pub fn run() {
    link::unshared(&[INSIDE], "shaped link");
}

pub fn inside() {
    sh(&["ip", "link", "set", "lo", "up"]);
    let (origin, tid) = link::origin_apart(0, run_origin);
    // tinyproxy and warden read /etc/hosts.
    name_hosts(&[(ORIGIN, NAME)]);
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
    let cpu_before: Vec<Option<u64>> = cs.iter().map(proxy_ticks).collect();
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
            let spent = proxy_ticks(c)? - (*before)?;
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

/// The proxy's CPU time so far, in ticks (None: no process of its own).
fn proxy_ticks(c: &Contender) -> Option<u64> {
    cpu_ticks(c.process.as_ref()?.child.id())
}
