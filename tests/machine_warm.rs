//! `warden machine up --warm N`, on rootful and rootless podman and on
//! Docker: the first call makes
//! a machine of the pool (`<id>-<k>`) and the pool fills to N stopped
//! spares in the background; the next call takes a spare (stopped until
//! then), which answers as any machine does, and the pool is filled again
//! with numbers never used before; a changed definition's spares are not
//! handed out and are replaced; `rm` of a spare takes it out of the pool;
//! `--warm 0` empties it; a definition that publishes ports is refused
//! before anything is made.

mod common;

use common::machine::{ready, show, TestMachine, IMAGE};
use common::rootless::{owner, rootless_machine};
use common::{docker, text};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Every machine of the pool is removed when dropped, with its volumes,
/// and the pool's folder too.
struct Pool<'a>(&'a TestMachine);

impl Drop for Pool<'_> {
    fn drop(&mut self) {
        let def = self.0.definition();
        let _ = self.0.warden(&[
            "machine",
            "up",
            "--warm",
            "0",
            "--fill",
            def.to_str().unwrap(),
        ]);
        for id in machines(self.0).keys() {
            let _ = self.0.warden(&["machine", "rm", id, "--volumes"]);
        }
        let _ = std::fs::remove_dir_all(pool_folder(self.0));
    }
}

/// The pool's folder, beside its owner's machines' state folders.
fn pool_folder(m: &TestMachine) -> std::path::PathBuf {
    let root = m.state().parent().and_then(|p| p.parent()).unwrap();
    root.join("pools").join(&m.id)
}

/// `ENGINE inspect --format FORMAT CONTAINER`, as the machine's owner.
type Inspect = fn(&str, &str) -> String;

