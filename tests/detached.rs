//! Commands that outlive their connection (protocol version 4), on a real
//! warden as PID 1 of its own namespaces: detached with a tag, listed,
//! attached (the backlog, then live, then the exit), fed stdin, signalled,
//! waited for, bounded, stopped by their limits, and audited.

mod common;

use common::{privileged, Machine, Options, HOST_KEY};
use std::time::Duration;
use warden::wire::client::{Client, Message};
use warden::wire::{Event, ExitReport, Kind, Request, RunRequest, StdinMode};

fn detach(client: &mut Client, id: u32, run: RunRequest) -> u64 {
    let run = RunRequest {
        detach: true,
        ..run
    };
    client.send(id, &Request::Run(run)).unwrap();
    loop {
        match client.receive().unwrap() {
            Message::Event(got, Event::Detached { command, .. }) if got == id => return command,
            Message::Event(got, other) if got == id => panic!("not detached: {other:?}"),
            _ => continue,
        }
    }
}

fn sh(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.into()),
        ..Default::default()
    }
}

/// Attaches on `id`; everything until the exit: (dropped, stdout, stderr, exit).
fn attach(client: &mut Client, id: u32, command: u64) -> (u64, Vec<u8>, Vec<u8>, ExitReport) {
    client.send(id, &Request::Attach { command }).unwrap();
    follow(client, id)
}

fn follow(client: &mut Client, id: u32) -> (u64, Vec<u8>, Vec<u8>, ExitReport) {
    let (mut dropped, mut out, mut err) = (0, Vec::new(), Vec::new());
    loop {
        match client.receive().unwrap() {
            Message::Event(got, Event::Attached { dropped_bytes, .. }) if got == id => {
                dropped = dropped_bytes
            }
            Message::Output(Kind::Stderr, got, bytes) if got == id => err.extend(bytes),
            Message::Output(_, got, bytes) if got == id => out.extend(bytes),
            Message::Event(got, Event::Exit(report)) if got == id => {
                return (dropped, out, err, report)
            }
            Message::Event(got, Event::Error { code, message }) if got == id => {
                panic!("{code:?}: {message}")
            }
            _ => continue,
        }
    }
}

fn wait(client: &mut Client, id: u32, command: u64) -> ExitReport {
    client.send(id, &Request::Wait { command }).unwrap();
    loop {
        match client.receive().unwrap() {
            Message::Event(got, Event::Exit(report)) if got == id => return report,
            Message::Event(got, Event::Error { code, message }) if got == id => {
                panic!("{code:?}: {message}")
            }
            _ => continue,
        }
    }
}

#[test]
fn a_detached_command_outlives_its_connection_and_is_followed_by_another() {
    if !privileged("a_detached_command_outlives_its_connection_and_is_followed_by_another") {
        return;
    }
    let m = Machine::boot(Options::default());
    // Started, and its connection closed at once.
    let command = {
        let mut a = m.client();
        detach(
            &mut a,
            1,
            RunRequest {
                tag: Some("nightly build".into()),
                ..sh("echo first; echo oops >&2; sleep 1; echo second; exit 5")
            },
        )
    };
    let mut b = m.client();
    b.send(0, &Request::List).unwrap();
    let listed = match b.receive().unwrap() {
        Message::Event(_, Event::Commands { commands }) => commands,
        other => panic!("{other:?}"),
    };
    let mine = listed
        .iter()
        .find(|c| c.command == command)
        .expect("listed");
    assert_eq!(mine.tag.as_deref(), Some("nightly build"));
    assert_eq!(mine.state, "running");
    assert!(mine.argv.iter().any(|a| a.contains("echo first")));
    // Attached: what it printed while nobody was, then live, then its exit.
    let (dropped, out, err, exit) = attach(&mut b, 9, command);
    assert_eq!(
        (dropped, String::from_utf8_lossy(&out).as_ref()),
        (0, "first\nsecond\n")
    );
    assert_eq!(err, b"oops\n");
    assert_eq!(exit.status, 5);
    // Ended: a wait answers at once, attach gives it all again, list says so.
    let mut c = m.client();
    assert_eq!(wait(&mut c, 3, command).status, 5);
    let (_, out, _, exit) = attach(&mut c, 4, command);
    assert_eq!(
        (out.as_slice(), exit.status),
        (b"first\nsecond\n".as_slice(), 5)
    );
    c.send(0, &Request::List).unwrap();
    match c.receive().unwrap() {
        Message::Event(_, Event::Commands { commands }) => {
            let mine = commands.iter().find(|d| d.command == command).unwrap();
            assert_eq!(mine.state, "exited");
            assert_eq!(mine.exit.as_ref().map(|e| e.status), Some(5));
        }
        other => panic!("{other:?}"),
    }
    let audit = std::fs::read_to_string(m.audit_path()).unwrap();
    for kind in ["command_attached", "command_waited"] {
        assert!(audit.contains(&format!("\"{kind}\"")), "{kind} missing");
    }
    assert!(audit.contains("\"tag\":\"nightly build\""));
}

