//! The network layer, end to end: warden as PID 1 in a machine namespace
//! routed to the tests' own internet (tests/common/internet.rs), and real
//! clients (curl, git, python) run as `shell` through the API.

mod common;

use common::net::{boot, policy, Net};
use common::privileged;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Sends raw request heads to the proxy and prints, for each, the status
/// line and the Warden-Reason header: what a client of any kind would get.
const RAW: &str = r#"
import socket, sys
for head in sys.argv[1:]:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(head.encode("latin-1").decode("unicode_escape").encode("latin-1"))
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    lines = reply.decode("latin-1").split("\r\n")
    reason = [l for l in lines if l.lower().startswith("warden-reason:")]
    print(repr(head), "->", lines[0], "|", reason[0] if reason else "")
"#;

#[test]
fn allowed_hosts_work_through_the_proxy() {
    if !privileged("allowed_hosts_work_through_the_proxy") {
        return;
    }
    allowed_hosts_work(boot_listed());
}

/// The same where nftables cannot hold: each tool's connection to the
/// proxy is made by warden's connect gate, and works as before.
#[test]
fn allowed_hosts_work_through_the_connect_gate() {
    if !privileged("allowed_hosts_work_through_the_connect_gate") {
        return;
    }
    let net = boot_gated();
    allowed_hosts_work(net);
}

/// The runtime on a list of its own (`runtime_hosts`): its main process
/// reaches its host through the proxy, is refused a host only shell's list
/// has, and gets nowhere directly; status counts its traffic by host, and
/// shell keeps its own list.
#[test]
fn the_runtime_reaches_only_its_own_hosts() {
    if !privileged("the_runtime_reaches_only_its_own_hosts") {
        return;
    }
    let net = runtime_reaches_only_its_own_hosts(false);
    let status = net.machine.client().status().unwrap();
    let layer = common::layer(&status, "runtime_network");
    assert!(layer.detail.contains("reach only the proxy"), "{layer:?}");
}

/// The same where nftables cannot hold (no CAP_NET_ADMIN): the runtime's
/// processes are forked under a gate of their own, which connects them to
/// the proxy alone; the refusal is audited as the runtime's.
#[test]
fn the_runtime_reaches_only_its_own_hosts_through_the_connect_gate() {
    if !privileged("the_runtime_reaches_only_its_own_hosts_through_the_connect_gate") {
        return;
    }
    let net = runtime_reaches_only_its_own_hosts(true);
    let status = net.machine.client().status().unwrap();
    let layer = common::layer(&status, "runtime_network");
    assert!(
        layer.detail.contains("held by warden's connect gate"),
        "{layer:?}"
    );
    println!("{}", layer.detail);
    let refused = net.machine.audit_kinds("connect_refused");
    assert!(
        refused
            .iter()
            .any(|l| l["user"] == "runtime"
                && l["address"].as_str().unwrap_or("").ends_with(":8080")),
        "{refused:?}"
    );
}

/// Where warden's connect gate holds the runtime (no nftables: on the
/// host's network, its listens would be servers there), the runtime listens
/// on its published ports only (`runtime_ports`), and on unix sockets.
#[test]
fn the_runtime_listens_only_on_its_published_ports_through_the_connect_gate() {
    if !privileged("the_runtime_listens_only_on_its_published_ports_through_the_connect_gate") {
        return;
    }
    let script = r#"
import os, socket
home = os.environ["HOME"]
said = []
for port in (0, 3000, 3001):
    s = socket.socket(socket.AF_INET6 if port == 3001 else socket.AF_INET)
    try:
        if port:
            s.bind(("::" if port == 3001 else "0.0.0.0", port))
        s.listen()
        said.append(f"{port}: listening")
    except OSError as e:
        said.append(f"{port}: errno {e.errno}")
u = socket.socket(socket.AF_UNIX)
u.bind(home + "/u.sock")
u.listen()
said.append("unix: listening")
open(home + "/out.txt", "w").write("\n".join(said) + "\n")
os.rename(home + "/out.txt", home + "/done.txt")
import time; time.sleep(1000)
"#;
    let net = boot(
        |internet| {
            let mut p = policy(internet);
            p["runtime_hosts"] = json!(["allowed.test"]);
            p
        },
        |o| {
            o.main = vec!["python3".into(), "-c".into(), script.into()];
            o.drop_caps = vec!["net_admin".into()];
            o.config["runtime_ports"] = json!([3000]);
        },
    );
    let done = net.machine.home.join("done.txt");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = std::fs::read_to_string(&done)
        .unwrap_or_else(|_| panic!("no output; log: {}", net.machine.log()));
    eprintln!("{out}");
    assert!(out.contains("0: errno 13"), "{out}");
    assert!(out.contains("3000: listening"), "{out}");
    assert!(out.contains("3001: errno 13"), "{out}");
    assert!(out.contains("unix: listening"), "{out}");
}

