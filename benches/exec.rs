//! Starting a command as `shell`: warden's API and `warden run` against
//! sudo, runuser and a bare fork+exec+wait (the floor), measured side by
//! side in one run; plus output throughput against a raw pipe, warden's
//! idle memory and its binary's size.
//!
//! Run as root: `scripts/bench` (see docs/benchmarks.md).

#[path = "../tests/common/mod.rs"]
mod common;
mod timing;

use common::{Machine, Options, SHELL_UID};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use timing::{interleaved, ok, us, Stats};
use warden::wire::RunRequest;

/// One row of the table: a contender's name and its figures.
struct Row {
    name: String,
    stats: Stats,
}

fn measure(name: &str, runs: usize, mut once: impl FnMut()) -> Row {
    measure_interleaved([name], runs, [&mut once as &mut dyn FnMut()])
        .into_iter()
        .next()
        .expect("one row")
}

fn measure_interleaved<const N: usize>(
    names: [&str; N],
    runs: usize,
    each: [&mut dyn FnMut(); N],
) -> [Row; N] {
    let mut stats = interleaved(runs, each).into_iter();
    names.map(|name| Row {
        name: name.to_string(),
        stats: stats.next().expect("one Stats per contender"),
    })
}

/// Runs the bench in a mount namespace of its own where /etc/passwd and
/// /etc/group are copies that name `shell`, so sudo and runuser can switch
/// to it without the host's files being touched.
fn private_users(dir: &std::path::Path) {
    use nix::mount::{mount, MsFlags};
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare(CLONE_NEWNS)");
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .unwrap();
    for (file, line) in [
        (
            "passwd",
            format!("shell:x:{SHELL_UID}:{SHELL_UID}::/tmp:/bin/sh\n"),
        ),
        ("group", format!("shell:x:{SHELL_UID}:\n")),
    ] {
        let copy = dir.join(file);
        let text = std::fs::read_to_string(format!("/etc/{file}")).unwrap();
        std::fs::write(&copy, text + &line).unwrap();
        mount(
            Some(&copy),
            format!("/etc/{file}").as_str(),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // cargo bench asks benches to list themselves
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: the exec bench needs root (namespaces, setuid)");
        return;
    }
    if std::env::args().any(|a| a == SWEEP_INSIDE) {
        return sweep_inside();
    }
    let scratch = tempfile::tempdir().unwrap();
    private_users(scratch.path());
    for tool in ["sudo", "runuser"] {
        if Command::new(tool).arg("--version").output().is_err() {
            panic!("{tool} is missing: run bench/run, which installs it");
        }
    }
    // Output is not limited here: the throughput run moves 4 GiB.
    let unlimited = scratch.path().join("policy-unlimited");
    std::fs::create_dir(&unlimited).unwrap();
    std::fs::write(unlimited.join("limits.json"), r#"{"output_bytes": null}"#).unwrap();
    let m = Machine::boot(Options {
        config: serde_json::json!({"policy_dir": unlimited}),
        ..Default::default()
    });
    // The same machine with Landlock and seccomp off, to price them.
    let policy = scratch.path().join("policy-off");
    std::fs::create_dir(&policy).unwrap();
    std::fs::write(policy.join("landlock.json"), r#"{"require": "off"}"#).unwrap();
    std::fs::write(policy.join("seccomp.json"), r#"{"require": "off"}"#).unwrap();
    let bare = Machine::boot(Options {
        config: serde_json::json!({"policy_dir": policy}),
        ..Default::default()
    });
    let mut bare_client = bare.client();
    let warden = common::warden_bin();
    std::thread::sleep(Duration::from_millis(200));
    let booted_rss = vm_field(m.warden_pid(), "VmRSS:");
    let booted_parts = rss_parts(m.warden_pid());
    // warden gives back what its requests mapped and freed once it has
    // been idle through one of its 5 s ticks.
    std::thread::sleep(Duration::from_millis(5500));
    let idle_rss = vm_field(m.warden_pid(), "VmRSS:");
    let idle_parts = rss_parts(m.warden_pid());
    let idle = format!(
        "warden after boot: {booted_rss} resident ({booted_parts}); idle 5.5 s later: {idle_rss} resident ({idle_parts})"
    );
    let socket = m.socket.clone();
    let true_req = || RunRequest {
        argv: Some(vec!["true".into()]),
        ..Default::default()
    };

    if std::env::args().any(|a| a == "many-api") {
        // The API's many-at-once alone, for a profile beside it; numbers
        // after it pick the levels (repeated, the same level again).
        let mut levels: Vec<usize> = std::env::args().filter_map(|a| a.parse().ok()).collect();
        if levels.is_empty() {
            levels = vec![1, 8, 64, 256];
        }
        for clients in levels {
            println!("{clients:>4} clients: {:.0} runs/s", api_rate(&m, clients));
        }
        return;
    }
    if std::env::args().any(|a| a == "many") {
        many_at_once(&m, warden, &socket);
        let pid = m.warden_pid();
        println!(
            "{idle}; after the runs: {} resident ({}), peak {}",
            vm_field(pid, "VmRSS:"),
            rss_parts(pid),
            vm_field(pid, "VmHWM:")
        );
        // Idle threads of the blocking pool end after 10 s; warden hands
        // freed memory back every 5 s while no command runs.
        std::thread::sleep(Duration::from_secs(16));
        println!(
            "16 s later: {} resident ({})",
            vm_field(pid, "VmRSS:"),
            rss_parts(pid)
        );
        return;
    }
    let mut client = m.client();
    if std::env::args().any(|a| a == "roundtrip") {
        // Only the round trip and its floor, in turn: what a profile of
        // warden (`perf record -p`) wants beside it.
        let [floor, api] = measure_interleaved(
            ["fork+exec+wait /bin/true (floor)", "API round trip: true"],
            5000,
            [&mut || ok(&mut Command::new("/bin/true")), &mut || {
                assert_eq!(client.run(true_req()).unwrap().exit.status, 0)
            }],
        );
        let (f, a) = (floor.stats, api.stats);
        println!(
            "floor p50 {:.0} µs p99 {:.0} µs; API p50 {:.0} µs p99 {:.0} µs; x floor p50 {:.2} p99 {:.2}",
            us(f.p50),
            us(f.p99),
            us(a.p50),
            us(a.p99),
            a.p50.as_secs_f64() / f.p50.as_secs_f64(),
            a.p99.as_secs_f64() / f.p99.as_secs_f64()
        );
        return;
    }
    let only_throughput = std::env::args().any(|a| a == "throughput");
    let [confined, bare] = measure_interleaved(
        [
            "API round trip: true (one connection)",
            "  the same, Landlock and seccomp off",
        ],
        if only_throughput { 1 } else { 2000 },
        [
            &mut || assert_eq!(client.run(true_req()).unwrap().exit.status, 0),
            &mut || assert_eq!(bare_client.run(true_req()).unwrap().exit.status, 0),
        ],
    );
    let rows = if only_throughput {
        Vec::new()
    } else {
        vec![
            measure("fork+exec+wait /bin/true (floor)", 2000, || {
                ok(&mut Command::new("/bin/true"))
            }),
            confined,
            bare,
            // What the lifetime sweep adds to each command's end when it
            // left nothing behind: one walk of /proc (this host's, with
            // more processes than a machine's: an upper bound).
            measure("  of which: the lifetime sweep (/proc walk)", 2000, || {
                assert_eq!(
                    warden::guest::process::lifetime::sweep(
                        SHELL_UID,
                        warden::guest::process::lifetime::TAG_BASE
                    ),
                    (0, 0)
                )
            }),
            measure("API: connect + hello + true", 1000, || {
                assert_eq!(m.client().run(true_req()).unwrap().exit.status, 0)
            }),
            measure("warden run -- true (whole process)", 500, || {
                ok(Command::new(warden)
                    .args(["run", "--socket"])
                    .arg(&socket)
                    .args(["--", "true"]))
            }),
            measure("sudo -u shell env -i true", 300, || {
                ok(Command::new("sudo").args(["-u", "shell", "env", "-i", "true"]))
            }),
            measure("runuser -u shell -- env -i true", 300, || {
                ok(Command::new("runuser").args(["-u", "shell", "--", "env", "-i", "true"]))
            }),
        ]
    };
    if !rows.is_empty() {
        let sudo = rows
            .iter()
            .find(|r| r.name.starts_with("sudo"))
            .expect("the sudo row")
            .stats
            .p50;
        let floor = rows[0].stats.p50;
        println!("\nstarting `true` as shell (p50 ratios: against the floor, and how many times faster than sudo)");
        println!(
            "{:<42} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9}",
            "", "runs", "p50 µs", "p99 µs", "mean µs", "x floor", "sudo/x"
        );
        for r in &rows {
            println!(
                "{:<42} {:>6} {:>10.0} {:>10.0} {:>10.0} {:>9.2} {:>9.2}",
                r.name,
                r.stats.runs,
                us(r.stats.p50),
                us(r.stats.p99),
                us(r.stats.mean),
                r.stats.p50.as_secs_f64() / floor.as_secs_f64(),
                sudo.as_secs_f64() / r.stats.p50.as_secs_f64()
            );
        }
        let (confined, bare) = (rows[1].stats.p50, rows[2].stats.p50);
        println!(
            "Landlock and seccomp add {:.0} µs at p50 to a command's round trip ({:.2}x)",
            us(confined) - us(bare),
            confined.as_secs_f64() / bare.as_secs_f64()
        );
        println!("{}", sweep_in_a_machine());
    }
    // Output throughput: warden's API against a raw pipe from the same
    // producer, each moving the same bytes.
    const BYTES: u64 = 4 << 30;
    let producer = ["dd", "if=/dev/zero", "bs=1M", "count=4096", "status=none"];
    let raw = {
        let t = Instant::now();
        let mut child = Command::new("dd")
            .args(producer.iter().skip(1))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        // The same pipe size warden gives its commands.
        // SAFETY: F_SETPIPE_SZ on a pipe this process owns.
        unsafe {
            libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(&out),
                libc::F_SETPIPE_SZ,
                1 << 20,
            )
        };
        let mut buf = vec![0u8; 256 * 1024];
        let mut n = 0u64;
        loop {
            match out.read(&mut buf).unwrap() {
                0 => break,
                k => n += k as u64,
            }
        }
        child.wait().unwrap();
        assert_eq!(n, BYTES);
        t.elapsed()
    };
    let api = {
        let t = Instant::now();
        let mut n = 0u64;
        let req = RunRequest {
            argv: Some(producer.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        client
            .run_streaming(req, |_, b| n += b.len() as u64)
            .unwrap();
        assert_eq!(n, BYTES);
        t.elapsed()
    };
    let gib = |d: Duration| BYTES as f64 / (1u64 << 30) as f64 / d.as_secs_f64();
    println!("\noutput throughput, 4 GiB from `dd if=/dev/zero bs=1M`");
    println!(
        "{:<42} {:>10.2} GiB/s",
        "raw pipe, read by the bench",
        gib(raw)
    );
    println!(
        "{:<42} {:>10.2} GiB/s  ({:.0}% of the raw pipe)",
        "warden API stream",
        gib(api),
        100.0 * gib(api) / gib(raw)
    );

    // Many at once last, with the bench's own connection closed: 256
    // clients are half of what the door holds at once.
    drop(client);
    if !only_throughput {
        many_at_once(&m, warden, &socket);
    }

    // Warden's own footprint.
    let pid = m.warden_pid();
    std::thread::sleep(Duration::from_millis(200));
    let size = std::fs::metadata(warden).unwrap().len();
    println!("\n{idle}");
    println!(
        "warden after the runs above: {} resident, peak {}",
        vm_field(pid, "VmRSS:"),
        vm_field(pid, "VmHWM:")
    );
    println!(
        "warden binary: {:.2} MiB ({warden})",
        size as f64 / (1 << 20) as f64
    );
}

/// Runs of `true` per contender and level, all clients together.
const MANY_RUNS: usize = 512;

/// Many at once: `true` started by 1, 8, 64 and 256 clients together,
/// `MANY_RUNS` in all per contender and level (each client its share),
/// every one of which must succeed; printed as runs per second.
fn many_at_once(m: &Machine, warden: &str, socket: &std::path::Path) {
    println!("\nmany at once: {MANY_RUNS} runs of `true` per contender and level, all must succeed (runs/s)");
    println!(
        "{:>8} {:>11} {:>11} {:>11} {:>11} {:>10} {:>12}",
        "clients", "API", "warden run", "sudo", "runuser", "API/sudo", "run/runuser"
    );
    for clients in [1, 8, 64, 256] {
        let api = api_rate(m, clients);
        let run = rate(clients, || {
            move || {
                ok(Command::new(warden)
                    .arg("run")
                    .arg("--socket")
                    .arg(socket)
                    .args(["--", "true"]))
            }
        });
        let sudo = rate(clients, || {
            || ok(Command::new("sudo").args(["-u", "shell", "env", "-i", "true"]))
        });
        let runuser = rate(clients, || {
            || ok(Command::new("runuser").args(["-u", "shell", "--", "env", "-i", "true"]))
        });
        println!(
            "{clients:>8} {api:>11.0} {run:>11.0} {sudo:>11.0} {runuser:>11.0} {:>10.2} {:>12.2}",
            api / sudo,
            run / runuser
        );
    }
}

/// The API's rate with `clients` at once, each holding one connection,
/// made beforehand.
fn api_rate(m: &Machine, clients: usize) -> f64 {
    rate(clients, || {
        let mut client = m.client();
        move || {
            let req = RunRequest {
                argv: Some(vec!["true".into()]),
                ..Default::default()
            };
            assert_eq!(client.run(req).unwrap().exit.status, 0)
        }
    })
}

/// Runs per second of `clients` threads, each made its runner by `make`
/// before the clock starts and running `MANY_RUNS / clients` times.
fn rate<F: FnMut() + Send>(clients: usize, make: impl Fn() -> F) -> f64 {
    let share = MANY_RUNS / clients;
    let mut runners: Vec<F> = (0..clients).map(|_| make()).collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for runner in &mut runners {
            s.spawn(move || (0..share).for_each(|_| runner()));
        }
    });
    let rate = (share * clients) as f64 / start.elapsed().as_secs_f64();
    // Let warden free the places of the connections just closed before
    // the next contender's burst arrives.
    drop(runners);
    std::thread::sleep(Duration::from_millis(500));
    rate
}

/// What the resident memory is made of: anonymous (heap, stacks) and
/// file-backed (the binary's pages), and the threads that hold stacks.
fn rss_parts(pid: i32) -> String {
    format!(
        "anonymous {}, file {}, {} threads",
        vm_field(pid, "RssAnon:"),
        vm_field(pid, "RssFile:"),
        vm_field(pid, "Threads:")
    )
}

/// A field of /proc/PID/status, e.g. "3368 kB".
fn vm_field(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or("");
    line[field.len().min(line.len())..].trim().to_string()
}

/// The argument that makes this bench measure the sweep from inside a PID
/// namespace of its own.
const SWEEP_INSIDE: &str = "sweep-inside";
/// Processes beside the bench in that namespace: a machine's warden,
/// runtime and its tools, generously.
const MACHINE_PROCESSES: usize = 24;

/// What the lifetime sweep costs where it runs: in a machine, whose /proc
/// lists its own processes only (this host's lists every process here).
/// The bench runs itself again in a new PID namespace with its own /proc.
fn sweep_in_a_machine() -> String {
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(std::env::current_exe().unwrap())
        .arg(SWEEP_INSIDE)
        .output()
        .expect("unshare (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.trim().to_string()
}

/// Inside the namespace: a machine's worth of processes, then the sweep
/// of a command that left nothing behind, 2000 times.
fn sweep_inside() {
    let mut others: Vec<std::process::Child> = (0..MACHINE_PROCESSES)
        .map(|_| Command::new("sleep").arg("60").spawn().unwrap())
        .collect();
    let listed = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .count();
    let row = measure("the lifetime sweep", 2000, || {
        assert_eq!(
            warden::guest::process::lifetime::sweep(
                SHELL_UID,
                warden::guest::process::lifetime::TAG_BASE
            ),
            (0, 0)
        )
    });
    for child in &mut others {
        let _ = child.kill();
        let _ = child.wait();
    }
    println!(
        "the lifetime sweep of a command's end, in a machine-sized /proc ({listed} processes): p50 {:.0} µs, p99 {:.0} µs",
        us(row.stats.p50),
        us(row.stats.p99)
    );
}
