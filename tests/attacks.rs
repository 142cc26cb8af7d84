//! The attack suite: what a hostile command would try, each run as `shell`
//! through warden's API on a real warden (PID 1 of its own namespaces, real
//! users, real Landlock, seccomp and rlimits), each asserting it fails.
//! The syscall-level attempts are `tests/attacks/attack.c`, compiled here.
//! What a command leaves behind is in tests/attacks/left_behind.rs.

mod common;

#[path = "attacks/left_behind.rs"]
mod left_behind;

use common::attacks::{
    assert_blocked, assert_no_secret, build_attack_program, hand_to_shell, programs, shell_lines,
    Targets, DATA_CANARY, ENV_CANARY, ROUTINE_CANARY,
};
use common::{printed, privileged, Machine, Options, RUNTIME_UID, SHELL_UID};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use warden::wire::client::Output;
use warden::wire::Limits;
use warden::wire::RunRequest;

struct Scene {
    m: Machine,
    /// The attack program, as shell sees it.
    bin: PathBuf,
    _bin_dir: tempfile::TempDir,
    main_pid: i32,
    abstract_name: String,
    listener: std::net::TcpListener,
}

impl Scene {
    fn new() -> Scene {
        let (bin_dir, runtime_bin) = build_attack_program();
        // Unique per scene: abstract names are shared by the whole host.
        let abstract_name =
            format!("warden-test-runtime-{}", bin_dir.path().display()).replace('/', "-");
        let m = Machine::boot(Options {
            main: vec![
                runtime_bin.display().to_string(),
                "serve-abstract".into(),
                abstract_name.clone(),
            ],
            ..Default::default()
        });
        // The runtime's secrets, memory, routines, and a folder of its own in
        // the workspace: all things a command must not reach.
        let h = &m.home;
        std::fs::write(h.join(".env"), format!("API_KEY={ENV_CANARY}\n")).unwrap();
        let as_runtime =
            |p: &Path| std::os::unix::fs::chown(p, Some(RUNTIME_UID), Some(RUNTIME_UID)).unwrap();
        for (path, text) in [
            (h.join("data/memory.txt"), DATA_CANARY),
            (h.join("workspace/routines/agent.md"), ROUTINE_CANARY),
        ] {
            std::fs::write(&path, text).unwrap();
            as_runtime(&path);
        }
        std::fs::set_permissions(
            h.join("workspace/routines/agent.md"),
            PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let notes = h.join("workspace/runtime-notes");
        std::fs::create_dir(&notes).unwrap();
        std::fs::write(notes.join("n.txt"), "notes").unwrap();
        as_runtime(&notes);
        as_runtime(&notes.join("n.txt"));
        std::os::unix::fs::symlink(h.join("data"), h.join("workspace/evil")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let main_pid = loop {
            if let Some(main) = m.client().status().unwrap().main {
                break main.pid;
            }
            assert!(Instant::now() < deadline, "no main process");
            std::thread::sleep(Duration::from_millis(10));
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let bin = hand_to_shell(&m, bin_dir.path());
        Scene {
            m,
            bin,
            _bin_dir: bin_dir,
            main_pid,
            abstract_name,
            listener,
        }
    }

    fn run(&self, mut req: RunRequest) -> Output {
        if req.folder.is_none() {
            req.folder = Some("attacks".into());
        }
        self.m.client().run(req).unwrap()
    }

    fn attack(&self, args: &[&str]) -> Output {
        let mut argv = vec![self.bin.display().to_string()];
        argv.extend(args.iter().map(|s| s.to_string()));
        self.run(RunRequest {
            argv: Some(argv),
            ..Default::default()
        })
    }
}

fn sh(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.into()),
        ..Default::default()
    }
}

#[test]
fn every_attack_fails() {
    if !privileged("every_attack_fails") {
        return;
    }
    let s = Scene::new();
    let targets = targets(&s);
    let mut tried = every_shell_line_fails_and_changes_nothing(&s, &targets);
    tried += every_program_is_blocked(&s, &targets);

    the_abstract_socket_is_there(&s);

    // A setuid-root binary runs, but as shell.
    let o = s.run(RunRequest {
        argv: Some(vec![
            s.bin.with_file_name("id-suid").display().to_string(),
            "-u".into(),
        ]),
        ..Default::default()
    });
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        SHELL_UID.to_string(),
        "{}",
        printed(&o)
    );
    tried += 1;

