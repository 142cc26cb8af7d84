//! Opened hosts, end to end: warden as PID 1 on the tests' own internet,
//! with credentials its proxy adds and rules by method and path. The
//! origin (tests/internet/serve.py) records every header it receives and
//! can echo them back; real clients (curl, git, python, node, pip, npm)
//! run as shell and as the runtime, with no flag of their own.

mod common;

use common::internet::{Internet, SMART_REPO};
use common::net::{boot, Net};
use common::{privileged, Options};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use warden::wire::client::Client;

/// The credential's value: long and unlike anything else in the tests.
const SECRET: &str = "wdn-test-s3cr3t-7f1c9a2b4e6d8f00";

/// The hosts of these tests, the internet's addresses, the credentials
/// and rules of `opened`, and the test CA trusted upstream.
fn policy(internet: &Internet, opened: Value) -> Value {
    let mut policy = common::net::policy(internet);
    policy["upstream_ca"] = json!([internet.ca]);
    if let Value::Object(extra) = opened {
        policy.as_object_mut().unwrap().extend(extra);
    }
    policy
}

/// A machine whose proxy adds `TEST_TOKEN` (read at boot from a root-only
/// file, as from a cluster's Secret) under `opened`'s credentials.
fn boot_opened(opened: Value) -> Net {
    boot(
        |internet| policy(internet, opened),
        |opts: &mut Options| {
            let file = tempfile::NamedTempFile::new().unwrap().into_temp_path();
            let path = file.keep().unwrap();
            std::fs::write(&path, format!("TEST_TOKEN={SECRET}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            opts.config["credentials_from"] = json!(path);
        },
    )
}

fn credential(host: &str, holders: &[&str]) -> Value {
    json!({"credentials": [{"host": host, "key": "TEST_TOKEN", "for": holders}]})
}

/// The headers the origin received for requests to `path` (whatever
/// their query), in order.
fn received(net: &Net, path: &str) -> Vec<Value> {
    net.internet
        .headers_log()
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
    let object = headers.as_object()?;
    object
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .and_then(|(_, v)| v.as_str().map(str::to_string))
}

/// The egress lines of opened requests to `path`, waiting for one.
fn opened_lines(net: &Net, path: &str) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let lines: Vec<Value> = net
            .egress()
            .into_iter()
            .filter(|l| l["opened"] == true && l["path"] == path)
            .collect();
        if !lines.is_empty() || std::time::Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn shell_s_request_gets_the_credential_and_never_sees_it() {
    if !privileged("shell_s_request_gets_the_credential_and_never_sees_it") {
        return;
    }
    let net = boot_opened(credential("allowed.test", &["shell"]));
    // No --cacert: the machine's bundle trusts its own authority. The
    // client's own Authorization (a placeholder) is replaced.
    let (status, text) = net.text(
        "curl -sS --max-time 20 -H 'Authorization: Bearer placeholder' -D - https://allowed.test/echo",
    );
    assert_eq!(status, 0, "{text}\n{}", net.machine.log());
    let seen = received(&net, "/echo");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        authorization(&seen[0]).as_deref(),
        Some(format!("Bearer {SECRET}").as_str()),
        "{seen:?}"
    );
    // The echo (in the body and in X-Echo- headers) came back masked.
    assert!(!text.contains(SECRET), "{text}");
    assert!(
        !text.contains("placeholder"),
        "the placeholder never reached the origin: {text}"
    );
    assert!(text.contains("Bearer ****"), "{text}");
    let lines = opened_lines(&net, "/echo");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["method"], "GET", "{line}");
    assert_eq!(line["status"], 200, "{line}");
    assert_eq!(line["credential"], "TEST_TOKEN for allowed.test", "{line}");
    let removed = net.machine.audit_kinds("credential_echo_removed");
    assert!(
        removed.iter().any(|l| l["count"].as_u64() >= Some(2)),
        "{removed:?}"
    );
    // Status: the opened host, the authority, one request, no value.
    let status = net.machine.client().status().unwrap();
    let opened = serde_json::to_value(&status).unwrap()["proxy"]["opened"].clone();
    assert_eq!(opened["hosts"], json!(["allowed.test"]), "{opened}");
    assert_eq!(opened["credentials"][0]["requests"], 1, "{opened}");
    assert_eq!(opened["credentials"][0]["handed"], true, "{opened}");
    assert_eq!(
        opened["ca_sha256"].as_str().map(str::len),
        Some(95),
        "{opened}"
    );
    assert!(!opened.to_string().contains(SECRET));
}

