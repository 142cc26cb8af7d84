//! `warden audit verify` and `warden audit tail` on a real log file, as an
//! owner would run them on a copy fetched from a machine.

use serde_json::json;
use std::path::Path;
use std::process::Command;
use warden::guest::audit::payload::Raw;
use warden::guest::audit::Audit;
use warden::guest::audit::Event;

fn warden(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn write_log(dir: &Path) -> String {
    let audit = Audit::open(dir, None, None).unwrap();
    audit.record(&Raw(Event::Boot, json!({"version": "test"})));
    for i in 0..5 {
        audit.record(&Raw(
            Event::CommandStart,
            json!({"command": i, "argv": ["echo", format!("n{i}")]}),
        ));
        audit.record(&Raw(Event::CommandEnd, json!({"command": i, "status": 0})));
    }
    audit.record(&Raw(Event::Shutdown, json!({"status": 0})));
    audit.path().display().to_string()
}

#[test]
fn verify_accepts_an_intact_log_and_pinpoints_edits_cuts_and_tears() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path());
    let (code, out) = warden(&["audit", "verify", &log]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok: 12 lines, chain intact"), "{out}");

    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let copy = dir.path().join("copy.jsonl");
    let check = |content: String| {
        std::fs::write(&copy, content).unwrap();
        warden(&["audit", "verify", copy.to_str().unwrap()])
    };
    // An edited line.
    let edited = text.replacen("\"n3\"", "\"n9\"", 1);
    let (code, out) = check(edited);
    assert_eq!(code, 1);
    assert!(out.contains("copy.jsonl:8: hash does not match"), "{out}");
    // A removed line.
    let mut cut = lines.clone();
    cut.remove(4);
    let (code, out) = check(cut.join("\n") + "\n");
    assert_eq!(code, 1);
    assert!(out.contains("copy.jsonl:5: seq 6 where 5 was due"), "{out}");
    // A torn last line.
    let (code, out) = check(text[..text.len() - 10].to_string());
    assert_eq!(code, 1);
    assert!(
        out.contains("copy.jsonl:12: the last line is incomplete"),
        "{out}"
    );
    // The front cut off: caught when the two files are checked as a chain.
    let head = lines[..6].join("\n") + "\n";
    let tail = lines[6..].join("\n") + "\n";
    let (first, second) = (dir.path().join("1.jsonl"), dir.path().join("2.jsonl"));
    std::fs::write(&first, &head).unwrap();
    std::fs::write(&second, &tail).unwrap();
    let (code, out) = warden(&[
        "audit",
        "verify",
        first.to_str().unwrap(),
        second.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = warden(&[
        "audit",
        "verify",
        second.to_str().unwrap(),
        first.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn tail_prints_for_people_and_filters_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path());
    let (code, out) = warden(&["audit", "tail", "--kind", "command_start", &log]);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(
        lines[0].starts_with("#2 ")
            && lines[0].contains(" command_start ")
            && lines[0].contains("argv=[\"echo\",\"n0\"]"),
        "{out}"
    );
    assert!(!out.contains("hash="), "{out}");
    let (_, out) = warden(&["audit", "tail", "-n", "2", &log]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("shutdown"), "{out}");
}

#[test]
fn an_anchor_kept_on_the_host_shows_a_cut_or_a_replaced_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path());
    let anchor = dir.path().join("anchor.json");
    let a = anchor.to_str().unwrap();
    let (code, out) = warden(&["audit", "verify", "--anchor", a, &log]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no anchor yet"), "{out}");
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&anchor).unwrap()).unwrap();
    assert_eq!(kept["seq"], 12);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&anchor).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // More lines later: the anchored line is still there.
    let audit = Audit::open(dir.path(), None, None).unwrap();
    audit.record(&Raw(Event::Boot, json!({"version": "again"})));
    drop(audit);
    let (code, out) = warden(&["audit", "verify", "--anchor", a, &log]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("line 12 verified before is still there"),
        "{out}"
    );
    // The end cut off: the chain of what is left verifies, the anchor does not.
    let text = std::fs::read_to_string(&log).unwrap();
    let kept: Vec<&str> = text.lines().take(10).collect();
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, kept.join("\n") + "\n").unwrap();
    let (code, out) = warden(&["audit", "verify", "--anchor", a, cut.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("chain intact") && out.contains("CUT: line 13"),
        "{out}"
    );
    // A whole other log, valid on its own.
    let other = tempfile::tempdir().unwrap();
    let other_log = write_log(other.path());
    let audit = Audit::open(other.path(), None, None).unwrap();
    audit.record(&Raw(Event::Boot, json!({"version": "forged"})));
    drop(audit);
    let (code, out) = warden(&["audit", "verify", "--anchor", a, &other_log]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("REWRITTEN: line 13"), "{out}");
}

