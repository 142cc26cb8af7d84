//! What gets through: listed hosts by every kind of client (curl, python,
//! git over HTTPS, IPv6), through the proxy and through the connect gate;
//! package managers to their registries; ssh through `warden connect`.

use super::{boot_gated, boot_listed};
use crate::common::net::Net;
use crate::common::{self, privileged};
use std::path::Path;

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
