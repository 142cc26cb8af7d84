//! The policy decides what follows when a layer does not hold, and warden
//! finds out by behaviour, not by trusting its own configuration.

mod common;

use common::{privileged, Machine, Options};
use serde_json::json;
use warden::wire::{ErrorCode, RunRequest};

/// A machine with these policy files; the folder lives as long as it.
fn with_policy(files: &[(&str, &str)]) -> (Machine, tempfile::TempDir) {
    let dir = tempfile::Builder::new()
        .prefix("warden-policy-")
        .tempdir_in("/var/tmp")
        .unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let m = Machine::boot(Options {
        config: json!({"policy_dir": dir.path()}),
        ..Default::default()
    });
    (m, dir)
}

fn ls_root() -> RunRequest {
    RunRequest {
        argv: Some(vec!["ls".into(), "/".into()]),
        ..Default::default()
    }
}

#[test]
fn a_required_layer_that_does_not_hold_refuses_every_command() {
    if !privileged("a_required_layer_that_does_not_hold_refuses_every_command") {
        return;
    }
    // A policy that grants "/" read-write: Landlock is applied, but the
    // probe opens "/" and so proves it does not hold as required.
    let (m, _policy) = with_policy(&[("landlock.json", r#"{"read_write": ["/"]}"#)]);
    match m.client().run(ls_root()) {
        Err(warden::wire::client::ClientError::Warden {
            code: ErrorCode::NotConfined,
            message,
        }) => {
            assert!(message.contains("landlock did not hold"), "{message}")
        }
        other => panic!("a command ran: {other:?}"),
    }
    let status = m.client().status().unwrap();
    assert!(
        status
            .refusing
            .as_deref()
            .unwrap_or("")
            .contains("landlock"),
        "{status:?}"
    );
    assert!(
        m.log()
            .contains("commands will be refused: landlock did not hold"),
        "{}",
        m.log()
    );
    assert_eq!(m.audit_kinds("command_refused").len(), 1);
    let boot = &m.audit_kinds("boot")[0];
    let landlock = boot["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == "landlock")
        .unwrap();
    assert_eq!(
        (landlock["holds"].as_bool(), landlock["required"].as_bool()),
        (Some(false), Some(true))
    );
}

#[test]
fn best_effort_runs_and_keeps_saying_what_is_missing() {
    if !privileged("best_effort_runs_and_keeps_saying_what_is_missing") {
        return;
    }
    let (m, _policy) = with_policy(&[(
        "landlock.json",
        r#"{"require": "best-effort", "read_write": ["/"]}"#,
    )]);
    let out = m.client().run(ls_root()).unwrap();
    assert_eq!(out.exit.status, 0, "best effort runs the command");
    let status = m.client().status().unwrap();
    let landlock = common::layer(&status, "landlock");
    assert!(!landlock.holds && !landlock.required, "{landlock:?}");
    assert!(
        landlock.detail.contains("probe got through"),
        "{landlock:?}"
    );
    assert_eq!(status.refusing, None);
    assert!(
        m.log().contains("landlock (best effort) does not hold"),
        "{}",
        m.log()
    );
}

#[test]
fn a_layer_turned_off_is_reported_off_and_its_protection_is_gone() {
    if !privileged("a_layer_turned_off_is_reported_off_and_its_protection_is_gone") {
        return;
    }
    let (m, _policy) = with_policy(&[
        ("landlock.json", r#"{"require": "off"}"#),
        ("seccomp.json", r#"{"require": "off"}"#),
    ]);
    // Without Landlock, "/" can be listed; without seccomp, personality(2)
    // is allowed (the two things the probe tests).
    assert_eq!(m.client().run(ls_root()).unwrap().exit.status, 0);
    let status = m.client().status().unwrap();
    for layer in ["landlock", "seccomp"] {
        let l = status.layers.iter().find(|l| l.layer == layer).unwrap();
        assert!(!l.holds && l.detail.contains("off by policy"), "{l:?}");
    }
    // Everything else still holds.
    for layer in ["identity", "capabilities", "no_new_privs"] {
        assert!(
            status
                .layers
                .iter()
                .find(|l| l.layer == layer)
                .unwrap()
                .holds,
            "{layer}"
        );
    }
}

#[test]
fn a_broken_policy_file_refuses_boot_naming_file_and_field() {
    if !privileged("a_broken_policy_file_refuses_boot_naming_file_and_field") {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("warden-policy-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::write(dir.path().join("limits.json"), r#"{"processes": "many"}"#).unwrap();
    let mut m = Machine::start(Options {
        config: json!({"policy_dir": dir.path()}),
        ..Default::default()
    });
    assert_eq!(m.wait(std::time::Duration::from_secs(30)), 1);
    let line = m
        .log()
        .lines()
        .find(|l| l.starts_with("warden: refusing to start"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("limits.json") && line.contains("invalid type"),
        "{line}"
    );
}
