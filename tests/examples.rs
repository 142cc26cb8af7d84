//! The examples, used as their READMEs say, from outside the machine: the
//! Node agent (examples/node-agent) made with `warden machine up
//! examples/node-agent/definition.json` on rootful podman, rootless podman
//! and Docker, its page asked over HTTP on the port published on
//! 127.0.0.1, its build run as shell, its key out of shell's reach; and the
//! Python example (examples/python-project/run.py), a plain image with a
//! project lent at its own path through the Python client, rootful and
//! rootless with keep-id.

mod common;

use common::docker;
use common::machine::{project_under_home, ready, ready_with, show, warden, TestMachine, ROOTFS};
use common::rootless::owner;
use common::{skipped, text, warden_bin};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const CANARY: &str = "example-canary-4d1e9b";

/// The examples' machines have fixed ids (rootful podman and Docker share
/// the state folder) and take the first free port from 8080: one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn example(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(path)
}

/// The machine `id`, made by `warden` (the owner's launcher), its state
/// folder at `state`, and `dir`, a folder of the test's: removed with its
/// volumes, whatever happens.
fn machine(
    id: &str,
    dir: tempfile::TempDir,
    warden: fn(&[&str]) -> Output,
    state: PathBuf,
) -> TestMachine {
    TestMachine::in_folder(id.to_string(), dir, warden, state)
}

/// `machine`, rootful, with the owner's `.env` (a key the test made) in
/// its folder.
fn keyed(id: &str, warden: fn(&[&str]) -> Output) -> TestMachine {
    let state = warden::host::machine::state_dir(id);
    let m = machine(id, tempfile::tempdir().unwrap(), warden, state);
    std::fs::write(m.dir.path().join(".env"), format!("AGENT_TOKEN={CANARY}\n")).unwrap();
    m
}

