//! warden as PID 1, checked the way tini and dumb-init check themselves, in
//! real PID namespaces (root).

mod common;

use common::{privileged, sh, Machine, Options};
use nix::sys::signal::Signal;
use serde_json::json;
use std::time::{Duration, Instant};
use warden::wire::RunRequest;

const LIMIT: Duration = Duration::from_secs(30);

fn boot_main(main: Vec<String>) -> Machine {
    Machine::start(Options {
        main,
        ..Default::default()
    })
}

#[test]
fn a_hundred_orphaned_zombies_are_reaped() {
    if !privileged("a_hundred_orphaned_zombies_are_reaped") {
        return;
    }
    // Each inner sh exits at once, leaving its sleep to PID 1; the script
    // counts those orphans while they live, then the zombies after they die.
    let script = r#"
        # Five seconds: long enough for a loaded machine to start all 100.
        for i in $(seq 100); do sh -c 'sleep 5 &'; done
        orphans=0
        for f in /proc/[0-9]*/stat; do
            set -- $(cat "$f" 2>/dev/null); [ "$2" = "(sleep)" ] && [ "$4" = 1 ] && orphans=$((orphans+1))
        done
        sleep 6
        zombies=0
        for f in /proc/[0-9]*/stat; do
            set -- $(cat "$f" 2>/dev/null); [ "$3" = Z ] && zombies=$((zombies+1))
        done
        echo "orphans=$orphans zombies=$zombies"
    "#;
    let mut m = boot_main(sh(script));
    assert_eq!(m.wait(LIMIT), 0, "{}", m.log());
    let log = m.log();
    let line = log.lines().find(|l| l.starts_with("orphans=")).expect(&log);
    let orphans: u32 = line["orphans=".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        orphans >= 90,
        "only {orphans} orphans seen alive: the test proved nothing\n{log}"
    );
    assert!(line.ends_with("zombies=0"), "{line}");
}

