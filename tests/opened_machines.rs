//! Opened hosts in each kind of machine, made as an owner makes one: a
//! definition naming a credential for allowed.test, its value in the
//! owner's `.env` beside it, and `warden machine up` (or `warden machine
//! kube`). The launcher hands the value to warden alone (over the host's
//! door, or in a cluster's Secret); warden's proxy adds it to shell's
//! requests to the tests' own internet (tests/common/internet.rs), whose
//! origin logs what it received and echoes it back, and masks it out of
//! the answer. The value must be nowhere else: not in the runtime's
//! `.env`, a file, an environment, the logs, the audit log nor status.
//!
//! Rootful podman and the VM join the internet's machine namespace as
//! the existing tests do. Docker (no bridge here, no namespace by path),
//! rootless podman (no namespace of root's) and a pod (podman 4.3 puts
//! none on a namespace by path) cannot: their machines are made on the
//! network they can have, and a link from the internet is laid into
//! their namespace by the host's root (`link_into`), as their network
//! would carry it. Every machine runs this build's warden (an image, or a
//! VM kit, made from the base one), the base image's may be older.
//!
//! Each kind's test is in tests/opened_machines/ (podman, pod, vm, docker,
//! rootless); the owner's files, the checks they share and `link_into` are
//! here.

mod common;

#[path = "opened_machines/docker.rs"]
mod docker;
#[path = "opened_machines/pod.rs"]
mod pod;
#[path = "opened_machines/podman.rs"]
mod podman;
#[path = "opened_machines/rootless.rs"]
mod rootless;
#[path = "opened_machines/vm.rs"]
mod vm;

use common::internet::Internet;
use common::machine::show;
use common::text;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The credential's value: long and unlike anything else in the tests.
const SECRET: &str = "wdn-kinds-s3cr3t-4b7e2d9c1a5f6e08";
/// A key the runtime is given, beside it: its `.env` is not empty.
const RUNTIME_KEY: &str = "kinds-runtime-key-93d1";
/// Where the machine finds the internet's CA (a lent folder).
const CA_AT: &str = "/lent/ca";
const CA_FILE: &str = "internet-ca.pem";

/// The forms of the secret an answer could carry it in: its bytes, and
/// its base64 (its percent-encoding is itself: `-` is never encoded).
fn forms() -> [String; 2] {
    use base64::Engine;
    [
        SECRET.to_string(),
        base64::engine::general_purpose::STANDARD.encode(SECRET),
    ]
}

/// Which forms of the secret `said` holds.
fn leaked(said: &str) -> Vec<String> {
    forms().into_iter().filter(|f| said.contains(f)).collect()
}

/// Fails with `what` and the text when any form of the secret is in it.
fn assert_no_secret(what: &str, said: &str) {
    let found = leaked(said);
    assert!(
        found.is_empty(),
        "{what} holds the secret ({found:?}):\n{said}"
    );
}

/// The owner's `.env` in `dir` (beside the definition): the credential's
/// value and the runtime's key; and a copy of the internet's CA in a
/// folder of its own, to lend.
fn owners_files(dir: &Path, net: &Internet) -> PathBuf {
    std::fs::write(
        dir.join(".env"),
        format!("TEST_TOKEN={SECRET}\nAPI_TOKEN={RUNTIME_KEY}\n"),
    )
    .unwrap();
    let ca = dir.join("ca");
    std::fs::create_dir(&ca).unwrap();
    std::fs::copy(&net.ca, ca.join(CA_FILE)).unwrap();
    ca
}

/// What a definition opens: TEST_TOKEN for allowed.test, shell's
/// requests only; the internet's CA trusted upstream, lent from `ca`.
fn opened(ca: &Path) -> Value {
    json!({
        "hosts": ["allowed.test"],
        "credentials": [{"host": "allowed.test", "key": "TEST_TOKEN", "for": ["shell"]}],
        "upstream_ca": [format!("{CA_AT}/{CA_FILE}")],
        "lend": [{"host": ca, "at": CA_AT, "mode": "read"}],
        "keys": ["API_TOKEN"],
        "command": ["sleep", "infinity"],
    })
}

/// A machine joining the internet's machine namespace, as in
/// machines.rs: its name server, and the internet's private addresses
/// allowed.
fn on_the_internet(net: &Internet) -> Value {
    json!({
        "network": format!("/run/netns/{}", net.machine_ns),
        "dns": [net.v4.to_string()],
        // The tests' internet uses private addresses.
        "allow_addresses": [format!("{}/32", net.v4), format!("{}/128", net.v6)],
    })
}

/// `base` with `extra`'s fields laid over it.
fn merged(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// The headers the origin received for requests to `path` (whatever
/// their query), in order.
fn received(net: &Internet, path: &str) -> Vec<Value> {
    net.headers_log()
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(4, ' ');
            let (_, _, p, headers) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
            let p = p.split('?').next().unwrap_or(p);
            (p == path)
                .then(|| serde_json::from_str(headers).ok())
                .flatten()
        })
        .collect()
}

