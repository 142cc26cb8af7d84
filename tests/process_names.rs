//! A process of shell's named in bytes that are not UTF-8 (the kernel
//! writes its name as it is in `/proc/PID/status`): it still ends with
//! its command, is counted by `status`, ends with `stop_shell`, and names
//! its command to the egress proxy and to the connect gate. Each run as shell through warden's
//! API on a real warden; the process is looked for from the host's side.

mod common;

use common::{printed, privileged, Machine, Options};
use std::time::{Duration, Instant};
use warden::wire::RunRequest;

/// Starts, in a new session, a copy of sleep named "\377", with `marker`
/// as its last argument.
fn hider(marker: u32) -> String {
    format!(
        "n=$(printf '\\377'); cp /bin/sleep \"$HOME/$n\"; \
         setsid \"$HOME/$n\" {marker} </dev/null >/dev/null 2>&1 & \
         sleep 0.2; echo started"
    )
}

fn sh(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.into()),
        ..Default::default()
    }
}

/// The host's pids of live processes whose last argument is `marker`.
fn alive(marker: u32) -> Vec<i32> {
    let want = marker.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            // A zombie's command line is empty: it is not counted.
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let last = cmdline.strip_suffix(b"\0")?.rsplit(|b| *b == 0).next()?;
            (last == want.as_bytes()).then_some(pid)
        })
        .collect()
}

/// Waits up to 5 s for the processes with this marker to be `n`.
fn wait_for(marker: u32, n: usize) -> usize {
    let count = || alive(marker).len();
    let deadline = Instant::now() + Duration::from_secs(5);
    while count() != n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    count()
}

#[test]
fn a_process_whose_name_is_not_utf8_ends_with_its_command() {
    if !privileged("a_process_whose_name_is_not_utf8_ends_with_its_command") {
        return;
    }
    let m = Machine::boot_quiet();
    let o = m.client().run(sh(&hider(3931))).unwrap();
    assert_eq!(printed(&o), "started\n");
    assert_eq!(
        wait_for(3931, 0),
        0,
        "outlived its command: {:?}",
        alive(3931)
    );
    let end = m.audit_kinds("command_end");
    let end = end.last().unwrap();
    assert_eq!(end["left_behind_killed"], 1, "{end}");
    assert_eq!(end["left_behind_surviving"], 0, "{end}");
}

#[test]
fn a_kept_process_whose_name_is_not_utf8_is_counted_and_stopped() {
    if !privileged("a_kept_process_whose_name_is_not_utf8_is_counted_and_stopped") {
        return;
    }
    let m = Machine::boot_quiet();
    let o = m
        .client()
        .run(RunRequest {
            keep_background: true,
            ..sh(&hider(3941))
        })
        .unwrap();
    assert_eq!(printed(&o), "started\n");
    assert_eq!(wait_for(3941, 1), 1, "it did not start");
    let status = m.client().status().unwrap();
    assert_eq!(
        status.shell_process_count,
        Some(1),
        "{:?}",
        status.shell_processes
    );
    let (signalled, left) = m.client().stop_shell("KILL").unwrap();
    assert_eq!((signalled, left), (1, 0));
    assert_eq!(wait_for(3941, 0), 0, "stop_shell left {:?}", alive(3941));
    let o = m.client().run(sh("echo fine")).unwrap();
    assert_eq!(printed(&o), "fine\n");
}

/// A connection to the proxy from a process named "\377" still names its
/// command on the egress line. The process (a copy of bash) holds its
/// connection a second after the proxy's answer (reading a FIFO it holds
/// open itself), so that it is there to be found.
#[test]
fn a_connection_from_a_process_whose_name_is_not_utf8_names_its_command() {
    if !privileged("a_connection_from_a_process_whose_name_is_not_utf8_names_its_command") {
        return;
    }
    let m = Machine::boot_quiet();
    let o = m
        .client()
        .run(sh(
            r#"n=$(printf '\377'); cp "$(command -v bash)" "$HOME/$n"; mkfifo "$HOME/hold"; "$HOME/$n" -c '
            p=${http_proxy#http://}; exec 3<>"/dev/tcp/${p%:*}/${p##*:}"
            printf "GET http://not-listed.test/x HTTP/1.1\r\nHost: not-listed.test\r\n\r\n" >&3
            read -r -t 5 answer <&3; read -r -t 1 <>"$HOME/hold"; echo "$answer"'"#,
        ))
        .unwrap();
    assert!(printed(&o).contains(" 403 "), "{}", printed(&o));
    let command = m.audit_kinds("command_start").last().unwrap()["command"].clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let lines = m.audit_kinds("egress");
        if let Some(l) = lines.into_iter().find(|l| l["host"] == "not-listed.test") {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "no egress line for not-listed.test"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(line["allowed"], false, "{line}");
    assert_eq!(line["origin"]["command"], command, "{line}");
    assert!(line["origin"]["argv_sha256"].is_string(), "{line}");
}

/// Under the connect gate (warden without CAP_NET_ADMIN), a direct
/// connect from a process named "\377" is refused, and its line names the
/// command (read from the caller's status while it waits).
#[test]
fn a_refused_connect_from_a_process_whose_name_is_not_utf8_names_its_command() {
    if !privileged("a_refused_connect_from_a_process_whose_name_is_not_utf8_names_its_command") {
        return;
    }
    // A namespace of the test's own with loopback up (warden without
    // CAP_NET_ADMIN cannot bring it up, and its proxy listens there).
    let ns = Netns::new();
    let m = Machine::boot(Options {
        drop_caps: vec!["net_admin".into()],
        netns: Some(ns.0.clone()),
        ..Default::default()
    });
    let status = m.client().status().unwrap();
    let fw = common::layer(&status, "firewall");
    assert!(fw.detail.contains("connect gate"), "{fw:?}");
    let o = m
        .client()
        .run(sh(
            r#"n=$(printf '\377'); cp "$(command -v bash)" "$HOME/$n"; "$HOME/$n" -c '
            exec 3<>/dev/tcp/192.0.2.7/80 && echo connected'; echo done"#,
        ))
        .unwrap();
    assert!(!printed(&o).contains("connected"), "{}", printed(&o));
    let command = m.audit_kinds("command_start").last().unwrap()["command"].clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let lines = m.audit_kinds("connect_refused");
        if let Some(l) = lines.into_iter().find(|l| l["address"] == "192.0.2.7:80") {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "no connect_refused line for 192.0.2.7:80"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(line["command"], command, "{line}");
    assert!(line["argv_sha256"].is_string(), "{line}");
}

/// A network namespace with only loopback, up; deleted when dropped.
/// (Named as the internet's are, so that one left by a killed test is
/// deleted by the next.)
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("wdn-m-{:x}-names", std::process::id());
        let ip = |args: &[&str]| {
            let ok = std::process::Command::new("ip")
                .args(args)
                .status()
                .unwrap();
            assert!(ok.success(), "ip {args:?}");
        };
        ip(&["netns", "add", &name]);
        let ns = Netns(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}