fn runtime_reaches_only_its_own_hosts(gated: bool) -> Net {
    let script = r#"
ca=$HOME/ca.pem
while [ ! -s "$ca" ]; do sleep 0.1; done
{
  echo "own: $(curl -sS --max-time 20 --cacert $ca https://allowed.test/rt 2>&1)"
  echo "shells: $(curl -sS --max-time 20 --cacert $ca -o /dev/null -w '%{http_code}' https://www.allowed.test/x 2>&1)"
  echo "direct: $(curl -sS --max-time 10 --noproxy '*' http://$(cat $HOME/v4):8080/ 2>&1; echo " exit $?")"
  echo "dns: $(getent ahosts unlisted.test >/dev/null 2>&1; echo "exit $?")"
  echo "node: $(node -e 'const s = require("net").connect(3128, "127.0.0.1", () => s.write("CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")); s.once("data", d => { console.log(String(d).split("\r\n")[0]); s.destroy(); }); s.on("error", e => console.log("error " + e.code));' 2>&1)"
} > $HOME/out.txt
mv $HOME/out.txt $HOME/done.txt
sleep 1000
"#;
    let net = boot(
        |internet| {
            let mut p = policy(internet);
            p["runtime_hosts"] = json!(["allowed.test"]);
            p
        },
        |o| {
            o.main = vec!["bash".into(), "-c".into(), script.into()];
            if gated {
                o.drop_caps = vec!["net_admin".into()];
            }
        },
    );
    let home = &net.machine.home;
    std::fs::write(home.join("v4"), net.internet.v4.to_string()).unwrap();
    let ca = home.join("ca.pem");
    std::fs::copy(&net.internet.ca, &ca).unwrap();
    std::os::unix::fs::chown(&ca, Some(common::RUNTIME_UID), Some(common::RUNTIME_UID)).unwrap();
    let done = home.join("done.txt");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = std::fs::read_to_string(&done)
        .unwrap_or_else(|_| panic!("no output; log: {}", net.machine.log()));
    assert!(out.contains("own: hello allowed.test /rt"), "{out}");
    // Node's own sockets (libuv: non-blocking connects) through the proxy.
    assert!(out.contains("node: HTTP/1.1 200"), "{out}");
    assert!(
        out.contains("shells: curl: (56) CONNECT tunnel failed, response 403"),
        "{out}"
    );
    // A direct connection is refused at once (curl: 7), and the runtime's
    // own DNS gets no answer (its datagrams are refused too).
    assert!(out.contains(" exit 7"), "{out}");
    assert!(out.contains("dns: exit 2"), "{out}");
    let queries = net.internet.dns_queries();
    assert!(
        !queries.contains("unlisted.test"),
        "the resolver saw: {queries}"
    );
    assert!(!net.internet.connections().contains("tcp 8080"));
    // Shell keeps its own list, which has www.allowed.test.
    let (status, text) = net.text(&format!(
        "curl -sS --max-time 20 --cacert {} https://www.allowed.test/s",
        net.ca().display()
    ));
    assert_eq!((status, text.trim()), (0, "hello www.allowed.test /s"));
    // status: the layer, the list, the traffic by host.
    let st = net.machine.client().status().unwrap();
    let layer = common::layer(&st, "runtime_network");
    assert!(layer.holds && layer.required, "{layer:?}");
    let proxy = st.proxy.unwrap();
    assert_eq!(proxy.runtime_hosts, Some(vec!["allowed.test".to_string()]));
    let traffic = proxy.runtime_traffic.unwrap();
    let own = traffic.iter().find(|t| t.host == "allowed.test").unwrap();
    // curl's request and node's tunnel.
    assert!(own.connections == 2 && own.bytes_down > 100, "{traffic:?}");
    let refused = traffic
        .iter()
        .find(|t| t.host == "www.allowed.test")
        .unwrap();
    assert_eq!(
        (refused.connections, refused.refused),
        (0, 1),
        "{traffic:?}"
    );
    // The egress lines say which list decided.
    let lines = net.egress();
    let rt = lines
        .iter()
        .find(|l| l["host"] == "allowed.test" && l["list"] == "runtime_hosts");
    assert!(rt.is_some(), "{lines:?}");
    let no = lines
        .iter()
        .find(|l| l["host"] == "www.allowed.test" && l["allowed"] == false)
        .unwrap();
    assert!(
        no["reason"]
            .as_str()
            .unwrap()
            .contains("runtime's host list"),
        "{no}"
    );
    net
}