/// One HTTP/1.0 request to 127.0.0.1:`port`, retried until the server
/// answers or `limit` passes: the status code and the body.
fn http(port: u16, method: &str, path: &str, body: &str, limit: Duration) -> (u16, String) {
    let deadline = Instant::now() + limit;
    loop {
        let attempt = (|| -> std::io::Result<String> {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
            stream.set_read_timeout(Some(Duration::from_secs(90)))?;
            write!(
                stream,
                "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )?;
            let mut reply = String::new();
            stream.read_to_string(&mut reply)?;
            Ok(reply)
        })();
        match attempt {
            Ok(reply) if !reply.is_empty() => {
                let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
                let code = head.split(' ').nth(1).and_then(|c| c.parse().ok());
                return (code.unwrap_or(0), body.to_string());
            }
            other if Instant::now() > deadline => {
                panic!("{method} 127.0.0.1:{port}{path}: no answer: {other:?}")
            }
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// The host port `up` said it published the runtime's 8080 on
/// ("published: 8080/tcp -> 127.0.0.1:PORT").
fn published(up: &Output) -> u16 {
    let said = text(&up.stdout);
    said.lines()
        .find_map(|l| {
            let (_, to) = l.split_once("published: 8080/tcp -> 127.0.0.1:")?;
            to.trim().parse().ok()
        })
        .unwrap_or_else(|| panic!("no published port: {}", show("up", up)))
}

/// What the README shows, asked through `ask(method, path, body)` (a
/// status code and a body): the page, where the runtime holds its key; a
/// build run as shell, whose read of the key is denied; a command of the
/// asker's own. The key's value is never in any answer.
fn the_agent_answers(ask: impl Fn(&str, &str, &str) -> (u16, String)) {
    let digest: String = Sha256::digest(CANARY)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let (code, page) = ask("GET", "/", "");
    eprintln!("GET /: {code}\n{page}");
    assert_eq!(code, 200, "{page}");
    assert!(
        page.starts_with("node-agent: an agent runtime in a warden machine, as runtime"),
        "{page}"
    );
    let held = format!(
        "AGENT_TOKEN: in the runtime's environment and in its .env, sha256 {}...",
        &digest[..16]
    );
    assert!(page.contains(&held), "{page}");

    let (code, build) = ask("POST", "/build", "");
    eprintln!("POST /build: {code}\n{build}");
    assert_eq!(code, 200, "{build}");
    for said in [
        "$ id -un\nshell\n(exit 0)\n",
        "$ node add.test.mjs\nadd.test.mjs: ok\n(exit 0)\n",
        "$ cat /home/runtime/.env\ncat: /home/runtime/.env: Permission denied\n(exit 1)\n",
    ] {
        assert!(build.contains(said), "{said:?} not in:\n{build}");
    }
    assert_eq!(build.matches("(exit 0)").count(), 5, "{build}");

    // A command of the asker's: shell's environment, the main process's
    // (hidden), the runtime's memory; none gives the key.
    let (code, ran) = ask(
        "POST",
        "/run",
        "env; cat /proc/1/environ; ls /home/runtime/data; pwd",
    );
    assert_eq!(code, 200, "{ran}");
    assert!(ran.contains("/home/runtime/workspace/project\n"), "{ran}");
    assert!(ran.contains("ls: cannot open directory"), "{ran}");
    let (code, missing) = ask("GET", "/nothing", "");
    assert_eq!(code, 404, "{missing}");
    for answer in [&page, &build, &ran] {
        assert!(!answer.contains(CANARY), "the key leaked:\n{answer}");
    }
}

/// How a test reaches a published port: from the host's 127.0.0.1, or
/// from the loopback of the bridged Docker daemon's namespace.
#[derive(Clone, Copy)]
enum Loopback {
    Host,
    DockerNamespace,
}

impl Loopback {
    /// METHOD `path` on `port`, retried for 30 s while nothing answers.
    fn ask(self, port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
        match self {
            Loopback::Host => http(port, method, path, body, Duration::from_secs(30)),
            Loopback::DockerNamespace => {
                let (code, said) = docker::http_bridged(port, method, path, body, 30);
                assert_ne!(code, 0, "{method} {path} on port {port}: no answer: {said}");
                (code, said)
            }
        }
    }

    /// Whether anything listens on `port` there.
    fn answers(self, port: u16) -> bool {
        match self {
            Loopback::Host => std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
            Loopback::DockerNamespace => docker::http_bridged(port, "GET", "/", "", 0).0 != 0,
        }
    }
}

/// `up` with the example's own definition and the test's `.env`, then the
/// agent from 127.0.0.1 (`at`), `status`, `audit` and `stop`, as the
/// README says; `warden` is the owner's launcher.
fn node_example_end_to_end(m: &TestMachine, warden: fn(&[&str]) -> Output, at: Loopback) {
    let definition = example("node-agent/definition.json");
    let env = m.dir.path().join(".env");
    let started = Instant::now();
    let up = warden(&[
        "machine",
        "up",
        definition.to_str().unwrap(),
        "--env-file",
        env.to_str().unwrap(),
    ]);
    assert!(up.status.success(), "{}", show("up", &up));
    eprintln!("up took {:.1} s", started.elapsed().as_secs_f64());
    assert!(text(&up.stdout).contains(": built"), "{}", show("up", &up));
    let port = published(&up);
    assert!(port >= 8080, "auto port {port}");
    the_agent_answers(|method: &str, path: &str, body: &str| at.ask(port, method, path, body));

    let status = warden(&["machine", "status", &m.id]);
    let said = text(&status.stdout);
    assert!(status.status.success(), "{}", show("status", &status));
    assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");
    assert!(said.contains("main process: pid"), "{said}");
    for line in said.lines().filter(|l| l.starts_with("layer ")) {
        assert!(
            !(line.contains("DOES NOT HOLD") && line.contains("required")),
            "{line}"
        );
    }
    let audit = warden(&["machine", "audit", &m.id]);
    let said = text(&audit.stdout);
    assert!(audit.status.success(), "{}", show("audit", &audit));
    assert!(said.contains("chain intact"), "{said}");
    assert!(!said.contains(CANARY), "{said}");
    let stop = warden(&["machine", "stop", &m.id]);
    assert!(stop.status.success(), "{}", show("stop", &stop));
    assert!(!at.answers(port), "port {port} still answers after stop");
}

#[test]
fn the_node_example_answers_on_its_port_with_rootful_podman() {
    if !ready("the_node_example_answers_on_its_port_with_rootful_podman") {
        return;
    }
    let _one = one_at_a_time();
    let m = keyed("node-agent", warden);
    node_example_end_to_end(&m, warden, Loopback::Host);
}

/// A rootless "private" network: slirp4netns, and /dev/net/tun open to
/// users (udev's default on a Debian host; scripts/test sees to both where
/// the host has no udev).
fn rootless_private(test: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let tun = std::fs::metadata("/dev/net/tun").map(|m| m.permissions().mode() & 0o006);
    let slirp = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|dir| dir.join("slirp4netns").is_file());
    let problem = match (tun, slirp) {
        (Ok(0o006), true) => return true,
        (_, false) => "slirp4netns is not installed",
        _ => "/dev/net/tun is not open to users (mode 0666)",
    };
    let reason = format!(
        "{test}: a rootless \"private\" network needs slirp4netns and /dev/net/tun open to users: {problem} (scripts/test sees to both)"
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason}, and CI=true forbids skipping");
    }
    skipped(&reason);
    false
}

#[test]
fn the_node_example_answers_on_its_port_with_rootless_podman() {
    let test = "the_node_example_answers_on_its_port_with_rootless_podman";
    if !ready(test) || !rootless_private(test) {
        return;
    }
    let _one = one_at_a_time();
    let owner = owner();
    fn as_owner(args: &[&str]) -> Output {
        common::rootless::owner().warden(args)
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let m = machine("node-agent", dir, as_owner, owner.state("node-agent"));
    let env = m.dir.path().join(".env");
    std::fs::write(&env, format!("AGENT_TOKEN={CANARY}\n")).unwrap();
    let uid = Some(nix::unistd::Uid::from_raw(owner.uid));
    for path in [m.dir.path(), &env] {
        nix::unistd::chown(path, uid, None).unwrap();
    }
    node_example_end_to_end(&m, as_owner, Loopback::Host);
}

/// On Docker as users run it, with its bridge (the tests' daemon of that
/// kind, in a network namespace of its own): the same, its port asked on
/// that namespace's loopback.
#[test]
fn the_node_example_answers_on_its_port_with_docker() {
    if !docker::bridged_ready("the_node_example_answers_on_its_port_with_docker") {
        return;
    }
    let _one = one_at_a_time();
    let m = keyed("node-agent", docker::warden_bridged);
    node_example_end_to_end(&m, docker::warden_bridged, Loopback::DockerNamespace);
}

/// A small Python project with one test, in `project`.
fn python_project(project: &Path) {
    std::fs::write(project.join("add.py"), "def add(a, b):\n    return a + b\n").unwrap();
    std::fs::write(
        project.join("test_add.py"),
        "import unittest\nfrom add import add\n\n\
         class TestAdd(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    )
    .unwrap();
}

/// run.py's output: shell ran the project's tests at its own path.
fn ran_the_tests(out: &Output, project: &Path) {
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", show("run.py", out));
    assert!(
        said.starts_with(&format!(
            "machine python-project: {0} lent at {0}\nshell\n",
            project.display()
        )),
        "{said}"
    );
    assert!(said.contains("test_add (test_add.TestAdd"), "{said}");
    assert!(said.contains("\nOK\n"), "{said}");
    assert!(said.contains("the tests ended with status 0"), "{said}");
}

#[test]
fn the_python_example_lends_a_project_at_its_path_with_rootful_podman() {
    let test = "the_python_example_lends_a_project_at_its_path_with_rootful_podman";
    if !ready_with(test, ROOTFS) {
        return;
    }
    let _one = one_at_a_time();
    let state = warden::host::machine::state_dir("python-project");
    let m = machine(
        "python-project",
        tempfile::tempdir().unwrap(),
        warden,
        state,
    );
    let (project, _gone) = project_under_home("pyexample");
    python_project(&project);
    let out = Command::new("python3")
        .arg(example("python-project/run.py"))
        .arg(&project)
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python/src"),
        )
        .env("WARDEN", warden_bin())
        .current_dir(m.dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    ran_the_tests(&out, &project);
    // Written by shell at the project's own path: uid 2001 on the host.
    let log = std::fs::metadata(project.join("unittest.log")).unwrap();
    assert_eq!(log.uid(), common::SHELL_UID);
    // Stopped by the client, not removed.
    let ps = warden(&["machine", "ps"]);
    let row = text(&ps.stdout)
        .lines()
        .find(|l| l.starts_with("python-project "))
        .map(str::to_string);
    assert!(
        row.is_some_and(|r| r.split_whitespace().nth(4) == Some("exited")),
        "{}",
        show("ps", &ps)
    );
}

#[test]
fn the_python_example_writes_as_the_owner_with_rootless_podman() {
    let test = "the_python_example_writes_as_the_owner_with_rootless_podman";
    if !ready(test) || !ready_with(test, ROOTFS) {
        return;
    }
    let _one = one_at_a_time();
    let owner = owner();
    owner.load(ROOTFS);
    fn as_owner(args: &[&str]) -> Output {
        common::rootless::owner().warden(args)
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let m = machine(
        "python-project",
        dir,
        as_owner,
        owner.state("python-project"),
    );
    let uid = Some(nix::unistd::Uid::from_raw(owner.uid));
    nix::unistd::chown(m.dir.path(), uid, None).unwrap();
    let project = PathBuf::from(format!(
        "/home/{}/pyexample-{}",
        owner.name,
        std::process::id()
    ));
    let _gone = common::machine::Gone(project.clone());
    std::fs::create_dir(&project).unwrap();
    python_project(&project);
    for path in [
        &project,
        &project.join("add.py"),
        &project.join("test_add.py"),
    ] {
        nix::unistd::chown(path.as_path(), uid, None).unwrap();
    }
    let pythonpath = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python/src");
    let mut command = owner.command(
        "env",
        &[
            &format!("PYTHONPATH={}", pythonpath.display()),
            &format!("WARDEN={}", owner.bin.display()),
            "python3",
            example("python-project/run.py").to_str().unwrap(),
            project.to_str().unwrap(),
        ],
    );
    let out = command.current_dir(m.dir.path()).output().unwrap();
    ran_the_tests(&out, &project);
    // keep-id: what shell wrote is the owner's on the host.
    let log = std::fs::metadata(project.join("unittest.log")).unwrap();
    assert_eq!(log.uid(), owner.uid, "unittest.log belongs to the owner");
}