#[test]
fn every_form_of_the_secret_is_masked_however_the_answer_comes() {
    if !privileged("every_form_of_the_secret_is_masked_however_the_answer_comes") {
        return;
    }
    let net = boot_opened(credential("allowed.test", &["shell", "runtime"]));
    let b64 = base64_of(SECRET);
    let url = SECRET.replace('-', "%2D");
    for query in ["chunked=1", "b64=1", "url=1", "chunked=1&b64=1&url=1"] {
        let (status, text) = net.text(&format!(
            "curl -sS --max-time 20 'https://allowed.test/echo?{query}'"
        ));
        assert_eq!(status, 0, "{query}: {text}");
        for form in [SECRET, b64.as_str(), url.as_str()] {
            assert!(!text.contains(form), "{query}: {form} came back: {text}");
        }
    }
    // An origin that compresses although asked not to: not carried,
    // since what it holds cannot be checked.
    let (_, text) = net.text("curl -sS --max-time 20 -i 'https://allowed.test/echo?gzip=1'");
    assert!(text.contains("\nHTTP/1.1 502"), "{text}");
    assert!(text.contains("compressed (gzip)"), "{text}");
}

fn base64_of(text: &str) -> String {
    let out = std::process::Command::new("base64")
        .arg("-w0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_machine_s_clients_reach_an_opened_host_without_a_flag() {
    if !privileged("the_machine_s_clients_reach_an_opened_host_without_a_flag") {
        return;
    }
    let net = boot_opened(credential("allowed.test", &["shell"]));
    let clients = [
        ("curl", "curl -sS --max-time 20 https://allowed.test/echo/curl", "/echo/curl"),
        (
            "python",
            "python3 -c \"import urllib.request as u; print(u.urlopen('https://allowed.test/echo/python').read().decode())\"",
            "/echo/python",
        ),
        ("node", NODE, "/echo/node"),
        (
            "git",
            "cd $(mktemp -d) && git ls-remote https://allowed.test/echo/git 2>&1; true",
            "/echo/git/info/refs",
        ),
        (
            "pip",
            "cd $(mktemp -d) && python3 -m pip download --no-deps --disable-pip-version-check --index-url https://allowed.test/echo/pip/ -d . warden-pkg 2>&1; true",
            "/echo/pip/warden-pkg/",
        ),
        (
            "npm",
            "cd $(mktemp -d) && HOME=$PWD npm view warden-pkg --registry https://allowed.test/echo/npm/ 2>&1; true",
            "/echo/npm/warden-pkg",
        ),
    ];
    for (name, line, path) in clients {
        let (_, text) = net.text(line);
        let seen = received(&net, path);
        assert!(
            seen.iter()
                .any(|h| authorization(h).is_some_and(|a| a.contains(SECRET))),
            "{name}: the origin saw {seen:?}\n{text}\nrequests: {}\nheaders: {}",
            net.internet.http_requests(),
            net.internet.headers_log()
        );
        assert!(!text.contains(SECRET), "{name}: {text}");
    }
}

/// Node's fetch goes through a proxy by the environment from Node 24
/// (with NODE_USE_ENV_PROXY, which warden sets); before, through an agent
/// of the program's. Either way the trust is the machine's bundle, by
/// NODE_EXTRA_CA_CERTS: no CA is named here.
const NODE: &str = r#"node -e "
const [major] = process.versions.node.split('.').map(Number);
const url = 'https://allowed.test/echo/node';
const done = (t) => console.log(t), fail = (e) => { console.error(e); process.exit(1); };
if (major >= 24) { fetch(url).then(r => r.text()).then(done, fail); } else {
  const http = require('http'), https = require('https'), tls = require('tls');
  http.request({ host: '127.0.0.1', port: 3128, method: 'CONNECT', path: 'allowed.test:443', headers: { host: 'allowed.test:443' } })
    .on('connect', (res, socket) => {
      https.get(url, { createConnection: () => tls.connect({ socket, servername: 'allowed.test' }) }, (r) => {
        let body = ''; r.on('data', (c) => body += c); r.on('end', () => done(body));
      }).on('error', fail);
    }).on('error', fail).end();
}
""#;

#[test]
fn a_credential_for_the_runtime_is_not_shell_s() {
    if !privileged("a_credential_for_the_runtime_is_not_shell_s") {
        return;
    }
    let net = boot_opened(credential("allowed.test", &["runtime"]));
    let (status, text) = net.text("curl -sS --max-time 20 https://allowed.test/echo/shell");
    assert_eq!(status, 0, "{text}");
    let seen = received(&net, "/echo/shell");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(authorization(&seen[0]), None, "{seen:?}");
    let lines = opened_lines(&net, "/echo/shell");
    assert_eq!(lines[0]["credential"], Value::Null, "{lines:?}");
}

#[test]
fn a_redirect_to_another_host_carries_no_credential() {
    if !privileged("a_redirect_to_another_host_carries_no_credential") {
        return;
    }
    // www.allowed.test is opened too (its rules let all through), so that
    // the machine's bundle is what curl trusts there as well.
    let mut opened = credential("allowed.test", &["shell"]);
    opened["rules"] = json!([{"host": "www.allowed.test", "allow": [{}]}]);
    let net = boot_opened(opened);
    let (status, text) = net.text(
        "curl -sS -L --max-time 20 'https://allowed.test/redirect?to=https://www.allowed.test/echo/after'",
    );
    assert_eq!(status, 0, "{text}");
    let seen = received(&net, "/echo/after");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(authorization(&seen[0]), None, "{seen:?}");
    // Plain HTTP to the same host: never a credential either.
    let (_, text) = net.text("curl -sS --max-time 20 http://allowed.test/echo/plain");
    let seen = received(&net, "/echo/plain");
    assert_eq!(seen.len(), 1, "{seen:?} {text}");
    assert_eq!(authorization(&seen[0]), None, "{seen:?}");
}

/// git over HTTPS against `git http-backend`: GitHub made read-only by
/// rules, as a definition would (clone works, push is refused).
#[test]
fn rules_let_git_clone_and_refuse_its_push() {
    if !privileged("rules_let_git_clone_and_refuse_its_push") {
        return;
    }
    let rules = json!({"rules": [{"host": "git.allowed.test", "allow": [
        {"method": ["GET", "HEAD"]},
        {"method": ["POST"], "path": "/smart/*.git/git-upload-pack"},
    ]}]});
    let net = boot_opened(rules);
    let repo = format!("https://git.allowed.test{SMART_REPO}");
    let (status, text) = net.text(&format!(
        "cd $(mktemp -d) && git clone -q {repo} r && cd r && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m push && git push -q origin HEAD 2>&1; echo \"push: $?\""
    ));
    assert_eq!(status, 0, "{text}");
    assert!(text.contains("403"), "{text}");
    assert!(!text.contains("push: 0"), "the push went through: {text}");
    let lines = net.egress();
    let refused: Vec<&Value> = lines
        .iter()
        .filter(|l| l["refusal"] == "rule_refused")
        .collect();
    assert!(
        refused.iter().any(|l| l["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("git-receive-pack"))
            || l["reason"]
                .as_str()
                .is_some_and(|r| r.contains("git-receive-pack"))),
        "{lines:?}"
    );
    let requests = net.internet.http_requests();
    assert!(requests.contains("git-upload-pack"), "{requests}");
    assert!(
        !requests.contains("POST git.allowed.test /smart/project.git/git-receive-pack"),
        "{requests}"
    );
}

/// What shell may try against the proxy and its authority.
#[test]
fn shell_cannot_misdirect_or_read_the_credential() {
    if !privileged("shell_cannot_misdirect_or_read_the_credential") {
        return;
    }
    let net = boot_opened(credential("allowed.test", &["shell", "runtime"]));
    // SNI naming another host than the CONNECT: refused before any request.
    let (_, text) = net.text(&format!(
        "python3 {} sni allowed.test www.allowed.test",
        attack_script(&net)
    ));
    assert!(text.contains("refused"), "{text}");
    // A Host header naming another host: 400, nothing reaches the origin.
    let (_, text) = net.text(&format!(
        "python3 {} host allowed.test www.allowed.test",
        attack_script(&net)
    ));
    assert!(text.contains("400"), "{text}");
    // Two requests in one: only the first reaches the origin.
    let (_, text) = net.text(&format!(
        "python3 {} smuggle allowed.test /echo/first /echo/second",
        attack_script(&net)
    ));
    assert_eq!(received(&net, "/echo/first").len(), 1, "{text}");
    assert_eq!(received(&net, "/echo/second").len(), 0, "{text}");
    // Downgraded to plain HTTP: no credential.
    let (_, text) = net.text(&format!(
        "python3 {} plain allowed.test",
        attack_script(&net)
    ));
    let seen = received(&net, "/echo/plain-attack");
    assert_eq!(seen.len(), 1, "{text}");
    assert_eq!(authorization(&seen[0]), None, "{seen:?}");
    // warden's memory is no user's to read: not dumpable, and shell's
    // and the runtime's attempts fail.
    let status = serde_json::to_value(net.machine.client().status().unwrap()).unwrap();
    assert_eq!(
        status["proxy"]["opened"]["memory_dumpable"], false,
        "{status}"
    );
    let pid = net.machine.warden_pid();
    for uid in [common::SHELL_UID, common::RUNTIME_UID] {
        let out = std::process::Command::new("setpriv")
            .args([
                "--reuid",
                &uid.to_string(),
                "--regid",
                &uid.to_string(),
                "--clear-groups",
            ])
            .args([
                "sh",
                "-c",
                &format!("cat /proc/{pid}/environ /proc/{pid}/mem /proc/{pid}/maps 2>&1; true"),
            ])
            .output()
            .unwrap();
        let text = common::text(&out.stdout);
        assert!(text.contains("Permission denied"), "{uid}: {text}");
        assert!(!text.contains(SECRET), "{uid}: {text}");
    }
    // The key, nowhere in the machine: no process's environment (every
    // process of the host, the machine's among them), no file of the
    // machine's (its homes, volumes and audit log), as root.
    let out = std::process::Command::new("sh")
        .args(["-c", &format!(
            "grep -l -a -- {SECRET} /proc/[0-9]*/environ 2>/dev/null; grep -rl -a -- {SECRET} {} 2>/dev/null; true",
            net.machine.root().display()
        )])
        .output()
        .unwrap();
    let listing = common::text(&out.stdout);
    assert_eq!(listing.trim(), "", "the secret was found in: {listing}");
    assert!(!std::fs::read_to_string(net.machine.audit_path())
        .unwrap()
        .contains(SECRET));
    assert!(!net.machine.log().contains(SECRET));
}

/// A script of raw TLS attacks, copied where shell may read it.
fn attack_script(net: &Net) -> String {
    let to = net.machine.shell_home.join("opened_attack.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/attacks/opened_attack.py"),
        &to,
    )
    .unwrap();
    to.display().to_string()
}

/// The owner hands credentials through the host's door alone, and a
/// host whose credential was not handed over is refused, saying so.
#[test]
fn credentials_come_through_the_host_s_door_only() {
    if !privileged("credentials_come_through_the_host_s_door_only") {
        return;
    }
    let key_dir = tempfile::tempdir().unwrap();
    let key = key_dir.path().join("key");
    std::fs::write(&key, format!("{}\n", common::HOST_KEY)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let host = key_dir.path().join("api.sock");
    let net = boot(
        |internet| policy(internet, credential("allowed.test", &["shell"])),
        |opts: &mut Options| {
            opts.config["host_socket"] = json!(host);
            opts.config["key_file"] = json!(key);
        },
    );
    let (_, text) = net.text("curl -sS --max-time 20 -i https://allowed.test/echo/early");
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(
        text.contains("TEST_TOKEN for allowed.test was not handed"),
        "{text}"
    );
    let local = net
        .machine
        .client()
        .hand_credentials(&format!("TEST_TOKEN={SECRET}\n"))
        .unwrap_err();
    assert!(local.to_string().contains("host's door only"), "{local}");
    let mut owner = Client::connect_keyed(&host, Some(common::HOST_KEY), None).unwrap();
    let names = owner
        .hand_credentials(&format!("TEST_TOKEN={SECRET}\n"))
        .unwrap();
    assert_eq!(names, ["TEST_TOKEN"]);
    let (status, text) = net.text("curl -sS --max-time 20 https://allowed.test/echo/late");
    assert_eq!(status, 0, "{text}");
    let seen = received(&net, "/echo/late");
    assert!(
        authorization(&seen[0]).is_some_and(|a| a.contains(SECRET)),
        "{seen:?}"
    );
    let handed = net.machine.audit_kinds("credentials_handed");
    assert_eq!(handed[0]["names"], json!(["TEST_TOKEN"]), "{handed:?}");
}
