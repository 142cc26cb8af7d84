//! A VM's pause, side by side in one run: the VM frozen as `warden machine
//! serve` freezes an idle one (`serve::freeze`: QEMU's `stop`, its vsock's
//! socket hidden), then woken three ways, each from the same freeze:
//!
//! - by hand through QEMU's monitor, what an owner would otherwise do:
//!   `cont` alone, then what warden adds before anything may reach the
//!   vsock (`vsock_back`: the backend's rings armed again and one round
//!   trip), then the first answer on the published port;
//! - by a connection to its published port (its relay thaws it, says the
//!   wake in its audit log, then carries the connection): from opening it
//!   to the first answer;
//! - by `warden machine exec -- true` (its door thaws it), against the same
//!   command while the VM runs.

use crate::common::machine::http_get;
use crate::common::serve::RUNTIME;
use crate::timing::{median, ok};
use std::path::Path;
use std::time::{Duration, Instant};
use warden::host::machine::serve::{self, SLEEP_LOCK};
use warden::host::state::PAUSED;
use warden::host::vm::monitor;

/// Rounds of each contender.
const ROUNDS: usize = 9;
/// Left frozen before each wake: long enough that the freeze is whole.
const FROZEN_FOR: Duration = Duration::from_millis(300);

/// Makes the VM `id` (its runtime's page on port 3000, published), runs
/// the rounds, prints the table; returns the medians (port wake, hand
/// thaw with its answer, `cont` alone) in ms.
pub fn run(dir: &Path, id: &str) -> (f64, f64, f64) {
    let port = up(dir, id);
    let state = warden::host::state::state_dir(id);
    http_get(port, "/", Duration::from_secs(30)).expect("the page before any freeze");
    let mut columns: Vec<(&str, Vec<f64>)> = [
        "QEMU's monitor: cont alone",
        "  + vsock_back (rings armed, one round trip)",
        "  + the first answer on the published port",
        "a connection to the published port, to its first answer",
        "warden machine exec -- true, frozen",
        "warden machine exec -- true, running",
    ]
    .into_iter()
    .map(|name| (name, Vec::new()))
    .collect();
    let mut by_hand_total = Vec::new();
    for round in 0..ROUNDS {
        let [cont, back, answer] = by_hand(id, &state, port);
        for (i, t) in [cont, back, answer].into_iter().enumerate() {
            columns[i].1.push(ms(t));
        }
        by_hand_total.push(ms(cont + back + answer));
        freeze(id, &state);
        let t = Instant::now();
        http_get(port, "/", Duration::ZERO)
            .unwrap_or_else(|e| panic!("round {round}: through the port: {e}"));
        columns[3].1.push(ms(t.elapsed()));
        freeze(id, &state);
        columns[4].1.push(ms(exec_true(id)));
        columns[5].1.push(ms(exec_true(id)));
    }
    println!("\nA VM's pause ({ROUNDS} rounds, each wake from its own freeze; ms):");
    for (name, runs) in &columns {
        let shown: Vec<String> = runs.iter().map(|x| format!("{x:.0}")).collect();
        println!(
            "  {name:<58} median {:>7.1}  (runs: {})",
            median(runs.clone()),
            shown.join(" ")
        );
    }
    println!(
        "  {:<58} median {:>7.1}",
        "the thaw by hand, all three",
        median(by_hand_total.clone())
    );
    let m = |i: usize| median(columns[i].1.clone());
    (m(3), median(by_hand_total), m(0))
}

/// `warden machine up` of the VM; the host port its relay publishes 3000 on.
fn up(dir: &Path, id: &str) -> u16 {
    let file = dir.join(format!("{id}.json"));
    let definition = serde_json::json!({
        "id": id, "image": crate::IMAGE, "kind": "vm",
        "ports": [{"port": 3000, "host": "auto", "from": 18600}],
        "command": ["sh", "-c", RUNTIME], "ready_port": 3000,
    });
    std::fs::write(&file, definition.to_string()).unwrap();
    let out = crate::warden()
        .args(["machine", "up"])
        .arg(&file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "up {id}: {said}");
    said.lines()
        .find_map(|l| {
            let (_, port) = l.split_once("published: 3000/tcp -> 127.0.0.1:")?;
            port.trim().parse().ok()
        })
        .unwrap_or_else(|| panic!("up {id}: no published port: {said}"))
}

/// Frozen as serve freezes an idle VM, and left so for `FROZEN_FOR`.
fn freeze(id: &str, state: &Path) {
    serve::freeze(id, state, 0).unwrap_or_else(|e| panic!("freeze: {e}"));
    std::thread::sleep(FROZEN_FOR);
}

/// The thaw by hand, under the machine's sleep lock as warden's own is:
/// times to `cont`'s answer, to the vsock back, and to the first answer.
fn by_hand(id: &str, state: &Path, port: u16) -> [Duration; 3] {
    freeze(id, state);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(state.join(SLEEP_LOCK))
        .unwrap();
    let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("sleep lock: {e}"));
    let t = Instant::now();
    monitor::thaw(id).unwrap_or_else(|e| panic!("cont: {e}"));
    let cont = t.elapsed();
    monitor::vsock_back(id).unwrap_or_else(|e| panic!("vsock back: {e}"));
    let back = t.elapsed();
    std::fs::remove_file(state.join(PAUSED)).unwrap();
    drop(held);
    http_get(port, "/", Duration::ZERO).unwrap_or_else(|e| panic!("after cont: {e}"));
    [cont, back - cont, t.elapsed() - back]
}

fn exec_true(id: &str) -> Duration {
    let t = Instant::now();
    ok(crate::warden().args(["machine", "exec", id, "--", "true"]));
    t.elapsed()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
