//! Density: N warden machines against N plain containers of the same image
//! on one host, side by side in one run. For each N, per container: the
//! host memory it holds (its own processes' anonymous memory and what the
//! kernel's unreclaimable memory grew by; the host's MemAvailable delta
//! too), its own processes (conmon and its PID namespace: their number,
//! PSS and descriptors, its memory cgroup, its PID 1's RSS), the host's
//! file handles, processes and threads before against after; the time to
//! make all N (`warden machine up` against `podman run -d`) and to list
//! them (`warden machine ps` against `podman ps -a`); and `warden machine
//! exec ID -- true` to a random machine with all N up, in turn with the
//! same to one machine and the host's own fork+exec+wait (its speed at
//! that moment), against the same with one machine up. Then the ratios
//! against the density goals.
//!
//! Needs root and the image localhost/warden-machine:latest (`machine/build`);
//! without them it says why and does nothing. The levels are its arguments
//! (default 10 50 100): `sudo cargo bench --bench density -- 10 50 100`.
//! Everything it makes is named `dens<pid>-...` and removed at its end, a
//! failure midway included (see docs/benchmarks.md).

mod timing;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use timing::{ok, podman, us, Stats};

const IMAGE: &str = "localhost/warden-machine:latest";
/// Levels when none are given.
const LEVELS: [usize; 3] = [10, 50, 100];
/// The most machines one run makes (each is a container, two volumes and
/// a state folder).
const MOST: usize = 200;
/// `exec true` rounds at each level, a tenth more first to warm up.
const EXEC_RUNS: usize = 100;
/// Listings at each level, each contender in turn.
const PS_RUNS: usize = 5;
/// How long the host is left alone before it is read: warden gives back
/// its code and heap at its 5 s tick once idle for a second, podman's
/// cleanup processes end.
const SETTLE: Duration = Duration::from_secs(10);
/// Removals at once at the end.
const REMOVERS: usize = 4;

fn warden() -> &'static str {
    env!("CARGO_BIN_EXE_warden")
}

/// Why the bench cannot run here, if it cannot.
fn unable() -> Option<String> {
    timing::machine_bench_unable("density", IMAGE)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Warden,
}

/// What one run made of a kind, removed when dropped (also on a panic):
/// plain containers by name, machines by id with their volumes.
struct Fleet {
    kind: Kind,
    /// Container names (plain) or machine ids (warden), in making order.
    made: Vec<String>,
    /// Where the machines' definitions are.
    dir: tempfile::TempDir,
    tag: String,
}

impl Fleet {
    fn new(kind: Kind) -> Fleet {
        Fleet {
            kind,
            made: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
            tag: format!("dens{}", std::process::id()),
        }
    }

    /// The engine's name of the `i`th container.
    fn container(&self, i: usize) -> String {
        match self.kind {
            Kind::Plain => self.made[i].clone(),
            Kind::Warden => format!("warden-{}", self.made[i]),
        }
    }

    /// Makes one more; how long it took.
    fn make_one(&mut self) -> Duration {
        let i = self.made.len();
        match self.kind {
            Kind::Plain => {
                let name = format!("{}-plain-{i}", self.tag);
                self.made.push(name.clone());
                // The limits the launcher gives a machine: podman's own
                // default (a million open files) is above this host's.
                let ulimits = &warden::host::this_host::get().unwrap().ulimits;
                let started = Instant::now();
                ok(podman()
                    .args(["run", "-d", "--name", &name])
                    .args(ulimits)
                    .args(["--entrypoint=", IMAGE, "sleep", "infinity"]));
                started.elapsed()
            }
            Kind::Warden => {
                let id = format!("{}-{i}", self.tag);
                let definition = self.dir.path().join(format!("{id}.json"));
                std::fs::write(
                    &definition,
                    serde_json::json!({"id": id, "image": IMAGE, "network": "private"}).to_string(),
                )
                .unwrap();
                self.made.push(id);
                let started = Instant::now();
                ok(Command::new(warden())
                    .args(["machine", "up"])
                    .arg(&definition));
                started.elapsed()
            }
        }
    }

