//! Machines that sleep and wake behind `warden machine serve`: a machine
//! idle for its time is stopped (or frozen), its port stays held, and the
//! next connection wakes it and gets the runtime's page, slower but not
//! refused; a frozen one keeps its memory; a job due starts a stopped one
//! ahead of it; each wake is an audit line with its cause. On rootful and
//! rootless podman and Docker.

mod common;

use common::docker;
use common::machine::{http_get, ready, show, TestMachine, IMAGE};
use common::rootless::{owner, rootless_machine};
use common::serve::{kept_and_stood_still, page, serving, wait_for, RUNTIME};
use common::text;
use std::process::Command;
use std::time::{Duration, Instant};

/// The definition every scenario starts from; `extra` laid over it.
fn served(extra: serde_json::Value) -> serde_json::Value {
    let mut definition = serde_json::json!({
        "image": IMAGE, "network": "private",
        "ports": [{"port": 3000, "host": "auto", "from": 18300}],
        "serve": true, "idle_stop_minutes": 0.1,
        "command": ["sh", "-c", RUNTIME], "ready_port": 3000,
    });
    if let (Some(d), Some(e)) = (definition.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    definition
}

/// `up`, which must succeed; the port serve fronts for 3000.
fn up_fronted(m: &TestMachine) -> u16 {
    let out = m.up();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", show("up", &out));
    said.lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("published: 3000/tcp -> 127.0.0.1:")?;
            let (port, how) = rest.split_once(' ')?;
            how.contains("fronted by warden machine serve")
                .then(|| port.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no fronted port: {}", show("up", &out)))
}

/// The engine's word for the container's state, asked by `command`
/// (podman as root or as the owner, or docker with its daemon).
fn state_of(mut command: Command, container: &str) -> String {
    let out = command
        .args(["inspect", "--format", "{{.State.Status}}", container])
        .output()
        .unwrap();
    text(&out.stdout).trim().to_string()
}

/// `docker`, speaking to the daemon with its bridge.
fn bridged_docker() -> Command {
    let mut command = Command::new("docker");
    command.env("DOCKER_HOST", docker::BRIDGED);
    command
}

/// Stopped after its idle time; the next connection starts it and gets
/// the page at the first try; the wake's cause in the audit log.
fn stops_and_wakes_by_port(
    m: &TestMachine,
    ask: &dyn Fn(u16) -> Result<String, String>,
    state: &dyn Fn() -> String,
) {
    m.define(served(serde_json::json!({})));
    let front = up_fronted(m);
    assert_eq!(page(&|| ask(front)).0, 1);
    wait_for("stopped after 6 s idle", "exited", state);
    let begun = Instant::now();
    assert_eq!(
        page(&|| ask(front)).0,
        1,
        "a new runtime: its count begins again"
    );
    eprintln!(
        "first answer from a stopped machine: {:.2} s",
        begun.elapsed().as_secs_f64()
    );
    assert_eq!(state(), "running");
    let log = m.audit();
    assert!(log.contains(" wake cause=port"), "{log}");
}

/// Frozen after its idle time instead: the runtime's memory stays and its
/// time stands still; the next connection thaws it, and so does a request
/// to its door; the audit log says so, intact.
fn pauses_and_thaws(
    m: &TestMachine,
    ask: &dyn Fn(u16) -> Result<String, String>,
    state: &dyn Fn() -> String,
) {
    m.define(served(serde_json::json!({"idle": "pause"})));
    let front = up_fronted(m);
    let (count, before) = page(&|| ask(front));
    let asked = Instant::now();
    assert_eq!(count, 1);
    wait_for("paused after 6 s idle", "paused", state);
    std::thread::sleep(Duration::from_secs(3));
    kept_and_stood_still(&|| ask(front), before, asked);
    let status = m.warden(&["machine", "status", &m.id]);
    assert!(status.status.success(), "{}", show("status", &status));
    let log = m.audit();
    assert!(
        log.contains(" pause idle_ms=") && log.contains(" wake cause=port"),
        "{log}"
    );
    assert!(log.contains("chain intact"), "{log}");
    // Frozen again, a request to its door thaws it.
    wait_for("paused again", "paused", state);
    let out = m.exec(&["id", "-un"]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("exec", &out));
    assert!(m.audit().contains(" wake cause=door"));
    // While a connection into it is open, a freeze is put off, and its
    // audit log holds no pause that did not come.
    let pauses = |log: &str| log.matches(" pause idle_ms=").count();
    let held = warden::host::machine::connect(&m.id, None).unwrap();
    let before = pauses(&m.audit());
    let state_dir = warden::host::state::state_dir(&m.id);
    let refused = warden::host::machine::serve::freeze(&m.id, &state_dir, 1).unwrap_err();
    assert!(refused.to_string().contains("not frozen now"), "{refused}");
    assert_eq!(state(), "running");
    drop(held);
    assert_eq!(pauses(&m.audit()), before, "{}", m.audit());
}

#[test]
fn podman_machines_sleep_and_wake_behind_serve() {
    if !ready("podman_machines_sleep_and_wake_behind_serve") {
        return;
    }
    let mut command = Command::new(common::warden_bin());
    command.args(["machine", "serve", "--lead", "20"]);
    let _serve = serving(command);
    let ask = |port: u16| http_get(port, "/", Duration::ZERO);

    let m = TestMachine::new("serve");
    let state = || common::machine::inspect(&m.container(), "{{.State.Status}}");
    stops_and_wakes_by_port(&m, &ask, &state);

    let m = TestMachine::new("pause");
    let state = || common::machine::inspect(&m.container(), "{{.State.Status}}");
    pauses_and_thaws(&m, &ask, &state);

    // A job due: stopped, it is started ahead of it, and stays up for it.
    let m = TestMachine::new("job");
    m.define(served(serde_json::json!({})));
    up_fronted(&m);
    let at = warden::shared::idle::now_ms() + 30_000;
    let mut client = warden::host::machine::connect(&m.id, None).unwrap();
    assert_eq!(client.next_job(at).unwrap(), at);
    drop(client);
    // serve keeps the job in the state folder at its next look.
    std::thread::sleep(Duration::from_secs(2));
    let out = m.warden(&["machine", "stop", &m.id]);
    assert!(out.status.success(), "{}", show("stop", &out));
    let state = || common::machine::inspect(&m.container(), "{{.State.Status}}");
    wait_for("started 20 s ahead of its job", "running", &state);
    let started = warden::shared::idle::now_ms();
    assert!(
        started + 20_000 >= at,
        "started {} ms before the job",
        at - started
    );
    // Within five minutes of its job, its idle time does not stop it.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(state(), "running");
    assert!(m.audit().contains(" wake cause=job"));
}

#[test]
fn rootless_machines_sleep_and_wake_behind_serve() {
    if !ready("rootless_machines_sleep_and_wake_behind_serve") {
        return;
    }
    let owner = owner();
    let _serve = serving(owner.command(owner.bin.to_str().unwrap(), &["machine", "serve"]));
    let m = rootless_machine("serve", serde_json::json!({}));
    let container = m.container();
    let state = || state_of(owner.command("podman", &[]), &container);
    let ask = |port: u16| http_get(port, "/", Duration::ZERO);
    stops_and_wakes_by_port(&m, &ask, &state);
    // Freezing needs a freezer of the engine's own: on cgroup v1 a
    // rootless owner has none, and `up` says so before anything is made.
    let m = rootless_machine("pause", serde_json::json!({}));
    let container = m.container();
    let state = || state_of(owner.command("podman", &[]), &container);
    let unified = nix::sys::statfs::statfs("/sys/fs/cgroup")
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC);
    if unified {
        return pauses_and_thaws(&m, &ask, &state);
    }
    m.define(served(serde_json::json!({"idle": "pause"})));
    let out = m.up();
    assert!(!out.status.success(), "{}", show("up", &out));
    assert!(
        text(&out.stderr).contains("a rootless engine on cgroup v1 cannot freeze a container"),
        "{}",
        show("up", &out)
    );
}

#[test]
fn docker_machines_sleep_and_wake_behind_serve() {
    if !docker::bridged_ready("docker_machines_sleep_and_wake_behind_serve") {
        return;
    }
    // serve where the bridged daemon publishes: in its network namespace.
    let mut command = Command::new("nsenter");
    command
        .arg(format!("--net={}", docker::NETNS))
        .arg(common::warden_bin())
        .args(["machine", "serve"])
        .env("WARDEN_ENGINE", "docker")
        .env("DOCKER_HOST", docker::BRIDGED);
    let _serve = serving(command);
    let m = docker::bridged_machine("serve-docker", serde_json::json!({}));
    let container = m.container();
    let state = || state_of(bridged_docker(), &container);
    let ask = |port: u16| match docker::http_bridged(port, "GET", "/", "", 0) {
        (200, body) => Ok(body),
        (code, said) => Err(format!("{code}: {said}")),
    };
    stops_and_wakes_by_port(&m, &ask, &state);
    let m = docker::bridged_machine("pause-docker", serde_json::json!({}));
    let container = m.container();
    let state = || state_of(bridged_docker(), &container);
    pauses_and_thaws(&m, &ask, &state);
}