/// pip, npm and cargo (through git) reach a listed host's registry paths
/// through the connect gate, each by the proxy its variables name: the
/// requests arrive (the tests' internet serves no real index, so the
/// tools then fail to parse what it answers, which is not asserted).
#[test]
fn package_managers_reach_their_registries_through_the_connect_gate() {
    if !privileged("package_managers_reach_their_registries_through_the_connect_gate") {
        return;
    }
    let net = boot_gated();
    let ca = net.ca().display().to_string();
    let tools = [
        (
            // pip's --cert loses to REQUESTS_CA_BUNDLE, which warden sets
            // (a requests behaviour): the variable names the test CA.
            format!("REQUESTS_CA_BUNDLE={ca} python3 -m pip download --no-deps --disable-pip-version-check --index-url https://allowed.test/simple/ -d $(mktemp -d) warden-pkg"),
            "https GET allowed.test /simple/warden-pkg/",
        ),
        (
            format!("HOME=$(mktemp -d) npm view warden-pkg --registry https://allowed.test/npm/ --cafile {ca}"),
            "https GET allowed.test /npm/warden-pkg",
        ),
        (
            format!("CARGO_HOME=$(mktemp -d) CARGO_HTTP_CAINFO={ca} cargo search --index https://allowed.test/cargo-index warden-pkg"),
            "https GET allowed.test /cargo-index/info/refs",
        ),
    ];
    for (line, request) in tools {
        let (_, text) = net.text(&format!("cd $(mktemp -d) && {line}"));
        let seen = net.internet.http_requests();
        assert!(
            seen.contains(request),
            "{line}: {text}\nthe internet saw: {seen}"
        );
    }
    let refused = net.machine.audit_kinds("connect_refused");
    assert!(refused.is_empty(), "{refused:?}");
}

fn allowed_hosts_work(net: Net) {
    let ca = net.ca().display().to_string();
    let cases = [
        // Plain HTTP, absolute URI.
        ("curl -sS --max-time 20 http://allowed.test/plain".to_string(), "hello allowed.test /plain"),
        // HTTPS through CONNECT, checked against the test CA.
        (format!("curl -sS --max-time 20 --cacert {ca} https://www.allowed.test/tls"), "hello www.allowed.test /tls"),
        // python's urllib honours https_proxy too.
        (format!("python3 -c \"import ssl,urllib.request as u; c=ssl.create_default_context(cafile='{ca}'); print(u.urlopen('https://allowed.test/py', context=c).read().decode())\""), "hello allowed.test /py"),
        // git over HTTPS.
        (format!("cd $(mktemp -d) && GIT_SSL_CAINFO={ca} git clone -q https://git.allowed.test/repo.git r && cat r/README.md"), "hello from repo.git"),
        // A name with only an IPv6 address is reached over IPv6.
        (format!("curl -sS --max-time 20 --cacert {ca} https://v6only.test/six"), "hello v6only.test /six"),
        // mixed.test resolves to loopback and to the internet: only the
        // address that passes is used.
        ("curl -sS --max-time 20 http://mixed.test/m".to_string(), "hello mixed.test /m"),
    ];
    for (line, want) in cases {
        let (status, text) = net.text(&line);
        assert_eq!((status, text.trim()), (0, want), "{line}: {text}");
    }
    // Every decision is one audit line, with what was resolved and moved.
    let lines = net.egress_for(&["www.allowed.test", "v6only.test", "mixed.test"]);
    let tls = lines
        .iter()
        .find(|l| l["host"] == "www.allowed.test")
        .expect("an egress line for www.allowed.test");
    assert_eq!(tls["allowed"], true, "{tls}");
    assert_eq!(tls["method"], "CONNECT");
    assert_eq!(tls["entry"], "*.allowed.test");
    assert_eq!(tls["address"], format!("{}:443", net.internet.v4));
    assert!(tls["bytes_up"].as_u64().unwrap() > 100, "{tls}");
    assert!(tls["bytes_down"].as_u64().unwrap() > 100, "{tls}");
    assert!(tls["duration_ms"].as_f64().is_some());
    // The line names the command that opened the connection: its id, and
    // the digest of its argv as its command_start line has it.
    let origin = &tls["origin"];
    let command = origin["command"]
        .as_u64()
        .unwrap_or_else(|| panic!("no command: {tls}"));
    let start = net
        .machine
        .audit_kinds("command_start")
        .into_iter()
        .find(|l| l["command"] == command)
        .unwrap_or_else(|| panic!("no command_start for {command}"));
    let argv: Vec<String> = serde_json::from_value(start["argv"].clone()).unwrap();
    let digest = <sha2::Sha256 as sha2::Digest>::digest(argv.join("\0").as_bytes());
    assert_eq!(origin["argv_sha256"], format!("{digest:x}"), "{tls}");
    assert!(argv.join(" ").contains("www.allowed.test/tls"), "{argv:?}");
    assert!(origin["pid"].as_i64().unwrap() > 1, "{tls}");
    let six = lines.iter().find(|l| l["host"] == "v6only.test").unwrap();
    assert_eq!(six["address"], format!("[{}]:443", net.internet.v6));
    let mixed = lines.iter().find(|l| l["host"] == "mixed.test").unwrap();
    assert_eq!(
        mixed["address"],
        format!("{}:80", net.internet.v4),
        "{mixed}"
    );
}

