//! The agent lives in its machine (rootful podman, real containers): a
//! Node runtime as the main process, reached on a published port, running
//! commands through warden with the Node client; an image with no warden
//! in it; `requires`; a base image rebuilt; an idle machine that stops
//! itself and wakes when asked.

mod common;

use common::machine::*;
use common::{printed, text};
use std::path::Path;
use std::time::{Duration, Instant};

const CANARY: &str = "agent-canary-7f3a91";

/// Runs one shell command through the agent's own page; its JSON answer.
fn agent_run(port: u16, cmd: &str) -> serde_json::Value {
    let query: String = cmd
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let body = http_get(
        port,
        &format!("/run?folder=job&cmd={query}"),
        Duration::from_secs(5),
    )
    .unwrap_or_else(|e| panic!("/run {cmd}: {e}"));
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body}: {e}"))
}

#[test]
fn a_node_runtime_lives_in_its_machine() {
    let test = "a_node_runtime_lives_in_its_machine";
    if !ready(test) {
        return;
    }
    let m = TestMachine::new("node");
    let id = &m.id;
    // The agent's folder, lent at routines: its program is there.
    let routines = agent_folder(m.dir.path());
    std::fs::write(m.dir.path().join(".env"), format!("API_TOKEN={CANARY}\n")).unwrap();
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/node");
    m.define(serde_json::json!({
        "image": IMAGE,
        "network": "private",
        "command": ["node", "/home/runtime/workspace/routines/server.mjs"],
        "env": {"AGENT_PORT": "3000"},
        "ports": [{"port": 3000, "host": "auto", "from": 18300}],
        "keys": ["API_TOKEN"],
        "lend": [
            {"host": routines, "at": "/home/runtime/workspace/routines", "mode": "read"},
            {"host": client, "at": "/opt/warden-client", "mode": "read"},
        ],
    }));
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let container = m.container();
    let port = host_port(&container, 3000).expect("port 3000 published");
    assert!(port >= 18300, "auto port {port}");
    let published = inspect(&container, "{{json .HostConfig.PortBindings}}");
    assert!(
        published.contains("\"HostIp\":\"127.0.0.1\""),
        "loopback only: {published}"
    );

    // The runtime's page, from the host, through the published port.
    let page = http_get(port, "/", Duration::from_secs(20)).expect("the agent's page");
    assert!(page.contains("alive"), "{page}");
    // Its key reached it, in its environment, from the start.
    let key = http_get(port, "/key", Duration::from_secs(5)).unwrap();
    assert!(key.contains(CANARY), "{key}");

    // A command through warden, in a folder, with its code and outputs.
    let ran = agent_run(port, "id -un; pwd; echo oops >&2; exit 3");
    assert_eq!(ran["exitCode"], 3, "{ran}");
    let stdout = ran["stdout"].as_str().unwrap();
    assert!(
        stdout.starts_with("shell\n/home/runtime/workspace/job"),
        "{ran}"
    );
    assert_eq!(ran["stderr"], "oops\n", "{ran}");

    shell_gets_neither_the_key_nor_the_runtimes_port(port);

    // The runtime's output is the machine's log.
    let logs = warden(&["machine", "logs", id]);
    assert!(
        text(&logs.stdout).contains("agent: serving on port 3000"),
        "{}",
        show("logs", &logs)
    );
    // `status` shows the main process and the published port.
    let status = warden(&["machine", "status", id]);
    let said = text(&status.stdout);
    assert!(said.contains("main process: pid"), "{said}");
    assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");

    // podman stop: the runtime gets SIGTERM, and the machine ends with it.
    let out = podman(&["stop", "-t", "10", &container]);
    assert!(out.status.success(), "{}", show("stop", &out));
    assert_eq!(inspect(&container, "{{.State.ExitCode}}"), "143");
}

