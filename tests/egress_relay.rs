//! A VM's egress relay on the host, spoken to as a hostile guest would:
//! straight on its socket, with no warden in between. The relay must hold
//! on its own (the machine's key, its list, no address as a name, the
//! address classes the proxy refuses), connecting from the machine's
//! namespace of the tests' own internet.

mod common;

use common::internet::{Internet, Listener};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

struct Relay {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_relay(net: &Internet) -> Relay {
    let dir = net.dir.path().join("relay");
    std::fs::create_dir_all(dir.join("policy")).unwrap();
    let key = dir.join("key");
    std::fs::write(&key, KEY).unwrap();
    std::fs::set_permissions(&key, PermissionsExt::from_mode(0o600)).unwrap();
    let policy = serde_json::json!({
        "hosts": ["allowed.test", "rebind.test", "private.test"],
        "allow_addresses": [format!("{}/32", net.v4), format!("{}/128", net.v6)],
    });
    std::fs::write(dir.join("policy/network.json"), policy.to_string()).unwrap();
    let socket = dir.join("vsock.sock_1025");
    let config = serde_json::json!({"egress": {
        "listen": socket, "key_file": key, "policy_dir": dir.join("policy"),
        "dns": [net.v4.to_string()],
        "netns": format!("/run/netns/{}", net.machine_ns),
    }});
    let config_file = dir.join("relay.json");
    std::fs::write(&config_file, config.to_string()).unwrap();
    let log = dir.join("relay.log");
    let child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["machine", "vm-relay", "--config"])
        .arg(&config_file)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let relay = Relay { child, socket, log };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !relay.socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the relay did not listen: {}",
            std::fs::read_to_string(&relay.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mode = std::fs::metadata(&relay.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the relay's socket is root's alone");
    relay
}

/// Sends `line`; returns the answer line and the open connection.
fn ask(relay: &Relay, line: &str) -> (String, BufReader<UnixStream>) {
    let mut s = UnixStream::connect(&relay.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    let mut answer = String::new();
    reader.read_line(&mut answer).unwrap();
    (answer.trim_end().to_string(), reader)
}

#[test]
fn the_relay_decides_again_whatever_the_guest_asks() {
    let test = "the_relay_decides_again_whatever_the_guest_asks";
    if !common::privileged(test) {
        return;
    }
    let net = Internet::start();
    let relay = start_relay(&net);
    // The relay namespace's own loopback: nothing may reach it.
    let listener = Listener::start(Some(&net.machine_ns), "127.0.0.1", 80);

    // A listed host: reached, and the bytes flow both ways.
    let (answer, mut conn) = ask(&relay, &format!("EGRESS {KEY} allowed.test 80\n"));
    assert_eq!(answer, format!("OK {}:80", net.v4));
    conn.get_mut()
        .write_all(b"GET /through-relay HTTP/1.0\r\nHost: allowed.test\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1."), "{body}");
    assert!(
        body.ends_with("hello allowed.test /through-relay"),
        "{body}"
    );

    // What a hostile guest might ask, and the refusal each gets.
    let refusals = hostile_asks(&net);
    for (line, want) in &refusals {
        let (answer, mut conn) = ask(&relay, line);
        assert!(answer.starts_with(want), "{line:.80}: {answer}");
        // Nothing follows a refusal.
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{line:.80}: {rest:?}");
    }

    // Nothing reached the relay's own loopback, and the internet saw only
    // the listed request.
    listener.took_nothing("the relay namespace's loopback");
    let seen = net.http_requests();
    assert!(
        seen.contains("http GET allowed.test /through-relay"),
        "{seen}"
    );
    assert_eq!(seen.lines().count(), 1, "{seen}");

    // Each decision is a line of the relay's log, and the key is in none.
    let log = std::fs::read_to_string(&relay.log).unwrap();
    assert!(!log.contains(KEY), "{log}");
    let decisions = log.lines().filter(|l| l.contains("\"allowed\"")).count();
    assert_eq!(decisions, 1 + refusals.len(), "{log}");
}

/// What a hostile guest might ask, and the refusal each gets.
fn hostile_asks(net: &Internet) -> [(String, &'static str); 9] {
    [
        (
            format!("EGRESS {} allowed.test 80\n", "f".repeat(48)),
            "REFUSED bad_request the machine's key is wrong",
        ),
        (
            format!("EGRESS {KEY} denied.test 80\n"),
            "REFUSED not_listed denied.test:80 is not on the machine's list",
        ),
        (
            format!("EGRESS {KEY} allowed.test 8080\n"),
            "REFUSED not_listed allowed.test:8080",
        ),
        (format!("EGRESS {KEY} {} 80\n", net.v4), "REFUSED ip_target"),
        (format!("EGRESS {KEY} 127.0.0.1 80\n"), "REFUSED ip_target"),
        (
            format!("EGRESS {KEY} rebind.test 80\n"),
            "REFUSED refused_address rebind.test resolves to 127.0.0.1, a loopback address",
        ),
        (
            format!("EGRESS {KEY} private.test 80\n"),
            "REFUSED refused_address private.test resolves to 192.168.77.7",
        ),
        (
            "CONNECT allowed.test:80 HTTP/1.1\n".to_string(),
            "REFUSED bad_request",
        ),
        (
            format!("EGRESS {KEY} {} 80\n", "a".repeat(2000)),
            "REFUSED bad_request",
        ),
    ]
}