/// ssh (git over ssh) through the proxy: `warden connect HOST PORT` as its
/// ProxyCommand reaches a listed host:22, whose banner ssh reads, and no
/// other host; the direct connection stays refused.
#[test]
fn ssh_reaches_a_listed_host_through_warden_connect() {
    if !privileged("ssh_reaches_a_listed_host_through_warden_connect") {
        return;
    }
    let net = boot_listed();
    // warden, where shell may run it (its own /tmp).
    let dest = net.machine.root().join("var/shell-tmp/warden-connect");
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::copy(common::warden_bin(), dest.join("warden")).unwrap();
    let chmod = |p: &Path, mode| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap()
    };
    chmod(&dest, 0o755);
    chmod(&dest.join("warden"), 0o755);
    let warden = "/tmp/warden-connect/warden";

    let (status, text) = net.text(&format!("{warden} connect git.allowed.test 22 </dev/null"));
    assert_eq!(
        (status, text.trim()),
        (0, "SSH-2.0-internet.test"),
        "{text}"
    );
    // Not listed on port 22: refused with the proxy's reason.
    let (status, text) = net.text(&format!("{warden} connect www.allowed.test 22 </dev/null"));
    assert_ne!(status, 0, "{text}");
    assert!(text.contains("refused by the proxy (403)"), "{text}");
    // ssh itself, with the helper as its ProxyCommand, reads the banner
    // (the internet's port 22 is not a real sshd: the exchange ends there).
    let ssh = format!(
        "ssh -o ProxyCommand='{warden} connect %h %p' -o StrictHostKeyChecking=no \
             -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o ConnectTimeout=10 \
             -v git@git.allowed.test true"
    );
    let (status, text) = net.text(&ssh);
    assert_ne!(status, 0, "{text}");
    assert!(
        text.contains("Remote protocol version 2.0, remote software version internet.test"),
        "{text}"
    );
    // Without the helper, ssh cannot reach it.
    let (status, text) = net.text(
        "ssh -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=no git@git.allowed.test true",
    );
    assert_ne!(status, 0, "{text}");
    assert!(!text.contains("internet.test"), "{text}");
    // The proxy's lines: the listed one carried, the other refused.
    let lines = net.egress();
    assert!(
        lines
            .iter()
            .any(|l| l["host"] == "git.allowed.test" && l["port"] == 22 && l["allowed"] == true),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["host"] == "www.allowed.test" && l["port"] == 22 && l["allowed"] == false),
        "{lines:?}"
    );
}

/// A listed machine without CAP_NET_ADMIN: its firewall cannot hold, and
/// warden's connect gate stands in (checked here, so every test on it
/// knows which layer it exercises).
fn boot_gated() -> Net {
    let net = boot(policy, |o| o.drop_caps = vec!["net_admin".into()]);
    let fw = firewall(&net.machine.client().status().unwrap());
    assert!(fw.holds, "{fw:?}");
    assert!(
        fw.detail.contains("held by warden's connect gate"),
        "{}",
        fw.detail
    );
    net
}

fn boot_listed() -> Net {
    boot(policy, |_| {})
}

#[test]
fn refusals_name_their_reason() {
    if !privileged("refusals_name_their_reason") {
        return;
    }
    let net = boot_listed();
    let v4 = net.internet.v4;
    let cases: Vec<(String, &str)> = vec![
        ("CONNECT denied.test:443 HTTP/1.1\\r\\n\\r\\n".into(), "403 Forbidden | Warden-Reason: denied.test:443 is not on the host list"),
        ("CONNECT allowed.test:22 HTTP/1.1\\r\\n\\r\\n".into(), "403 Forbidden | Warden-Reason: allowed.test:22 is not on the host list"),
        (format!("CONNECT {v4}:443 HTTP/1.1\\r\\n\\r\\n"), "403 Forbidden | Warden-Reason: an IP address as the target"),
        ("CONNECT 2130706433:443 HTTP/1.1\\r\\n\\r\\n".into(), "400 Bad Request | Warden-Reason: bad target"),
        ("CONNECT 0x7f.1:443 HTTP/1.1\\r\\n\\r\\n".into(), "400 Bad Request | Warden-Reason: bad target"),
        ("CONNECT 127.1:443 HTTP/1.1\\r\\n\\r\\n".into(), "400 Bad Request | Warden-Reason: bad target"),
        ("CONNECT 017.0.0.1:443 HTTP/1.1\\r\\n\\r\\n".into(), "400 Bad Request | Warden-Reason: bad target"),
        ("CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\\r\\n\\r\\n".into(), "403 Forbidden | Warden-Reason: an IP address as the target"),
        ("CONNECT [fe80::1%25lo]:443 HTTP/1.1\\r\\n\\r\\n".into(), "400 Bad Request | Warden-Reason: bad target"),
        ("CONNECT user@allowed.test:443 HTTP/1.1\\r\\n\\r\\n".into(), "400 Bad Request | Warden-Reason: bad target"),
        ("CONNECT allowed.test%00.evil:443 HTTP/1.1\\r\\n\\r\\n".into(), "400 Bad Request | Warden-Reason: bad target"),
        ("GET http://allowed.test/ HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n".into(), "400 Bad Request | Warden-Reason: the Host header (denied.test:80) disagrees"),
        ("GET http://rebind.test/ HTTP/1.1\\r\\n\\r\\n".into(), "403 Forbidden | Warden-Reason: rebind.test resolves to 127.0.0.1, a loopback address"),
        ("GET http://private.test/ HTTP/1.1\\r\\n\\r\\n".into(), "403 Forbidden | Warden-Reason: private.test resolves to 192.168.77.7, a private address"),
        ("GET http://nosuch.allowed.test/ HTTP/1.1\\r\\n\\r\\n".into(), "502 Bad Gateway | Warden-Reason: cannot resolve nosuch.allowed.test"),
        ("GET /relative HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n".into(), "400 Bad Request | Warden-Reason: not a proxy request"),
    ];
    let args: Vec<String> = cases.iter().map(|(head, _)| format!("'{head}'")).collect();
    let line = format!(
        "python3 -c '{}' {}",
        RAW.replace('\'', "\""),
        args.join(" ")
    );
    let (status, text) = net.text(&line);
    assert_eq!(status, 0, "{text}");
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got.len(), cases.len(), "{text}");
    for ((head, want), line) in cases.iter().zip(got) {
        assert!(line.contains(want), "{head}: got {line}, wanted {want}");
    }
    // Each refusal is an audit line with its reason; nothing reached the
    // internet's HTTP server.
    let refused: Vec<Value> = net
        .egress()
        .into_iter()
        .filter(|l| l["allowed"] == false)
        .collect();
    assert_eq!(refused.len(), cases.len(), "{refused:?}");
    assert!(refused.iter().all(|l| l["reason"].is_string()));
    let rebind = refused.iter().find(|l| l["host"] == "rebind.test").unwrap();
    assert_eq!(rebind["resolved"], json!(["127.0.0.1"]));
    assert!(!net.internet.http_requests().contains("denied.test"));
}