    /// Removes all it made, a few at once; says what failed.
    fn remove_all(&mut self) {
        let made = std::mem::take(&mut self.made);
        if made.is_empty() {
            return;
        }
        let started = Instant::now();
        match self.kind {
            Kind::Plain => {
                for chunk in made.chunks(50) {
                    let out = podman()
                        .args(["rm", "-f", "-t", "0"])
                        .args(chunk)
                        .stdin(Stdio::null())
                        .output();
                    if let Ok(o) = &out {
                        if o.status.success() {
                            continue;
                        }
                    }
                    eprintln!("podman rm -f {}: {out:?}", chunk.join(" "));
                }
            }
            Kind::Warden => std::thread::scope(|s| {
                for k in 0..REMOVERS {
                    let made = &made;
                    s.spawn(move || {
                        for id in made.iter().skip(k).step_by(REMOVERS) {
                            let out = Command::new(warden())
                                .args(["machine", "rm", id, "--volumes"])
                                .stdin(Stdio::null())
                                .output();
                            match out {
                                Ok(o) if o.status.success() => {}
                                Ok(o) => eprintln!(
                                    "warden machine rm {id} --volumes: {}: {}",
                                    o.status,
                                    String::from_utf8_lossy(&o.stderr).trim()
                                ),
                                Err(e) => eprintln!("warden machine rm {id} --volumes: {e}"),
                            }
                        }
                    });
                }
            }),
        }
        eprintln!(
            "removed {} {} in {:.1} s",
            made.len(),
            match self.kind {
                Kind::Plain => "plain containers",
                Kind::Warden => "machines",
            },
            started.elapsed().as_secs_f64()
        );
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// The host as a whole, read from /proc.
#[derive(Clone, Default)]
struct HostRead {
    /// MemTotal - MemAvailable, kB.
    used_kb: i64,
    /// What the kernel holds that it cannot reclaim, but processes' own
    /// anonymous memory: Shmem + SUnreclaim + KernelStack + PageTables +
    /// Percpu, kB. The page cache is left out: it is given back on demand,
    /// and the builds beside the bench move it by gigabytes.
    kernel_kb: i64,
    /// Allocated file handles (/proc/sys/fs/file-nr).
    files: i64,
    processes: i64,
    threads: i64,
    /// Processes by their `comm`.
    comms: BTreeMap<String, i64>,
}

fn meminfo(field: &str) -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{field} not in /proc/meminfo"))
}

/// A field of /proc/PID/status (the number before its unit), 0 if gone.
fn status_field(pid: u32, field: &str) -> i64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

fn read_host() -> HostRead {
    let files = std::fs::read_to_string("/proc/sys/fs/file-nr")
        .unwrap()
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap();
    let mut host = HostRead {
        used_kb: meminfo("MemTotal:") - meminfo("MemAvailable:"),
        kernel_kb: [
            "Shmem:",
            "SUnreclaim:",
            "KernelStack:",
            "PageTables:",
            "Percpu:",
        ]
        .into_iter()
        .map(meminfo)
        .sum(),
        files,
        ..HostRead::default()
    };
    for pid in pids() {
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        host.processes += 1;
        host.threads += status_field(pid, "Threads:");
        *host.comms.entry(comm.trim().to_string()).or_default() += 1;
    }
    host
}

/// What one container adds by its own processes.
#[derive(Clone, Copy, Default)]
struct Own {
    /// conmon and every process in the container's PID namespace.
    processes: i64,
    descriptors: i64,
    /// Their proportional set size, kB.
    pss_kb: i64,
    /// Their anonymous resident memory, kB.
    anon_kb: i64,
    /// Its PID 1's resident memory, kB (warden's, in a machine).
    pid1_rss_kb: i64,
    /// Its memory cgroup's usage, kB (0 where it cannot be read).
    cgroup_kb: i64,
}

fn descriptors(pid: u32) -> i64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as i64)
}