#[test]
fn lines_rotated_away_before_the_owner_read_them_fail_the_check() {
    use warden::guest::audit::Rotation;
    let dir = tempfile::tempdir().unwrap();
    let rotation = Rotation {
        max_bytes: 4096,
        max_files: 2,
    };
    let write = |n: usize| {
        let audit = Audit::open_with(dir.path(), None, None, rotation).unwrap();
        for i in 0..n {
            audit.record(&Raw(
                Event::Egress,
                json!({"allowed": false, "host": format!("h{i}.test")}),
            ));
        }
    };
    write(3);
    let anchor = dir.path().join("anchor.json");
    let a = anchor.to_str().unwrap();
    let folder = dir.path().to_str().unwrap();
    let (code, out) = warden(&["audit", "verify", "--anchor", a, folder]);
    assert_eq!(code, 0, "{out}");
    // A flood pushes what followed the anchor out of rotation.
    write(200);
    let (code, out) = warden(&["audit", "verify", "--anchor", a, folder]);
    assert_eq!(code, 1, "a gap after the anchor must fail: {out}");
    assert!(out.contains("GAP: lines 4 to"), "{out}");
    // The log says so itself, too.
    let all: String = warden::shared::audit_chain::log_files(dir.path())
        .unwrap()
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    assert!(all.contains("\"kind\":\"rotated_away\""), "{all}");
    // The owner may accept it, saying so; the anchor then moves on.
    let (code, out) = warden(&["audit", "verify", "--anchor", a, "--allow-gap", folder]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("with a gap (allowed)"), "{out}");
    let (code, out) = warden(&["audit", "verify", "--anchor", a, folder]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_reader_that_stops_early_ends_tail_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let audit = Audit::open(dir.path(), None, None).unwrap();
    for i in 0..5000 {
        audit.record(&Raw(
            Event::CommandStart,
            json!({"command": i, "argv": ["echo", "x".repeat(64)]}),
        ));
    }
    let log = audit.path().display().to_string();
    let out = Command::new("sh")
        .args([
            "-c",
            &format!(
                "'{}' audit tail -n 5000 '{log}' | head -n 1",
                env!("CARGO_BIN_EXE_warden")
            ),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "nothing said on a closed pipe: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

#[test]
fn a_flood_of_refusals_is_a_burst_and_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let audit = Audit::open(dir.path(), None, None).unwrap();
    for i in 0..5000 {
        audit.record_refusal(
            "proxy",
            &Raw(Event::Egress, json!({"host": format!("h{i}.test")})),
        );
    }
    audit.record(&Raw(Event::CommandStart, json!({"command": 1})));
    audit.sync();
    let text =
        std::fs::read_to_string(dir.path().join(warden::shared::audit_chain::FILE_NAME)).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let written = lines.iter().filter(|l| l["kind"] == "egress").count();
    assert_eq!(written, 20);
    let counted: u64 = lines
        .iter()
        .filter(|l| l["kind"] == "suppressed")
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    assert_eq!(written as u64 + counted, 5000, "nothing lost");
    assert!(lines.iter().any(|l| l["kind"] == "command_start"));
}
