//! `warden machine ...` on Docker (`WARDEN_ENGINE=docker`), with a real
//! Docker daemon (Debian's docker.io; scripts/test starts it and loads the
//! base image into it): a machine built from a Dockerfile whose context
//! holds a `.env`, made, confined, keyed, stopped with 143 and removed
//! without a trace.

mod common;

use common::docker::{docker, ready as docker_ready, warden};
use common::machine::{machine_id, show, TestMachine, IMAGE};
use common::{skipped, text};

const CANARY: &str = "docker-canary-51c2";

/// Containers, volumes and the state folder the machine left.
fn leftovers(id: &str) -> String {
    let label = format!("label=warden.machine={id}");
    let containers = docker(&["ps", "-a", "--filter", &label, "-q"]);
    let volumes = docker(&["volume", "ls", "--filter", &label, "-q"]);
    let state = warden::host::machine::state_dir(id);
    let state = if state.exists() {
        format!("{}\n", state.display())
    } else {
        String::new()
    };
    format!(
        "{}{}{state}",
        text(&containers.stdout),
        text(&volumes.stdout)
    )
}

fn inspect(container: &str, format: &str) -> String {
    text(&docker(&["inspect", "--format", format, container]).stdout)
        .trim()
        .to_string()
}

#[test]
fn a_docker_machine_is_built_confined_keyed_stopped_and_removed() {
    let test = "a_docker_machine_is_built_confined_keyed_stopped_and_removed";
    if !docker_ready(test) {
        return;
    }
    let id = machine_id("docker");
    let state = warden::host::machine::state_dir(&id);
    // Removed with Docker as the engine; its folder 0700, as tempdirs are.
    let m = TestMachine::in_folder(id, tempfile::tempdir().unwrap(), warden, state);
    let id = &m.id;
    // The context holds the owner's keys: they must not reach the image.
    std::fs::write(m.dir.path().join(".env"), format!("API_TOKEN={CANARY}\n")).unwrap();
    std::fs::write(
        m.dir.path().join("Dockerfile"),
        format!("FROM {IMAGE}\nCOPY . /ctx\nRUN echo built-on-docker > /etc/marker\n"),
    )
    .unwrap();
    m.define(serde_json::json!({
        "dockerfile": "Dockerfile", "keys": ["API_TOKEN"],
        "command": ["sleep", "infinity"],
    }));
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(
        text(&out.stdout).contains(": built"),
        "{}",
        show("up", &out)
    );

    // Built from the context, without its .env.
    let container = format!("warden-{id}");
    // As root (the context was copied with its folder's 0700).
    let out = docker(&[
        "exec",
        &container,
        "sh",
        "-c",
        "cat /etc/marker; ls -a /ctx",
    ]);
    let listed = text(&out.stdout);
    assert!(
        listed.starts_with("built-on-docker\n") && listed.contains("Dockerfile"),
        "{}",
        show("exec", &out)
    );
    assert!(!listed.contains(".env"), "{listed}");
    commands_run_as_shell_and_the_key_stays_the_runtimes(id);
    // Nothing changed: kept, not rebuilt.
    let out = m.up();
    assert!(
        text(&out.stdout).contains("unchanged, kept"),
        "{}",
        show("up again", &out)
    );

    // docker stop: warden passes SIGTERM on and ends with its main's 143.
    let out = docker(&["stop", "-t", "10", &container]);
    assert!(out.status.success(), "{}", show("docker stop", &out));
    assert_eq!(inspect(&container, "{{.State.ExitCode}}"), "143");
    let audit = warden(&["machine", "audit", id]);
    assert!(audit.status.success(), "{}", show("audit", &audit));
    assert!(
        text(&audit.stdout).contains("chain intact"),
        "{}",
        show("audit", &audit)
    );

    let out = warden(&["machine", "rm", id, "--volumes"]);
    assert!(out.status.success(), "{}", show("rm", &out));
    assert_eq!(leftovers(id), "");
    let image = docker(&["image", "inspect", &format!("localhost/warden-{id}:latest")]);
    assert!(
        !image.status.success(),
        "the machine's image is removed with it"
    );
    assert!(m.definition().exists());
}

/// Commands run as shell, every required layer holds, the key stays the runtime's.
fn commands_run_as_shell_and_the_key_stays_the_runtimes(id: &str) {
    let out = warden(&["machine", "exec", id, "--", "id", "-un"]);
    assert_eq!(text(&out.stdout), "shell\n", "{}", show("exec", &out));
    let out = warden(&[
        "machine",
        "exec",
        id,
        "--shell",
        "env; cat /home/runtime/.env; cat /proc/1/environ",
    ]);
    assert!(
        !text(&out.stdout).contains(CANARY) && !text(&out.stderr).contains(CANARY),
        "{}",
        show("exec", &out)
    );
    let status = warden(&["machine", "status", id]);
    let said = text(&status.stdout);
    assert!(status.status.success(), "{}", show("status", &status));
    for line in said.lines().filter(|l| l.starts_with("layer ")) {
        assert!(
            !(line.contains("DOES NOT HOLD") && line.contains("required")),
            "{line}"
        );
    }
    assert!(said.contains("layer firewall      holds"), "{said}");
}

#[test]
fn a_private_machine_on_a_daemon_without_its_bridge_is_refused_before_anything_is_made() {
    let test =
        "a_private_machine_on_a_daemon_without_its_bridge_is_refused_before_anything_is_made";
    if !docker_ready(test) {
        return;
    }
    // The tests' daemon runs without its bridge (scripts/test): a machine
    // asked for on "private" would get no network and publish nothing.
    let bridge = docker(&["network", "inspect", "bridge"]).status.success();
    let check = warden(&["machine", "check"]);
    let said = text(&check.stdout);
    if bridge {
        assert!(
            said.contains("network \"private\": the daemon's bridge"),
            "{said}"
        );
        skipped(&format!(
            "{test}: this Docker daemon has its bridge; the refusal is not reached"
        ));
        return;
    }
    assert!(
        said.contains(
            "network \"private\": refused here: this Docker daemon has no bridge network"
        ),
        "{}",
        show("check", &check)
    );
    let id = machine_id("nobridge");
    let state = warden::host::machine::state_dir(&id);
    let m = TestMachine::in_folder(id, tempfile::tempdir().unwrap(), warden, state);
    m.define(serde_json::json!({
        "image": IMAGE, "network": "private", "ports": [{"port": 3000, "host": "auto", "from": 18600}],
        "command": ["sleep", "infinity"],
    }));
    let out = m.up();
    assert!(!out.status.success(), "{}", show("up", &out));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("network \"private\"")
            && err.contains("--bridge=none")
            && err.contains("start dockerd with its bridge"),
        "{err}"
    );
    assert_eq!(leftovers(&m.id), "", "nothing was made");
}