#[test]
fn direct_connections_fail_fast() {
    if !privileged("direct_connections_fail_fast") {
        return;
    }
    direct_connections_fail(boot_listed());
}

/// Under the connect gate a direct connect is refused by warden itself,
/// with EACCES ("Permission denied"; curl says it could not connect: 7),
/// and audited.
#[test]
fn direct_connections_fail_fast_through_the_connect_gate() {
    if !privileged("direct_connections_fail_fast_through_the_connect_gate") {
        return;
    }
    let net = boot_gated();
    let net = direct_connections_fail(net);
    let refused = net.machine.audit_kinds("connect_refused");
    let v4 = net.internet.v4.to_string();
    let line = refused
        .iter()
        .find(|l| l["address"].as_str().is_some_and(|a| a.starts_with(&v4)))
        .unwrap_or_else(|| panic!("no connect_refused line for {v4}: {refused:?}"));
    assert!(
        line["reason"].as_str().unwrap().contains("not the proxy"),
        "{line}"
    );
    assert!(line["command"].as_u64().is_some(), "{line}");
    assert!(line["argv_sha256"].as_str().is_some(), "{line}");
}

/// Time of check against time of use: a second thread rewrites the address
/// (proxy or unix path, then the target), or also swaps the descriptor,
/// while the first connects, 2000 times each; nothing reaches the target.
#[test]
fn the_connect_gate_acts_on_what_it_read() {
    if !privileged("the_connect_gate_acts_on_what_it_read") {
        return;
    }
    let net = boot_gated();
    let (bin_dir, _) = common::attacks::build_attack_program();
    let bin = common::attacks::hand_to_shell(&net.machine, bin_dir.path());
    let v4 = net.internet.v4;
    for how in ["proxy", "unix", "fd"] {
        let line = format!("{} connect-race {how} {v4} 8080 3128", bin.display());
        let (status, text) = net.text(&line);
        assert_eq!(status, 0, "{how}: {text}");
        assert!(text.contains("blocked: connect race"), "{how}: {text}");
        if how == "proxy" {
            // Both sides of the race were seen: the gate connected some
            // to the proxy and refused others.
            assert!(!text.contains(" 0 to the proxy"), "{text}");
            assert!(!text.contains(" 0 refused"), "{text}");
        }
    }
    let seen = net.internet.connections();
    assert!(!seen.contains("tcp 8080"), "the target saw: {seen}");
    // Refusals by the thousand: a burst written whole (20 per 10 s for
    // each of the three commands), the rest counted into `suppressed`
    // lines.
    let whole = net.machine.audit_kinds("connect_refused").len();
    assert!(
        whole <= 3 * 40,
        "{whole} connect_refused lines written whole"
    );
}

