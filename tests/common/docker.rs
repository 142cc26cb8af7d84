//! Machines on Docker, for the launcher's tests: the daemon scripts/test
//! starts (with the base image loaded into it), and `warden` with Docker
//! as its engine.

use super::machine::TestMachine;
use super::machine::{machine_id, IMAGE};
use super::{privileged, skipped, text, warden_bin};
use std::process::{Command, Output, Stdio};

/// Root, a Docker daemon that answers, and the base image in it; a skip
/// said outside CI, a failure under CI=true.
pub fn ready(test: &str) -> bool {
    if !privileged(test) {
        return false;
    }
    let problem = match docker(&["image", "inspect", "--format", "{{.Id}}", IMAGE]) {
        out if out.status.success() => return true,
        out => format!("{test}: needs a Docker daemon with {IMAGE} (scripts/test starts dockerd and loads it): {}", text(&out.stderr).trim()),
    };
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{problem}, and CI=true forbids skipping");
    }
    skipped(&problem);
    false
}

pub fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().unwrap()
}

/// `warden ARGS` with Docker as the engine.
pub fn warden(args: &[&str]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .env("WARDEN_ENGINE", "docker")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Machine `machine_id(tag)` on Docker, `definition` written; removed
/// with Docker as the engine when dropped.
pub fn machine(tag: &str, definition: serde_json::Value) -> TestMachine {
    let id = machine_id(tag);
    let state = warden::host::machine::state_dir(&id);
    let m = TestMachine::in_folder(id, tempfile::tempdir().unwrap(), warden, state);
    m.define(definition);
    m
}

/// The engine's id of the machine's container, on the tests' daemon
/// without its bridge or (`bridged`) the one with it.
pub fn container_id(m: &TestMachine, bridged: bool) -> String {
    let daemon = if bridged { BRIDGED } else { "" };
    let out = Command::new("docker")
        .args(["inspect", "--format", "{{.Id}}", &m.container()])
        .env("DOCKER_HOST", daemon)
        .output()
        .unwrap();
    text(&out.stdout).trim().to_string()
}

/// The daemon as users run it, with its bridge (scripts/test starts it in
/// the network namespace `NETNS`, so the host's network stays as it was).
pub const BRIDGED: &str = "unix:///run/warden-docker-bridged/docker.sock";
/// Where the bridged daemon's published ports are: that namespace's
/// loopback.
pub const NETNS: &str = "/run/netns/warden-docker";

/// Root, the bridged daemon answering, and the base image in it.
pub fn bridged_ready(test: &str) -> bool {
    if !privileged(test) {
        return false;
    }
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", IMAGE])
        .env("DOCKER_HOST", BRIDGED)
        .output()
        .unwrap();
    if out.status.success() {
        return true;
    }
    let problem = format!("{test}: needs the Docker daemon with its bridge at {BRIDGED} and {IMAGE} in it (scripts/test starts it): {}", text(&out.stderr).trim());
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{problem}, and CI=true forbids skipping");
    }
    skipped(&problem);
    false
}

/// `warden ARGS` with the bridged daemon as the engine, in its network
/// namespace (where the ports it publishes, and serve's, are).
pub fn warden_bridged(args: &[&str]) -> Output {
    Command::new("nsenter")
        .arg(format!("--net={NETNS}"))
        .arg(warden_bin())
        .args(args)
        .env("WARDEN_ENGINE", "docker")
        .env("DOCKER_HOST", BRIDGED)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Machine `machine_id(tag)` on the bridged daemon, `definition` written.
pub fn bridged_machine(tag: &str, definition: serde_json::Value) -> TestMachine {
    let id = machine_id(tag);
    let state = warden::host::machine::state_dir(&id);
    let m = TestMachine::in_folder(id, tempfile::tempdir().unwrap(), warden_bridged, state);
    m.define(definition);
    m
}

/// `curl` in the bridged daemon's namespace: METHOD 127.0.0.1:PORT/PATH
/// with `body`, tried again while nothing answers (the engine's proxy may
/// accept and reset before the runtime listens) until `limit` seconds have
/// passed (0: once); the status code (0: no answer, why in the body) and
/// the body.
pub fn http_bridged(port: u16, method: &str, path: &str, body: &str, limit: u64) -> (u16, String) {
    let url = format!("http://127.0.0.1:{port}{path}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(limit);
    loop {
        let out = Command::new("nsenter")
            .arg(format!("--net={NETNS}"))
            .args([
                "curl",
                "-sS",
                "-X",
                method,
                "--data-binary",
                body,
                "-w",
                "\n%{http_code}",
            ])
            .args(["--max-time", "90", &url])
            .output()
            .unwrap();
        let said = text(&out.stdout);
        match said.rsplit_once('\n') {
            Some((body, code)) if out.status.success() => {
                return (code.trim().parse().unwrap_or(0), body.to_string())
            }
            _ if std::time::Instant::now() >= deadline => return (0, text(&out.stderr)),
            _ => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}
