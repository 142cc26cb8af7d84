//! `warden machine ps` and `down`, as an owner runs them from outside the
//! machine, on rootful and rootless podman and Docker: `ps` shows each
//! machine's kind, engine, owner's uid, state, idle time (which reading
//! it does not reset), image and ports, `ps --json` the same fields; `down`
//! removes the container, and the next `up` finds the workspace's files,
//! the data volume and the audit log's chain where they were.

mod common;

use common::docker;
use common::machine::{ps_row, ready, show, TestMachine, IMAGE};
use common::rootless::{owner, rootless_machine};
use common::text;
use serde_json::Value;
use std::process::Output;
use std::time::Duration;

/// The engine a scenario runs on, as the machine's owner reaches it.
struct On {
    /// "podman" or "docker", as `ps` names it.
    engine: &'static str,
    /// The owner's uid, as `ps` shows it.
    owner: u32,
    /// `ENGINE ARGS` as the owner.
    run: fn(&[&str]) -> Output,
}

/// The machine's row in `ps --json`.
fn json_row(m: &TestMachine) -> Option<Value> {
    let out = m.warden(&["machine", "ps", "--json"]);
    assert!(out.status.success(), "{}", show("ps --json", &out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("ps --json: {e}: {}", text(&out.stdout)));
    rows.into_iter().find(|r| r["id"] == m.id.as_str())
}

/// The machine's row in `ps`'s table.
fn table_row(m: &TestMachine) -> Option<Vec<String>> {
    let out = m.warden(&["machine", "ps"]);
    assert!(out.status.success(), "{}", show("ps", &out));
    let table = text(&out.stdout);
    assert!(table.starts_with("MACHINE  "), "a header first: {table}");
    ps_row(&table, &m.id)
}

/// Pure: seconds of an idle time as the table says it (`42s`, `5m07s`).
fn idle_secs(said: &str) -> Option<u64> {
    let said = said.strip_suffix('s')?;
    match said.split_once('m') {
        Some((m, s)) => Some(m.parse::<u64>().ok()? * 60 + s.parse::<u64>().ok()?),
        None => said.parse().ok(),
    }
}

/// `warden machine audit`: the chain intact, read through the running
/// machine's warden; the number of its last line.
fn audit(m: &TestMachine) -> u64 {
    let out = m.warden(&["machine", "audit", &m.id]);
    let said = text(&out.stdout);
    assert!(
        out.status.success() && said.contains("chain intact"),
        "{}",
        show("audit", &out)
    );
    let (_, rest) = said
        .split_once("read through the machine's warden: lines 1 to ")
        .unwrap_or_else(|| panic!("read from line 1: {said}"));
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

/// What every engine goes through. `ports`: the published ports the
/// engine itself says, which `ps` must show.
fn ps_and_down(m: &TestMachine, on: &On, ports: &dyn Fn() -> Vec<String>) {
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let out = m.warden(&[
        "machine",
        "exec",
        &m.id,
        "--folder",
        "kept",
        "--shell",
        "echo kept-across-down > marker",
    ]);
    assert!(out.status.success(), "{}", show("write", &out));
    let published = ports();
    let idle = ps_says_its_columns_while_it_idles(m, on, &published);
    ps_json_says_the_same_and_a_command_is_activity(m, on, &published, idle);
    stopped_it_has_no_idle_time_nor_ports(m);
    let lines = down_keeps_its_volumes_and_ps_lists_it_no_more(m, on);
    up_again_finds_the_workspace_the_data_and_the_chain(m, lines);

    // Down of what is not there is refused, saying so.
    let out = m.warden(&["machine", "down", "t0-no-such-machine"]);
    assert!(!out.status.success(), "{}", show("down nothing", &out));
    assert!(
        text(&out.stderr).contains("no such machine"),
        "{}",
        show("down nothing", &out)
    );
}

/// Idle for three seconds: the table says so, in its columns; the idle
/// seconds it says.
fn ps_says_its_columns_while_it_idles(m: &TestMachine, on: &On, published: &[String]) -> u64 {
    // Idle for three seconds: the table says so, in its columns.
    std::thread::sleep(Duration::from_secs(3));
    let row = table_row(m).expect("the machine in ps");
    let owner = on.owner.to_string();
    assert_eq!(
        &row[1..5],
        ["container", on.engine, owner.as_str(), "running"],
        "{row:?}"
    );
    let idle = idle_secs(&row[5]).unwrap_or_else(|| panic!("idle: {row:?}"));
    assert!((3..60).contains(&idle), "{row:?}");
    assert_eq!(row[6], IMAGE);
    let ports_said = match published.join(", ") {
        p if p.is_empty() => "-".to_string(),
        p => p,
    };
    assert_eq!(row[7..].join(" "), ports_said, "{row:?}");
    idle
}

/// The same in JSON, and the first `ps` did not reset the idle time.
fn ps_json_says_the_same_and_a_command_is_activity(
    m: &TestMachine,
    on: &On,
    published: &[String],
    idle: u64,
) {
    let json = json_row(m).expect("the machine in ps --json");
    let want = serde_json::json!({
        "id": m.id, "name": m.container(), "kind": "container",
        "engine": on.engine, "owner": on.owner, "image": IMAGE,
        "state": "running", "running": true, "ports": published,
    });
    for (key, value) in want.as_object().unwrap() {
        assert_eq!(&json[key], value, "{key}: {json}");
    }
    assert!(
        json["status"].as_str().is_some_and(|s| !s.is_empty()),
        "{json}"
    );
    let idle_ms = json["idle_ms"].as_u64().expect("idle_ms");
    assert!(idle_ms >= idle * 1000, "reset by reading it? {json}");
    // A command is activity: idle again from its end.
    let out = m.exec(&["true"]);
    assert!(out.status.success(), "{}", show("true", &out));
    let after = json_row(m).unwrap()["idle_ms"].as_u64().unwrap();
    // Never less than the first had it, had the command not counted.
    assert!(
        after < idle_ms,
        "{after} ms idle after a command, {idle_ms} before"
    );
}

/// Stopped: no idle time, no ports.
fn stopped_it_has_no_idle_time_nor_ports(m: &TestMachine) {
    let out = m.warden(&["machine", "stop", &m.id]);
    assert!(out.status.success(), "{}", show("stop", &out));
    let row = table_row(m).expect("a stopped machine is listed");
    assert_eq!(
        (row[4].as_str(), row[5].as_str()),
        ("exited", "-"),
        "{row:?}"
    );
    let json = json_row(m).unwrap();
    assert_eq!(
        (&json["running"], &json["idle_ms"], &json["ports"]),
        (&Value::Bool(false), &Value::Null, &serde_json::json!([])),
        "{json}"
    );
}

/// Down from running: the container goes, its volumes and the state
/// folder stay, and `ps` lists it no more. The audit log's last line before
/// it.
fn down_keeps_its_volumes_and_ps_lists_it_no_more(m: &TestMachine, on: &On) -> u64 {
    // Down from running: the container goes, its volumes and the state
    // folder stay, and `ps` lists it no more.
    let out = m.warden(&["machine", "exec", &m.id, "--start", "--", "true"]);
    assert!(out.status.success(), "{}", show("exec --start", &out));
    let lines = audit(m);
    let out = m.warden(&["machine", "down", &m.id]);
    assert!(out.status.success(), "{}", show("down", &out));
    let said = text(&out.stdout);
    let c = m.container();
    let removed = format!(
        "machine {} down: container {c} removed; kept for its next up: ",
        m.id
    );
    let kept = format!("volume {c}-data, volume {c}-work, state folder ");
    assert!(
        said.starts_with(&format!("{removed}{kept}")),
        "this machine's volumes, and only those: {said}"
    );
    let gone = (on.run)(&["container", "inspect", &m.container()]);
    assert!(!gone.status.success(), "the container is removed");
    let volumes = (on.run)(&["volume", "ls", "-q"]);
    let volumes = text(&volumes.stdout);
    for volume in ["data", "work"] {
        let name = format!("{}-{volume}", m.container());
        assert!(volumes.lines().any(|v| v == name), "{name} kept: {volumes}");
    }
    assert!(
        table_row(m).is_none() && json_row(m).is_none(),
        "listed after down"
    );
    lines
}

/// Up again: a new container on the same workspace and data; the audit
/// log goes on from `lines`, its chain whole.
fn up_again_finds_the_workspace_the_data_and_the_chain(m: &TestMachine, lines: u64) {
    // Up again: a new container on the same workspace and data.
    let out = m.up();
    assert!(out.status.success(), "{}", show("up after down", &out));
    assert!(
        text(&out.stdout).contains(": created"),
        "{}",
        show("up", &out)
    );
    let out = m.warden(&[
        "machine", "exec", &m.id, "--folder", "kept", "--", "cat", "marker",
    ]);
    assert_eq!(
        text(&out.stdout),
        "kept-across-down\n",
        "{}",
        show("cat", &out)
    );
    // The audit log goes on from where it was, its chain whole.
    let now = audit(m);
    assert!(now > lines, "{now} lines, {lines} before down");
    let row = json_row(m).expect("listed again");
    assert_eq!(row["state"], "running", "{row}");
}

#[test]
fn ps_shows_a_podman_machine_and_down_keeps_its_workspace_and_data() {
    let test = "ps_shows_a_podman_machine_and_down_keeps_its_workspace_and_data";
    if !ready(test) {
        return;
    }
    let m = TestMachine::defined(
        "ps",
        serde_json::json!({
            "image": IMAGE, "command": ["sleep", "infinity"], "network": "private",
            "ports": [{"port": 3000, "host": "auto", "from": 18700}],
        }),
    );
    let on = On {
        engine: "podman",
        owner: 0,
        run: common::machine::podman,
    };
    let container = m.container();
    let ports = || {
        let out = common::machine::podman(&["port", &container]);
        let said: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
        assert_eq!(said.len(), 1, "{}", show("podman port", &out));
        said
    };
    ps_and_down(&m, &on, &ports);
}

#[test]
fn ps_shows_a_rootless_machine_and_down_keeps_its_workspace_and_data() {
    let test = "ps_shows_a_rootless_machine_and_down_keeps_its_workspace_and_data";
    if !ready(test) {
        return;
    }
    owner().load(IMAGE);
    let m = rootless_machine(
        "ps",
        serde_json::json!({"image": IMAGE, "command": ["sleep", "infinity"]}),
    );
    let on = On {
        engine: "podman",
        owner: owner().uid,
        run: |args| owner().command("podman", args).output().unwrap(),
    };
    ps_and_down(&m, &on, &Vec::new);
}

#[test]
fn ps_shows_a_docker_machine_and_down_keeps_its_workspace_and_data() {
    if !docker::ready("ps_shows_a_docker_machine_and_down_keeps_its_workspace_and_data") {
        return;
    }
    let definition = serde_json::json!({"image": IMAGE, "command": ["sleep", "infinity"]});
    let m = docker::machine("ps-docker", definition);
    let on = On {
        engine: "docker",
        owner: 0,
        run: docker::docker,
    };
    // The tests' daemon without its bridge: nothing published.
    ps_and_down(&m, &on, &Vec::new);
}

#[test]
fn idle_times_are_read_as_the_table_says_them() {
    let cases = [
        ("0s", Some(0)),
        ("59s", Some(59)),
        ("5m07s", Some(307)),
        ("-", None),
        ("?", None),
        ("3h04m", None),
    ];
    for (said, want) in cases {
        assert_eq!(idle_secs(said), want, "{said}");
    }
}