    // A folder that leads out of the workspace through a planted link.
    let o = s.run(RunRequest {
        folder: Some("evil/x".into()),
        ..sh("true")
    });
    assert_eq!(o.exit.status, 125, "{:?}", o.exit);
    assert!(!s.m.home.join("data/x").exists());
    tried += 1;

    eprintln!("{tried} attacks tried, all stopped");
    assert!(tried >= 40);

    status_says_every_layer_holds(&s);
}

/// What the suite aims at in `s`: the runtime's home, main process,
/// audit log, config, socket, a listening port and abstract socket.
fn targets(s: &Scene) -> Targets {
    let h = s.m.home.display().to_string();
    let main = s.main_pid.to_string();
    let audit = s.m.audit_path().display().to_string();
    let config = s.m.root().join("machine.json").display().to_string();
    let socket = s.m.socket.display().to_string();
    let port = s.listener.local_addr().unwrap().port().to_string();
    Targets {
        home: h,
        main,
        audit,
        config,
        socket,
        port,
        abstract_name: Some(s.abstract_name.clone()),
    }
}

/// Every attack as a shell line fails, shows no secret, and changes
/// nothing; how many were tried.
fn every_shell_line_fails_and_changes_nothing(s: &Scene, targets: &Targets) -> usize {
    let lines = shell_lines(targets);
    let mut tried = 0;
    for (name, line) in &lines {
        let o = s.run(sh(line));
        assert_ne!(o.exit.status, 0, "{name} succeeded: {}", printed(&o));
        assert_no_secret(name, &o);
        tried += 1;
    }
    // And nothing those lines tried changed anything.
    let routine = std::fs::read_to_string(s.m.home.join("workspace/routines/agent.md")).unwrap();
    assert_eq!(routine, ROUTINE_CANARY, "a routine was changed");
    assert!(s.m.home.join("workspace/runtime-notes/n.txt").exists());
    assert!(!s.m.home.join("workspace/routines/planted").exists());
    assert!(!Path::new("/var/tmp/planted-by-shell").exists());
    tried
}

/// Every attack of the program is blocked and shows no secret; how many
/// were tried.
fn every_program_is_blocked(s: &Scene, targets: &Targets) -> usize {
    let mut tried = 0;
    let programs = programs(targets);
    for (name, args) in &programs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = s.attack(&args);
        assert_blocked(name, &o);
        tried += 1;
    }
    tried
}

/// The abstract socket really is there: root, outside the sandbox but
/// in the machine's network namespace (abstract names live there),
/// reaches it, so the programs' refusal was the scope, not a typo.
fn the_abstract_socket_is_there(s: &Scene) {
    let reached = std::process::Command::new("nsenter")
        .args(["-t", &s.m.warden_pid().to_string(), "-n", "python3", "-c"])
        .arg("import socket,sys; c = socket.socket(socket.AF_UNIX); c.connect('\\0' + sys.argv[1]); assert c.recv(100)")
        .arg(&s.abstract_name)
        .output()
        .unwrap();
    assert!(
        reached.status.success(),
        "the runtime's abstract socket is not listening: {reached:?}"
    );
}

/// What the suite found is what warden says.
fn status_says_every_layer_holds(s: &Scene) {
    let status = s.m.client().status().unwrap();
    for layer in [
        "identity",
        "capabilities",
        "no_new_privs",
        "landlock",
        "seccomp",
        "proc_hidden",
    ] {
        let l = common::layer(&status, layer);
        assert!(
            l.holds,
            "status says {layer} does not hold, yet the attacks failed: {l:?}"
        );
    }
    assert_eq!(status.refusing, None);
}

/// The machine carries on: a command answers, within 10 s.
fn alive(s: &Scene) {
    let t = Instant::now();
    let o = s.run(sh("echo alive"));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "alive\n",
        "{:?}",
        o.exit
    );
    assert!(t.elapsed() < Duration::from_secs(10));
}

fn limited(req: RunRequest, limits: Limits) -> RunRequest {
    RunRequest {
        limits: Some(limits),
        ..req
    }
}