/// One registry of detached commands for every door: a command detached
/// through the machine's own socket is listed, followed and waited for
/// through the host's door, and the other way round.
#[test]
fn a_detached_command_is_the_same_through_every_door() {
    if !privileged("a_detached_command_is_the_same_through_every_door") {
        return;
    }
    let (m, host) = Machine::keyed(0o600);
    m.wait_ready();
    let owner = || Client::connect_keyed(&host, Some(HOST_KEY), None).unwrap();
    let inside = detach(&mut m.client(), 1, sh("echo from-inside"));
    let outside = detach(&mut owner(), 2, sh("echo from-outside"));
    for (mut client, command, said) in [
        (owner(), inside, "from-inside\n"),
        (m.client(), outside, "from-outside\n"),
    ] {
        client.send(0, &Request::List).unwrap();
        let listed = match client.receive().unwrap() {
            Message::Event(_, Event::Commands { commands }) => commands,
            other => panic!("{other:?}"),
        };
        assert!(listed.iter().any(|c| c.command == command), "{listed:?}");
        let (_, out, _, exit) = attach(&mut client, 5, command);
        assert_eq!(
            (String::from_utf8_lossy(&out).as_ref(), exit.status),
            (said, 0)
        );
        assert_eq!(wait(&mut client, 6, command).status, 0);
    }
}

#[test]
fn detached_commands_take_stdin_signals_and_limits_and_keep_a_bounded_backlog() {
    if !privileged("detached_commands_take_stdin_signals_and_limits_and_keep_a_bounded_backlog") {
        return;
    }
    let m = Machine::boot(Options::default());
    let mut client = m.client();
    stdin_reaches_it_through_an_attachment(&mut client);
    a_signal_reaches_its_whole_group(&mut client);
    // Its own limits still end it.
    let slow = detach(
        &mut client,
        5,
        RunRequest {
            timeout_ms: Some(300),
            ..sh("sleep 100")
        },
    );
    let exit = wait(&mut client, 6, slow);
    assert_eq!(exit.limit.as_deref(), Some("timeout"), "{exit:?}");

    // Nobody attached: only the last MiB is kept, the rest is counted.
    let loud = detach(&mut client, 7, sh("head -c 3000000 /dev/zero"));
    assert_eq!(wait(&mut client, 8, loud).status, 0);
    let (dropped, out, _, _) = attach(&mut client, 9, loud);
    assert_eq!(out.len(), warden::guest::command::detached::BACKLOG_BYTES);
    assert_eq!(dropped as usize + out.len(), 3_000_000);

    // Unknown commands are typed errors.
    client
        .send(10, &Request::Attach { command: 999_999 })
        .unwrap();
    loop {
        match client.receive().unwrap() {
            Message::Event(10, Event::Error { code, .. }) => {
                assert_eq!(code, warden::wire::ErrorCode::UnknownId);
                break;
            }
            _ => continue,
        }
    }
    let audit = std::fs::read_to_string(m.audit_path()).unwrap();
    assert!(audit.contains("\"command_signalled\""));
    std::thread::sleep(Duration::from_millis(10));
}

