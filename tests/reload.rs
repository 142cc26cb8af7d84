//! `reload` beyond the network policy: the commands' limits (limits.json)
//! and the idle stop (machine.json's `idle_stop_s`) taken by a running
//! warden, PID 1 of its own namespaces; a broken file changes nothing.

mod common;

use common::{privileged, Machine, Options};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

fn write_json(path: &Path, value: serde_json::Value) {
    std::fs::write(path, value.to_string()).unwrap();
}

/// `sleep 2` as shell, with the machine's own limits only.
fn sleep_two(m: &Machine) -> warden::wire::client::Output {
    let request = warden::wire::RunRequest {
        shell: Some("sleep 2".into()),
        ..Default::default()
    };
    m.client().run(request).unwrap()
}

#[test]
fn a_reload_takes_new_limits_and_an_idle_stop_and_refuses_a_broken_file() {
    if !privileged("a_reload_takes_new_limits_and_an_idle_stop_and_refuses_a_broken_file") {
        return;
    }
    let policy = tempfile::tempdir().unwrap();
    let limits = policy.path().join("limits.json");
    write_json(&limits, json!({"timeout_ms": 60_000}));
    let m = Machine::boot(Options {
        config: json!({"policy_dir": policy.path()}),
        ..Options::default()
    });
    let config = m.root().join("machine.json");
    let out = sleep_two(&m);
    assert_eq!(out.exit.code, Some(0), "{:?}", out.exit);
    assert_eq!(
        m.client().status().unwrap().activity.unwrap().idle_stop_s,
        None
    );

    // New limits and an idle stop of an hour: both hold without a restart.
    write_json(&limits, json!({"timeout_ms": 300}));
    let mut with_idle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    with_idle["idle_stop_s"] = 3600.into();
    write_json(&config, with_idle.clone());
    m.client().reload().unwrap();
    let out = sleep_two(&m);
    assert_eq!(out.exit.limit.as_deref(), Some("timeout"), "{:?}", out.exit);
    let status = m.client().status().unwrap();
    assert_eq!(status.activity.unwrap().idle_stop_s, Some(3600));
    let reloaded = m.audit_kinds("settings_reload");
    assert_eq!(reloaded.len(), 1, "{reloaded:?}");
    assert_eq!(reloaded[0]["limits"]["timeout_ms"], 300);
    assert_eq!(reloaded[0]["idle_stop_s"], 3600);

    // A broken limits.json: refused, naming the file; the last good holds.
    std::fs::write(&limits, "{\"timeout_ms\": ").unwrap();
    let e = m.client().reload().unwrap_err().to_string();
    assert!(e.contains("limits.json") && e.contains("last good"), "{e}");
    let out = sleep_two(&m);
    assert_eq!(out.exit.limit.as_deref(), Some("timeout"), "{:?}", out.exit);
    assert_eq!(m.audit_kinds("settings_reload").len(), 1);

    // An idle stop of one second: the watch the first reload began (none
    // was needed at boot) takes it, and the machine stops itself, saying so.
    write_json(&limits, json!({"timeout_ms": 300}));
    with_idle["idle_stop_s"] = 1.into();
    write_json(&config, with_idle);
    m.client().reload().unwrap();
    let mut m = m;
    let status = m.wait(Duration::from_secs(30));
    assert_eq!(status, 0, "{}", m.log());
    let stopped = m.audit_kinds("idle_stop");
    assert_eq!(stopped.len(), 1, "{}", m.log());
    assert_eq!(stopped[0]["idle_stop_s"], 1);
}

/// The runtime's next job, due within five minutes, keeps warden's own
/// idle stop off; once the job is let go (0), the machine stops.
#[test]
fn a_job_due_soon_keeps_the_idle_stop_off() {
    if !privileged("a_job_due_soon_keeps_the_idle_stop_off") {
        return;
    }
    let mut m = Machine::boot(Options {
        config: json!({"idle_stop_s": 1}),
        ..Options::default()
    });
    let at = warden::shared::idle::now_ms() + 120_000;
    assert_eq!(m.client().next_job(at).unwrap(), at);
    let status = m.client().status().unwrap();
    assert_eq!(status.activity.unwrap().next_job_at_ms, Some(at));
    // Idle for three times its stop, and still up.
    std::thread::sleep(Duration::from_secs(3));
    assert!(m.client().status().is_ok(), "{}", m.log());
    assert_eq!(m.audit_kinds("next_job")[0]["at_ms"], at);
    m.client().next_job(0).unwrap();
    assert_eq!(m.wait(Duration::from_secs(30)), 0, "{}", m.log());
    assert_eq!(m.audit_kinds("idle_stop").len(), 1);
}