#[test]
fn bombs_and_floods_hit_their_limits_and_the_machine_carries_on() {
    if !privileged("bombs_and_floods_hit_their_limits_and_the_machine_carries_on") {
        return;
    }
    let s = Scene::new();
    a_fork_bomb_stops_at_the_process_limit(&s);
    a_memory_bomb_stops_at_the_address_space_limit(&s);
    // Output, file size, CPU time: each named in the exit event.
    let cases = limit_cases();
    for (limit, req, limits) in cases {
        let o = s.run(limited(req, limits));
        assert_eq!(
            o.exit.limit.as_deref(),
            Some(limit),
            "{limit}: {:?}",
            o.exit
        );
        if limit == "output" {
            assert_eq!(
                o.exit.stdout_bytes,
                1 << 20,
                "exactly the limit is delivered"
            );
        }
        alive(&s);
    }
    let ends = s.m.audit_kinds("command_end");
    for limit in ["output", "file_size", "cpu", "timeout"] {
        assert!(
            ends.iter().any(|e| e["limit"] == json!(limit)),
            "no audit line names {limit}"
        );
    }
}

/// A fork bomb: stopped by the process limit and the timeout.
fn a_fork_bomb_stops_at_the_process_limit(s: &Scene) {
    let bomb = limited(
        sh("bomb() { bomb | bomb & }; bomb; sleep 2"),
        Limits {
            processes: Some(64),
            timeout_ms: Some(5000),
            ..Default::default()
        },
    );
    let o = s.run(bomb);
    assert!(
        printed(&o).to_lowercase().contains("fork"),
        "the bomb never hit the process limit: {}",
        printed(&o)
    );
    alive(s);
    assert_eq!(
        common::processes_of(
            SHELL_UID,
            &["/bin/sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 2"]
        ),
        0
    );
}

/// A memory bomb: stopped by the address-space limit.
fn a_memory_bomb_stops_at_the_address_space_limit(s: &Scene) {
    let mut argv = vec![s.bin.display().to_string(), "memory-bomb".into()];
    let o = s.run(limited(
        RunRequest {
            argv: Some(std::mem::take(&mut argv)),
            ..Default::default()
        },
        Limits {
            address_space_bytes: Some(512 << 20),
            ..Default::default()
        },
    ));
    assert!(printed(&o).starts_with("blocked: "), "{}", printed(&o));
    alive(s);
}

