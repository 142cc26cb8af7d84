//! A change of only what a machine's warden reads again (its hosts, its
//! commands' limits, its idle stop) reaches the running machine through
//! `reload` at the next `up`, without making it again; any other change
//! makes it again and says why, and the setup runs once through it all.
//! The clients the image carries are there. On rootful and rootless podman
//! and Docker (with its bridge, on "private").

mod common;

use common::docker;
use common::machine::{inspect, ready, show, TestMachine, IMAGE};
use common::rootless::{owner, rootless_machine};
use common::text;

/// How `up` says the size an engine holds.
const HELD: &str = "size: cpus ";

/// `up`, which must succeed; its output.
fn up(m: &TestMachine, what: &str) -> String {
    let out = m.up();
    assert!(out.status.success(), "{}", show(what, &out));
    text(&out.stdout)
}

/// The scenario every engine goes through; `container_id` asks the
/// engine for the machine's container; `size` is how `up` says the size
/// this engine holds (on every `up`, the first too).
fn reloads_without_remaking(m: &TestMachine, container_id: &dyn Fn() -> String, size: &str) {
    std::fs::write(
        m.dir.path().join("setup.sh"),
        "echo ran >> \"$HOME/data/setup-runs\"\n",
    )
    .unwrap();
    m.edit(|d| {
        d["command"] = serde_json::json!(["sleep", "infinity"]);
        d["hosts"] = serde_json::json!(["one.example"]);
        d["limits"] = serde_json::json!({"timeout_ms": 60_000});
        d["setup"] = "setup.sh".into();
    });
    // The size the engine holds, said from the first `up` on; the setup
    // runs once.
    let said = up(m, "first up");
    assert!(said.contains(size), "{said}");
    assert!(said.contains("setup.sh ran"), "{said}");
    the_clients_the_image_carries_are_importable(m);
    let first = container_id();
    assert!(!first.is_empty());
    let out = m.exec(&["sleep", "2"]);
    assert!(out.status.success(), "{}", show("sleep 2", &out));

    hosts_limits_and_idle_stop_are_reloaded(m, container_id, &first);

    // Nothing changed: kept, nothing said of a reload.
    let said = up(m, "up unchanged");
    assert!(
        said.contains("unchanged, kept") && !said.contains("reloaded"),
        "{said}"
    );
    assert!(said.contains(size), "{said}");

    // What the engine holds (here `requires`, checked at up) makes it
    // again, saying why, over the same volumes; the setup, unchanged, does
    // not run again.
    m.edit(|d| d["requires"] = serde_json::json!(["sh"]));
    let said = up(m, "up after a change of requires");
    assert!(
        said.contains("made again: the definition's requires changed"),
        "{said}"
    );
    assert!(
        said.contains("setup.sh: unchanged since it ran, not run again"),
        "{said}"
    );
    assert_ne!(container_id(), first, "made again");
    // The new container keeps the reloaded fields too.
    let out = m.warden(&["machine", "status", &m.id]);
    assert!(
        text(&out.stdout).contains("stops itself after 3600 s idle"),
        "{}",
        show("status", &out)
    );
}

/// The clients the image carries, importable where a runtime is.
fn the_clients_the_image_carries_are_importable(m: &TestMachine) {
    let out = m.exec(&[
        "sh",
        "-c",
        "python3 -c 'import warden_client; print(warden_client.__version__)' && node --input-type=module -e \"import {VERSION} from '@warden/client'; console.log(VERSION)\"",
    ]);
    let version = format!("{0}\n{0}\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(text(&out.stdout), version, "{}", show("the clients", &out));
}

/// Hosts, limits and an idle stop changed, and a log beside the
/// definition: the same container (`first`), its warden told.
fn hosts_limits_and_idle_stop_are_reloaded(
    m: &TestMachine,
    container_id: &dyn Fn() -> String,
    first: &str,
) {
    std::fs::write(m.dir.path().join("up.log"), "the owner's log\n").unwrap();
    m.edit(|d| {
        d["hosts"] = serde_json::json!(["one.example", "two.example"]);
        d["limits"] = serde_json::json!({"timeout_ms": 500});
        d["idle_stop_minutes"] = 60.into();
    });
    let said = up(m, "up after a reloaded change");
    let fields = "hosts, idle_stop_minutes, limits";
    assert!(
        said.contains(&format!("kept; the definition's {fields} changed")),
        "{said}"
    );
    assert!(said.contains(&format!("reloaded: {fields}")), "{said}");
    assert!(
        !said.contains("created") && !said.contains("made again"),
        "{said}"
    );
    assert_eq!(container_id(), first, "not made again");
    let out = m.exec(&["sleep", "2"]);
    assert!(!out.status.success(), "{}", show("sleep 2", &out));
    assert!(
        text(&out.stderr).contains("timeout limit reached"),
        "{}",
        show("sleep 2", &out)
    );
    let out = m.warden(&["machine", "status", &m.id]);
    let status = text(&out.stdout);
    assert!(
        status.contains("stops itself after 3600 s idle"),
        "{status}"
    );
    assert!(status.contains("one.example two.example"), "{status}");
}

#[test]
fn a_podman_machine_takes_hosts_limits_and_idle_stop_without_being_made_again() {
    if !ready("a_podman_machine_takes_hosts_limits_and_idle_stop_without_being_made_again") {
        return;
    }
    let m = TestMachine::defined("reload", serde_json::json!({"image": IMAGE}));
    reloads_without_remaking(&m, &|| inspect(&m.container(), "{{.Id}}"), HELD);
}

#[test]
fn a_rootless_machine_takes_hosts_limits_and_idle_stop_without_being_made_again() {
    if !ready("a_rootless_machine_takes_hosts_limits_and_idle_stop_without_being_made_again") {
        return;
    }
    let m = rootless_machine("reload", serde_json::json!({"keep_id": true}));
    let container = m.container();
    reloads_without_remaking(
        &m,
        &|| {
            let out = owner()
                .command("podman", &["inspect", "--format", "{{.Id}}", &container])
                .output()
                .unwrap();
            text(&out.stdout).trim().to_string()
        },
        rootless_size(),
    );
}

/// A rootless engine holds a size on a unified cgroup hierarchy only.
fn rootless_size() -> &'static str {
    let unified = nix::sys::statfs::statfs("/sys/fs/cgroup")
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC);
    match unified {
        true => HELD,
        false => "size: not held (a rootless engine on cgroup v1 ignores limits)",
    }
}

/// On Docker as users run it, with its bridge, on "private".
#[test]
fn a_docker_machine_takes_hosts_limits_and_idle_stop_without_being_made_again() {
    let test = "a_docker_machine_takes_hosts_limits_and_idle_stop_without_being_made_again";
    if !docker::bridged_ready(test) {
        return;
    }
    let definition = serde_json::json!({"image": IMAGE, "network": "private"});
    let m = docker::bridged_machine("reload-docker", definition);
    reloads_without_remaking(&m, &|| docker::container_id(&m, true), HELD);
}
