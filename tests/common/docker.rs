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
    let state = warden::launcher::machine::state_dir(&id);
    let m = TestMachine::in_folder(id, tempfile::tempdir().unwrap(), warden, state);
    m.define(definition);
    m
}

/// The engine's id of the machine's container.
pub fn container_id(m: &TestMachine) -> String {
    text(&docker(&["inspect", "--format", "{{.Id}}", &m.container()]).stdout)
        .trim()
        .to_string()
}
