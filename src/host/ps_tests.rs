//! Tests of `ps`: the engines' listings read into rows, the idle time
//! from a status, and the table people read.

use super::*;
use crate::wire::{ActivityState, RunningCommand, Status};

/// A podman listing entry, as podman 4 gives it.
fn podman_entry(name: &str, machine: &str, state: &str, ports: &str) -> String {
    format!(
        r#"{{"Names":["{name}"],"Labels":{{"warden.machine":"{machine}","warden.owner":"1000","warden.inputs":"d"}},
           "Image":"localhost/warden-machine:latest","State":"{state}","Status":"","Ports":{ports}}}"#
    )
}

fn row(id: &str, engine: &'static str, state: &str, ports: &[&str]) -> Row {
    Row {
        id: id.into(),
        name: format!("warden-{id}"),
        kind: "container",
        engine,
        owner: Some(1000),
        image: "localhost/warden-machine:latest".into(),
        state: state.into(),
        status: state.into(),
        running: state == "running",
        ports: ports.iter().map(|p| p.to_string()).collect(),
        idle_ms: None,
    }
}

#[test]
fn podmans_listing_gives_one_row_per_machine() {
    let ports = r#"[{"host_ip":"127.0.0.1","container_port":3000,"host_port":3100,"range":1,"protocol":"tcp"},
                    {"host_ip":"","container_port":4000,"host_port":4100,"range":2,"protocol":"udp"},
                    {"host_ip":"","container_port":5000,"host_port":0,"range":1,"protocol":"tcp"}]"#;
    let cases: Vec<(String, Result<Vec<Row>, ()>)> = vec![
        (String::new(), Ok(vec![])),
        ("[]".into(), Ok(vec![])),
        ("{}".into(), Err(())),
        ("not json".into(), Err(())),
        (
            format!("[{}]", podman_entry("warden-a", "a", "running", ports)),
            Ok(vec![row(
                "a",
                "podman",
                "running",
                &[
                    "3000/tcp -> 127.0.0.1:3100",
                    "4000/udp -> 0.0.0.0:4100",
                    "4001/udp -> 0.0.0.0:4101",
                ],
            )]),
        ),
        // A stopped machine publishes nothing, whatever it was made with.
        (
            format!("[{}]", podman_entry("warden-b", "b", "exited", ports)),
            Ok(vec![row("b", "podman", "exited", &[])]),
        ),
        (
            format!(
                "[{},{}]",
                podman_entry("warden-c", "c", "created", "null"),
                podman_entry("other", "", "running", "null")
            ),
            Ok(vec![row("c", "podman", "created", &[])]),
        ),
    ];
    for (out, want) in cases {
        assert_eq!(podman_rows(&out).map_err(drop), want, "{out}");
    }
    // The engine's words, when it gives them; a label that is no uid.
    let said = r#"[{"Names":["warden-d"],"Labels":{"warden.machine":"d","warden.owner":"x"},
                   "Image":"i","State":"running","Status":"Up 3 minutes","Ports":null}]"#;
    let rows = podman_rows(said).unwrap();
    assert_eq!(
        (rows[0].status.as_str(), rows[0].owner),
        ("Up 3 minutes", None)
    );
}

#[test]
fn dockers_lines_give_one_row_per_machine() {
    let line = |machine: &str, state: &str, ports: &str| {
        format!(
            r#"{{"row":{{"Names":"warden-{machine}","Labels":"warden.owner=1000,x=1,warden.owner=6","Image":"localhost/warden-machine:latest","State":"{state}","Status":"{state}","Ports":"{ports}"}},"machine":"{machine}","owner":"1000"}}"#
        )
    };
    let cases: Vec<(String, Result<Vec<Row>, ()>)> = vec![
        (String::new(), Ok(vec![])),
        ("\n\n".into(), Ok(vec![])),
        ("{".into(), Err(())),
        (
            line("a", "running", "127.0.0.1:3100->3000/tcp, 3001/tcp"),
            Ok(vec![row(
                "a",
                "docker",
                "running",
                &["3000/tcp -> 127.0.0.1:3100"],
            )]),
        ),
        (
            format!(
                "{}\n{}\n",
                line("b", "exited", "127.0.0.1:3100->3000/tcp"),
                line("", "running", "")
            ),
            Ok(vec![row("b", "docker", "exited", &[])]),
        ),
    ];
    for (out, want) in cases {
        assert_eq!(docker_rows(&out).map_err(drop), want, "{out}");
    }
}

#[test]
fn idle_time_for_people() {
    let cases = [
        (false, Some(5_000), "-"),
        (false, None, "-"),
        (true, None, "?"),
        (true, Some(0), "0s"),
        (true, Some(59_999), "59s"),
        (true, Some(60_000), "1m00s"),
        (true, Some(307_000), "5m07s"),
        (true, Some(3_600_000), "1h00m"),
        (true, Some(11_040_000), "3h04m"),
        (true, Some(86_400_000 * 2 + 3_600_000 * 5), "2d05h"),
    ];
    for (running, idle_ms, want) in cases {
        let r = Row {
            running,
            idle_ms,
            ..row("a", "podman", "running", &[])
        };
        assert_eq!(idle_text(&r), want, "{running} {idle_ms:?}");
    }
}

#[test]
fn the_idle_time_is_the_statuss_and_nothing_while_a_command_runs() {
    let status = |activity: Option<u64>, commands: usize| {
        let mut s: Status = serde_json::from_value(serde_json::json!({
            "version": "0", "protocol": 8, "pid1": true, "uptime_ms": 1,
            "users": [], "layout": [], "running": [], "commands_started": 0,
            "audit_log": "", "layers": [],
        }))
        .unwrap();
        s.activity = activity.map(|idle_ms| ActivityState {
            idle_ms,
            held_until_ms: None,
            idle_stop_s: None,
            next_job_at_ms: None,
            running: None,
        });
        s.running = (0..commands)
            .map(|i| RunningCommand {
                command: i as u64,
                pid: 1,
                argv: vec!["sleep".into()],
                folder: None,
                requester_uid: 0,
                running_ms: 1,
            })
            .collect();
        s
    };
    assert_eq!(idle_of(&status(Some(4200), 0)), Some(4200));
    assert_eq!(idle_of(&status(Some(4200), 1)), Some(0));
    assert_eq!(idle_of(&status(None, 0)), None);
}

#[test]
fn the_table_has_a_header_and_aligned_columns() {
    let mut a = row("a", "podman", "running", &["3000/tcp -> 127.0.0.1:3100"]);
    a.idle_ms = Some(65_000);
    let mut vm = row("long-vm-id", "qemu", "stopped", &[]);
    vm.kind = "vm";
    vm.owner = Some(0);
    let want = "\
MACHINE     KIND       ENGINE  OWNER  STATE    IDLE   IMAGE                            PORTS
a           container  podman  1000   running  1m05s  localhost/warden-machine:latest  3000/tcp -> 127.0.0.1:3100
long-vm-id  vm         qemu    0      stopped  -      localhost/warden-machine:latest  -
";
    assert_eq!(table(&[a, vm]), want);
    assert_eq!(
        table(&[]),
        "MACHINE  KIND  ENGINE  OWNER  STATE  IDLE  IMAGE  PORTS\n"
    );
}