fn pss_kb(pid: u32) -> i64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The v1 memory cgroup's usage of the process's cgroup, or the v2 one's.
fn cgroup_kb(pid: u32) -> i64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let v1 = text.lines().find_map(|l| {
        let (_, rest) = l.split_once(':')?;
        let (controllers, path) = rest.split_once(':')?;
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| format!("/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"))
    });
    let v2 = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|path| format!("/sys/fs/cgroup{path}/memory.current"));
    [v1, v2]
        .into_iter()
        .flatten()
        .find_map(|f| std::fs::read_to_string(f).ok()?.trim().parse::<i64>().ok())
        .map_or(0, |bytes| bytes / 1024)
}

/// Each container's own processes, read from its inspect and /proc.
fn owns(fleet: &Fleet) -> Vec<Own> {
    let names: Vec<String> = (0..fleet.made.len()).map(|i| fleet.container(i)).collect();
    let mut by_ns: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for pid in pids() {
        if let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/pid")) {
            by_ns
                .entry(ns.to_string_lossy().into_owned())
                .or_default()
                .push(pid);
        }
    }
    let mut all = Vec::with_capacity(names.len());
    for chunk in names.chunks(50) {
        let out = podman()
            .args([
                "container",
                "inspect",
                "--format",
                "{{.State.Pid}} {{.State.ConmonPid}}",
            ])
            .args(chunk)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "podman inspect: {out:?}");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut f = line.split_whitespace().map(|x| x.parse::<u32>().unwrap());
            let (pid, conmon) = (f.next().unwrap(), f.next().unwrap());
            let ns = std::fs::read_link(format!("/proc/{pid}/ns/pid"))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut members = by_ns.get(&ns).cloned().unwrap_or_default();
            members.push(conmon);
            all.push(Own {
                processes: members.len() as i64,
                descriptors: members.iter().map(|&p| descriptors(p)).sum(),
                pss_kb: members.iter().map(|&p| pss_kb(p)).sum(),
                anon_kb: members.iter().map(|&p| status_field(p, "RssAnon:")).sum(),
                pid1_rss_kb: status_field(pid, "VmRSS:"),
                cgroup_kb: cgroup_kb(pid),
            });
        }
    }
    all
}

/// One kind at one level.
#[derive(Default)]
struct Measure {
    /// Time to make all N, one after another.
    make_total: Duration,
    /// The median make of the ones made since the level before.
    make_p50: Duration,
    host: HostRead,
    /// Each container's own.
    owns: Vec<Own>,
    /// `warden machine ps` or `podman ps -a`, median ms.
    ps_ms: f64,
    /// `podman ps -a` in the machines' phase, median ms.
    engine_ps_ms: f64,
    exec: Option<Exec>,
}

fn median_i(mut v: Vec<i64>) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A small generator for the random machine of each `exec`.
struct Random(u64);

