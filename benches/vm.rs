//! A machine as a micro-VM against the same machine as a container, side
//! by side in one run: launch to API ready (and warden's own boot, which
//! warden measures), `true` round trips over vsock against the
//! container's host socket and `podman exec`, and output throughput over
//! vsock against the host socket, and a download through the egress proxy
//! from the benches' own internet (two network namespaces): the VM's proxy
//! through the host's relay over vsock against the container's proxy
//! connecting itself. QEMU runs with software emulation here (no usable
//! KVM): these are not KVM figures.
//!
//! Run as root after `machine/build` and `machine/vm/build`:
//! `cargo bench --bench vm` (`-- boot`: the launches and each boot phase's
//! median alone; `-- pause`: a VM's freeze and its wakes alone, see
//! `vm_pause`). The whole process runs under the AF_VSOCK
//! guard: the host's own vsock is never touched.

#[path = "../tests/common/mod.rs"]
mod common;
mod timing;
mod vm_pause;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use timing::{interleaved, median, ok, podman, print_phases, table};
use warden::host::machine as m;
use warden::wire::RunRequest;

const IMAGE: &str = "localhost/warden-machine:latest";
const RUNS: usize = 30;
const LAUNCHES: usize = 3;
const OUTPUT_BYTES: u64 = 32 << 20;
const OUTPUT_RUNS: usize = 3;
const DOWNLOAD_BYTES: u64 = 16 << 20;
const DOWNLOAD_RUNS: usize = 3;

fn warden() -> Command {
    Command::new(env!("CARGO_BIN_EXE_warden"))
}

/// Why the bench cannot run here, if it cannot.
fn unable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("the VM bench needs root".into());
    }
    if let Err(e) = warden::host::vm::kit() {
        return Some(e.to_string());
    }
    let image = podman().args(["image", "exists", IMAGE]).status();
    match image {
        Ok(s) if s.success() => None,
        _ => Some(format!("no image {IMAGE}: build it with machine/build")),
    }
}

/// Makes the machine `id` from a definition in `dir`; returns how long
/// `up` took.
fn up(dir: &Path, id: &str, kind: &str) -> Duration {
    let file = dir.join(format!("{id}.json"));
    let definition = serde_json::json!({"id": id, "image": IMAGE, "kind": kind});
    std::fs::write(&file, definition.to_string()).unwrap();
    let t = Instant::now();
    ok(warden().args(["machine", "up"]).arg(&file));
    t.elapsed()
}

/// Makes the machine `id` on the internet `net`'s machine namespace, with
/// `allowed.test` listed.
fn up_on(dir: &Path, id: &str, kind: &str, net: &common::internet::Internet) {
    let file = dir.join(format!("{id}.json"));
    let definition = serde_json::json!({
        "id": id, "image": IMAGE, "kind": kind,
        "network": format!("/run/netns/{}", net.machine_ns),
        "dns": [net.v4.to_string()],
        "hosts": ["allowed.test"],
        "allow_addresses": [format!("{}/32", net.v4), format!("{}/128", net.v6)],
    });
    std::fs::write(&file, definition.to_string()).unwrap();
    ok(warden().args(["machine", "up"]).arg(&file));
}

/// MiB/s of one download of DOWNLOAD_BYTES through the machine's proxy,
/// as curl (run as shell) timed it.
fn download(id: &str) -> f64 {
    let request = RunRequest {
        shell: Some(format!(
            "curl -sS -o /dev/null -w '%{{size_download}} %{{time_total}}' http://allowed.test/bytes/{DOWNLOAD_BYTES}"
        )),
        ..Default::default()
    };
    let out = m::connect(id, None).unwrap().run(request).unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let mut words = said.split_whitespace();
    let size: f64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0.0);
    let secs: f64 = words
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or(f64::NAN);
    assert_eq!(
        size as u64,
        DOWNLOAD_BYTES,
        "{id}: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    size / (1 << 20) as f64 / secs
}

fn boot_ms(id: &str) -> f64 {
    m::status(id).unwrap().boot_ms
}

