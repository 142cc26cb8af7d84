//! How commands run and end: binary-safe stdin and output, exit statuses,
//! a background process holding the pipes, timeouts, signals to the whole
//! group, many commands at once, output in bulk, and what a run spent.

use super::{argv, boot, run, shell};
use crate::common::{self, privileged, text, SHELL_UID};
use std::time::{Duration, Instant};
use warden::wire::client::Message;
use warden::wire::{ErrorCode, Event, Kind, Request, RunRequest, StdinMode};

#[test]
fn stdin_and_output_are_binary_safe_and_separate() {
    if !privileged("stdin_and_output_are_binary_safe_and_separate") {
        return;
    }
    let m = boot();
    let payload: Vec<u8> = (0..=255u8).cycle().take(3 * 1024 * 1024 + 7).collect();
    let mut client = m.client();
    let mut req = shell("cat; echo done >&2");
    req.stdin = StdinMode::Pipe;
    client.send(5, &Request::Run(req)).unwrap();
    let sender = client.sender();
    let to_send = payload.clone();
    let feeder = std::thread::spawn(move || {
        for chunk in to_send.chunks(100_000) {
            sender.frame(Kind::Stdin, 5, chunk).unwrap();
        }
        sender.frame(Kind::Stdin, 5, &[]).unwrap();
    });
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let exit = loop {
        match client.receive().unwrap() {
            Message::Output(Kind::Stdout, 5, b) => stdout.extend(b),
            Message::Output(Kind::Stderr, 5, b) => stderr.extend(b),
            Message::Event(5, Event::Exit(r)) => break r,
            Message::Event(5, Event::Started { .. }) => {}
            other => panic!("{other:?}"),
        }
    };
    feeder.join().unwrap();
    assert_eq!(exit.status, 0);
    assert_eq!(stdout.len(), payload.len());
    assert!(stdout == payload, "stdout differs from stdin");
    assert_eq!(stderr, b"done\n");
    assert_eq!(
        (exit.stdout_bytes, exit.stderr_bytes),
        (payload.len() as u64, 5)
    );
}

#[test]
fn exit_status_codes_signals_and_spawn_failures() {
    if !privileged("exit_status_codes_signals_and_spawn_failures") {
        return;
    }
    let m = boot();
    let cases = [
        (shell("exit 3"), 3, Some(3), None),
        (shell("kill -9 $$"), 137, None, Some("SIGKILL")),
        (shell("kill -TERM $$"), 143, None, Some("SIGTERM")),
        (argv(&["no-such-program"]), 127, Some(127), None),
        (argv(&["/etc/passwd"]), 126, Some(126), None),
    ];
    for (req, status, code, signal) in cases {
        let out = run(&m, req.clone());
        assert_eq!(out.exit.status, status, "{req:?}: {:?}", out.exit);
        assert_eq!(out.exit.code, code, "{req:?}");
        assert_eq!(out.exit.signal.as_deref(), signal, "{req:?}");
    }
    let out = run(&m, argv(&["no-such-program"]));
    assert!(out.exit.error.unwrap().contains("No such file"));
    assert_eq!(m.audit_kinds("command_failed").len(), 3);
}

#[test]
fn exit_is_reported_even_when_a_background_process_holds_the_pipes() {
    if !privileged("exit_is_reported_even_when_a_background_process_holds_the_pipes") {
        return;
    }
    let m = boot(); // drain period: 500 ms
                    // Kept: the exit comes after the bounded drain, output cut.
    let mut req = shell("sleep 31 & echo started");
    req.keep_background = true;
    let t0 = Instant::now();
    let out = run(&m, req);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(
        (out.exit.status, out.exit.drained),
        (0, false),
        "{:?}",
        out.exit
    );
    assert_eq!(text(&out.stdout), "started\n");
    // Not kept (the default): the group dies with the command, at once.
    let out = run(&m, shell("sleep 32 & echo started"));
    assert_eq!(
        (out.exit.status, out.exit.drained),
        (0, true),
        "{:?}",
        out.exit
    );
    // Seen from the host, since commands cannot see each other's processes.
    assert_eq!(
        common::processes_of(SHELL_UID, &["sleep", "31"]),
        1,
        "the kept one lives"
    );
    assert_eq!(
        common::processes_of(SHELL_UID, &["sleep", "32"]),
        0,
        "the other died with its group"
    );
}

#[test]
fn a_timeout_kills_the_whole_group_and_says_so() {
    if !privileged("a_timeout_kills_the_whole_group_and_says_so") {
        return;
    }
    let m = boot();
    let mut req = shell("sleep 60 & sleep 60");
    req.timeout_ms = Some(300);
    let t0 = Instant::now();
    let out = run(&m, req);
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(out.exit.limit.as_deref(), Some("timeout"), "{:?}", out.exit);
    assert_eq!(out.exit.signal.as_deref(), Some("SIGKILL"));
    assert!(out.exit.drained, "the background sleep died with the group");
    let end = m.audit_kinds("command_end");
    assert_eq!(end.last().unwrap()["limit"], "timeout");
}