/// shell never gets the key (not in its environment, not from .env),
/// cannot write the routines, however lent, and can neither reach the
/// runtime's port (directly or by the proxy) nor bind one of its own.
fn shell_gets_neither_the_key_nor_the_runtimes_port(port: u16) {
    // shell never gets the key: not in its environment, not from .env.
    let ran = agent_run(port, "env; cat /home/runtime/.env; cat /proc/1/environ");
    assert!(!ran.to_string().contains(CANARY), "{ran}");
    // shell cannot write the routines, however lent.
    let ran = agent_run(
        port,
        "touch /home/runtime/workspace/routines/x && echo WROTE",
    );
    assert!(!ran["stdout"].as_str().unwrap().contains("WROTE"), "{ran}");
    // shell can neither reach the runtime's port (directly or by the
    // proxy) nor bind one of its own.
    let ran = agent_run(
        port,
        "curl -s -m 5 http://127.0.0.1:3000/ ; curl -s -m 5 --noproxy '*' http://127.0.0.1:3000/ ; echo done",
    );
    assert!(!ran["stdout"].as_str().unwrap().contains("alive"), "{ran}");
    let ran = agent_run(
        port,
        "python3 -c 'import socket; s=socket.socket(); s.bind((\"0.0.0.0\", 3001)); s.listen(); print(\"BOUND\")'",
    );
    assert!(!ran["stdout"].as_str().unwrap().contains("BOUND"), "{ran}");
}

#[test]
fn an_image_without_warden_runs_with_the_lent_one() {
    let test = "an_image_without_warden_runs_with_the_lent_one";
    if !ready_with(test, ROOTFS) {
        return;
    }
    let Some(binary) = static_warden(test) else {
        return;
    };
    let m = TestMachine::new("bare");
    let id = &m.id;
    // A project at the path it has on the host, under /home.
    let (project, _gone) = project_under_home("bare");
    m.define(serde_json::json!({
        "image": ROOTFS,
        "requires": ["python3", "git"],
        "lend": [{"host": project, "at": project, "mode": "write"}],
    }));
    let out = warden_with(
        &["machine", "up", m.definition().to_str().unwrap()],
        &[("WARDEN_MACHINE_BINARY", &binary)],
    );
    assert!(out.status.success(), "{}", show("up", &out));
    let container = m.container();
    let entry = inspect(&container, "{{json .Config.Entrypoint}}");
    assert!(entry.contains("/usr/local/lib/warden/warden"), "{entry}");

    // A command writes in the project; the file is on the host.
    let line = format!(
        "cd {} && python3 -c 'open(\"made-inside.txt\", \"w\").write(\"hi\")' && id -un",
        project.display()
    );
    let out = warden(&["machine", "exec", id, "--shell", &line]);
    assert!(out.status.success(), "{}", show("exec", &out));
    assert_eq!(text(&out.stdout).trim(), "shell");
    assert_eq!(
        std::fs::read_to_string(project.join("made-inside.txt")).unwrap(),
        "hi"
    );
    // Every layer holds, with warden's users made at boot.
    let status = warden(&["machine", "status", id]);
    let said = text(&status.stdout);
    assert!(status.status.success(), "{}", show("status", &status));
    assert!(
        !said.contains("does not hold") && !said.contains("BAD"),
        "{said}"
    );
}

#[test]
fn requires_refuses_an_image_without_the_command_and_leaves_nothing() {
    let test = "requires_refuses_an_image_without_the_command_and_leaves_nothing";
    if !ready_with(test, ROOTFS) {
        return;
    }
    let Some(binary) = static_warden(test) else {
        return;
    };
    let m = TestMachine::defined(
        "nopy",
        serde_json::json!({"dockerfile": "Dockerfile", "requires": ["python3"]}),
    );
    let id = &m.id;
    std::fs::write(
        m.dir.path().join("Dockerfile"),
        format!("FROM {ROOTFS}\nRUN rm -f /usr/bin/python3 /usr/bin/python3.*\n"),
    )
    .unwrap();
    let out = warden_with(
        &["machine", "up", m.definition().to_str().unwrap()],
        &[("WARDEN_MACHINE_BINARY", &binary)],
    );
    assert!(!out.status.success(), "{}", show("up", &out));
    let err = text(&out.stderr);
    assert!(err.contains("requires: the image has no python3"), "{err}");
    assert_eq!(leftovers(id), "", "{err}");
    let image = format!("localhost/warden-{id}:latest");
    let exists = podman(&["image", "exists", &image]);
    assert!(
        !exists.status.success(),
        "the image this up built is removed: {err}"
    );
}

