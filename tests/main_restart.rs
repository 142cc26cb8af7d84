//! `main_restart`: warden starts the main process again when it ends, as
//! a container's engine would (what a VM's `restart` is).

mod common;

use common::{privileged, Machine, Options};
use std::time::{Duration, Instant};

/// A machine as PID 1 of its own namespaces whose main process is `sh -c
/// script`, started again by `restart` (`main_restart`).
fn restarting(script: &str, restart: &str) -> Machine {
    let m = Machine::start(Options {
        main: vec!["sh".into(), "-c".into(), script.into()],
        config: serde_json::json!({"main_restart": restart}),
        pid_namespace: true,
        ..Default::default()
    });
    m.wait_ready();
    m
}

/// Waits (30 s at most) until the audit log holds `count` lines of `kind`.
fn wait_for(m: &Machine, kind: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.audit_kinds(kind).len() < count {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            m.audit_kinds("main_exit")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_failing_main_process_is_started_again_until_it_stays() {
    if !privileged("a_failing_main_process_is_started_again_until_it_stays") {
        return;
    }
    // Fails twice, then stays: two restarts, 1 s then 2 s apart.
    let script = "echo run >> $HOME/main-runs; [ $(wc -l < $HOME/main-runs) -ge 3 ] && exec sleep 1000; exit 3";
    let m = restarting(script, "on-failure");
    wait_for(&m, "main_start", 3);
    let exits = m.audit_kinds("main_exit");
    assert_eq!(exits.len(), 2, "{exits:?}");
    for exit in &exits {
        assert_eq!(
            (exit["status"].as_i64(), exit["restart"].as_bool()),
            (Some(3), Some(true))
        );
    }
    // The third stays, and the machine with it.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(m.audit_kinds("main_start").len(), 3);
    let status = m.client().status().unwrap();
    assert!(status.main.is_some(), "{status:?}");
}

#[test]
fn without_main_restart_the_machine_ends_with_its_main_process() {
    if !privileged("without_main_restart_the_machine_ends_with_its_main_process") {
        return;
    }
    let mut m = Machine::start(Options {
        main: vec!["sh".into(), "-c".into(), "sleep 0.5; exit 4".into()],
        pid_namespace: true,
        ..Default::default()
    });
    m.wait_ready();
    assert_eq!(m.wait(Duration::from_secs(20)), 4);
    let exits = m.audit_kinds("main_exit");
    assert_eq!(exits.len(), 1, "{exits:?}");
    assert_eq!(exits[0]["restart"], false);
}

#[test]
fn a_signal_while_waiting_to_restart_ends_the_machine_without_a_new_start() {
    let test = "a_signal_while_waiting_to_restart_ends_the_machine_without_a_new_start";
    if !privileged(test) {
        return;
    }
    // Quick exits: the waits grow 1, 2, then 4 s.
    let mut m = restarting("exit 0", "always");
    wait_for(&m, "main_exit", 3);
    // In the 4 s wait after the third exit: SIGTERM ends the machine.
    m.kill(nix::sys::signal::Signal::SIGTERM);
    m.wait(Duration::from_secs(30));
    let (starts, exits) = (
        m.audit_kinds("main_start").len(),
        m.audit_kinds("main_exit").len(),
    );
    assert_eq!((starts, exits), (3, 3), "no start after the signal");
    let signals = m.audit_kinds("signal");
    assert!(
        signals.iter().any(|l| l["action"] == "shutdown"),
        "{signals:?}"
    );
}
