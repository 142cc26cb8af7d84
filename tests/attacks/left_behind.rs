//! What a command leaves behind: every process it starts ends when it ends,
//! whatever it did to escape, and what it was asked to keep ends at the
//! runtime's word.

use super::sh;
use crate::common::{self, printed, privileged, Machine, Options, SHELL_UID};
use std::time::{Duration, Instant};
use warden::wire::RunRequest;

#[test]
fn the_runtime_stops_every_process_shell_left_behind() {
    if !privileged("the_runtime_stops_every_process_shell_left_behind") {
        return;
    }
    // warden works out its default hosts at boot with the machine's tools,
    // as shell: let that end first, so that only the escapes are shell's.
    let m = Machine::boot_quiet();
    // Escapes from the command's process group, in new sessions and a
    // double fork, which the command asked to keep (else they would end
    // with it: see the lifetime test).
    let o = m
        .client()
        .run(RunRequest {
            keep_background: true,
            ..sh("for i in $(seq 40); do setsid sh -c 'sleep 777 &'; done; \
                  setsid sh -c '(sleep 778 &) &'")
        })
        .unwrap();
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    let sleepers = || {
        ["777", "778"]
            .iter()
            .map(|n| common::processes_of(SHELL_UID, &["sleep", n]))
            .sum::<usize>()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleepers() < 41 {
        assert!(Instant::now() < deadline, "the escapes did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // status lists them, though no command runs.
    let status = m.client().status().unwrap();
    assert!(status.running.is_empty());
    let count = status.shell_process_count.unwrap();
    assert!(count >= 41, "{count}");
    let listed = status.shell_processes.unwrap();
    assert!(listed.iter().any(|p| p.name == "sleep"));
    // The runtime's word ends them all.
    let (signalled, left) = m.client().stop_shell("KILL").unwrap();
    assert!(signalled >= 41, "{signalled}");
    assert_eq!(left, 0);
    // SIGKILL is delivered at once, but a process under load takes a
    // moment to be gone from /proc.
    let deadline = Instant::now() + Duration::from_secs(5);
    while sleepers() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sleepers(), 0);
    let status = m.client().status().unwrap();
    assert_eq!(
        status.shell_process_count,
        Some(0),
        "{:?}",
        status.shell_processes
    );
    assert_eq!(m.audit_kinds("shell_stopped").len(), 1);
    // The machine carries on.
    let o = m.client().run(sh("echo fine")).unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "fine");
}

/// Every process a command starts ends when it ends, whatever it did to
/// escape: a new session, a double fork, daemon(), nohup, disown, a
/// reparent to PID 1. Checked by pid from outside the machine. Hundreds of
/// them over several commands, and the next command still runs.
#[test]
fn what_a_command_leaves_behind_ends_with_it() {
    if !privileged("what_a_command_leaves_behind_ends_with_it") {
        return;
    }
    let m = Machine::boot(Options::default());
    let escapes = [
        ("setsid", "setsid sleep 901 & echo $!"),
        ("double fork", "sh -c '(sleep 902 & echo $!) &' ; sleep 0.1"),
        ("nohup", "nohup sleep 903 >/dev/null 2>&1 & echo $!"),
        ("disown", "bash -c 'sleep 904 & echo $!; disown'"),
        (
            "daemon()",
            "python3 -c 'import os,time\nif os.fork(): time.sleep(0.5); os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\nprint(os.getpid(), flush=True)\ntime.sleep(905)'",
        ),
    ];
    for (name, line) in escapes {
        let o = m.client().run(sh(line)).unwrap();
        let said = printed(&o);
        let pid: i32 = said
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name}: no pid in {said:?}"));
        // The command has ended and been reported: its escape is gone
        // (its pid, seen from the host's side of the namespaces).
        assert!(
            host_pid(&m, pid) < 0,
            "{name}: pid {pid} outlived its command: {said}"
        );
    }
    for n in ["901", "902", "903", "904"] {
        assert_eq!(
            common::processes_of(SHELL_UID, &["sleep", n]),
            0,
            "sleep {n} is left"
        );
    }
    // 600 escapes over six commands, then a normal command.
    for _ in 0..6 {
        let o = m
            .client()
            .run(sh(
                "for i in $(seq 100); do setsid sleep 950 & done; echo started",
            ))
            .unwrap();
        assert_eq!(printed(&o), "started\n");
        assert_eq!(common::processes_of(SHELL_UID, &["sleep", "950"]), 0);
    }
    let o = m.client().run(sh("echo still-runs")).unwrap();
    assert_eq!(printed(&o), "still-runs\n");
    let status = m.client().status().unwrap();
    let lifetime = common::layer(&status, "lifetime");
    assert!(
        lifetime.holds && lifetime.detail.contains("group of its own"),
        "{lifetime:?}"
    );
    let audit = std::fs::read_to_string(m.audit_path()).unwrap();
    let swept: Vec<u64> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|l| l["left_behind_killed"].as_u64())
        .collect();
    // Each end says how many it killed (those still in the command's
    // group when it exited went with the group).
    assert!(
        swept.iter().sum::<u64>() >= 100,
        "the sweeps are audited: {swept:?}"
    );
}

/// The host's pid of a live process of the machine's, by its pid inside
/// (NSpid, in warden's PID namespace); -1 when there is none.
fn host_pid(m: &Machine, inner: i32) -> i32 {
    let warden_ns = std::fs::read_link(format!("/proc/{}/ns/pid", m.warden_pid())).ok();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if std::fs::read_link(entry.path().join("ns/pid")).ok() != warden_ns {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let Some(ns) = status.lines().find_map(|l| l.strip_prefix("NSpid:")) else {
            continue;
        };
        let ids: Vec<i32> = ns
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        if ids.len() > 1 && ids.last() == Some(&inner) {
            if let Some(host) = ids.first() {
                return *host;
            }
        }
    }
    -1
}