/// stdin through an attachment.
fn stdin_reaches_it_through_an_attachment(client: &mut Client) {
    let cat = detach(
        client,
        1,
        RunRequest {
            argv: Some(vec!["cat".into()]),
            stdin: StdinMode::Pipe,
            ..Default::default()
        },
    );
    client.send(2, &Request::Attach { command: cat }).unwrap();
    let sender = client.sender();
    sender.frame(Kind::Stdin, 2, b"typed later\n").unwrap();
    sender.frame(Kind::Stdin, 2, b"").unwrap();
    let (_, out, _, exit) = follow(client, 2);
    assert_eq!(
        (out.as_slice(), exit.status),
        (b"typed later\n".as_slice(), 0)
    );
}

/// A signal to its whole group.
fn a_signal_reaches_its_whole_group(client: &mut Client) {
    let sleeper = detach(client, 3, sh("sleep 100"));
    client
        .send(
            0,
            &Request::SignalCommand {
                command: sleeper,
                signal: "TERM".into(),
            },
        )
        .unwrap();
    loop {
        match client.receive().unwrap() {
            Message::Event(0, Event::CommandSignalled { command, signal }) => {
                assert_eq!((command, signal.as_str()), (sleeper, "SIGTERM"));
                break;
            }
            Message::Event(0, other) => panic!("{other:?}"),
            _ => continue,
        }
    }
    assert_eq!(wait(client, 4, sleeper).status, 143);
}

/// warden's resident memory in KiB, as the kernel counts it.
fn resident_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// A command printing 1.1 MB one byte per write(2), taking turns between
/// stdout and stderr (a kind boundary at every byte). Each byte waits (a
/// bounded while) for the one before to be read, so that warden reads
/// them one by one, as it does a slow drip.
const DRIP: &str = r#"import os, fcntl, termios, array
n = array.array("i", [0])
for i in range(1100000):
    fd = 1 + i % 2
    for _ in range(200):
        fcntl.ioctl(fd, termios.FIONREAD, n)
        if n[0] == 0: break
    os.write(fd, b"x")
"#;

#[test]
fn a_detached_commands_drip_costs_warden_no_more_than_its_backlog() {
    if !privileged("a_detached_commands_drip_costs_warden_no_more_than_its_backlog") {
        return;
    }
    let m = Machine::boot(Options::default());
    let pid = m.warden_pid();
    let mut client = m.client();
    assert_eq!(client.run(sh("true")).unwrap().exit.status, 0);
    let before = resident_kib(pid);
    let drip = RunRequest {
        argv: Some(vec!["python3".into(), "-c".into(), DRIP.into()]),
        ..Default::default()
    };
    let drip = detach(&mut client, 1, drip);
    assert_eq!(wait(&mut client, 2, drip).status, 0);
    let after = resident_kib(pid);
    eprintln!("warden resident: {before} KiB before a 1.1 MB drip, {after} KiB after");
    // A backlog of 1 MiB and its kinds, and some slack for the allocator.
    assert!(
        after < before + 8 * 1024,
        "warden grew from {before} to {after} KiB"
    );
    // The last MiB is all there, by kind: the bytes took turns.
    let (dropped, out, err, _) = attach(&mut client, 3, drip);
    assert!(out.iter().chain(&err).all(|b| *b == b'x'));
    assert_eq!(
        out.len() + err.len(),
        warden::guest::command::detached::BACKLOG_BYTES
    );
    assert_eq!(dropped as usize + out.len() + err.len(), 1_100_000);
    // Each pipe is read on its own, so not exactly by halves.
    let half = warden::guest::command::detached::BACKLOG_BYTES / 2;
    assert!(
        out.len().abs_diff(half) < half / 10,
        "{} {}",
        out.len(),
        err.len()
    );
}
