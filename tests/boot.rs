//! Boot: the users and the layout are made, fixed where wrong, and refused
//! where they cannot be fixed, each with one clear line.

mod common;

use common::{privileged, Machine, Options, RUNTIME_UID, SHELL_UID};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

fn mode_owner(path: &std::path::Path) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

#[test]
fn the_layout_has_the_designed_modes_and_boot_fixes_what_drifted() {
    if !privileged("the_layout_has_the_designed_modes_and_boot_fixes_what_drifted") {
        return;
    }
    let m = Machine::boot(Options::default());
    let h = m.home.clone();
    let (r, s) = (RUNTIME_UID, SHELL_UID);
    let want = [
        (h.clone(), (0o711, r, r)),
        (h.join(".env"), (0o600, r, r)),
        (h.join("data"), (0o700, r, r)),
        (h.join("workspace"), (0o1770, r, s)),
        (h.join("workspace/routines"), (0o755, r, r)),
        (m.shell_home.clone(), (0o700, s, s)),
        (h.join("data/audit"), (0o750, 0, r)),
    ];
    for (path, expected) in &want {
        assert_eq!(mode_owner(path), *expected, "{}", path.display());
    }
    let passwd = std::fs::read_to_string(m.root().join("etc/passwd")).unwrap();
    assert!(passwd.contains(&format!("runtime:x:{r}:{r}:")), "{passwd}");
    assert!(passwd.contains(&format!("shell:x:{s}:{s}:")), "{passwd}");
    let first_boot = m.audit_kinds("boot");
    assert!(!first_boot[0]["layout_changes"]
        .as_array()
        .unwrap()
        .is_empty());

    // Drift behind warden's back, then boot again on the same folder.
    let shell_home = m.shell_home.clone();
    let dir = m.stop();
    std::fs::set_permissions(h.join("data"), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(h.join(".env"), PermissionsExt::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(h.join("workspace/routines"), Some(s), Some(s)).unwrap();
    std::fs::set_permissions(h.join("workspace"), PermissionsExt::from_mode(0o777)).unwrap();
    let m = Machine::start_in(dir, Options::default());
    m.wait_ready();
    for (path, expected) in &want {
        assert_eq!(
            mode_owner(path),
            *expected,
            "{} after a second boot",
            path.display()
        );
    }
    let boots = m.audit_kinds("boot");
    assert_eq!(boots.len(), 2, "the audit log continues across boots");
    let changes = boots[1]["layout_changes"].to_string();
    for fixed in [
        "mode of",
        "/data was 0755",
        "/.env was 0644",
        "routines was 2001:2001",
        "workspace was 0777",
    ] {
        assert!(changes.contains(fixed), "{fixed} not in {changes}");
    }
    assert_eq!(changes.matches("now").count(), 4, "{changes}");
    let passwd_again = std::fs::read_to_string(m.root().join("etc/passwd")).unwrap();
    assert_eq!(passwd, passwd_again, "users are added once");
    assert_eq!(m.shell_home, shell_home);

    // A third boot with nothing wrong changes nothing.
    let dir = m.stop();
    let m = Machine::start_in(dir, Options::default());
    m.wait_ready();
    assert_eq!(m.audit_kinds("boot")[2]["layout_changes"], json!([]));
}

/// Boots a machine that must refuse; returns its one refusal line and its
/// folder.
fn refused(dir: tempfile::TempDir, opts: Options) -> (String, tempfile::TempDir) {
    let mut m = Machine::start_in(dir, opts);
    assert_eq!(m.wait(LIMIT), 1, "{}", m.log());
    let log = m.log();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("warden: refusing to start: "))
        .collect();
    assert_eq!(refusals.len(), 1, "one clear line: {log}");
    (refusals[0].to_string(), m.stop())
}

#[test]
fn conflicting_users_are_refused_not_rewritten() {
    if !privileged("conflicting_users_are_refused_not_rewritten") {
        return;
    }
    let cases = [
        (
            "runtime:x:3000:3000::/x:/bin/sh\n",
            "user runtime exists as 3000:3000",
        ),
        (
            "someone:x:2001:2001::/:/bin/sh\n",
            "uid 2001 is taken by user someone",
        ),
    ];
    for (extra, want) in cases {
        let dir = Machine::folder(extra);
        let passwd_before = std::fs::read_to_string(dir.path().join("etc/passwd")).unwrap();
        let (line, dir) = refused(dir, Options::default());
        assert!(line.contains(want), "{line}");
        let passwd_after = std::fs::read_to_string(dir.path().join("etc/passwd")).unwrap();
        assert_eq!(passwd_before, passwd_after, "a conflict changes nothing");
    }
}

#[test]
fn a_symlink_or_wrong_type_in_the_layout_is_refused() {
    if !privileged("a_symlink_or_wrong_type_in_the_layout_is_refused") {
        return;
    }
    let dir = Machine::folder("");
    let home = dir.path().join("home/runtime");
    std::fs::create_dir_all(&home).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("target");
    std::fs::write(&target, "precious").unwrap();
    std::fs::set_permissions(&target, PermissionsExt::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink(&target, home.join(".env")).unwrap();
    let (line, _) = refused(dir, Options::default());
    assert!(line.contains(".env: is a symlink"), "{line}");
    assert_eq!(
        mode_owner(&target),
        (0o640, 0, 0),
        "the link's target was not touched"
    );

    let dir = Machine::folder("");
    let home = dir.path().join("home/runtime");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("data"), "a file").unwrap();
    let (line, _) = refused(dir, Options::default());
    assert!(
        line.contains("data: exists but is not a directory"),
        "{line}"
    );
}

#[test]
fn a_broken_config_is_refused_naming_the_file_and_field() {
    if !privileged("a_broken_config_is_refused_naming_the_file_and_field") {
        return;
    }
    let cases = [
        (json!({"grace_period_ms": "soon"}), "invalid type"),
        (json!({"shel": {}}), "unknown field `shel`"),
        (
            json!({"socket": "relative.sock"}),
            "field `socket`: must be an absolute path",
        ),
    ];
    for (config, want) in cases {
        let (line, _) = refused(
            Machine::folder(""),
            Options {
                config,
                ..Default::default()
            },
        );
        assert!(
            line.contains("machine.json") && line.contains(want),
            "{line}"
        );
    }
}

/// A foreign image's /etc/group that puts shell in a group of the
/// runtime's (which opens the API socket's 0660 and the audit log's group
/// read), or that names a group in the command tags' range, is refused
/// with one line, and nothing is appended.
#[test]
fn an_image_whose_groups_join_shell_to_the_runtime_is_refused() {
    if !privileged("an_image_whose_groups_join_shell_to_the_runtime_is_refused") {
        return;
    }
    let cases = [
        (
            format!("runtime:x:{RUNTIME_UID}:shell\n"),
            format!("users: shell is in group runtime ({RUNTIME_UID}), which runtime is in too"),
        ),
        (
            "agents:x:3000:runtime,shell\n".to_string(),
            "users: shell is in group agents (3000), which runtime is in too".to_string(),
        ),
        (
            "tagged:x:60005:\n".to_string(),
            "users: /etc/group names tagged (60005) inside the command tags' range 60000-63999"
                .to_string(),
        ),
    ];
    for (extra, want) in cases {
        let dir = Machine::folder("");
        let group = dir.path().join("etc/group");
        let text = std::fs::read_to_string(&group).unwrap() + &extra;
        std::fs::write(&group, &text).unwrap();
        let (line, dir) = refused(dir, Options::default());
        assert!(line.contains(&want), "{line}");
        let after = std::fs::read_to_string(dir.path().join("etc/group")).unwrap();
        assert_eq!(after, text, "a refusal changes nothing");
    }
}