#[test]
fn a_rebuilt_base_image_rebuilds_the_agent_image() {
    let test = "a_rebuilt_base_image_rebuilds_the_agent_image";
    if !ready(test) {
        return;
    }
    let m = TestMachine::new("rebase");
    let id = &m.id;
    let base = format!("localhost/wt-base-{}:latest", std::process::id());
    struct Untag(String);
    impl Drop for Untag {
        fn drop(&mut self) {
            let _ = podman(&["rmi", "-f", &self.0]);
        }
    }
    let _untag = Untag(base.clone());
    let build_base = |mark: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Dockerfile"),
            format!("FROM {IMAGE}\nLABEL wt.mark={mark}\n"),
        )
        .unwrap();
        let out = podman(&[
            "build",
            "--pull=never",
            "-t",
            &base,
            dir.path().to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", show("build base", &out));
    };
    build_base("one");
    std::fs::write(
        m.dir.path().join("Dockerfile"),
        format!("FROM {base}\nRUN echo agent > /agent-layer\n"),
    )
    .unwrap();
    m.define(serde_json::json!({"dockerfile": "Dockerfile"}));
    let image = format!("localhost/warden-{id}:latest");
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let first = inspect(&image, "{{.Id}}");
    // Unchanged: kept.
    let out = m.up();
    assert!(
        text(&out.stdout).contains("unchanged"),
        "{}",
        show("up again", &out)
    );
    assert_eq!(inspect(&image, "{{.Id}}"), first);
    // The base is rebuilt: the agent image follows, and the old one goes.
    build_base("two");
    let out = m.up();
    assert!(
        out.status.success(),
        "{}",
        show("up after the base changed", &out)
    );
    assert!(
        text(&out.stdout).contains(": built"),
        "{}",
        show("up", &out)
    );
    let second = inspect(&image, "{{.Id}}");
    assert_ne!(second, first);
    let old = podman(&["image", "exists", &first]);
    assert!(
        !old.status.success(),
        "the replaced image {first} is removed:\n{}",
        text(&out.stdout)
    );
}

#[test]
fn an_idle_machine_stops_itself_a_hold_keeps_it_and_exec_start_wakes_it() {
    let test = "an_idle_machine_stops_itself_a_hold_keeps_it_and_exec_start_wakes_it";
    if !ready(test) {
        return;
    }
    // Three seconds idle, and a main process that would run forever.
    let m = TestMachine::defined(
        "idle",
        serde_json::json!({"image": IMAGE, "idle_stop_minutes": 0.05,
                           "command": ["sleep", "infinity"], "restart": "on-failure"}),
    );
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let container = m.container();
    let started = Instant::now();
    assert!(
        wait_exited(&container, Duration::from_secs(30)),
        "still up after 30 s idle"
    );
    eprintln!(
        "stopped itself {:.1} s after up",
        started.elapsed().as_secs_f64()
    );
    // An idle stop is no failure: status 0, and on-failure does not restart it.
    assert_eq!(inspect(&container, "{{.State.ExitCode}}"), "0");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(inspect(&container, "{{.State.Running}}"), "false");

    // exec --start wakes it and runs the command.
    let out = warden(&["machine", "exec", id, "--start", "--", "echo", "awake"]);
    assert!(out.status.success(), "{}", show("exec --start", &out));
    assert_eq!(text(&out.stdout), "awake\n");
    // A hold from the runtime keeps it up past its idle time...
    let mut client = warden::host::machine::connect(id, None).unwrap();
    let until = warden::shared::idle::now_ms() + 60_000;
    assert_eq!(client.hold(until).unwrap(), until);
    drop(client);
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        inspect(&container, "{{.State.Running}}"),
        "true",
        "held, yet stopped"
    );
    let status = warden(&["machine", "status", id]);
    assert!(
        text(&status.stdout).contains("held by the runtime until"),
        "{}",
        show("status", &status)
    );
    // ...and once let go, it stops again.
    let mut client = warden::host::machine::connect(id, None).unwrap();
    assert_eq!(client.hold(0).unwrap(), 0);
    drop(client);
    assert!(
        wait_exited(&container, Duration::from_secs(30)),
        "still up 30 s after the hold ended"
    );
    let audit = warden(&["machine", "audit", id]);
    let said = text(&audit.stdout);
    assert!(
        said.contains("idle_stop") && said.contains("hold"),
        "{}",
        show("audit", &audit)
    );
}

