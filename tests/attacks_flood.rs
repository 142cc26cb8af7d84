//! The attack suite's floods: what a hostile `shell` (or anyone who reaches
//! a socket) sends in bulk to spend warden's memory and descriptors or to
//! push the owner's evidence out of the audit log's rotation. Each is run
//! against a real warden, PID 1 of its own namespaces, and bounded in
//! count and time.

mod common;

use common::{printed, privileged, Machine, Options, SHELL_UID};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden::wire::client::Client;
use warden::wire::RunRequest;

const KEY: &str = "flood-key-0123456789abcdef0123456789abcdef";

fn sh(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.into()),
        ..Default::default()
    }
}

/// A machine with a host socket and key, as the launcher makes one.
fn keyed(extra: Value) -> (Machine, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = Machine::folder("");
    let key = dir.path().join("key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(dir.path().join("host")).unwrap();
    let host = dir.path().join("host/api.sock");
    let mut config = json!({"host_socket": host, "key_file": key});
    if let (Value::Object(c), Value::Object(e)) = (&mut config, extra) {
        c.extend(e);
    }
    let m = Machine::start_in(
        dir,
        Options {
            config,
            ..Default::default()
        },
    );
    m.wait_ready();
    (m, host)
}

/// warden's resident memory (KiB) and open descriptors, seen from the host.
fn footprint(pid: i32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (rss, fds)
}

/// Every line of the log in `dir` (all its files, in order).
fn lines_in(dir: &Path) -> Vec<Value> {
    warden::shared::audit_chain::log_files(dir)
        .unwrap()
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<Value>>()
        })
        .collect()
}

/// Lines written whole of `kind`, and the refusals of that kind counted
/// into `suppressed` lines.
fn written_and_counted(lines: &[Value], kind: &str, pick: impl Fn(&Value) -> bool) -> (u64, u64) {
    let written = lines
        .iter()
        .filter(|l| l["kind"] == kind && pick(l))
        .count() as u64;
    let counted = lines
        .iter()
        .filter(|l| l["kind"] == "suppressed" && l["of"] == kind)
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    (written, counted)
}

/// 64 of the runtime's clients connect at once and only then say hello,
/// as parallel `warden run`s do on a busy machine: on the machine's own
/// socket every peer was vetted by its uid, so none is shed as "waiting
/// to be let in" (that bound is for the host's doors, where the key
/// decides), and every one runs its command.
#[test]
fn a_burst_on_the_machines_own_socket_sheds_none_of_its_peers() {
    if !privileged("a_burst_on_the_machines_own_socket_sheds_none_of_its_peers") {
        return;
    }
    let (m, host) = keyed(json!({}));
    let burst: Vec<UnixStream> = (0..64)
        .map(|_| UnixStream::connect(&m.socket).unwrap())
        .collect();
    for (i, stream) in burst.into_iter().enumerate() {
        let mut client =
            Client::over(stream, None).unwrap_or_else(|e| panic!("client {i} of 64: {e}"));
        let out = client.run(sh("true")).unwrap();
        assert_eq!(out.exit.status, 0, "client {i} of 64");
    }
    // The host's door still sheds the oldest of more than 32 strangers:
    // warden says why and closes it.
    let mut strangers: Vec<UnixStream> = (0..40)
        .map(|_| UnixStream::connect(&host).unwrap())
        .collect();
    let oldest = &mut strangers[0];
    oldest
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut said = Vec::new();
    let _ = oldest.read_to_end(&mut said);
    let said = String::from_utf8_lossy(&said);
    assert!(said.contains("waiting to be let in"), "{said}");
}

#[test]
fn shell_cannot_reach_the_hosts_way_in_nor_spend_wardens_memory() {
    if !privileged("shell_cannot_reach_the_hosts_way_in_nor_spend_wardens_memory") {
        return;
    }
    raise_the_descriptor_limit();
    let (m, host) = keyed(json!({}));
    let pid = m.warden_pid();
    let host_path = host.display().to_string();
    shell_cannot_connect_to_the_hosts_socket(&m, &host_path);

    // 2. Where the mode cannot tell (keep-id makes the owner shell), the
    //    API refuses a peer inside the machine before reading a byte.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (rss_before, _) = footprint(pid);
    let refused = a_flood_from_inside_is_refused(&m, &host_path);
    connections_held_open_inside_take_no_place_at_the_door(&m, &host, &host_path);
    strangers_outside_get_nothing_allocated(&m, &host, pid, rss_before);
    the_log_names_shell_as_the_one_refused(m, refused);
}

