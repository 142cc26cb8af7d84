//! The API against a real warden (PID 1 of its own namespace), with real
//! users: who commands run as, what they see, how they end, who may connect,
//! and what malformed input gets.

mod common;

use common::{privileged, text, Machine, Options, RUNTIME_UID, SHELL_UID};
use serde_json::json;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};
use warden::wire::client::{Client, ClientError, Message, Output};
use warden::wire::{ErrorCode, Event, Header, Kind, Request, RunRequest, StdinMode};

fn argv(args: &[&str]) -> RunRequest {
    RunRequest {
        argv: Some(args.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

fn shell(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.into()),
        ..Default::default()
    }
}

fn run(m: &Machine, req: RunRequest) -> Output {
    m.client().run(req).unwrap()
}

fn boot() -> Machine {
    Machine::boot(Options::default())
}

#[test]
fn commands_run_as_shell_with_only_shells_groups() {
    if !privileged("commands_run_as_shell_with_only_shells_groups") {
        return;
    }
    let m = boot();
    assert_eq!(text(&run(&m, argv(&["id", "-un"])).stdout), "shell\n");
    assert_eq!(
        text(&run(&m, argv(&["id", "-u"])).stdout),
        format!("{SHELL_UID}\n")
    );
    // shell's group, and the command's own lifetime tag (a group owning
    // nothing; see src/guest/process/lifetime.rs).
    let groups = text(&run(&m, argv(&["id", "-G"])).stdout);
    let groups: Vec<u32> = groups
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert_eq!(groups[0], SHELL_UID);
    let tags = warden::guest::process::lifetime::TAG_BASE
        ..warden::guest::process::lifetime::TAG_BASE + warden::guest::process::lifetime::TAG_COUNT;
    assert!(tags.contains(&groups[1]), "{groups:?}");
    let status = run(
        &m,
        argv(&["grep", "-E", "^(Uid|Gid|NoNewPrivs)", "/proc/self/status"]),
    );
    let s = text(&status.stdout);
    assert!(
        s.contains(&format!(
            "Uid:\t{SHELL_UID}\t{SHELL_UID}\t{SHELL_UID}\t{SHELL_UID}"
        )),
        "{s}"
    );
    assert!(s.contains("NoNewPrivs:\t1"), "{s}");
}

#[test]
fn the_environment_is_built_from_nothing() {
    if !privileged("the_environment_is_built_from_nothing") {
        return;
    }
    let canary = "warden-canary-9f1c";
    let m = Machine::boot(Options {
        main: vec!["sleep".into(), "100".into()],
        env: vec![("SECRET_TOKEN".into(), canary.into())],
        ..Default::default()
    });
    let mut req = argv(&["env"]);
    req.env.insert("EXTRA".into(), "given".into());
    let env = text(&run(&m, req).stdout);
    // The proxy's variables and those naming the machine's bundle (which
    // trusts its own authority), exactly as warden sets them, and nothing
    // else.
    let bundle = warden::guest::net::opened::trust::env(std::path::Path::new(
        "/etc/ssl/certs/ca-certificates.crt",
    ));
    let proxy: Vec<String> = warden::guest::net::proxy_env(3128)
        .iter()
        .chain(&bundle)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for line in &proxy {
        assert!(env.lines().any(|l| l == line), "{line} missing: {env}");
    }
    let mut names: Vec<&str> = env
        .lines()
        .filter(|l| !proxy.iter().any(|p| p == l))
        .map(|l| l.split('=').next().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["EXTRA", "HOME", "LANG", "LOGNAME", "PATH", "USER"],
        "{env}"
    );
    assert!(
        env.contains(&format!("HOME={}\n", m.shell_home.display())),
        "{env}"
    );
    assert!(env.contains("EXTRA=given\n"));
    assert!(!env.contains(canary));
    // The main process (the trusted runtime) does get warden's environment,
    // and nothing a command can read shows it.
    let status = m.client().status().unwrap();
    let main_pid = status.main.unwrap().pid;
    let environ = run(
        &m,
        shell(&format!("cat /proc/{main_pid}/environ /proc/1/environ")),
    );
    assert!(!text(&environ.stdout).contains(canary));
    assert_ne!(
        environ.exit.status, 0,
        "reading another user's environ must fail"
    );
}

#[test]
fn folders_are_made_as_shell_inside_the_workspace_and_escapes_are_refused() {
    if !privileged("folders_are_made_as_shell_inside_the_workspace_and_escapes_are_refused") {
        return;
    }
    let m = boot();
    let workspace = m.home.join("workspace");
    let mut req = argv(&["pwd"]);
    req.folder = Some("proj/sub".into());
    let out = run(&m, req);
    assert_eq!(
        text(&out.stdout).trim(),
        workspace.join("proj/sub").display().to_string()
    );
    for dir in ["proj", "proj/sub"] {
        let meta = std::fs::metadata(workspace.join(dir)).unwrap();
        assert_eq!(
            (meta.uid(), meta.mode() & 0o7777),
            (SHELL_UID, 0o755),
            "{dir}"
        );
    }
    // Without a folder: shell's home.
    assert_eq!(
        text(&run(&m, argv(&["pwd"])).stdout).trim(),
        m.shell_home.display().to_string()
    );
    // Names that leave the workspace never reach a process.
    for bad in ["../x", "/etc", "a/../../b", "./a", "a//b", ""] {
        let mut req = argv(&["true"]);
        req.folder = Some(bad.into());
        match m.client().run(req) {
            Err(ClientError::Warden {
                code: ErrorCode::BadRequest,
                message,
            }) => {
                assert!(message.contains("folder"), "{bad}: {message}")
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert!(!m.home.join("x").exists() && !m.home.join("b").exists());
    // A symlink planted in the workspace is followed only with shell's
    // rights: it cannot make anything in data/.
    std::os::unix::fs::symlink(m.home.join("data"), workspace.join("evil")).unwrap();
    let mut req = argv(&["true"]);
    req.folder = Some("evil/planted".into());
    let out = run(&m, req);
    assert_eq!(out.exit.status, 125, "{:?}", out.exit);
    assert!(
        out.exit
            .error
            .as_deref()
            .unwrap_or("")
            .contains("working folder"),
        "{:?}",
        out.exit
    );
    assert!(!m.home.join("data/planted").exists());
}

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
fn only_root_and_runtime_may_connect() {
    if !privileged("only_root_and_runtime_may_connect") {
        return;
    }
    let m = boot();
    let meta = std::fs::metadata(&m.socket).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (0, RUNTIME_UID, 0o660)
    );
    let status_as = |uid: u32, gid: u32| {
        use std::os::unix::process::CommandExt;
        Command::new(common::warden_bin())
            .args(["status", "--socket"])
            .arg(&m.socket)
            .uid(uid)
            .gid(gid)
            .output()
            .unwrap()
    };
    // shell is stopped by the socket's mode...
    let out = status_as(SHELL_UID, SHELL_UID);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out.stderr)
    );
    // ...and, should the mode ever be wrong, by its peer credentials.
    std::fs::set_permissions(
        &m.socket,
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    let out = status_as(SHELL_UID, SHELL_UID);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("Refused"),
        "{}",
        text(&out.stderr)
    );
    let refused = m.audit_kinds("connection_refused");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["uid"], SHELL_UID);
    // The runtime may.
    let out = status_as(RUNTIME_UID, RUNTIME_UID);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("user shell"));
}