fn run(id: &str, request: RunRequest) -> u64 {
    let out = m::connect(id, None).unwrap().run(request).unwrap();
    assert_eq!(
        out.exit.status,
        0,
        "{id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.len() as u64
}

fn true_request() -> RunRequest {
    RunRequest {
        argv: Some(vec!["true".into()]),
        ..Default::default()
    }
}

/// Removes the bench's machines, whatever happened.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = warden().args(["machine", "rm", id, "--volumes"]).output();
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // cargo bench asks benches to list themselves
    }
    common::vm::guard();
    if let Some(why) = unable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pid = std::process::id();
    let (vm, ct) = (format!("bench{pid}-v"), format!("bench{pid}-c"));
    let _cleanup = Cleanup(vec![vm.clone(), ct.clone(), format!("bench{pid}-p")]);
    if std::env::args().any(|a| a == "pause") {
        pause(dir.path(), pid);
        println!("(measured in {:.0} s)", started.elapsed().as_secs_f64());
        return;
    }

    // Launch to ready: a first `up` makes each; then stop + `up` again
    // (start only), which for the VM is a whole boot of its kernel.
    let first = [up(dir.path(), &vm, "vm"), up(dir.path(), &ct, "container")];
    let mut launches = [Vec::new(), Vec::new()];
    let mut boots = [Vec::new(), Vec::new()];
    let mut phases = [Vec::new(), Vec::new()];
    for _ in 0..LAUNCHES {
        for (i, (id, kind)) in [(&vm, "vm"), (&ct, "container")].into_iter().enumerate() {
            ok(warden().args(["machine", "stop", id]));
            launches[i].push(up(dir.path(), id, kind).as_secs_f64() * 1e3);
            boots[i].push(boot_ms(id));
            phases[i].extend(timing::boot_line(id).map(|l| l["boot_phases_ms"].clone()));
        }
    }
    println!(
        "\nlaunch to API ready: `warden machine up` of a stopped machine, {LAUNCHES} runs (ms)"
    );
    for (i, what) in ["VM (QEMU, software emulation)", "container (podman)"]
        .iter()
        .enumerate()
    {
        println!(
            "{what:<32} first up {:>7.0}   start-only median {:>7.0} (runs {})   warden's own boot median {:>7.1} (runs {})",
            first[i].as_secs_f64() * 1e3,
            median(launches[i].clone()),
            launches[i].iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" "),
            median(boots[i].clone()),
            boots[i].iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" "),
        );
        print_phases(&phases[i]);
    }
    if std::env::args().any(|a| a == "boot") {
        return; // `-- boot`: the launches and the boots' phases alone
    }

    // `true` round trips, contenders in turn.
    let container = m::container(&ct);
    let names = [
        "VM: API over vsock (connect + run true)",
        "VM: warden machine exec -- true",
        "container: API over host socket",
        "container: podman exec true",
    ];
    let stats = interleaved(
        RUNS,
        [
            &mut || {
                run(&vm, true_request());
            },
            &mut || ok(warden().args(["machine", "exec", &vm, "--", "true"])),
            &mut || {
                run(&ct, true_request());
            },
            &mut || ok(podman().args(["exec", &container, "true"])),
        ],
    );
    println!("\n`true` round trip, {RUNS} runs, contenders in turn (x VM API: p50 over the VM's API p50)");
    let vm_api = stats[0].p50.as_secs_f64();
    table(&names, &stats, "x VM API", |s| s.p50.as_secs_f64() / vm_api);

    // Output throughput: the command writes OUTPUT_BYTES of zeros.
    let output = || RunRequest {
        shell: Some(format!("head -c {OUTPUT_BYTES} /dev/zero")),
        ..Default::default()
    };
    let mut rates = [Vec::new(), Vec::new()];
    for _ in 0..OUTPUT_RUNS {
        for (i, id) in [&vm, &ct].into_iter().enumerate() {
            let t = Instant::now();
            assert_eq!(run(id, output()), OUTPUT_BYTES, "{id}: short output");
            rates[i].push(OUTPUT_BYTES as f64 / (1 << 20) as f64 / t.elapsed().as_secs_f64());
        }
    }
    let (v, c) = (median(rates[0].clone()), median(rates[1].clone()));
    println!(
        "\noutput of {} MiB, {OUTPUT_RUNS} runs each, in turn (MiB/s, median): VM over vsock {v:.1}, container over its host socket {c:.1} ({:.1}x)",
        OUTPUT_BYTES >> 20,
        c / v
    );

    // A download through the egress proxy, from the benches' own internet.
    let net = common::internet::Internet::start();
    let (vm_net, ct_net) = (format!("bench{pid}-vn"), format!("bench{pid}-cn"));
    let _cleanup_net = Cleanup(vec![vm_net.clone(), ct_net.clone()]);
    up_on(dir.path(), &vm_net, "vm", &net);
    up_on(dir.path(), &ct_net, "container", &net);
    let mut rates = [Vec::new(), Vec::new()];
    for _ in 0..DOWNLOAD_RUNS {
        for (i, id) in [&vm_net, &ct_net].into_iter().enumerate() {
            rates[i].push(download(id));
        }
    }
    let (v, c) = (median(rates[0].clone()), median(rates[1].clone()));
    let shown = |r: &[f64]| {
        r.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "\ndownload of {} MiB through the egress proxy, {DOWNLOAD_RUNS} runs each, in turn (MiB/s, median): VM (proxy, then the host's relay over vsock) {v:.1} (runs {}), container (proxy connecting itself) {c:.1} (runs {}) ({:.2} of the container's)",
        DOWNLOAD_BYTES >> 20,
        shown(&rates[0]),
        shown(&rates[1]),
        v / c
    );
    pause(dir.path(), pid);
    println!("(measured in {:.0} s)", started.elapsed().as_secs_f64());
}

/// A VM's pause and its wakes (`vm_pause`), with the ratios.
fn pause(dir: &Path, pid: u32) {
    let (port, by_hand, cont) = vm_pause::run(dir, &format!("bench{pid}-p"));
    println!(
        "  wake through the port / QEMU's cont alone      {:.2}x\n  \
         wake through the port / the thaw by hand + answer {:.2}x\n  \
         first answer {:.0} ms after cont's median",
        port / cont,
        port / by_hand,
        port - cont
    );
}