/// This test holds 2000 connections itself.
fn raise_the_descriptor_limit() {
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        hard.min(8192),
        hard,
    )
    .unwrap();
}

/// The host's socket is the owner's: shell cannot even connect.
fn shell_cannot_connect_to_the_hosts_socket(m: &Machine, host_path: &str) {
    let probe = format!(
        "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' {host_path}"
    );
    let o = m.client().run(sh(&probe)).unwrap();
    assert_ne!(o.exit.status, 0, "shell connected: {}", printed(&o));
    assert!(printed(&o).contains("PermissionError"), "{}", printed(&o));
}

/// A flood of 1 MiB announcements from shell, 3000 connections.
fn a_flood_from_inside_is_refused(m: &Machine, host_path: &str) -> u64 {
    let flood = format!(
        r#"python3 - {host_path} <<'EOF'
import socket, sys, struct, time
refused = 0
end = time.time() + 20
for i in range(3000):
    if time.time() > end: break
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    try:
        s.sendall(struct.pack(">BII", 1, 0, 1 << 20))
        if b"inside the machine" in s.recv(4096): refused += 1
    except OSError:
        pass
    s.close()
print("refused", refused)
EOF"#
    );
    let o = m.client().run(sh(&flood)).unwrap();
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    let refused: u64 = String::from_utf8_lossy(&o.stdout)
        .trim()
        .trim_start_matches("refused ")
        .parse()
        .unwrap();
    assert!(refused >= 2900, "{}", printed(&o));
    refused
}

/// 600 connections held open at once, in parallel, take no
/// place at the door: the owner still gets in meanwhile.
fn connections_held_open_inside_take_no_place_at_the_door(
    m: &Machine,
    host: &Path,
    host_path: &str,
) {
    //    ... and 600 connections held open at once, in parallel, take no
    //    place at the door: the owner still gets in meanwhile.
    let hold = format!(
        r#"python3 - {host_path} <<'EOF'
import socket, sys, time
held = []
for i in range(600):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1])
        held.append(s)
    except OSError:
        pass
print("holding", len(held), flush=True)
time.sleep(3)
EOF"#
    );
    let holder = {
        let socket = m.socket.clone();
        std::thread::spawn(move || Client::connect(&socket).unwrap().run(sh(&hold)).unwrap())
    };
    std::thread::sleep(Duration::from_millis(1500));
    let mut owner = Client::connect_keyed(host, Some(KEY), None).unwrap();
    let o = owner.run(sh("echo owner got in")).unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "owner got in");
    drop(owner);
    let held = holder.join().unwrap();
    assert!(printed(&held).contains("holding"), "{}", printed(&held));
}

/// Strangers outside the machine (this test, as the host) announce
/// 1 MiB frames before any key: nothing is allocated for them.
fn strangers_outside_get_nothing_allocated(m: &Machine, host: &Path, pid: i32, rss_before: u64) {
    let mut held: Vec<UnixStream> = Vec::new();
    for _ in 0..1000 {
        let mut s = UnixStream::connect(host).unwrap();
        let _ = s.write_all(&[1, 0, 0, 0, 0, 0, 0x10, 0, 0]);
        held.push(s);
    }
    // ... and 1000 that say nothing at all, held open.
    for _ in 0..1000 {
        held.push(UnixStream::connect(host).unwrap());
    }
    std::thread::sleep(Duration::from_millis(300));
    let (rss_during, fds_during) = footprint(pid);
    eprintln!(
        "warden during the flood: {rss_during} KiB resident (before {rss_before}), {fds_during} descriptors"
    );
    assert!(
        rss_during < rss_before + 64 * 1024,
        "warden grew from {rss_before} to {rss_during} KiB"
    );
    assert!(fds_during < 400, "warden holds {fds_during} descriptors");
    // The owner still gets in, and commands still start.
    let mut owner = Client::connect_keyed(host, Some(KEY), None).unwrap();
    let o = owner.run(sh("echo still here")).unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "still here");
    let o = m.client().run(sh("true")).unwrap();
    assert_eq!(o.exit.status, 0);
    drop(held);
}