/// A command for each of output, file size, CPU time and timeout, with
/// the limit it hits.
fn limit_cases() -> [(&'static str, RunRequest, Limits); 4] {
    [
        (
            "output",
            sh("yes"),
            Limits {
                output_bytes: Some(1 << 20),
                ..Default::default()
            },
        ),
        (
            "file_size",
            RunRequest {
                argv: Some(
                    ["dd", "if=/dev/zero", "of=big", "bs=1M", "count=4"]
                        .map(String::from)
                        .to_vec(),
                ),
                ..Default::default()
            },
            Limits {
                file_size_bytes: Some(1 << 20),
                ..Default::default()
            },
        ),
        (
            "cpu",
            sh("while :; do :; done"),
            Limits {
                cpu_seconds: Some(1),
                ..Default::default()
            },
        ),
        (
            "timeout",
            sh("sleep 30"),
            Limits {
                timeout_ms: Some(300),
                ..Default::default()
            },
        ),
    ]
}

#[test]
fn a_build_still_works_inside_the_confinement() {
    if !privileged("a_build_still_works_inside_the_confinement") {
        return;
    }
    let s = Scene::new();
    let steps = [
        "git init -q . && git config user.email a@example.invalid && git config user.name n && echo x > f && git add f && git commit -qm first && git log --oneline | wc -l",
        "python3 -m venv venv && venv/bin/python -c 'print(6*7)'",
        "printf '#include <stdio.h>\\nint main(void){puts(\"built\");return 0;}\\n' > hello.c && cc hello.c -o hello && ./hello",
        "tar czf src.tgz hello.c && rm hello.c && tar xzf src.tgz && test -f hello.c && echo untarred",
        "printf 'all:\\n\\t@echo made\\n' > Makefile && make",
        "mkdir -p /tmp/scratch-$$ && echo tmp > /tmp/scratch-$$/f && cat /tmp/scratch-$$/f && rm -r /tmp/scratch-$$",
        // Debian's cargo (/usr/bin): the shell's PATH has no other.
        "cargo new --offline --vcs none -q hello-rs && cd hello-rs && cargo build --offline -q && ./target/debug/hello-rs",
    ];
    let want = [
        "1",
        "42",
        "built",
        "untarred",
        "made",
        "tmp",
        "Hello, world!",
    ];
    for (step, want) in steps.iter().zip(want) {
        let o = s.run(RunRequest {
            folder: Some("build".into()),
            ..sh(step)
        });
        assert_eq!(o.exit.status, 0, "{step}: {}", printed(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim().lines().last(),
            Some(want),
            "{step}: {}",
            printed(&o)
        );
    }
}

fn exit_of(o: &Output) -> (i32, String) {
    (o.exit.status, o.exit.error.clone().unwrap_or_default())
}

#[test]
fn a_commands_folder_is_one_shell_could_make_or_enter() {
    if !privileged("a_commands_folder_is_one_shell_could_make_or_enter") {
        return;
    }
    let m = Machine::boot(Options::default());
    let w = m.home.join("workspace");
    let as_runtime = |p: &Path, mode: u32| {
        std::fs::create_dir(p).unwrap();
        std::os::unix::fs::chown(p, Some(RUNTIME_UID), Some(RUNTIME_UID)).unwrap();
        std::fs::set_permissions(p, PermissionsExt::from_mode(mode)).unwrap();
    };
    as_runtime(&w.join("closed"), 0o700);
    as_runtime(&w.join("open"), 0o755);
    let in_folder = |folder: &str| {
        m.client()
            .run(RunRequest {
                folder: Some(folder.into()),
                ..sh("echo planted > planted.sh")
            })
            .unwrap()
    };
    // (folder, what the refusal says, what must not exist afterwards)
    let refused = [
        ("routines/evil", "not a place for commands", "routines/evil"),
        (
            "routines",
            "not a place for commands",
            "routines/planted.sh",
        ),
        ("closed/x", "may not enter closed", "closed/x"),
        ("open/x", "may not make folders in open", "open/x"),
        ("open", "", "open/planted.sh"),
    ];
    for (folder, says, absent) in refused {
        let o = in_folder(folder);
        let (status, error) = exit_of(&o);
        assert_ne!(status, 0, "{folder}: {}", printed(&o));
        assert!(error.contains(says), "{folder}: {error}");
        assert!(!w.join(absent).exists(), "{folder}: {absent} was made");
    }
    let refusals = m.audit_kinds("command_failed");
    assert!(refusals.len() >= 4, "each refusal is audited: {refusals:?}");
    // A folder shell could make itself is made, and is shell's.
    let o = in_folder("mine/deeper");
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(w.join("mine/deeper")).unwrap().uid(),
        SHELL_UID
    );
    // A name that would forge a line of the log is refused outright.
    for name in ["a\nforged", "b\u{1b}[8m"] {
        let e = m
            .client()
            .run(RunRequest {
                folder: Some(name.into()),
                ..sh("true")
            })
            .unwrap_err();
        assert!(e.to_string().contains("control character"), "{e}");
    }
}

#[test]
fn shell_has_its_own_tmp_shm_and_ipc() {
    if !privileged("shell_has_its_own_tmp_shm_and_ipc") {
        return;
    }
    // As in the launcher's containers, warden has no CAP_IPC_OWNER: it must
    // still see and remove a segment only its owner may read.
    let m = Machine::boot(Options {
        drop_caps: vec!["ipc_owner".into()],
        ..Default::default()
    });
    // warden's own look at the machine's tools (as shell) is over first:
    // IPC is emptied once shell has no process left.
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.audit_kinds("default_hosts").is_empty() {
        assert!(Instant::now() < deadline, "no default_hosts line");
        std::thread::sleep(Duration::from_millis(50));
    }
    let h = m.home.display().to_string();
    let tag = m.root().file_name().unwrap().to_string_lossy().into_owned();
    let run = |line: &str| m.client().run(sh(line)).unwrap();
    // A link planted where the runtime might write lands in shell's /tmp
    // only: the machine's /tmp (here the host's) never has it.
    let name = format!("agent-session-{tag}.json");
    let o = run(&format!(
        "ln -s {h}/data/planted-by-shell /tmp/{name} && ls -l /tmp/{name} && echo x > /dev/shm/{name}"
    ));
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    assert!(std::fs::symlink_metadata(format!("/tmp/{name}")).is_err());
    assert!(!Path::new(&format!("/dev/shm/{name}")).exists());
    // ... and it stays shell's, from one command to the next.
    let o = run(&format!("test -L /tmp/{name} && cat /dev/shm/{name}"));
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    // What others put in the machine's /tmp is not shell's to see.
    let theirs = format!("/tmp/runtime-{tag}");
    std::fs::write(&theirs, "runtime's").unwrap();
    let o = run(&format!("cat {theirs}"));
    let _ = std::fs::remove_file(&theirs);
    assert_ne!(o.exit.status, 0, "{}", printed(&o));
    // A System V segment is made in shell's own namespace, never the
    // machine's, and is gone once its command has ended.
    let shell_segments = || {
        std::fs::read_to_string("/proc/sysvipc/shm")
            .unwrap()
            .lines()
            .skip(1)
            .filter(|l| l.split_whitespace().nth(7) == Some(&SHELL_UID.to_string()))
            .count()
    };
    // A 0600 segment too: warden removes it without read permission on it.
    let o = run("ipcmk -M 8388608 && ipcmk -p 0600 -M 4194304 && ipcmk -p 0600 -Q && ipcs -m | grep -c '^0x'");
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    assert_eq!(
        shell_segments(),
        0,
        "shell's segment is in the machine's namespace"
    );
    let o = run("ipcs -m | grep -c '^0x' || true");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "0",
        "{}",
        printed(&o)
    );
    let status = m.client().status().unwrap();
    let layer = common::layer(&status, "shell_space");
    assert!(layer.holds, "{layer:?}");
}

