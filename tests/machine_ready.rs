//! Ready means ready: `up` and `exec --start` return once the machine is
//! ready by what its definition waits for (the runtime saying `ready`, or
//! its port accepting a connection), and fail after `ready_timeout_s`
//! saying what they waited for. On rootful and rootless podman and Docker.

mod common;

use common::docker;
use common::machine::{host_port, http_get, ready, show, TestMachine, IMAGE};
use common::rootless::rootless_machine;
use common::text;
use std::process::Output;
use std::time::{Duration, Instant};

/// The runtime's main process: says it is ready two seconds after it
/// starts (the image's own warden, as the runtime), then serves nothing.
const SAYS_READY: &str = "sleep 2; /sbin/warden ready; exec sleep infinity";

/// `up`, timed; its output.
fn timed_up(m: &TestMachine) -> (Output, Duration) {
    let begun = Instant::now();
    let out = m.up();
    (out, begun.elapsed())
}

/// The runtime's signal, through `up`, `status` and `exec --start`.
fn the_runtime_says_it(m: &TestMachine) {
    m.edit(|d| {
        d["command"] = serde_json::json!(["sh", "-c", SAYS_READY]);
        d["ready"] = "runtime".into();
    });
    let (out, took) = timed_up(m);
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(
        text(&out.stdout).contains("ready: runtime"),
        "{}",
        show("up", &out)
    );
    // The runtime waits two seconds before it says it: `up` cannot be back
    // sooner.
    assert!(took >= Duration::from_secs(2), "up returned after {took:?}");
    let out = m.warden(&["machine", "status", &m.id]);
    let status = text(&out.stdout);
    assert!(status.contains("(the runtime said so)"), "{status}");

    // Stopped, then `exec --start`: back once the runtime said it again.
    let out = m.warden(&["machine", "stop", &m.id]);
    assert!(out.status.success(), "{}", show("stop", &out));
    let begun = Instant::now();
    let out = m.warden(&["machine", "exec", &m.id, "--start", "--", "true"]);
    assert!(out.status.success(), "{}", show("exec --start", &out));
    assert!(
        begun.elapsed() >= Duration::from_secs(2),
        "--start after {:?}",
        begun.elapsed()
    );
}

/// A runtime that never says it: `up` fails after the timeout in one
/// line, and the machine is left running, its logs at hand.
fn the_runtime_never_says_it(m: &TestMachine) {
    m.edit(|d| {
        d["command"] = serde_json::json!(["sleep", "infinity"]);
        d["ready"] = "runtime".into();
        d["ready_timeout_s"] = 3.into();
    });
    let out = m.up();
    assert!(!out.status.success(), "{}", show("up", &out));
    let said = text(&out.stderr);
    assert!(
        said.contains("not ready after 3 s: waited for the runtime to say `ready`"),
        "{said}"
    );
    assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
    let out = m.warden(&["machine", "status", &m.id]);
    assert!(
        text(&out.stdout).contains("ready: not yet (waiting for the runtime)"),
        "{}",
        show("status", &out)
    );
}

#[test]
fn podman_up_and_start_wait_for_the_runtime_to_say_it_is_ready() {
    if !ready("podman_up_and_start_wait_for_the_runtime_to_say_it_is_ready") {
        return;
    }
    let m = TestMachine::defined("ready", serde_json::json!({"image": IMAGE}));
    the_runtime_says_it(&m);
    let m = TestMachine::defined("never", serde_json::json!({"image": IMAGE}));
    the_runtime_never_says_it(&m);
}

#[test]
fn podman_up_returns_once_the_runtimes_port_answers() {
    if !ready("podman_up_returns_once_the_runtimes_port_answers") {
        return;
    }
    let m = TestMachine::defined(
        "readyport",
        serde_json::json!({
            "image": IMAGE, "network": "private",
            "ports": [{"port": 3000, "host": "auto"}],
            // The page comes two seconds late, as a runtime's might.
            "command": ["sh", "-c", "sleep 2; cd /tmp && exec python3 -m http.server 3000"],
            "ready_port": 3000,
        }),
    );
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(
        text(&out.stdout).contains("ready: port 3000"),
        "{}",
        show("up", &out)
    );
    // At once, no retry: the page answers when `up` is back.
    let port = host_port(&m.container(), 3000).expect("a published port");
    http_get(port, "/", Duration::ZERO).expect("the runtime's page, at the first try");
    let out = m.warden(&["machine", "status", &m.id]);
    assert!(
        text(&out.stdout).contains("(its port 3000 accepted a connection)"),
        "{}",
        show("status", &out)
    );
}

#[test]
fn rootless_up_waits_for_the_runtime_to_say_it_is_ready() {
    if !ready("rootless_up_waits_for_the_runtime_to_say_it_is_ready") {
        return;
    }
    let m = rootless_machine("ready", serde_json::json!({"keep_id": true}));
    the_runtime_says_it(&m);
    let m = rootless_machine("never", serde_json::json!({}));
    the_runtime_never_says_it(&m);
}

/// On Docker as users run it, with its bridge, on "private".
#[test]
fn docker_up_waits_for_the_runtime_to_say_it_is_ready() {
    if !docker::bridged_ready("docker_up_waits_for_the_runtime_to_say_it_is_ready") {
        return;
    }
    let definition = serde_json::json!({"image": IMAGE, "network": "private"});
    the_runtime_says_it(&docker::bridged_machine("ready-docker", definition.clone()));
    the_runtime_never_says_it(&docker::bridged_machine("never-docker", definition));
}