/// The log names shell as the one refused, as a burst and a count.
fn the_log_names_shell_as_the_one_refused(m: Machine, refused: u64) {
    let audit_dir = m.home.join("data/audit");
    let _kept = m.stop();
    let lines = lines_in(&audit_dir);
    let (written, counted) =
        written_and_counted(&lines, "connection_refused", |l| l["uid"] == SHELL_UID);
    eprintln!("refusals of shell: {written} lines, {counted} counted");
    assert!(written <= 20, "{written} lines for one flood");
    assert!(written + counted >= refused, "refusals lost");
    assert!(lines
        .iter()
        .filter(|l| l["kind"] == "connection_refused")
        .all(|l| l["uid"] != 0 || l["door"] != "host" || l["pid"] == 0));
}

#[test]
fn a_refusal_flood_through_the_proxy_leaves_the_owners_evidence_in_place() {
    if !privileged("a_refusal_flood_through_the_proxy_leaves_the_owners_evidence_in_place") {
        return;
    }
    // A small log: 2 files of 64 KiB, so that a flood of unthrottled lines
    // would rotate everything away within a second.
    let (m, _) = keyed(json!({"audit_max_bytes": 65536, "audit_max_files": 2}));
    let audit_dir = m.home.join("data/audit");
    let o = m.client().run(sh("echo evidence-before")).unwrap();
    assert_eq!(o.exit.status, 0);
    let anchor = m.root().join("anchor.json");
    let verify = || {
        std::process::Command::new(common::warden_bin())
            .args(["audit", "verify", "--anchor"])
            .arg(&anchor)
            .arg(&audit_dir)
            .output()
            .unwrap()
    };
    assert!(verify().status.success());
    // From the first refusal on: the windows the throttle's lines span.
    let flooding = std::time::Instant::now();
    // A Content-Length with a sign is refused as such, not forwarded.
    let smuggle = r#"python3 - <<'EOF'
import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"POST http://example.com/ HTTP/1.1\r\nHost: example.com\r\nContent-Length: +5\r\n\r\nhello")
print(s.recv(200).decode().splitlines()[0])
EOF"#;
    let o = m.client().run(sh(smuggle)).unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("HTTP/1.1 400"),
        "{}",
        printed(&o)
    );
    // 5000 CONNECTs to an unlisted 253-character name, within 20 s.
    let flood = r#"python3 - <<'EOF'
import socket, time
name = ".".join(["a" * 62] * 4)[:253]
done = 0
end = time.time() + 20
while done < 5000 and time.time() < end:
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (name, name)).encode())
    s.recv(4096)
    s.close()
    done += 1
print(done)
EOF"#;
    let o = m.client().run(sh(flood)).unwrap();
    let flooded = flooding.elapsed();
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    let sent: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert!(sent >= 1000, "{}", printed(&o));
    let o = m.client().run(sh("echo evidence-after")).unwrap();
    assert_eq!(o.exit.status, 0);
    // The line verified before the flood is still there: nothing the owner
    // had not read was rotated away.
    let out = verify();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("still there"), "{said}");
    let _kept = m.stop();
    let lines = lines_in(&audit_dir);
    let (written, counted) = written_and_counted(&lines, "egress", |l| l["allowed"] == false);
    eprintln!("{sent} refused CONNECTs in {flooded:?}: {written} lines, {counted} counted");
    // 20 lines whole per 10 s window (a slow host's flood spans more than
    // one), and the smuggled request's.
    let windows = flooded.as_secs() / 10 + 1;
    assert!(
        written <= 20 * windows + 1,
        "{written} egress lines in {windows} windows"
    );
    assert!(
        written + counted >= sent,
        "refusals lost: {written} + {counted} < {sent}"
    );
    for l in &lines {
        assert!(l.to_string().len() < 8 * 1024, "a long line: {l}");
    }
}