/// Under the connect gate (no nftables: a rootless machine on the host's
/// network stands so) a command's listen on a network socket is refused by
/// warden too, also when another thread swaps a TCP socket under a unix
/// socket's number; a unix socket still listens, with shell as its peer.
#[test]
fn no_command_listens_on_the_network_through_the_connect_gate() {
    if !privileged("no_command_listens_on_the_network_through_the_connect_gate") {
        return;
    }
    let net = boot_gated();
    let status = net.machine.client().status().unwrap();
    let listen = common::layer(&status, "listen");
    assert!(
        listen.holds && listen.detail.contains("connect gate"),
        "{listen:?}"
    );
    let (bin_dir, _) = common::attacks::build_attack_program();
    let bin = common::attacks::hand_to_shell(&net.machine, bin_dir.path());
    for attempt in [
        "tcp-listen",
        "tcp6-listen",
        "listen-race /tmp/listen-race.sock 2000",
    ] {
        let (status, text) = net.text(&format!("{} {attempt}", bin.display()));
        eprintln!("{attempt}: {}", text.trim());
        assert_eq!(status, 0, "{attempt}: {text}");
        assert!(text.starts_with("blocked: "), "{attempt}: {text}");
    }
    let (_, text) = net.text(&format!("{} tcp-listen", bin.display()));
    assert!(text.contains("Permission denied"), "{text}");
    let (status, text) = net.text(&format!("{} unix-listen /tmp/unix.sock", bin.display()));
    assert_eq!(status, 0, "{text}");
    assert!(text.contains("unix listen works"), "{text}");
    // The gate, having listened as shell, connects to the proxy as before.
    let (status, text) = net.text(&format!(
        "curl -sS --max-time 20 --cacert {} https://allowed.test/after",
        net.ca().display()
    ));
    assert_eq!((status, text.trim()), (0, "hello allowed.test /after"));
}

fn direct_connections_fail(net: Net) -> Net {
    let v4 = net.internet.v4;
    let v6 = net.internet.v6;
    // curl told to ignore the proxy: refused, not timed out (exit 7, not 28).
    for url in [
        format!("http://{v4}/"),
        format!("http://[{v6}]/"),
        // The proxy's port elsewhere: Landlock allows the port, the
        // firewall alone stops it.
        format!("http://{v4}:3128/"),
    ] {
        let (status, text) = net.text(&format!("curl -sS --max-time 10 --noproxy '*' {url}"));
        assert_eq!(status, 7, "{url}: {text}");
    }
    // bash's /dev/tcp, python's sockets (TCP and UDP), ping.
    let (status, text) = net.text(&format!("bash -c 'echo > /dev/tcp/{v4}/22'"));
    assert_ne!(status, 0, "{text}");
    let probe = format!(
        r#"python3 -c '
import socket
for port in (22, 8080, 3128):
    try:
        socket.create_connection(("{v4}", port), timeout=5); print("tcp", port, "CONNECTED")
    except OSError as e:
        print("tcp", port, "refused" if not isinstance(e, socket.timeout) else "TIMEOUT", e)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
    u.sendto(b"hi", ("{v4}", 9999)); print("udp", u.recv(100))
except OSError as e:
    print("udp blocked", e)
'"#
    );
    let (_, text) = net.text(&probe);
    assert!(
        !text.contains("CONNECTED") && !text.contains("TIMEOUT"),
        "{text}"
    );
    assert!(text.contains("udp blocked"), "{text}");
    let (status, text) = net.text(&format!("ping -c 1 -W 2 {v4}"));
    assert_ne!(status, 0, "{text}");
    // Nothing of it reached the internet.
    let seen = net.internet.connections();
    assert!(seen.trim().is_empty(), "the internet saw: {seen}");
    net
}

#[test]
fn dns_is_not_a_way_out() {
    if !privileged("dns_is_not_a_way_out") {
        return;
    }
    let net = boot_listed();
    let v4 = net.internet.v4;
    // The system resolver (resolv.conf names the internet's server) and a
    // hand-made query to it both fail; the server never hears of them.
    let (status, text) = net.text("getent hosts leak.allowed.test");
    assert_ne!(status, 0, "{text}");
    let query = format!(
        r#"python3 -c '
import socket
q = bytes.fromhex("abcd01000001000000000000") + b"\x04leak\x07allowed\x04test\x00\x00\x01\x00\x01"
for proto in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
    try:
        s = socket.socket(socket.AF_INET, proto); s.settimeout(3)
        s.connect(("{v4}", 53)); s.send(q if proto == socket.SOCK_DGRAM else len(q).to_bytes(2, "big") + q)
        print("answer", s.recv(512))
    except OSError as e:
        print("blocked", e)
'"#
    );
    let (_, text) = net.text(&query);
    assert_eq!(text.matches("blocked").count(), 2, "{text}");
    assert!(
        !net.internet.dns_queries().contains("leak"),
        "{}",
        net.internet.dns_queries()
    );
    // Names still work for tools, through the proxy (CONNECT by name).
    let (status, text) = net.text("curl -sS --max-time 20 http://allowed.test/n");
    assert_eq!(
        (status, text.trim()),
        (0, "hello allowed.test /n"),
        "{text}"
    );
}