fn authorization(headers: &Value) -> Option<String> {
    headers
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .and_then(|(_, v)| v.as_str().map(str::to_string))
}

/// Asserts each request the origin received at `path` carried the
/// credential, and that there were `n` of them.
fn assert_credential_arrived(net: &Internet, path: &str, n: usize) {
    let seen = received(net, path);
    assert_eq!(seen.len(), n, "{seen:?}\nrequests: {}", net.http_requests());
    for headers in &seen {
        assert_eq!(
            authorization(headers).as_deref(),
            Some(format!("Bearer {SECRET}").as_str()),
            "{seen:?}"
        );
    }
}

/// What `machine exec ID -- curl` printed for the echo, and whether it
/// ran: the echo came back, masked. When it did not, the egress lines of
/// the machine's audit log (`audit`: `warden machine audit ID` as its
/// owner) say why.
fn assert_masked_echo(
    what: &str,
    out: &std::process::Output,
    audit: &dyn Fn() -> std::process::Output,
) {
    let said = text(&out.stdout) + &text(&out.stderr);
    if !out.status.success() {
        let log = text(&audit().stdout);
        let egress: Vec<&str> = log.lines().filter(|l| l.contains(" egress ")).collect();
        panic!(
            "{}\nthe audit log's egress lines:\n{}",
            show(what, out),
            egress.join("\n")
        );
    }
    assert_no_secret(what, &said);
    assert!(
        said.contains("Authorization: Bearer ****"),
        "{what}: {said}"
    );
}

/// The opened part of `warden machine status ID --json` (through
/// `warden_as`), checked: the host, the credential handed over and used
/// `requests` times, no value; and the same in the plain status.
fn assert_status_shows_the_opened_host(
    warden_as: &dyn Fn(&[&str]) -> std::process::Output,
    id: &str,
    requests: u64,
) {
    let out = warden_as(&["machine", "status", id, "--json"]);
    assert!(out.status.success(), "{}", show("status --json", &out));
    let said = text(&out.stdout);
    assert_no_secret("status --json", &said);
    let status: Value = serde_json::from_str(&said).unwrap();
    let opened = &status["proxy"]["opened"];
    assert_eq!(opened["hosts"], json!(["allowed.test"]), "{opened}");
    let credential = &opened["credentials"][0];
    assert_eq!(credential["key"], "TEST_TOKEN", "{opened}");
    assert_eq!(credential["handed"], true, "{opened}");
    assert_eq!(credential["requests"], requests, "{opened}");
    let out = warden_as(&["machine", "status", id]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", show("status", &out));
    assert_no_secret("status", &said);
    assert!(said.contains("opened hosts: allowed.test;"), "{said}");
    assert!(
        said.contains(&format!(
            "credential TEST_TOKEN for allowed.test (Authorization, for shell): {requests} requests\n"
        )),
        "{said}"
    );
}

/// A veth pair from the internet's namespace into the network namespace
/// of process `pid` (as `eth9` there), IPv4 only (Docker turns IPv6 off
/// in its containers), with routes there to the internet's address
/// through it; and to `name_servers`, which the internet answers as its
/// own name server (DNAT to it). Gone with the internet's namespace.
fn link_into(net: &Internet, pid: &str, name_servers: &[std::net::Ipv4Addr]) {
    let n = net.v4.octets()[2];
    let v4 = format!("10.201.{n}");
    let ns = net.internet_ns.as_str();
    run(&[
        "ip", "-n", ns, "link", "add", "pod0", "type", "veth", "peer", "name", "eth9", "netns", pid,
    ]);
    run(&[
        "ip",
        "-n",
        ns,
        "addr",
        "add",
        &format!("{v4}.1/24"),
        "dev",
        "pod0",
    ]);
    run(&["ip", "-n", ns, "link", "set", "pod0", "up"]);
    let inside = |args: &[&str]| {
        let mut argv = vec!["nsenter", "-t", pid, "-n", "ip"];
        argv.extend(args);
        run(&argv);
    };
    inside(&["addr", "add", &format!("{v4}.2/24"), "dev", "eth9"]);
    inside(&["link", "set", "eth9", "up"]);
    let via4 = format!("{v4}.1");
    for to in std::iter::once(&net.v4).chain(name_servers) {
        inside(&["route", "add", &format!("{to}/32"), "via", &via4]);
    }
    if name_servers.is_empty() {
        return;
    }
    let mut rules = String::from(
        "table ip warden_test_dns {\n chain pre {\n  type nat hook prerouting priority dstnat;\n",
    );
    for server in name_servers {
        for proto in ["udp", "tcp"] {
            rules += &format!("  ip daddr {server} {proto} dport 53 dnat to {}\n", net.v4);
        }
    }
    rules += " }\n}\n";
    let mut nft = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    nft.stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    let out = nft.wait_with_output().unwrap();
    assert!(out.status.success(), "{}\n{rules}", show("nft", &out));
}

/// Runs `argv`; fails the test with its output if it fails.
fn run(argv: &[&str]) {
    let out = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&argv.join(" "), &out));
}