#[test]
fn signals_reach_the_whole_group_of_the_named_command_only() {
    if !privileged("signals_reach_the_whole_group_of_the_named_command_only") {
        return;
    }
    let m = boot();
    let mut client = m.client();
    client
        .send(1, &Request::Run(shell("sleep 60 & sleep 60")))
        .unwrap();
    client
        .send(2, &Request::Run(argv(&["sleep", "60"])))
        .unwrap();
    let mut started = 0;
    while started < 2 {
        if let Message::Event(_, Event::Started { .. }) = client.receive().unwrap() {
            started += 1;
        }
    }
    let signal = |target, sig: &str| Request::Signal {
        target,
        signal: sig.into(),
    };
    client.send(0, &signal(1, "TERM")).unwrap();
    client.send(0, &signal(9, "TERM")).unwrap();
    client.send(0, &signal(2, "BOGUS")).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        match client.receive().unwrap() {
            Message::Event(0, Event::Signalled { target: 1, signal }) => seen.push(signal),
            Message::Event(
                0,
                Event::Error {
                    code: ErrorCode::UnknownId,
                    ..
                },
            ) => seen.push("unknown".into()),
            Message::Event(
                0,
                Event::Error {
                    code: ErrorCode::BadRequest,
                    ..
                },
            ) => seen.push("bad".into()),
            Message::Event(1, Event::Exit(r)) => {
                assert_eq!(r.signal.as_deref(), Some("SIGTERM"));
                assert!(r.drained, "the background sleep got the signal too");
                seen.push("exit1".into());
            }
            other => panic!("{other:?}"),
        }
    }
    seen.sort();
    assert_eq!(seen, ["SIGTERM", "bad", "exit1", "unknown"]);
    // Command 2 is untouched.
    let running = m.client().status().unwrap().running;
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].argv, ["sleep", "60"]);
}

#[test]
fn many_commands_at_once_on_one_connection_and_many() {
    if !privileged("many_commands_at_once_on_one_connection_and_many") {
        return;
    }
    let m = boot();
    let mut client = m.client();
    for id in 1..=20u32 {
        client
            .send(id, &Request::Run(shell(&format!("sleep 0.2; echo {id}"))))
            .unwrap();
    }
    let mut outputs = std::collections::HashMap::new();
    let mut exits = 0;
    while exits < 20 {
        match client.receive().unwrap() {
            Message::Output(Kind::Stdout, id, b) => {
                outputs.entry(id).or_insert_with(Vec::new).extend(b)
            }
            Message::Event(_, Event::Exit(r)) => {
                assert_eq!(r.status, 0);
                exits += 1;
            }
            Message::Event(_, Event::Started { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    for id in 1..=20u32 {
        assert_eq!(text(&outputs[&id]), format!("{id}\n"));
    }
    std::thread::scope(|s| {
        for i in 0..10 {
            let m = &m;
            s.spawn(move || {
                let out = run(m, shell(&format!("echo conn{i}")));
                assert_eq!(text(&out.stdout), format!("conn{i}\n"));
            });
        }
    });
}

#[test]
fn output_streams_in_bulk() {
    if !privileged("output_streams_in_bulk") {
        return;
    }
    let m = boot();
    let mut client = m.client();
    let mut total = 0u64;
    let out = client
        .run_streaming(argv(&["head", "-c", "268435456", "/dev/zero"]), |_, b| {
            total += b.len() as u64
        })
        .unwrap();
    assert_eq!(total, 256 << 20);
    assert_eq!(out.stdout_bytes, 256 << 20);
}

/// What a run spent: its CPU time (user and system, of it and the children
/// it waited for), its peak memory and its wall time, in its exit event and
/// audit line; the machine's totals in `status`.
#[test]
fn a_run_says_what_it_spent() {
    if !privileged("a_run_says_what_it_spent") {
        return;
    }
    let m = boot();
    // A second of CPU, burnt by a child the shell waits for.
    let burn = "python3 -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < 1: pass'";
    let out = run(
        &m,
        RunRequest {
            shell: Some(format!("{burn}; true")),
            ..Default::default()
        },
    );
    assert_eq!(out.exit.status, 0, "{}", text(&out.stderr));
    let cpu = out.exit.cpu_user_ms.unwrap() + out.exit.cpu_system_ms.unwrap();
    assert!((900.0..2000.0).contains(&cpu), "{:?}", out.exit);
    assert!(out.exit.duration_ms >= cpu * 0.5, "{:?}", out.exit);
    let rss = out.exit.max_rss_kb.unwrap();
    assert!(
        (1000..1_000_000).contains(&rss),
        "python's peak memory: {rss} KiB"
    );
    let status = m.client().status().unwrap();
    let total = status.spent.expect("totals");
    assert!(
        total.commands >= 1 && total.cpu_user_ms + total.cpu_system_ms >= cpu - 1.0,
        "{total:?}"
    );
    let audit = std::fs::read_to_string(m.audit_path()).unwrap();
    assert!(audit.contains("\"cpu_user_ms\":"), "the audit line says it");
}