#[test]
fn a_changed_host_list_holds_at_the_next_connection() {
    if !privileged("a_changed_host_list_holds_at_the_next_connection") {
        return;
    }
    let net = boot_listed();
    let file = net.policy_dir.join("network.json");
    let fetch = "curl -sS -o /dev/null -w '%{http_code}' --max-time 20 http://allowed.test/";
    assert_eq!(net.text(fetch).1, "200");
    // Removed from the list: refused at once, no restart.
    let mut p = policy(&net.internet);
    p["hosts"] = json!(["www.allowed.test"]);
    std::fs::write(&file, p.to_string()).unwrap();
    assert_eq!(net.text(fetch).1, "403");
    // A broken file: the last good list holds, and the log says why.
    std::fs::write(&file, "{\"hosts\": [\"allowed.test\"").unwrap();
    assert_eq!(net.text(fetch).1, "403");
    let failed = net.machine.audit_kinds("policy_reload_failed");
    assert!(!failed.is_empty(), "{}", net.machine.log());
    assert!(failed[0]["error"]
        .as_str()
        .unwrap()
        .contains("network.json"));
    // The API's reload says so too, then takes a good file.
    let e = net.machine.client().reload().unwrap_err().to_string();
    assert!(e.contains("last good network policy holds"), "{e}");
    std::fs::write(&file, policy(&net.internet).to_string()).unwrap();
    let state = net.machine.client().reload().unwrap();
    assert!(
        state.hosts.contains(&"allowed.test".to_string()),
        "{state:?}"
    );
    assert_eq!(net.text(fetch).1, "200");
    // warden kept running throughout.
    let status = net.machine.client().status().unwrap();
    assert!(status.proxy.unwrap().carried >= 2);
}

fn firewall(status: &warden::wire::Status) -> warden::wire::LayerState {
    common::layer(status, "firewall").clone()
}

#[test]
fn the_firewall_self_test_sees_rules_removed_behind_its_back() {
    if !privileged("the_firewall_self_test_sees_rules_removed_behind_its_back") {
        return;
    }
    let net = boot_listed();
    let first = firewall(&net.machine.client().status().unwrap());
    assert!(first.holds && first.required, "{first:?}");
    let nft = |args: &str| {
        let out = net
            .internet
            .in_machine("nft")
            .args(args.split(' '))
            .output()
            .unwrap();
        assert!(out.status.success(), "nft {args}: {out:?}");
    };
    // An accept-all rule slipped in first: the probe gets through.
    nft("insert rule inet warden output accept");
    let s = net.machine.client().status().unwrap();
    let fw = firewall(&s);
    assert!(!fw.holds, "{fw:?}");
    assert!(
        fw.detail.contains("5 rules found, 4 applied"),
        "{}",
        fw.detail
    );
    assert!(fw.detail.contains("connected over TCP"), "{}", fw.detail);
    assert!(
        fw.detail.contains("still holding: Landlock"),
        "{}",
        fw.detail
    );
    assert!(s.refusing.unwrap().contains("firewall did not hold"));
    // Commands are refused, naming the firewall.
    let e = net.refused_run();
    assert!(e.contains("firewall"), "{e}");
    // The table deleted whole.
    nft("delete table inet warden");
    let fw = firewall(&net.machine.client().status().unwrap());
    assert!(!fw.holds);
    assert!(
        fw.detail.contains("table inet warden is not there"),
        "{}",
        fw.detail
    );
}

#[test]
fn without_cap_net_admin_the_connect_gate_stands_in() {
    if !privileged("without_cap_net_admin_the_connect_gate_stands_in") {
        return;
    }
    // required (the default): the gate satisfies it, commands run.
    let net = boot_gated();
    let fw = firewall(&net.machine.client().status().unwrap());
    assert!(fw.required, "{fw:?}");
    // Why nftables could not, and what the gate has done.
    assert!(
        fw.detail.contains("cannot apply the rules"),
        "{}",
        fw.detail
    );
    assert!(
        fw.detail.contains("sockets connected to the proxy"),
        "{}",
        fw.detail
    );
    assert!(
        fw.detail.contains("could make no UDP socket"),
        "{}",
        fw.detail
    );
    assert!(
        net.machine
            .log()
            .contains("warden's connect gate stands in"),
        "{}",
        net.machine.log()
    );
    let boot_line = &net.machine.audit_kinds("boot")[0];
    let layers = boot_line["layers"].as_array().unwrap();
    assert!(layers
        .iter()
        .any(|l| l["layer"] == "firewall" && l["holds"] == true));
    assert_eq!(net.text("echo ran").1.trim(), "ran");
    // Landlock's own refusal, under the gate: proven by the probe.
    let status = net.machine.client().status().unwrap();
    let landlock = common::layer(&status, "landlock");
    assert!(landlock.holds, "{landlock:?}");
    // A unix socket is still connected as made (the gate lets it through).
    let (code, text) = net.text(
        "python3 -c 'import socket,os; s=socket.socket(socket.AF_UNIX); s.bind(\"/tmp/u.sock\"); s.listen(); c=socket.socket(socket.AF_UNIX); c.connect(\"/tmp/u.sock\"); print(\"unix ok\")'",
    );
    assert_eq!((code, text.trim()), (0, "unix ok"), "{text}");
}

/// Connects in a loop on one thread, and on another aims every signal
/// at every thread of PID 1 (tgkill), for 3 s; prints how many the kernel
/// took and how many connects were made.
const SIGNAL_STORM: &str = r#"
import ctypes, signal, socket, threading, time
libc = ctypes.CDLL(None, use_errno=True)
TGKILL = 234
stop = time.time() + 3
made = 0
def connects():
    global made
    while time.time() < stop:
        s = socket.socket()
        s.connect(("127.0.0.1", 3128))
        s.close()
        made += 1
