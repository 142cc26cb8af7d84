//! What a command is given: shell's user and groups alone, an environment
//! built from nothing, a folder made as shell inside the workspace, its
//! limits, the first place before the OOM killer, and no descriptor of
//! warden's.

use super::{argv, boot, run, shell};
use crate::common::{self, privileged, text, Machine, Options, SHELL_UID};
use std::os::unix::fs::MetadataExt;
use warden::wire::client::{Client, ClientError};
use warden::wire::ErrorCode;

#[test]
fn commands_run_as_shell_with_only_shells_groups() {
    if !privileged("commands_run_as_shell_with_only_shells_groups") {
        return;
    }
    let m = boot();
    assert_eq!(text(&run(&m, argv(&["id", "-un"])).stdout), "shell\n");
    assert_eq!(
        text(&run(&m, argv(&["id", "-u"])).stdout),
        format!("{SHELL_UID}\n")
    );
    // shell's group, and the command's own lifetime tag (a group owning
    // nothing; see src/guest/process/lifetime.rs).
    let groups = text(&run(&m, argv(&["id", "-G"])).stdout);
    let groups: Vec<u32> = groups
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert_eq!(groups[0], SHELL_UID);
    let tags = warden::guest::process::lifetime::TAG_BASE
        ..warden::guest::process::lifetime::TAG_BASE + warden::guest::process::lifetime::TAG_COUNT;
    assert!(tags.contains(&groups[1]), "{groups:?}");
    let status = run(
        &m,
        argv(&["grep", "-E", "^(Uid|Gid|NoNewPrivs)", "/proc/self/status"]),
    );
    let s = text(&status.stdout);
    assert!(
        s.contains(&format!(
            "Uid:\t{SHELL_UID}\t{SHELL_UID}\t{SHELL_UID}\t{SHELL_UID}"
        )),
        "{s}"
    );
    assert!(s.contains("NoNewPrivs:\t1"), "{s}");
}

#[test]
fn the_environment_is_built_from_nothing() {
    if !privileged("the_environment_is_built_from_nothing") {
        return;
    }
    let canary = "warden-canary-9f1c";
    let m = Machine::boot(Options {
        main: vec!["sleep".into(), "100".into()],
        env: vec![("SECRET_TOKEN".into(), canary.into())],
        ..Default::default()
    });
    let mut req = argv(&["env"]);
    req.env.insert("EXTRA".into(), "given".into());
    let env = text(&run(&m, req).stdout);
    // The proxy's variables and those naming the machine's bundle (which
    // trusts its own authority), exactly as warden sets them, and nothing
    // else.
    let bundle = warden::guest::net::opened::trust::env(std::path::Path::new(
        "/etc/ssl/certs/ca-certificates.crt",
    ));
    let proxy: Vec<String> = warden::guest::net::proxy_env(3128)
        .iter()
        .chain(&bundle)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for line in &proxy {
        assert!(env.lines().any(|l| l == line), "{line} missing: {env}");
    }
    let mut names: Vec<&str> = env
        .lines()
        .filter(|l| !proxy.iter().any(|p| p == l))
        .map(|l| l.split('=').next().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["EXTRA", "HOME", "LANG", "LOGNAME", "PATH", "USER"],
        "{env}"
    );
    assert!(
        env.contains(&format!("HOME={}\n", m.shell_home.display())),
        "{env}"
    );
    assert!(env.contains("EXTRA=given\n"));
    assert!(!env.contains(canary));
    // The main process (the trusted runtime) does get warden's environment,
    // and nothing a command can read shows it.
    let status = m.client().status().unwrap();
    let main_pid = status.main.unwrap().pid;
    let environ = run(
        &m,
        shell(&format!("cat /proc/{main_pid}/environ /proc/1/environ")),
    );
    assert!(!text(&environ.stdout).contains(canary));
    assert_ne!(
        environ.exit.status, 0,
        "reading another user's environ must fail"
    );
}