#[test]
fn forwarded_signals_end_the_main_process_with_128_plus_n() {
    if !privileged("forwarded_signals_end_the_main_process_with_128_plus_n") {
        return;
    }
    let cases = [
        Signal::SIGTERM,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGHUP,
        Signal::SIGINT,
    ];
    for sig in cases {
        let mut m = Machine::boot(Options {
            main: vec!["sleep".into(), "100".into()],
            ..Default::default()
        });
        // The main process is up once status names it.
        let deadline = Instant::now() + LIMIT;
        while m.client().status().unwrap().main.is_none() {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        m.kill(sig);
        assert_eq!(m.wait(LIMIT), 128 + sig as i32, "{sig}: {}", m.log());
        let signals = m.audit_kinds("signal");
        assert_eq!(signals.len(), 1, "{signals:?}");
        assert_eq!(signals[0]["signal"], sig.as_str());
    }
}

#[test]
fn exit_codes_0_to_255_pass_through() {
    if !privileged("exit_codes_0_to_255_pass_through") {
        return;
    }
    let codes: Vec<i32> = (0..=255).collect();
    std::thread::scope(|s| {
        for chunk in codes.chunks(64) {
            s.spawn(move || {
                for &code in chunk {
                    let mut m = boot_main(sh(&format!("exit {code}")));
                    assert_eq!(m.wait(LIMIT), code, "{}", m.log());
                }
            });
        }
    });
}

#[test]
fn exec_failures_give_127_and_126() {
    if !privileged("exec_failures_give_127_and_126") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let not_exec = dir.path().join("script");
    std::fs::write(&not_exec, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&not_exec, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cases = [
        (vec!["/nonexistent/program".to_string()], 127),
        (vec!["no-such-program-anywhere".to_string()], 127),
        (vec![not_exec.display().to_string()], 126),
        (vec![dir.path().display().to_string()], 126),
    ];
    for (main, want) in cases {
        let mut m = boot_main(main.clone());
        assert_eq!(m.wait(LIMIT), want, "{main:?}: {}", m.log());
    }
}

#[test]
fn children_start_with_a_clean_signal_mask_and_no_ignored_signals() {
    if !privileged("children_start_with_a_clean_signal_mask_and_no_ignored_signals") {
        return;
    }
    let clean = |status: &str| {
        for field in ["SigBlk:", "SigIgn:"] {
            let line = status.lines().find(|l| l.starts_with(field)).expect(status);
            assert!(line.ends_with("0000000000000000"), "{line}");
        }
    };
    // The main process...
    let mut m = boot_main(vec!["cat".into(), "/proc/self/status".into()]);
    assert_eq!(m.wait(LIMIT), 0);
    clean(&m.log());
    // ...and a command.
    let m = Machine::boot(Options::default());
    let out = m
        .client()
        .run(RunRequest {
            argv: Some(vec!["cat".into(), "/proc/self/status".into()]),
            ..Default::default()
        })
        .unwrap();
    clean(&String::from_utf8_lossy(&out.stdout));
}

#[test]
fn sigchld_coalescing_race_never_hangs() {
    if !privileged("sigchld_coalescing_race_never_hangs") {
        return;
    }
    // dumb-init's and tini's check: a child whose own child is orphaned and
    // killed in the same instant, so SIGCHLDs coalesce.
    for _ in 0..30 {
        let mut m = boot_main(vec![
            "bash".into(),
            "-c".into(),
            "bash -c 'sleep 0.01 & kill -9 $BASHPID'; sleep 0.0087".into(),
        ]);
        assert_eq!(m.wait(Duration::from_secs(10)), 0, "{}", m.log());
    }
}

#[test]
fn without_a_pid_namespace_warden_is_a_subreaper_and_leaves_nothing_behind() {
    if !privileged("without_a_pid_namespace_warden_is_a_subreaper_and_leaves_nothing_behind") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let pidfile = dir.path().join("orphan.pid");
    let script = format!(
        "sh -c 'sleep 100 & echo $! > {}'; sleep 0.2; exit 7",
        pidfile.display()
    );
    let mut m = Machine::start(Options {
        main: sh(&script),
        pid_namespace: false,
        ..Default::default()
    });
    assert_eq!(m.wait(LIMIT), 7, "{}", m.log());
    assert!(m.log().contains("acting as a subreaper"), "{}", m.log());
    let orphan: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = std::fs::read_to_string(format!("/proc/{orphan}/cmdline"))
        .is_ok_and(|c| c.starts_with("sleep"));
    assert!(!alive, "the orphan {orphan} outlived warden");
}

#[test]
fn shutdown_stops_commands_within_the_grace_period() {
    if !privileged("shutdown_stops_commands_within_the_grace_period") {
        return;
    }
    let mut m = Machine::boot(Options {
        main: vec!["sleep".into(), "100".into()],
        config: json!({"grace_period_ms": 300}),
        ..Default::default()
    });
    // One command that dies on TERM, one that ignores it.
    let mut clients = Vec::new();
    for line in ["sleep 100", "trap '' TERM; sleep 100; sleep 100"] {
        let c = m.client();
        c.send(
            1,
            &warden::wire::Request::Run(RunRequest {
                shell: Some(line.into()),
                ..Default::default()
            }),
        )
        .unwrap();
        clients.push(c);
    }
    m.wait_running(2);
    let t0 = Instant::now();
    m.kill(Signal::SIGTERM);
    assert_eq!(m.wait(LIMIT), 143, "{}", m.log());
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    let stopped = m.audit_kinds("stopped");
    assert_eq!(stopped[0]["terminated"], 2, "{stopped:?}");
    assert_eq!(stopped[0]["killed_after_grace"], 1, "{stopped:?}");
    assert_eq!(m.audit_kinds("command_end").len(), 2);
    assert_eq!(m.audit_kinds("shutdown")[0]["status"], 143);
}