t = threading.Thread(target=connects)
t.start()
sigs = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
        signal.SIGPIPE, signal.SIGALRM, signal.SIGCHLD, signal.SIGKILL, signal.SIGSTOP]
taken = 0
while time.time() < stop:
    for tid in range(1, 64):
        for sig in sigs:
            if libc.syscall(TGKILL, 1, tid, sig) == 0:
                taken += 1
t.join()
print("taken", taken, "made", made)
"#;

/// On every connect the gate's thread takes shell's real ids for a few
/// syscalls, and while it does shell may signal it. A command that
/// connects in a loop while it aims every signal at every thread of PID 1
/// ends nothing, stops nothing, and the gate goes on serving.
#[test]
fn signals_aimed_at_the_gate_end_nothing() {
    if !privileged("signals_aimed_at_the_gate_end_nothing") {
        return;
    }
    // Landlock's signal scope (Linux 6.12) would refuse shell every signal
    // to warden: off, so that what is tested is the gate's own guard.
    let net = boot(policy, |o| {
        o.drop_caps = vec!["net_admin".into()];
        let dir = PathBuf::from(o.config["policy_dir"].as_str().unwrap());
        let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/policy/landlock.json");
        let mut landlock: Value =
            serde_json::from_str(&std::fs::read_to_string(shipped).unwrap()).unwrap();
        landlock["scopes"] = json!(false);
        std::fs::write(dir.join("landlock.json"), landlock.to_string()).unwrap();
    });
    assert!(firewall(&net.machine.client().status().unwrap()).holds);
    let (code, text) = net.text(&format!("python3 -c '{SIGNAL_STORM}'"));
    assert_eq!(code, 0, "{text}");
    let counts: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [taken, made] = counts[..] else {
        panic!("{text}")
    };
    println!("signals the kernel took: {taken}, connects made meanwhile: {made}");
    // The storm reached the gate's thread while it acted as shell (else
    // the kernel would have refused every one), and connects went on.
    assert!(taken > 0 && made > 0, "{text}");
    // warden is whole: it serves, its gate connects, it did not stop.
    let (code, text) = net.text(&format!(
        "curl -sS --max-time 20 --cacert {} https://allowed.test/after",
        net.ca.display()
    ));
    assert_eq!(
        (code, text.trim()),
        (0, "hello allowed.test /after"),
        "{text}"
    );
    let status = net.machine.client().status().unwrap();
    assert!(firewall(&status).holds);
    assert!(
        !net.machine.log().contains("shutting down"),
        "{}",
        net.machine.log()
    );
}

/// With the firewall off by policy, the gate does not stand in either:
/// what is left (Landlock's port, seccomp's sockets) is said.
#[test]
fn a_firewall_off_by_policy_gets_no_gate() {
    if !privileged("a_firewall_off_by_policy_gets_no_gate") {
        return;
    }
    let p = json!({"hosts": ["allowed.test"], "firewall": "off"});
    let net = boot(move |_| p, |o| o.drop_caps = vec!["net_admin".into()]);
    let fw = firewall(&net.machine.client().status().unwrap());
    assert!(!fw.holds && !fw.required, "{fw:?}");
    assert!(fw.detail.contains("off by policy"), "{}", fw.detail);
    assert!(fw.detail.contains("no UDP"), "{}", fw.detail);
    assert!(
        fw.detail
            .contains("Not limited: TCP to port 3128 of any address"),
        "{}",
        fw.detail
    );
    assert!(!net.machine.log().contains("connect gate stands in"));
    assert_eq!(net.text("echo ran").1.trim(), "ran");
}

#[test]
fn applying_the_rules_twice_leaves_one_copy() {
    if !privileged("applying_the_rules_twice_leaves_one_copy") {
        return;
    }
    use std::io::Write;
    use warden::guest::net::firewall::{self, Scope};
    let ns = format!("wdn-fw-{:x}", std::process::id());
    let ip = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    ip(&["netns", "add", &ns]);
    let scope = Scope {
        shell_uid: 2001,
        network_uid: 2001,
        runtime_network_uid: None,
        proxy_port: 3128,
    };
    let batch = serde_json::to_string(&firewall::batch(scope)).unwrap();
    let nft = |args: &[&str], input: &str| {
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", &ns, "nft"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "nft {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    for _ in 0..2 {
        nft(&["-j", "-f", "-"], &batch);
    }
    let listing = nft(&["-j", "list", "table", "inet", "warden"], "");
    let result = firewall::compare(&listing, scope);
    // A rule added by someone else is flushed by the next apply.
    nft(
        &["insert", "rule", "inet", "warden", "output", "accept"],
        "",
    );
    assert!(
        firewall::compare(&nft(&["-j", "list", "table", "inet", "warden"], ""), scope).is_err()
    );
    nft(&["-j", "-f", "-"], &batch);
    let again = firewall::compare(&nft(&["-j", "list", "table", "inet", "warden"], ""), scope);
    ip(&["netns", "del", &ns]);
    assert_eq!(result, Ok(()));
    assert_eq!(again, Ok(()));
}