#[test]
fn folders_are_made_as_shell_inside_the_workspace_and_escapes_are_refused() {
    if !privileged("folders_are_made_as_shell_inside_the_workspace_and_escapes_are_refused") {
        return;
    }
    let m = boot();
    let workspace = m.home.join("workspace");
    let mut req = argv(&["pwd"]);
    req.folder = Some("proj/sub".into());
    let out = run(&m, req);
    assert_eq!(
        text(&out.stdout).trim(),
        workspace.join("proj/sub").display().to_string()
    );
    for dir in ["proj", "proj/sub"] {
        let meta = std::fs::metadata(workspace.join(dir)).unwrap();
        assert_eq!(
            (meta.uid(), meta.mode() & 0o7777),
            (SHELL_UID, 0o755),
            "{dir}"
        );
    }
    // Without a folder: shell's home.
    assert_eq!(
        text(&run(&m, argv(&["pwd"])).stdout).trim(),
        m.shell_home.display().to_string()
    );
    // Names that leave the workspace never reach a process.
    for bad in ["../x", "/etc", "a/../../b", "./a", "a//b", ""] {
        let mut req = argv(&["true"]);
        req.folder = Some(bad.into());
        match m.client().run(req) {
            Err(ClientError::Warden {
                code: ErrorCode::BadRequest,
                message,
            }) => {
                assert!(message.contains("folder"), "{bad}: {message}")
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert!(!m.home.join("x").exists() && !m.home.join("b").exists());
    // A symlink planted in the workspace is followed only with shell's
    // rights: it cannot make anything in data/.
    std::os::unix::fs::symlink(m.home.join("data"), workspace.join("evil")).unwrap();
    let mut req = argv(&["true"]);
    req.folder = Some("evil/planted".into());
    let out = run(&m, req);
    assert_eq!(out.exit.status, 125, "{:?}", out.exit);
    assert!(
        out.exit
            .error
            .as_deref()
            .unwrap_or("")
            .contains("working folder"),
        "{:?}",
        out.exit
    );
    assert!(!m.home.join("data/planted").exists());
}

#[test]
fn rlimits_reach_the_command() {
    if !privileged("rlimits_reach_the_command") {
        return;
    }
    let m = boot();
    let mut req = argv(&["cat", "/proc/self/limits"]);
    req.limits = Some(warden::wire::Limits {
        open_files: Some(64),
        processes: Some(77),
        file_size_bytes: Some(1 << 20),
        ..Default::default()
    });
    let limits = text(&run(&m, req).stdout);
    // (soft, hard) as the kernel holds them; cores are always off.
    for (name, want) in [
        ("Max open files", "64"),
        ("Max processes", "77"),
        ("Max file size", "1048576"),
        ("Max core file size", "0"),
    ] {
        let line = limits.lines().find(|l| l.starts_with(name)).expect(name);
        let values: Vec<&str> = line[name.len()..].split_whitespace().take(2).collect();
        assert_eq!(values, [want, want], "{line}");
    }
}

#[test]
fn huge_values_are_taken_as_they_are_without_overflow() {
    if !privileged("huge_values_are_taken_as_they_are_without_overflow") {
        return;
    }
    let m = boot();
    let mut req = argv(&["echo", "fine"]);
    req.timeout_ms = Some(u64::MAX);
    req.limits = Some(warden::wire::Limits {
        cpu_seconds: Some(u64::MAX),
        address_space_bytes: Some(u64::MAX),
        processes: Some(u64::MAX),
        output_bytes: Some(u64::MAX),
        file_size_bytes: Some(u64::MAX),
        open_files: Some(u64::MAX),
        timeout_ms: Some(u64::MAX),
        memory_bytes: Some(u64::MAX),
        cpu_percent: Some(u64::MAX),
    });
    let out = run(&m, req);
    assert_eq!(
        (out.exit.status, text(&out.stdout)),
        (0, "fine\n".to_string()),
        "{:?}",
        out.exit
    );
}

/// The OOM killer takes a command before the runtime and warden.
#[test]
fn commands_are_first_for_the_oom_killer() {
    if !privileged("commands_are_first_for_the_oom_killer") {
        return;
    }
    let m = boot();
    let out = run(&m, argv(&["cat", "/proc/self/oom_score_adj"]));
    assert_eq!(text(&out.stdout), "1000\n");
    // warden goes last where it may lower its score (CAP_SYS_RESOURCE);
    // status says which it is, as measured.
    let warden =
        std::fs::read_to_string(format!("/proc/{}/oom_score_adj", m.warden_pid())).unwrap();
    // The command's child shared warden's memory until exec: only
    // CLONE_VFORK keeps the kernel from giving warden its score too.
    assert_ne!(warden.trim(), "1000", "warden took its command's score");
    let status = m.client().status().unwrap();
    let layer = common::layer(&status, "oom_order");
    // The commands' part is proven by the probe, not assumed.
    assert!(
        layer
            .detail
            .contains("shell's commands first (oom_score_adj 1000, read back by the probe)"),
        "{layer:?}"
    );
    match warden.trim() {
        "-1000" => assert!(
            layer.holds && layer.detail.contains("last (-1000)"),
            "{layer:?}"
        ),
        other => {
            assert!(!layer.holds, "{layer:?}");
            assert!(
                layer.detail.contains(&format!("stay at {other}")),
                "{layer:?}"
            );
            assert!(layer.detail.contains("CAP_SYS_RESOURCE"), "{layer:?}");
        }
    }
}

/// A command gets its stdio and nothing else of warden's, however many
/// descriptors warden holds: with 200 connections open, each command's
/// shell lists its own descriptors, and its output still ends (no second
/// reference to its pipe kept anywhere).
#[test]
fn a_command_inherits_no_descriptor_of_wardens_however_many_it_holds() {
    if !privileged("a_command_inherits_no_descriptor_of_wardens_however_many_it_holds") {
        return;
    }
    let m = Machine::boot(Options::default());
    let held: Vec<Client> = (0..200).map(|_| m.client()).collect();
    let fds = std::fs::read_dir(format!("/proc/{}/fd", m.warden_pid()))
        .unwrap()
        .count();
    assert!(fds > 200, "warden holds only {fds} descriptors");
    let mut client = m.client();
    for _ in 0..3 {
        let out = client.run(shell("ls /proc/$$/fd; true")).unwrap();
        assert_eq!(out.exit.status, 0, "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "0\n1\n2\n", "warden holds {fds}");
    }
    drop(held);
}