/// Lines naming `host` as refused: `egress` lines written whole, and
/// `suppressed` counts of them that keep it among their examples.
fn lines_naming(lines: &[Value], host: &str) -> usize {
    lines
        .iter()
        .filter(|l| {
            let whole = l["kind"] == "egress" && l["allowed"] == false && l["host"] == host;
            let samples = l["samples"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            let counted =
                l["kind"] == "suppressed" && samples.iter().any(|s| s == host || s["what"] == host);
            whole || counted
        })
        .count()
}

/// One CONNECT through the proxy for `host`, its status line printed.
fn connect_script(host: &str) -> String {
    format!(
        r#"python3 - <<'EOF'
import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n")
print(s.recv(200).decode().splitlines()[0])
EOF"#
    )
}

/// shell floods the proxy with refusals (20 of one junk host, then 8
/// distinct ones to fill a count's examples, three rounds a second) and
/// tries its real target among them; meanwhile the runtime is refused a
/// host, and another command tries another target. Each is named in a
/// line: a flood of one command's hides no other's, the runtime's are
/// written whole, and every distinct host is kept with its count.
#[test]
fn a_sample_fill_flood_hides_no_refused_host() {
    if !privileged("a_sample_fill_flood_hides_no_refused_host") {
        return;
    }
    let m = boot_a_runtime_refused_once_told_to_go();
    let flood = r#"python3 - <<'EOF'
import os, socket, time
def refuse(host):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host, host)).encode())
    s.recv(4096)
    s.close()
start = time.time()
rounds = 0
stop = os.path.expanduser("~/stop")
while time.time() < start + 30 and not os.path.exists(stop):
    for i in range(20):
        refuse("junk.example")
    for i in range(8):
        refuse("fill-%d.example" % i)
    rounds += 1
    time.sleep(max(0, start + rounds / 3 - time.time()))
refuse("exfil-same.example")
print(rounds)
EOF"#;
    let flooding = {
        let socket = m.socket.clone();
        std::thread::spawn(move || Client::connect(&socket).unwrap().run(sh(flood)).unwrap())
    };
    the_runtime_and_another_command_are_refused_meanwhile(&m);
    std::fs::write(m.shell_home.join("stop"), "").unwrap();
    let o = flooding.join().unwrap();
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    let rounds: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    a_line_names_every_refused_host(m, rounds);
}

/// A machine whose runtime, once `go` is in its home, is refused
/// runtime-refused.example and says so in done.txt.
fn boot_a_runtime_refused_once_told_to_go() -> Machine {
    let runtime = format!(
        r#"for i in $(seq 600); do [ -e "$HOME/go" ] && break; sleep 0.1; done
exec > "$HOME/said.txt" 2>&1
{}
mv "$HOME/said.txt" "$HOME/done.txt"
sleep 1000"#,
        connect_script("runtime-refused.example")
    );
    Machine::boot(Options {
        main: vec!["bash".into(), "-c".into(), runtime],
        ..Default::default()
    })
}

/// Once the burst is written and the flood fills the examples (the
/// first refusals wait for the default host list), the runtime is
/// refused a host, and another command tries its target.
fn the_runtime_and_another_command_are_refused_meanwhile(m: &Machine) {
    for _ in 0..300 {
        if m.audit_kinds("egress").len() >= 20 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(700));
    std::fs::write(m.home.join("go"), "").unwrap();
    let o = m
        .client()
        .run(sh(&connect_script("exfil.example")))
        .unwrap();
    assert!(printed(&o).contains("403"), "{}", printed(&o));
    let done = m.home.join("done.txt");
    for _ in 0..200 {
        if done.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let said = std::fs::read_to_string(&done).unwrap_or_default();
    assert!(said.contains("403"), "the runtime: {said:?}");
}

/// Once `m` stopped, its audit log names each host refused, however
/// many `rounds` of the flood there were; the runtime's refusal is a line
/// of its own.
fn a_line_names_every_refused_host(m: Machine, rounds: u64) {
    let audit_dir = m.home.join("data/audit");
    let _kept = m.stop();
    let lines = lines_in(&audit_dir);
    let named: Vec<(&str, usize)> = [
        "exfil-same.example",
        "exfil.example",
        "runtime-refused.example",
        "fill-7.example",
    ]
    .into_iter()
    .map(|host| (host, lines_naming(&lines, host)))
    .collect();
    for l in lines.iter().filter(|l| l["kind"] == "suppressed") {
        eprintln!("{l}");
    }
    eprintln!("{rounds} rounds of 28 refusals; lines naming each host: {named:?}");
    for (host, n) in &named {
        assert!(*n >= 1, "no line names {host}: {named:?}");
    }
    // The runtime's refusal is a line of its own, never a count.
    assert!(lines.iter().any(|l| l["kind"] == "egress"
        && l["host"] == "runtime-refused.example"
        && l["origin"]["uid"] == common::RUNTIME_UID));
}