/// Every layer holds on a terminal too: the command runs as shell on a
/// terminal it leads, TIOCSTI (typing into it) is refused, and another
/// command cannot open that terminal by its name to read what is typed or
/// to write into it.
#[test]
fn a_command_on_a_terminal_is_as_confined_and_its_terminal_is_its_own() {
    if !privileged("a_command_on_a_terminal_is_as_confined_and_its_terminal_is_its_own") {
        return;
    }
    let s = Scene::new();
    let on_terminal = |req: RunRequest| RunRequest {
        pty: Some(warden::wire::PtySize { rows: 24, cols: 80 }),
        ..req
    };
    let o = s.run(on_terminal(sh(
        "id -un; tty; test -t 0 && test -t 1 && test -t 2 && echo all-three",
    )));
    let said = printed(&o);
    assert_eq!(o.exit.status, 0, "{said}");
    assert!(said.starts_with("shell\r\n/dev/pts/"), "{said}");
    assert!(said.contains("all-three"), "{said}");
    assert!(o.stderr.is_empty(), "a terminal has one stream");
    let bin = s.bin.display().to_string();
    let o = s.run(on_terminal(RunRequest {
        argv: Some(vec![bin, "tiocsti".into()]),
        ..Default::default()
    }));
    assert!(printed(&o).starts_with("blocked: "), "{}", printed(&o));
    // Nor may it change the terminal's line discipline.
    let o = s.run(on_terminal(RunRequest {
        argv: Some(vec![s.bin.display().to_string(), "tiocsetd".into()]),
        ..Default::default()
    }));
    assert!(printed(&o).starts_with("blocked: "), "{}", printed(&o));

    // A session that stays: another command cannot reach its terminal.
    let mut client = s.m.client();
    let long = on_terminal(RunRequest {
        folder: Some("attacks".into()),
        ..sh("tty; sleep 30")
    });
    client.send(7, &warden::wire::Request::Run(long)).unwrap();
    let mut name = String::new();
    while !name.contains('\n') {
        match client.receive().unwrap() {
            warden::wire::client::Message::Output(_, 7, bytes) => {
                name.push_str(&String::from_utf8_lossy(&bytes))
            }
            _ => continue,
        }
    }
    let other = name.trim().to_string();
    assert!(other.starts_with("/dev/pts/"), "{other}");
    let o = s.run(sh(&format!(
        "echo typed-by-another > {other}; cat {other}; stat -c %U:%a {other}"
    )));
    let said = printed(&o);
    assert!(!said.contains("typed-by-another"), "{said}");
    assert!(said.contains("Permission denied"), "{said}");
    assert!(
        said.contains("root:600"),
        "the terminal stays root's: {said}"
    );
    drop(client);
}