/// The pool's machines as `ps --json` lists them: id to state.
fn machines(m: &TestMachine) -> std::collections::BTreeMap<String, String> {
    let out = m.warden(&["machine", "ps", "--json"]);
    assert!(out.status.success(), "{}", show("ps --json", &out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let prefix = format!("{}-", m.id);
    rows.iter()
        .filter_map(|r| {
            let id = r["id"].as_str()?;
            id.starts_with(&prefix).then(|| {
                (
                    id.to_string(),
                    r["state"].as_str().unwrap_or("").to_string(),
                )
            })
        })
        .collect()
}

/// The pool's spares, once exactly `n` are ready (bounded wait).
fn spares_once(m: &TestMachine, n: usize) -> BTreeSet<String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let all = machines(m);
        let spares: BTreeSet<String> = all
            .iter()
            .filter(|(_, state)| *state == "spare")
            .map(|(id, _)| id.clone())
            .collect();
        if spares.len() == n {
            return spares;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not reach {n} spares in 90 s: {all:?}; its fill log:\n{}",
            fill_log(m)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn fill_log(m: &TestMachine) -> String {
    std::fs::read_to_string(pool_folder(m).join("fill.log")).unwrap_or_default()
}

/// `up --warm N --fill` (with `extra`), which must succeed.
fn fill(m: &TestMachine, n: &str, extra: &[&str]) {
    let def = m.definition();
    let mut args = vec![
        "machine",
        "up",
        "--warm",
        n,
        "--fill",
        def.to_str().unwrap(),
    ];
    args.extend(extra);
    let out = m.warden(&args);
    assert!(out.status.success(), "{}", show("fill", &out));
}

/// `up --warm N`; the id of the machine it says it brought up.
fn up_warm(m: &TestMachine, n: usize) -> (String, String) {
    let def = m.definition();
    let out = m.warden(&[
        "machine",
        "up",
        "--warm",
        &n.to_string(),
        def.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", show("up --warm", &out));
    let said = text(&out.stdout);
    let id = said
        .lines()
        .find_map(|l| {
            l.strip_prefix("machine ")?
                .split_once(" up in ")
                .map(|(id, _)| id)
        })
        .unwrap_or_else(|| panic!("no `machine ID up in` line: {said}"))
        .to_string();
    assert!(id.starts_with(&format!("{}-", m.id)), "{id}: {said}");
    (id, said)
}

fn shell_answers(m: &TestMachine, id: &str) {
    let out = m.warden(&["machine", "exec", id, "--", "id", "-un"]);
    assert!(out.status.success(), "{}", show("exec", &out));
    assert_eq!(text(&out.stdout).trim(), "shell");
}

#[test]
fn spares_made_ahead_taken_and_filled_again() {
    if !ready("spares_made_ahead_taken_and_filled_again") {
        return;
    }
    let m = TestMachine::defined("warm", json!({"image": IMAGE}));
    spares_of(&m, common::machine::inspect);
}

#[test]
fn spares_on_docker() {
    if !docker::ready("spares_on_docker") {
        return;
    }
    let m = docker::machine("warmd", json!({"image": IMAGE}));
    spares_of(&m, |container, format| {
        text(&docker::docker(&["inspect", "--format", format, container]).stdout)
    });
}

#[test]
fn spares_of_a_rootless_owner() {
    if !ready("spares_of_a_rootless_owner") {
        return;
    }
    let m = rootless_machine("warmr", json!({}));
    spares_of(&m, |container, format| {
        let out = owner()
            .command("podman", &["inspect", "--format", format, container])
            .output()
            .unwrap();
        text(&out.stdout)
    });
}

/// What every engine goes through.
fn spares_of(m: &TestMachine, inspect: Inspect) {
    let _pool = Pool(m);

    // No spare yet: made now, and the pool fills to two.
    let (first, said) = up_warm(m, 2);
    assert!(said.contains("no spare ready"), "{said}");
    shell_answers(m, &first);
    let spares = spares_once(m, 2);
    assert!(!spares.contains(&first), "{spares:?}");
    for id in &spares {
        let running = inspect(&format!("warden-{id}"), "{{.State.Running}}");
        assert_eq!(running.trim(), "false", "spare {id} is stopped");
    }

    // The next call takes a spare: it was made ahead, and now answers.
    let (taken, said) = up_warm(m, 2);
    assert!(
        spares.contains(&taken),
        "{taken} not among {spares:?}: {said}"
    );
    assert!(said.contains("a spare of pool"), "{said}");
    shell_answers(m, &taken);
    assert_eq!(machines(m).get(&taken).map(String::as_str), Some("running"));
    let refilled = spares_once(m, 2);
    assert!(!refilled.contains(&taken), "{refilled:?}");
    let known: BTreeSet<&String> = spares.iter().chain([&first]).collect();
    let new: Vec<&String> = refilled.iter().filter(|id| !known.contains(id)).collect();
    assert_eq!(
        new.len(),
        1,
        "one new spare, a number never used: {refilled:?}"
    );

    // A changed definition: its old spares are not handed out, and the
    // fill replaces them with one of the new text.
    m.edit(|d| d["env"] = json!({"POOL_TEXT": "2"}));
    let (made, said) = up_warm(m, 1);
    assert!(said.contains("no spare ready"), "{said}");
    assert!(!refilled.contains(&made));
    let now = spares_once(m, 1);
    assert!(now.is_disjoint(&refilled), "{now:?} {refilled:?}");
    let all = machines(m);
    for old in &refilled {
        assert!(!all.contains_key(old), "stale spare {old} removed: {all:?}");
    }
    let spare = now.iter().next().unwrap().clone();
    let env = inspect(&format!("warden-{spare}"), "{{.Config.Env}}");
    assert!(env.contains("POOL_TEXT=2"), "made from the new text: {env}");
    let out = m.warden(&["machine", "exec", &spare, "--start", "--", "true"]);
    assert!(out.status.success(), "{}", show("exec --start", &out));

    // Started by hand, it is the owner's; `rm` takes it out of the pool.
    let out = m.warden(&["machine", "rm", &spare, "--volumes"]);
    assert!(out.status.success(), "{}", show("rm", &out));
    spares_once(m, 0);

    // `--warm 0` empties the pool; the machines taken stay.
    fill(m, "1", &[]);
    spares_once(m, 1);
    fill(m, "0", &[]);
    let all = machines(m);
    assert!(all.values().all(|s| s != "spare"), "{all:?}");
    for id in [&first, &taken, &made] {
        assert!(all.contains_key(id.as_str()), "{id} kept: {all:?}");
    }
}

#[test]
fn a_pool_of_machines_with_ports_is_refused_before_anything_is_made() {
    if !ready("a_pool_of_machines_with_ports_is_refused_before_anything_is_made") {
        return;
    }
    let m = TestMachine::defined(
        "warmports",
        json!({"image": IMAGE, "network": "private", "ports": [{"port": 3000, "host": "auto"}]}),
    );
    let _pool = Pool(&m);
    let def = m.definition();
    let out = m.warden(&["machine", "up", "--warm", "2", def.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", show("up --warm", &out));
    let said = text(&out.stderr);
    assert!(
        said.contains("--warm") && said.contains("publishes ports"),
        "{said}"
    );
    assert!(machines(&m).is_empty(), "{:?}", machines(&m));
}

#[test]
fn paused_spares_wait_frozen_and_thaw_when_taken() {
    if !ready("paused_spares_wait_frozen_and_thaw_when_taken") {
        return;
    }
    let m = TestMachine::defined("warmp", json!({"image": IMAGE}));
    let _pool = Pool(&m);
    let def = m.definition();
    let def = def.to_str().unwrap();
    fill(&m, "1", &["--paused"]);
    let spares = spares_once(&m, 1);
    let spare = spares.iter().next().unwrap().clone();
    let container = format!("warden-{spare}");
    let status = common::machine::inspect(&container, "{{.State.Status}}");
    assert_eq!(status.trim(), "paused", "the spare waits frozen");

    let out = m.warden(&["machine", "up", "--warm", "1", "--paused", def]);
    assert!(out.status.success(), "{}", show("up --warm --paused", &out));
    let said = text(&out.stdout);
    assert!(said.contains(&format!("machine {spare} up in")), "{said}");
    assert!(
        said.contains("running, its warden answers"),
        "thawed, not started again: {said}"
    );
    shell_answers(&m, &spare);
    let status = common::machine::inspect(&container, "{{.State.Status}}");
    assert_eq!(status.trim(), "running");
    let out = m.warden(&["machine", "audit", &spare]);
    let log = text(&out.stdout);
    assert!(
        out.status.success() && log.contains("chain intact"),
        "{log}"
    );
    assert!(
        log.contains(" pause idle_ms=") && log.contains(" wake cause=start"),
        "{log}"
    );
    // The pool is filled again with a frozen spare.
    let again = spares_once(&m, 1);
    assert!(!again.contains(&spare), "{again:?}");
}