impl Random {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// `exec true` at one level, its contenders in turn.
struct Exec {
    /// `warden machine exec ID -- true` to a random machine.
    random: Stats,
    /// The same to the first machine every time: what the host's load
    /// costs, apart from which machine answers.
    first: Stats,
    /// The bench's own fork+exec+wait of /bin/true: the host's speed at
    /// that moment (the builds and tests beside it come and go).
    floor: Stats,
}

impl Exec {
    /// The random machine's p50 as a multiple of the floor's.
    fn over_floor(&self) -> f64 {
        us(self.random.p50) / us(self.floor.p50)
    }
}

fn exec_stats(fleet: &Fleet, random: &mut Random) -> Exec {
    let mut stats = timing::interleaved_with(3, EXEC_RUNS, |i| {
        let mut command = match i {
            2 => Command::new("/bin/true"),
            _ => {
                let id = match i {
                    0 => &fleet.made[random.below(fleet.made.len())],
                    _ => &fleet.made[0],
                };
                let mut c = Command::new(warden());
                c.args(["machine", "exec", id, "--", "true"]);
                c
            }
        };
        let started = Instant::now();
        ok(&mut command);
        started.elapsed()
    })
    .into_iter();
    let mut next = || stats.next().unwrap();
    Exec {
        random: next(),
        first: next(),
        floor: next(),
    }
}

/// The median of `PS_RUNS` timings of each listing, in turn.
fn list_ms(listings: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    let mut times = vec![Vec::new(); listings.len()];
    for _ in 0..PS_RUNS {
        for (i, list) in listings.iter_mut().enumerate() {
            let started = Instant::now();
            list();
            times[i].push(ms(started.elapsed()));
        }
    }
    times.into_iter().map(timing::median).collect()
}

/// Makes `fleet` up to each level in turn, measuring at each; with the
/// host as it was before anything was made.
fn phase(kind: Kind, levels: &[usize], random: &mut Random) -> (HostRead, Vec<Measure>) {
    let mut fleet = Fleet::new(kind);
    let what = match kind {
        Kind::Plain => "plain containers (podman run -d)",
        Kind::Warden => "warden machines (warden machine up)",
    };
    std::thread::sleep(SETTLE);
    let before = read_host();
    let mut measures = Vec::new();
    let mut made_in = Duration::ZERO;
    let mut times = Vec::new();
    let mut exec_one = None;
    for &n in levels {
        let mut batch = Vec::new();
        while fleet.made.len() < n {
            let took = fleet.make_one();
            made_in += took;
            batch.push(took);
            times.push(took);
            if kind == Kind::Warden && fleet.made.len() == 1 {
                // Settled as the levels are: its warden idle, its code given back.
                std::thread::sleep(SETTLE);
                exec_one = Some(exec_stats(&fleet, random));
            }
        }
        eprintln!(
            "{what}: {n} made in {:.1} s; settling",
            made_in.as_secs_f64()
        );
        std::thread::sleep(SETTLE);
        let host = read_host();
        let owns = owns(&fleet);
        let listings = match kind {
            Kind::Plain => list_ms(&mut [&mut || ok(podman().args(["ps", "-a"]))]),
            Kind::Warden => list_ms(&mut [
                &mut || ok(Command::new(warden()).args(["machine", "ps"])),
                &mut || ok(podman().args(["ps", "-a"])),
            ]),
        };
        let exec = (kind == Kind::Warden).then(|| exec_stats(&fleet, random));
        batch.sort();
        measures.push(Measure {
            make_total: made_in,
            make_p50: batch[batch.len() / 2],
            host,
            owns,
            ps_ms: listings[0],
            engine_ps_ms: listings.get(1).copied().unwrap_or(0.0),
            exec,
        });
    }
    if let Some(one) = exec_one {
        // Kept apart: the level "1" measured when the first was made.
        measures.push(Measure {
            exec: Some(one),
            ..Measure::default()
        });
    }
    drop(fleet);
    (before, measures)
}

/// One figure of a `Figures` at level N, per container.
type PerContainer = fn(&Figures, usize) -> f64;

/// The figures of one kind at one level, per container where it says so.
struct Figures {
    used_kb: f64,
    /// Its own processes' anonymous memory and what the kernel's
    /// unreclaimable memory grew by (see `HostRead::kernel_kb`): the host
    /// memory it holds, without the page cache and without the other
    /// processes' heaps (builds and tests beside the bench).
    held_kb: f64,
    /// The kernel's part of it.
    kernel_kb: f64,
    pss_kb: f64,
    cgroup_kb: f64,
    pid1_rss_kb: f64,
    own_processes: f64,
    own_descriptors: f64,
    host_files: f64,
    host_processes: f64,
    host_threads: f64,
    make_total_s: f64,
    make_p50_ms: f64,
    ps_ms: f64,
}

fn figures(n: usize, before: &HostRead, m: &Measure) -> Figures {
    let per = |x: i64| x as f64 / n as f64;
    let sum = |f: fn(&Own) -> i64| per(m.owns.iter().map(f).sum());
    Figures {
        used_kb: per(m.host.used_kb - before.used_kb),
        held_kb: per(
            m.host.kernel_kb - before.kernel_kb + m.owns.iter().map(|o| o.anon_kb).sum::<i64>()
        ),
        kernel_kb: per(m.host.kernel_kb - before.kernel_kb),
        pss_kb: sum(|o| o.pss_kb),
        cgroup_kb: sum(|o| o.cgroup_kb),
        pid1_rss_kb: median_i(m.owns.iter().map(|o| o.pid1_rss_kb).collect()) as f64,
        own_processes: sum(|o| o.processes),
        own_descriptors: sum(|o| o.descriptors),
        host_files: per(m.host.files - before.files),
        host_processes: per(m.host.processes - before.processes),
        host_threads: per(m.host.threads - before.threads),
        make_total_s: m.make_total.as_secs_f64(),
        make_p50_ms: ms(m.make_p50),
        ps_ms: m.ps_ms,
    }
}

/// The processes by name the N added, those that moved by at least N/2.
fn comm_delta(n: usize, before: &HostRead, after: &HostRead) -> String {
    let mut names: Vec<&String> = before.comms.keys().chain(after.comms.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|c| {
            let d = after.comms.get(c).copied().unwrap_or(0)
                - before.comms.get(c).copied().unwrap_or(0);
            (d.unsigned_abs() as usize * 2 >= n).then(|| format!("{c} {d:+}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        return; // cargo bench asks benches to list themselves
    }
    let mut levels: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if levels.is_empty() {
        levels = LEVELS.to_vec();
    }
    levels.sort();
    levels.dedup();
    levels.retain(|&n| n > 0);
    if levels.last().is_some_and(|&n| n > MOST) {
        eprintln!("SKIPPED: at most {MOST} machines in one run");
        return;
    }
    if let Some(why) = unable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let started = Instant::now();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut random = Random(seed | 1);
    let (plain_before, plain) = phase(Kind::Plain, &levels, &mut random);
    let (warden_before, mut machines) = phase(Kind::Warden, &levels, &mut random);
    let exec_one = machines.pop().and_then(|m| m.exec).expect("exec at one");

    println!(
        "\ndensity: N plain containers (`podman run -d --entrypoint= {IMAGE} sleep infinity`)"
    );
    println!(
        "against N warden machines (`warden machine up` of {{\"id\", \"image\", \"network\": \"private\"}}), the same image, bridge network"
    );
    println!(
        "memory per container read {} s after the last was made\n",
        SETTLE.as_secs()
    );
    let mut rows: Vec<(usize, Figures, Figures)> = Vec::new();
    for (i, &n) in levels.iter().enumerate() {
        let p = figures(n, &plain_before, &plain[i]);
        let w = figures(n, &warden_before, &machines[i]);
        println!("N = {n}{:>31}{:>12}{:>10}", "plain", "warden", "w/p");
        let row = |name: &str, p: f64, w: f64| {
            let ratio = match p {
                0.0 => "-".to_string(),
                _ => format!("{:.2}", w / p),
            };
            println!("  {name:<32}{p:>10.1}{w:>12.1}{ratio:>10}");
        };
        row("host memory held / N, kB", p.held_kb, w.held_kb);
        row("  of it the kernel's, kB", p.kernel_kb, w.kernel_kb);
        row("host used (MemAvailable) / N, kB", p.used_kb, w.used_kb);
        row("own processes' PSS / N, kB", p.pss_kb, w.pss_kb);
        row("memory cgroup / N, kB", p.cgroup_kb, w.cgroup_kb);
        row("PID 1's VmRSS, median kB", p.pid1_rss_kb, w.pid1_rss_kb);
        row("own processes / N", p.own_processes, w.own_processes);
        row("own descriptors / N", p.own_descriptors, w.own_descriptors);
        row("host file handles / N", p.host_files, w.host_files);
        row("host processes / N", p.host_processes, w.host_processes);
        row("host threads / N", p.host_threads, w.host_threads);
        row("time to make all N, s", p.make_total_s, w.make_total_s);
        row(
            "one make, median of the last, ms",
            p.make_p50_ms,
            w.make_p50_ms,
        );
        row("listing all (ps), median ms", p.ps_ms, w.ps_ms);
        println!(
            "  (podman ps -a beside the machines: {:.1} ms)",
            machines[i].engine_ps_ms
        );
        let exec = machines[i].exec.as_ref().unwrap();
        for (what, stats) in [
            ("exec true to a random machine", &exec.random),
            ("exec true to the first machine", &exec.first),
            ("fork+exec+wait /bin/true", &exec.floor),
        ] {
            println!(
                "  {what:<31}p50 {:>6.0} µs, p99 {:>6.0} µs",
                us(stats.p50),
                us(stats.p99),
            );
        }
        println!(
            "    random machine's p50 {:.2}x N=1's (p99 {:.2}x); over the floor {:.2}x, at N=1 {:.2}x",
            us(exec.random.p50) / us(exec_one.random.p50),
            us(exec.random.p99) / us(exec_one.random.p99),
            exec.over_floor(),
            exec_one.over_floor()
        );
        println!(
            "  processes by name, plain: {}",
            comm_delta(n, &plain_before, &plain[i].host)
        );
        println!(
            "  processes by name, warden: {}\n",
            comm_delta(n, &warden_before, &machines[i].host)
        );
        rows.push((n, p, w));
    }
    println!(
        "exec true with one machine up: p50 {:.0} µs, p99 {:.0} µs; the floor then p50 {:.0} µs",
        us(exec_one.random.p50),
        us(exec_one.random.p99),
        us(exec_one.floor.p50)
    );

    println!("\ngoals");
    for (n, p, w) in &rows {
        let verdict = |r: f64, goal: f64| if r <= goal { "met" } else { "not met" };
        let mem = w.held_kb / p.held_kb;
        let pss = w.pss_kb / p.pss_kb;
        let make = w.make_total_s / p.make_total_s;
        println!(
            "  N={n:<4} memory (host held) {mem:.2}x ({}), by own PSS {pss:.2}x ({}), goal 1.2x; make all {make:.2}x ({}), goal 1.3x; ps {:.2}x",
            verdict(mem, 1.2),
            verdict(pss, 1.2),
            verdict(make, 1.3),
            w.ps_ms / p.ps_ms
        );
    }
    let last = machines.last().and_then(|m| m.exec.as_ref()).unwrap();
    let (r50, r99) = (
        us(last.random.p50) / us(exec_one.random.p50),
        us(last.random.p99) / us(exec_one.random.p99),
    );
    let floored = last.over_floor() / exec_one.over_floor();
    println!(
        "  exec at N={} against N=1: p50 {r50:.2}x, p99 {r99:.2}x; p50 over each moment's floor {floored:.2}x; goal 1.5x ({})",
        levels.last().unwrap(),
        match (r50 <= 1.5, floored <= 1.5) {
            (true, _) => "met at p50",
            (false, true) => "met at p50 over the floor",
            (false, false) => "not met",
        }
    );
    if let Some(((n1, p1, w1), earlier)) = rows.split_last() {
        let per_container: [(&str, PerContainer); 7] = [
            ("host memory held", |f, _| f.held_kb),
            ("  the kernel's part", |f, _| f.kernel_kb),
            ("own PSS", |f, _| f.pss_kb),
            ("own descriptors", |f, _| f.own_descriptors),
            ("host file handles", |f, _| f.host_files),
            ("time per make (median)", |f, _| f.make_p50_ms),
            ("listing time", |f, n| f.ps_ms / n as f64),
        ];
        for (n0, p0, w0) in earlier {
            println!("  per container at N={n1} against N={n0} (1.00: it grows as N, no faster):");
            for (name, value) in per_container {
                let r = |a: f64, b: f64| match a {
                    0.0 => "-".to_string(),
                    _ => format!("{:.2}", b / a),
                };
                println!(
                    "    {name:<28} plain {:>6}   warden {:>6}",
                    r(value(p0, *n0), value(p1, *n1)),
                    r(value(w0, *n0), value(w1, *n1))
                );
            }
        }
    }
    println!("(measured in {:.0} s)", started.elapsed().as_secs_f64());
}