/// A raw connection, to send what no well-behaved client would.
struct Raw(UnixStream);

impl Raw {
    fn connect(m: &Machine) -> Raw {
        let s = UnixStream::connect(&m.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Raw(s)
    }
    fn frame(&mut self, kind: u8, id: u32, body: &[u8]) {
        let mut h = Header {
            kind: Kind::Control,
            id,
            len: body.len() as u32,
        }
        .encode();
        h[0] = kind;
        let _ = self.0.write_all(&h);
        let _ = self.0.write_all(body);
    }
    fn control(&mut self, id: u32, body: &str) {
        self.frame(1, id, body.as_bytes());
    }
    fn hello(&mut self) {
        self.control(0, r#"{"type":"hello","versions":[1]}"#);
        assert!(matches!(
            self.event(),
            Some((0, Event::Hello { version: 1, .. }))
        ));
    }
    /// The next control event, or None when warden closed the connection.
    fn event(&mut self) -> Option<(u32, Event)> {
        loop {
            let mut raw = [0u8; 9];
            self.0.read_exact(&mut raw).ok()?;
            let h = Header::decode(&raw).unwrap();
            let mut body = vec![0; h.len as usize];
            self.0.read_exact(&mut body).ok()?;
            if h.kind == Kind::Control {
                return Some((h.id, serde_json::from_slice(&body).unwrap()));
            }
        }
    }
    fn error_code(&mut self) -> Option<ErrorCode> {
        match self.event() {
            Some((_, Event::Error { code, .. })) => Some(code),
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

#[test]
fn malformed_input_gets_typed_errors_and_warden_carries_on() {
    if !privileged("malformed_input_gets_typed_errors_and_warden_carries_on") {
        return;
    }
    let m = boot();
    // Fatal: the connection is closed after the error.
    type Send = Box<dyn Fn(&mut Raw)>;
    let fatal: Vec<(&str, Send, ErrorCode)> = vec![
        (
            "run before hello",
            Box::new(|r| r.control(1, r#"{"type":"status"}"#)),
            ErrorCode::HelloRequired,
        ),
        (
            "data before hello",
            Box::new(|r| r.frame(4, 1, b"x")),
            ErrorCode::HelloRequired,
        ),
        (
            "no common version",
            Box::new(|r| r.control(0, r#"{"type":"hello","versions":[99]}"#)),
            ErrorCode::UnsupportedVersion,
        ),
        (
            "oversized frame",
            Box::new(|r| {
                r.hello();
                let mut h = Header {
                    kind: Kind::Control,
                    id: 1,
                    len: 0,
                }
                .encode();
                h[5..9].copy_from_slice(&(64u32 << 20).to_be_bytes());
                r.0.write_all(&h).unwrap();
            }),
            ErrorCode::FrameTooLarge,
        ),
        (
            "unknown frame kind",
            Box::new(|r| {
                r.hello();
                r.frame(77, 1, b"");
            }),
            ErrorCode::BadFrame,
        ),
        (
            "output frame from a client",
            Box::new(|r| {
                r.hello();
                r.frame(2, 1, b"x");
            }),
            ErrorCode::BadFrame,
        ),
    ];
    for (what, send, want) in fatal {
        let mut r = Raw::connect(&m);
        send(&mut r);
        assert_eq!(r.error_code(), Some(want), "{what}");
        assert!(r.event().is_none(), "{what}: connection should be closed");
    }
    // Not fatal: an error, then the same connection still works.
    let mut r = Raw::connect(&m);
    r.hello();
    let recoverable = [
        ("{not json", ErrorCode::BadJson),
        (r#"{"type":"launch"}"#, ErrorCode::BadRequest),
        (r#"{"type":"run","argv":"ls"}"#, ErrorCode::BadRequest),
        (
            r#"{"type":"run","argv":["ls"],"unknown":1}"#,
            ErrorCode::BadRequest,
        ),
        (r#"{"type":"run"}"#, ErrorCode::BadRequest),
        (
            r#"{"type":"run","argv":["ls"],"timeout_ms":99999999999999999999999}"#,
            ErrorCode::BadRequest,
        ),
        (r#"{"type":"hello","versions":[1]}"#, ErrorCode::BadRequest),
    ];
    for (body, want) in recoverable {
        r.control(3, body);
        assert_eq!(r.error_code(), Some(want), "{body}");
    }
    r.frame(1, 3, &[0xff, 0xfe, b'{']);
    assert_eq!(r.error_code(), Some(ErrorCode::BadJson), "invalid UTF-8");
    r.control(0, r#"{"type":"run","argv":["true"]}"#);
    assert_eq!(r.error_code(), Some(ErrorCode::BadRequest), "run with id 0");
    r.frame(4, 42, b"stdin for nobody");
    assert_eq!(r.error_code(), Some(ErrorCode::UnknownId));
    r.control(7, r#"{"type":"run","argv":["sleep","5"]}"#);
    r.control(7, r#"{"type":"run","argv":["true"]}"#);
    loop {
        match r.event() {
            Some((7, Event::Started { .. })) => continue,
            Some((7, Event::Error { code, .. })) => {
                assert_eq!(code, ErrorCode::DuplicateId);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    r.control(0, r#"{"type":"status"}"#);
    loop {
        // The run on id 7 may report its start before or after the error.
        match r.event() {
            Some((7, Event::Started { .. })) => continue,
            Some((0, Event::Status(_))) => break,
            other => panic!("{other:?}"),
        }
    }
    // And everyone else was never affected.
    assert_eq!(text(&run(&m, argv(&["echo", "fine"])).stdout), "fine\n");
}

#[test]
fn a_client_that_disconnects_takes_its_commands_with_it() {
    if !privileged("a_client_that_disconnects_takes_its_commands_with_it") {
        return;
    }
    let m = boot();
    let mut r = Raw::connect(&m);
    r.hello();
    r.control(1, r#"{"type":"run","shell":"sleep 101 & sleep 101"}"#);
    assert!(matches!(r.event(), Some((1, Event::Started { .. }))));
    drop(r);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !m.client().status().unwrap().running.is_empty() {
        assert!(Instant::now() < deadline, "the command outlived its client");
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = common::processes_of(SHELL_UID, &["sleep", "101"]);
    assert_eq!(left, 0, "a process outlived its client");
}

#[test]
fn status_reports_users_layout_and_running_commands() {
    if !privileged("status_reports_users_layout_and_running_commands") {
        return;
    }
    let m = boot();
    let mut c = m.client();
    let mut req = argv(&["sleep", "30"]);
    req.folder = Some("w".into());
    c.send(1, &Request::Run(req)).unwrap();
    assert!(matches!(
        c.receive().unwrap(),
        Message::Event(1, Event::Started { .. })
    ));
    let s = m.client().status().unwrap();
    assert!(s.pid1);
    // warden's own boot time, the same as its boot line says.
    let boot_line = &m.audit_kinds("boot")[0];
    assert!(s.boot_ms > 0.0);
    assert_eq!(Some(s.boot_ms), boot_line["boot_ms"].as_f64());
    assert_eq!(
        s.users.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(),
        ["runtime", "shell"]
    );
    assert!(s.layout.iter().all(|p| p.ok), "{:?}", s.layout);
    assert_eq!(s.running.len(), 1);
    assert_eq!(
        (s.running[0].folder.as_deref(), s.running[0].requester_uid),
        (Some("w"), 0)
    );
    // A path made wrong behind warden's back shows up at once.
    std::fs::set_permissions(
        m.home.join("data"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let s = m.client().status().unwrap();
    let data = s.layout.iter().find(|p| p.path.ends_with("/data")).unwrap();
    assert!(!data.ok, "{data:?}");
}

#[test]
fn the_audit_log_records_commands_in_a_verifiable_chain_shell_cannot_read() {
    if !privileged("the_audit_log_records_commands_in_a_verifiable_chain_shell_cannot_read") {
        return;
    }
    let m = boot();
    let mut req = argv(&["echo", "audited"]);
    req.folder = Some("a".into());
    run(&m, req);
    let cat = run(&m, argv(&["cat", &m.audit_path().display().to_string()]));
    assert_ne!(cat.exit.status, 0, "shell read the audit log");
    let start = m.audit_kinds("command_start");
    let found = start
        .iter()
        .find(|l| l["argv"] == json!(["echo", "audited"]))
        .unwrap();
    assert_eq!(
        (found["folder"].as_str(), found["requester_uid"].as_u64()),
        (Some("a"), Some(0))
    );
    let end = m.audit_kinds("command_end");
    let found_end = end
        .iter()
        .find(|l| l["command"] == found["command"])
        .unwrap();
    assert_eq!(
        (
            found_end["status"].as_i64(),
            found_end["stdout_bytes"].as_u64()
        ),
        (Some(0), Some(8))
    );
    let text = std::fs::read_to_string(m.audit_path()).unwrap();
    let mut prev = "0".repeat(64);
    for line in text.lines() {
        prev = warden::shared::audit_chain::check_line(line, &prev)
            .unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    let meta = std::fs::metadata(m.audit_path()).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (0, RUNTIME_UID, 0o640)
    );
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

#[test]
fn huge_values_are_taken_as_they_are_without_overflow() {
    if !privileged("huge_values_are_taken_as_they_are_without_overflow") {
        return;
    }
    let m = boot();
    let mut req = argv(&["echo", "fine"]);
    req.timeout_ms = Some(u64::MAX);
    req.limits = Some(warden::wire::Limits {
        cpu_seconds: Some(u64::MAX),
        address_space_bytes: Some(u64::MAX),
        processes: Some(u64::MAX),
        output_bytes: Some(u64::MAX),
        file_size_bytes: Some(u64::MAX),
        open_files: Some(u64::MAX),
        timeout_ms: Some(u64::MAX),
        memory_bytes: Some(u64::MAX),
        cpu_percent: Some(u64::MAX),
    });
    let out = run(&m, req);
    assert_eq!(
        (out.exit.status, text(&out.stdout)),
        (0, "fine\n".to_string()),
        "{:?}",
        out.exit
    );
}

#[test]
fn the_runtime_appends_its_own_events_and_refusals_are_logged() {
    if !privileged("the_runtime_appends_its_own_events_and_refusals_are_logged") {
        return;
    }
    let m = boot();
    let mut c = m.client();
    let event = Request::Audit {
        kind: "served_memory".into(),
        fields: json!({"file": "notes.md", "to": "agent"}),
    };
    c.send(0, &event).unwrap();
    let seq = match c.receive().unwrap() {
        Message::Event(0, Event::Recorded { seq }) => seq,
        other => panic!("{other:?}"),
    };
    let line = m.audit().into_iter().find(|l| l["seq"] == seq).unwrap();
    assert_eq!(
        (line["kind"].as_str(), line["event"].as_str()),
        (Some("runtime"), Some("served_memory"))
    );
    assert_eq!(
        (line["from_uid"].as_u64(), line["fields"]["file"].as_str()),
        (Some(0), Some("notes.md"))
    );
    // A bad kind is refused, and the refusal is itself in the log.
    c.send(
        0,
        &Request::Audit {
            kind: "Bad Kind".into(),
            fields: json!(null),
        },
    )
    .unwrap();
    assert!(matches!(
        c.receive().unwrap(),
        Message::Event(
            0,
            Event::Error {
                code: ErrorCode::BadRequest,
                ..
            }
        )
    ));
    let refused = m.audit_kinds("request_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["code"], "bad_request");
}

#[test]
fn rlimits_reach_the_command() {
    if !privileged("rlimits_reach_the_command") {
        return;
    }
    let m = boot();
    let mut req = argv(&["cat", "/proc/self/limits"]);
    req.limits = Some(warden::wire::Limits {
        open_files: Some(64),
        processes: Some(77),
        file_size_bytes: Some(1 << 20),
        ..Default::default()
    });
    let limits = text(&run(&m, req).stdout);
    // (soft, hard) as the kernel holds them; cores are always off.
    for (name, want) in [
        ("Max open files", "64"),
        ("Max processes", "77"),
        ("Max file size", "1048576"),
        ("Max core file size", "0"),
    ] {
        let line = limits.lines().find(|l| l.starts_with(name)).expect(name);
        let values: Vec<&str> = line[name.len()..].split_whitespace().take(2).collect();
        assert_eq!(values, [want, want], "{line}");
    }
}

/// A machine with a host socket and a key file, as the launcher makes one.
#[test]
fn the_host_socket_lets_in_only_the_machines_key() {
    if !privileged("the_host_socket_lets_in_only_the_machines_key") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let (m, host) = Machine::keyed(0o600);
    m.wait_ready();
    let mode = std::fs::metadata(&host).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o600,
        "the owner's alone; the key decides among those who reach it"
    );
    let keyed = |key: Option<&str>| {
        Client::connect_keyed(&host, key, None).map(|mut c| c.run(argv(&["id", "-un"])).unwrap())
    };
    let out = keyed(Some("test-key-0123456789abcdef0123456789abcdef")).unwrap();
    assert_eq!(text(&out.stdout).trim(), "shell");
    for (key, reason) in [
        (
            Some("test-key-0123456789abcdef0123456789abcdeX"),
            "wrong key",
        ),
        (None, "no key"),
    ] {
        let e = keyed(key).expect_err("refused").to_string();
        assert!(e.contains(reason), "{e}");
    }
    let refused = m.audit_kinds("connection_refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused.iter().all(|l| l["door"] == "host"));
    assert!(refused.iter().all(|l| l["via"] == "host_socket"));
    assert_eq!(m.audit_kinds("connection")[0]["door"], "host");
    // shell cannot read the key.
    let out = run(
        &m,
        shell(&format!("cat {}", m.root().join("key").display())),
    );
    assert_ne!(out.exit.status, 0);
    assert!(!text(&out.stdout).contains("test-key"));
}

#[test]
fn a_key_file_others_may_read_stops_the_boot() {
    if !privileged("a_key_file_others_may_read_stops_the_boot") {
        return;
    }
    let (mut m, _) = Machine::keyed(0o644);
    assert_eq!(m.wait(Duration::from_secs(10)), 1);
    assert!(
        m.log().contains("must be root's and mode 0600 or 0400"),
        "{}",
        m.log()
    );
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

/// The OOM killer takes a command before the runtime and warden.
#[test]
fn commands_are_first_for_the_oom_killer() {
    if !privileged("commands_are_first_for_the_oom_killer") {
        return;
    }
    let m = boot();
    let out = run(&m, argv(&["cat", "/proc/self/oom_score_adj"]));
    assert_eq!(text(&out.stdout), "1000\n");
    // warden goes last where it may lower its score (CAP_SYS_RESOURCE);
    // status says which it is, as measured.
    let warden =
        std::fs::read_to_string(format!("/proc/{}/oom_score_adj", m.warden_pid())).unwrap();
    // The command's child shared warden's memory until exec: only
    // CLONE_VFORK keeps the kernel from giving warden its score too.
    assert_ne!(warden.trim(), "1000", "warden took its command's score");
    let status = m.client().status().unwrap();
    let layer = common::layer(&status, "oom_order");
    // The commands' part is proven by the probe, not assumed.
    assert!(
        layer
            .detail
            .contains("shell's commands first (oom_score_adj 1000, read back by the probe)"),
        "{layer:?}"
    );
    match warden.trim() {
        "-1000" => assert!(
            layer.holds && layer.detail.contains("last (-1000)"),
            "{layer:?}"
        ),
        other => {
            assert!(!layer.holds, "{layer:?}");
            assert!(
                layer.detail.contains(&format!("stay at {other}")),
                "{layer:?}"
            );
            assert!(layer.detail.contains("CAP_SYS_RESOURCE"), "{layer:?}");
        }
    }
}

/// A command gets its stdio and nothing else of warden's, however many
/// descriptors warden holds: with 200 connections open, each command's
/// shell lists its own descriptors, and its output still ends (no second
/// reference to its pipe kept anywhere).
#[test]
fn a_command_inherits_no_descriptor_of_wardens_however_many_it_holds() {
    if !privileged("a_command_inherits_no_descriptor_of_wardens_however_many_it_holds") {
        return;
    }
    let m = Machine::boot(Options::default());
    let held: Vec<Client> = (0..200).map(|_| m.client()).collect();
    let fds = std::fs::read_dir(format!("/proc/{}/fd", m.warden_pid()))
        .unwrap()
        .count();
    assert!(fds > 200, "warden holds only {fds} descriptors");
    let mut client = m.client();
    for _ in 0..3 {
        let out = client.run(shell("ls /proc/$$/fd; true")).unwrap();
        assert_eq!(out.exit.status, 0, "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "0\n1\n2\n", "warden holds {fds}");
    }
    drop(held);
}