/// The attack suite, in a machine the launcher made with the agent's
/// fields in use: a main process (Node, serving on a published port, with
/// a key), `restart`, `requires`, `idle_stop_minutes`, the routines and a
/// project under /home lent for writing. (keep_id needs a rootless owner:
/// `tests/machines.rs` covers it.)
#[test]
fn the_attack_suite_fails_in_a_machine_with_every_agent_field() {
    use common::attacks::*;
    let test = "the_attack_suite_fails_in_a_machine_with_every_agent_field";
    if !ready(test) {
        return;
    }
    let m = TestMachine::new("attacked");
    let id = &m.id;
    let (attack_dir, _) = build_attack_program();
    let routines = agent_folder(m.dir.path());
    std::fs::write(routines.join("agent.md"), ROUTINE_CANARY).unwrap();
    let (project, _gone) = project_under_home("attacked");
    define_with_every_agent_field(&m, &routines, &project, attack_dir.path());
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let container = m.container();
    // The runtime's memory and a folder of its own in the workspace.
    let exec = |user: &str, line: &str| {
        let out = podman(&["exec", "-u", user, &container, "sh", "-c", line]);
        assert!(out.status.success(), "{}", show(line, &out));
    };
    exec(
        "2000",
        &format!("echo {DATA_CANARY} > /home/runtime/data/memory.txt"),
    );
    exec("2000", "mkdir /home/runtime/workspace/runtime-notes && echo notes > /home/runtime/workspace/runtime-notes/n.txt");
    let port = host_port(&container, 3000).unwrap();
    http_get(port, "/", Duration::from_secs(20)).expect("the runtime serves");
    let mut client = warden::host::machine::connect(id, None).unwrap();
    let main = client.status().unwrap().main.expect("a main process").pid;
    let targets = Targets {
        home: "/home/runtime".into(),
        main: main.to_string(),
        audit: "/home/runtime/data/audit/warden.jsonl".into(),
        config: "/etc/warden/machine.json".into(),
        socket: "/run/warden/api.sock".into(),
        port: "3000".into(),
        abstract_name: None,
    };
    let tried = every_attack_is_stopped(&mut client, &targets);
    // Through the project lent for writing, shell writes the project only.
    let o = run_in_attacks(
        &mut client,
        warden::wire::RunRequest {
            shell: Some(format!(
                "echo made > {}/by-shell && echo ok",
                project.display()
            )),
            ..Default::default()
        },
    );
    assert_eq!(printed(&o), "ok\n", "{:?}", o.exit);
    assert_eq!(
        std::fs::read_to_string(project.join("by-shell")).unwrap(),
        "made\n"
    );
    eprintln!("{tried} attacks tried in the launcher's machine, all stopped");
    assert!(tried >= 40);
    assert_eq!(
        std::fs::read_to_string(routines.join("agent.md")).unwrap(),
        ROUTINE_CANARY
    );
    assert!(!routines.join("planted").exists());
    let status = client.status().unwrap();
    assert_eq!(status.refusing, None);
    for layer in status.layers.iter().filter(|l| l.required) {
        assert!(layer.holds, "{layer:?}");
    }
}

/// `m` defined with every field an agent's machine may have: a restart
/// rule, a published port, `requires`, an idle stop, a key, the routines
/// and `project` lent for writing, the Node client and the attack program
/// (`attack`) lent to read.
fn define_with_every_agent_field(m: &TestMachine, routines: &Path, project: &Path, attack: &Path) {
    use common::attacks::*;
    std::fs::write(m.dir.path().join(".env"), format!("API_KEY={ENV_CANARY}\n")).unwrap();
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/node");
    m.define(serde_json::json!({
        "image": IMAGE,
        "network": "private",
        "command": ["node", "/home/runtime/workspace/routines/server.mjs"],
        "restart": "on-failure",
        "ports": [{"port": 3000, "host": "auto", "from": 18400}],
        "requires": ["node", "python3"],
        "idle_stop_minutes": 60,
        "keys": ["API_KEY"],
        "lend": [
            {"host": routines, "at": "/home/runtime/workspace/routines", "mode": "write"},
            {"host": project, "at": project, "mode": "write"},
            {"host": client, "at": "/opt/warden-client", "mode": "read"},
            {"host": attack, "at": "/opt/attack", "mode": "read"},
        ],
    }));
}

/// `request` run in the folder attacks.
fn run_in_attacks(
    client: &mut warden::wire::client::Client,
    request: warden::wire::RunRequest,
) -> warden::wire::client::Output {
    let request = warden::wire::RunRequest {
        folder: Some("attacks".into()),
        ..request
    };
    client.run(request).unwrap()
}

/// Every attack of the suite, as shell lines and as the attack program,
/// fails and shows no secret; how many were tried.
fn every_attack_is_stopped(
    client: &mut warden::wire::client::Client,
    targets: &common::attacks::Targets,
) -> usize {
    use common::attacks::*;
    let mut tried = 0;
    for (name, line) in shell_lines(targets) {
        let o = run_in_attacks(
            client,
            warden::wire::RunRequest {
                shell: Some(line),
                ..Default::default()
            },
        );
        assert_ne!(o.exit.status, 0, "{name} succeeded: {}", printed(&o));
        assert_no_secret(name, &o);
        tried += 1;
    }
    for (name, args) in programs(targets) {
        let mut argv = vec!["/opt/attack/attack".to_string()];
        argv.extend(args);
        let o = run_in_attacks(
            client,
            warden::wire::RunRequest {
                argv: Some(argv),
                ..Default::default()
            },
        );
        assert_blocked(name, &o);
        tried += 1;
    }
    tried
}

