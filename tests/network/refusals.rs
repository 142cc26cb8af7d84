//! What is refused, and how it is said: refusals with their reasons,
//! direct connections failing fast (under the firewall and under the
//! connect gate), DNS as a way out, and a changed host list holding at the
//! next connection.

use super::{boot_gated, boot_listed};
use crate::common::net::{policy, Net};
use crate::common::privileged;
use serde_json::{json, Value};

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