/// The machine's size is the engine's (cpus, memory, pids), shown by `up`
/// and `status`; a command that eats more memory than the machine has is
/// the one the OOM killer takes, its exit says so, and the runtime, warden
/// and the next command carry on.
#[test]
fn a_machine_has_its_size_and_a_memory_bomb_stops_at_it() {
    let test = "a_machine_has_its_size_and_a_memory_bomb_stops_at_it";
    if !ready_with(test, ROOTFS) {
        return;
    }
    let m = TestMachine::defined(
        "size",
        serde_json::json!({"image": ROOTFS, "cpus": 1, "memory": "256m", "pids": 300,
                           "command": ["sleep", "infinity"]}),
    );
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let said = text(&out.stdout);
    assert!(
        said.contains("size: cpus 1, memory 256 MiB, processes 300"),
        "{said}"
    );
    let container = m.container();
    assert_eq!(inspect(&container, "{{.HostConfig.Memory}}"), "268435456");
    assert_eq!(inspect(&container, "{{.HostConfig.PidsLimit}}"), "300");
    let status = warden(&["machine", "status", id]);
    assert!(
        text(&status.stdout).contains("machine size: cpus 1, memory 256 MiB, processes 300"),
        "{}",
        show("status", &status)
    );

    // 600 MiB in a 256 MiB machine: within the command's address-space
    // limit, beyond the machine's memory.
    let bomb = "python3 -c \"x = b'a' * (600 << 20); print(len(x))\"";
    let out = warden(&["machine", "exec", id, "--shell", bomb]);
    assert_eq!(out.status.code(), Some(137), "{}", show("bomb", &out));
    assert!(
        text(&out.stderr).contains("memory limit reached"),
        "{}",
        show("bomb", &out)
    );
    let mut client = warden::host::machine::connect(id, None).unwrap();
    let status = client.status().unwrap();
    assert!(status.main.is_some(), "the runtime is alive");
    let out = warden(&["machine", "exec", id, "--", "echo", "next"]);
    assert_eq!(text(&out.stdout), "next\n", "{}", show("next", &out));
    let audit = warden(&["machine", "audit", id]);
    assert!(
        text(&audit.stdout).contains("limit=memory"),
        "{}",
        show("audit", &audit)
    );
}

/// In a container too, what a command leaves behind ends with it: a new
/// session, a double fork, nohup; a kept one stays until stop_shell.
#[test]
fn in_a_container_what_a_command_leaves_behind_ends_with_it() {
    let test = "in_a_container_what_a_command_leaves_behind_ends_with_it";
    if !ready_with(test, ROOTFS) {
        return;
    }
    let m = TestMachine::defined("lifetime", serde_json::json!({"image": ROOTFS}));
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let container = m.container();
    let sleepers = |n: &str| {
        let out = podman(&[
            "exec",
            &container,
            "pgrep",
            "-u",
            "2001",
            "-f",
            &format!("sleep {n}"),
        ]);
        text(&out.stdout).lines().count()
    };
    for line in [
        "setsid sleep 911 &",
        "sh -c '(sleep 911 &) &'; sleep 0.2",
        "nohup sleep 911 >/dev/null 2>&1 &",
    ] {
        let out = warden(&["machine", "exec", id, "--shell", line]);
        assert!(out.status.success(), "{}", show(line, &out));
        assert_eq!(sleepers("911"), 0, "{line} left a process behind");
    }
    // Kept on purpose: it stays, listed, until stop_shell.
    let out = warden(&[
        "machine",
        "exec",
        id,
        "--keep-background",
        "--shell",
        "setsid sleep 912 &",
    ]);
    assert!(out.status.success(), "{}", show("kept", &out));
    assert_eq!(sleepers("912"), 1);
    let status = warden(&["machine", "status", id]);
    assert!(
        text(&status.stdout).contains("sleep"),
        "{}",
        show("status", &status)
    );
    let mut client = warden::host::machine::connect(id, None).unwrap();
    let (_, left) = client.stop_shell("KILL").unwrap();
    assert_eq!(left, 0);
    assert_eq!(sleepers("912"), 0);
}
