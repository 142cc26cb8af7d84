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

mod common;

use common::internet::Internet;
use common::machine::{podman, ready, sh_in, show, warden, TestMachine, IMAGE};
use common::{text, warden_bin};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

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

/// The secret as a grep pattern that does not hold it (its last
/// character in brackets): no command line or log holds the value.
fn pattern() -> String {
    let (head, last) = SECRET.split_at(SECRET.len() - 1);
    format!("{head}[{last}]")
}

/// An image removed when dropped: declared before the machine, it goes
/// after it.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = podman(&["rmi", "-f", &self.0]);
    }
}

/// The base image with this build's warden as /sbin/warden: the base
/// image's warden may be older than opened hosts (`hand_credentials`,
/// protocol 7).
fn this_wardens_image(fx: &TestMachine) -> Image {
    let image = Image(format!("localhost/warden-opened-{}:test", fx.id));
    let context = fx.dir.path().join("image");
    std::fs::create_dir(&context).unwrap();
    std::fs::copy(warden_bin(), context.join("warden")).unwrap();
    let file = format!("FROM {IMAGE}\nCOPY warden /sbin/warden\n");
    std::fs::write(context.join("Containerfile"), file).unwrap();
    let out = podman(&["build", "-q", "-t", &image.0, &context.to_string_lossy()]);
    assert!(out.status.success(), "{}", show("build", &out));
    image
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

/// Rootful podman, on the internet's namespace: the credential from the
/// owner's `.env` reaches the origin on shell's plain curl (no CA flag:
/// the machine's bundle trusts its proxy's authority), the echo comes
/// back masked in every form, and the value is in no file of the
/// machine's (its volumes too), no process's environment, not in its
/// logs, its audit log or its status; the runtime's `.env` holds its own
/// key only.
#[test]
fn a_podman_machine_adds_the_owners_credential_and_holds_it_nowhere_else() {
    let test = "a_podman_machine_adds_the_owners_credential_and_holds_it_nowhere_else";
    if !ready(test) {
        return;
    }
    let started = Instant::now();
    let net = Internet::start();
    let fx = TestMachine::new("opened");
    let image = this_wardens_image(&fx);
    let ca = owners_files(fx.dir.path(), &net);
    fx.define(merged(
        merged(json!({"image": image.0}), opened(&ca)),
        on_the_internet(&net),
    ));
    eprintln!(
        "internet and image: {:.2} s",
        started.elapsed().as_secs_f64()
    );

    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(said.contains("credentials handed to warden: 1"), "{said}");
    assert_no_secret("up", &said);

    let audit = || warden(&["machine", "audit", &fx.id]);
    // shell's curl, no flag of its own: through the proxy, which adds the
    // credential and masks its echo (the body and X-Echo- headers).
    let timed = Instant::now();
    let out = fx.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "20",
        "-D",
        "-",
        "https://allowed.test/echo",
    ]);
    eprintln!("curl: {:.2} s", timed.elapsed().as_secs_f64());
    assert_masked_echo("curl", &out, &audit);
    assert!(
        text(&out.stdout).contains("X-Echo-Authorization: Bearer ****"),
        "{}",
        show("curl", &out)
    );
    // Its base64 and URL forms, as the origin sends them back.
    let out = fx.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "20",
        "https://allowed.test/echo?b64=1&url=1",
    ]);
    assert_masked_echo("curl b64 url", &out, &audit);
    assert!(
        text(&out.stdout).contains("\nb64=*"),
        "{}",
        show("curl b64", &out)
    );
    assert_credential_arrived(&net, "/echo", 2);

    // The runtime's .env: its own key, not the credential.
    let out = sh_in(&fx, "0", "cat /home/runtime/.env");
    let dotenv = text(&out.stdout);
    assert!(out.status.success(), "{}", show("cat .env", &out));
    assert_eq!(dotenv, format!("API_TOKEN={RUNTIME_KEY}\n"));
    assert!(!dotenv.contains("TEST_TOKEN"), "{dotenv}");

    // Every file of the machine (its volumes, lends and the published
    // bundle too; not /proc and /sys), as the machine's root: a control
    // written in the runtime's volume shows the search reaches them.
    let timed = Instant::now();
    let script = format!(
        "echo control-mark-5 > /home/runtime/data/opened-control; \
         set --; for d in /*; do case $d in /proc|/sys) ;; *) set -- \"$@\" \"$d\" ;; esac; done; \
         timeout 300 grep -rl -a -D skip -e '{}' -e 'control-mark-[5]' \"$@\" 2>/dev/null; \
         for f in /proc/[0-9]*/environ; do \
           tr '\\0' '\\n' < $f 2>/dev/null | grep -q -e '{}' && echo \"environ $f\"; \
         done; \
         echo \"environs with PATH: $(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c '^PATH=')\"",
        pattern(),
        pattern()
    );
    let out = sh_in(&fx, "0", &script);
    eprintln!(
        "search as the machine's root: {:.2} s",
        timed.elapsed().as_secs_f64()
    );
    let found = text(&out.stdout);
    let lines: Vec<&str> = found.lines().collect();
    assert!(
        lines.contains(&"/home/runtime/data/opened-control"),
        "{}",
        show("search", &out)
    );
    let counted = lines
        .iter()
        .find_map(|l| l.strip_prefix("environs with PATH: "))
        .and_then(|n| n.trim().parse::<u32>().ok())
        .unwrap_or(0);
    assert!(
        counted > 0,
        "no environment was read: {}",
        show("search", &out)
    );
    let holding: Vec<&&str> = lines
        .iter()
        .filter(|l| {
            !l.starts_with("environs with PATH") && **l != "/home/runtime/data/opened-control"
        })
        .collect();
    assert!(holding.is_empty(), "the secret is in: {holding:?}");
    // Every process's environment, read as the host's root (the machine's
    // own root cannot read warden's: it is not dumpable).
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "grep -l -a -e '{}' /proc/[0-9]*/environ 2>/dev/null; true",
                pattern()
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout).trim(),
        "",
        "environments holding the secret"
    );

    // The machine's output, its audit log (read through warden and the
    // copy it verified) and its status.
    let out = warden(&["machine", "logs", &fx.id]);
    assert!(out.status.success(), "{}", show("logs", &out));
    let logs = text(&out.stdout) + &text(&out.stderr);
    assert!(!logs.trim().is_empty(), "no logs");
    assert_no_secret("logs", &logs);
    let out = warden(&["machine", "audit", &fx.id]);
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(said.contains("chain intact"), "{said}");
    assert_no_secret("audit", &said);
    let copy = warden::host::machine::state_dir(&fx.id).join("audit-copy/warden.jsonl");
    let log = std::fs::read_to_string(&copy).unwrap();
    assert_no_secret("the audit log", &log);
    assert!(log.contains("\"credentials_handed\""), "{log}");
    assert!(
        log.lines().any(|l| l.contains("\"egress\"")
            && l.contains("\"credential\":\"TEST_TOKEN for allowed.test\"")),
        "{log}"
    );
    assert_status_shows_the_opened_host(&warden, &fx.id, 2);

    // Stopped, then started by `exec --start`: warden held the values in
    // its memory alone, and the start hands them again from the owner's
    // `.env`, never from a file of the machine's.
    let out = warden(&["machine", "stop", &fx.id]);
    assert!(out.status.success(), "{}", show("stop", &out));
    let out = warden(&[
        "machine",
        "exec",
        &fx.id,
        "--start",
        "--",
        "curl",
        "-sS",
        "--max-time",
        "20",
        "https://allowed.test/echo",
    ]);
    assert_masked_echo("curl after a start", &out, &audit);
    eprintln!("{test}: {:.2} s", started.elapsed().as_secs_f64());
}

/// Where the kube machine's image holds the internet's CA: a cluster has
/// no lends, so the owner's image carries it.
const KUBE_CA: &str = "/usr/local/share/warden-test/internet-ca.pem";

/// `warden machine kube` of a definition with the credential, its value
/// in the `.env` beside it; the manifests (also written to
/// manifests.yaml, for `kube down`), parsed.
fn kube_manifests(fx: &common::kube::Played, net: &Internet) -> Vec<Value> {
    let dir = fx.dir.path();
    let def = json!({
        "id": fx.id,
        "image": fx.image,
        "network": "private",
        "dns": [net.v4.to_string()],
        "allow_addresses": [format!("{}/32", net.v4), format!("{}/128", net.v6)],
        "hosts": ["allowed.test"],
        "credentials": [{"host": "allowed.test", "key": "TEST_TOKEN", "for": ["shell"]}],
        "upstream_ca": [KUBE_CA],
        "keys": ["API_TOKEN"],
        "command": ["sleep", "infinity"],
    });
    std::fs::write(dir.join("def.json"), def.to_string()).unwrap();
    std::fs::write(
        dir.join(".env"),
        format!("TEST_TOKEN={SECRET}\nAPI_TOKEN={RUNTIME_KEY}\n"),
    )
    .unwrap();
    let out = warden(&["machine", "kube", &dir.join("def.json").to_string_lossy()]);
    assert!(out.status.success(), "{}", show("machine kube", &out));
    let yaml = text(&out.stdout);
    std::fs::write(dir.join("manifests.yaml"), &yaml).unwrap();
    assert_no_secret("the manifests as printed", &yaml);
    yaml.split("\n---\n")
        .skip(1)
        .map(|doc| serde_json::from_str(doc).unwrap())
        .collect()
}

/// The one document of `kind` named `name`.
fn document<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {docs:#?}"))
}

/// A Secret's file, decoded.
fn secret_file(secret: &Value, file: &str) -> String {
    use base64::Engine;
    let data = secret["data"][file]
        .as_str()
        .unwrap_or_else(|| panic!("no {file} in {secret}"));
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap()
}

/// The manifests carry the credential in a Secret of its own, which the
/// pod mounts read-only where its config's `credentials_from` names; the
/// runtime's keys Secret and the ConfigMap do not hold it.
fn assert_kube_manifests(fx: &common::kube::Played, docs: &[Value]) {
    let pod = fx.pod();
    let credentials = document(docs, "Secret", &format!("{pod}-credentials"));
    assert_eq!(
        secret_file(credentials, "credentials.env"),
        format!("TEST_TOKEN={SECRET}\n")
    );
    let keys = document(docs, "Secret", &format!("{pod}-keys"));
    assert_eq!(
        secret_file(keys, "runtime.env"),
        format!("API_TOKEN={RUNTIME_KEY}\n")
    );
    let config = document(docs, "ConfigMap", &pod);
    let machine: Value =
        serde_json::from_str(config["data"]["machine.json"].as_str().unwrap()).unwrap();
    assert_eq!(
        machine["credentials_from"], "/root/warden/credentials/credentials.env",
        "{machine}"
    );
    let network: Value =
        serde_json::from_str(config["data"]["network.json"].as_str().unwrap()).unwrap();
    assert_eq!(network["credentials"][0]["key"], "TEST_TOKEN", "{network}");
    assert_eq!(network["upstream_ca"], json!([KUBE_CA]), "{network}");
    let spec = &document(docs, "Pod", &pod)["spec"];
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "credentials")
        .unwrap_or_else(|| panic!("no credentials volume: {spec}"));
    assert_eq!(
        volume["secret"]["secretName"],
        format!("{pod}-credentials"),
        "{volume}"
    );
    assert_eq!(volume["secret"]["defaultMode"], 0o400, "{volume}");
    let mount = spec["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "credentials")
        .unwrap_or_else(|| panic!("no credentials mount: {spec}"));
    assert_eq!(mount["mountPath"], "/root/warden/credentials", "{mount}");
    assert_eq!(mount["readOnly"], true, "{mount}");
    // Only the credentials Secret holds the value (base64, as Secrets do).
    for doc in docs {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        if doc["kind"] == "Secret" && name == format!("{pod}-credentials") {
            continue;
        }
        let said = doc.to_string();
        assert_no_secret(name, &said);
        assert!(
            !said.contains(&credentials["data"]["credentials.env"].to_string()),
            "{said}"
        );
    }
}

/// `warden machine kube`'s manifests (the credential in a Secret of its
/// own, named by `credentials_from`, not in the runtime's keys) under
/// `podman kube play` with baseline's capabilities: warden reads the
/// credential from its Secret at boot, its proxy adds it to shell's
/// request, the echo comes back masked, and neither shell, the runtime's
/// `.env`, the audit log nor the logs hold it. Last, shell's tools trust
/// the machine's authority with no flag, as in the other kinds.
#[test]
fn a_pod_adds_the_credential_from_its_secret() {
    let test = "a_pod_adds_the_credential_from_its_secret";
    if !ready(test) || !common::kube::has_catatonit(test) {
        return;
    }
    let started = Instant::now();
    let net = Internet::start();
    let fx = common::kube::Played::new("kopened");
    fx.build_image_with(&[(&net.ca, KUBE_CA)]);
    let docs = kube_manifests(&fx, &net);
    assert_kube_manifests(&fx, &docs);
    // The pod on podman's own network, as played; the internet reached
    // through a link laid into its namespace, as a cluster's network
    // would carry it (podman 4.3 cannot put a pod on a namespace by path:
    // "pods presently do not support network mode path"; on "none" it
    // writes no name server). warden resolves and connects when asked,
    // after the link is there.
    let timed = Instant::now();
    let status = fx.up(&docs, "manifests.yaml");
    eprintln!("kube play and boot: {:.2} s", timed.elapsed().as_secs_f64());
    link_into(&net, &fx.warden_pid(), &[]);
    let said = status.to_string();
    assert_no_secret("status", &said);
    let opened = &status["proxy"]["opened"];
    assert_eq!(opened["hosts"], json!(["allowed.test"]), "{status}");
    assert_eq!(opened["credentials"][0]["handed"], true, "{opened}");

    // The pod's audit log, through the owner's door.
    let key = fx.key_file(&docs, "owner.key");
    let audit = || fx.door(&key, "audit", &[]);
    // The credential from the Secret, on a request that trusts the
    // machine's authority: the bundle warden wrote (its mount over the
    // system bundle needs SYS_ADMIN, which baseline does not give; see
    // the end), copied where shell reads it.
    let out = fx.exec(&[
        "sh",
        "-c",
        "install -m 0644 /run/warden/trust.pem /tmp/machine-bundle.pem",
    ]);
    assert!(out.status.success(), "{}", show("copy the bundle", &out));
    let out =
        fx.run("curl -sS --max-time 20 --cacert /tmp/machine-bundle.pem https://allowed.test/echo");
    assert_masked_echo("curl in the pod", &out, &audit);
    assert_credential_arrived(&net, "/echo", 1);
    let status = fx.status();
    assert_eq!(
        status["proxy"]["opened"]["credentials"][0]["requests"], 1,
        "{status}"
    );

    // The runtime's .env holds its key alone; the Secret's file is root's.
    let out = fx.exec(&["cat", "/home/runtime/.env"]);
    assert_eq!(
        text(&out.stdout),
        format!("API_TOKEN={RUNTIME_KEY}\n"),
        "{}",
        show(".env", &out)
    );
    let out = fx.run("cat /root/warden/credentials/credentials.env; env");
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(said.contains("Permission denied"), "{said}");
    assert_no_secret("shell", &said);
    let out = fx.exec(&["cat", "/home/runtime/data/audit/warden.jsonl"]);
    let log = text(&out.stdout);
    assert!(
        log.contains("\"credential\":\"TEST_TOKEN for allowed.test\""),
        "{log}"
    );
    assert_no_secret("the audit log", &log);
    let out = podman(&["logs", &fx.container()]);
    assert_no_secret("logs", &(text(&out.stdout) + &text(&out.stderr)));

    // Shell's tools trust the machine's authority with no flag, as in
    // every other kind of machine.
    let out = fx.run("curl -sS --max-time 20 https://allowed.test/echo/no-flag");
    let trust = &fx.status()["proxy"]["opened"]["trust"];
    assert!(
        out.status.success(),
        "no flag: {}\nstatus says the authority's trust is {trust}",
        show("curl", &out)
    );
    assert_masked_echo("curl with no flag", &out, &audit);
    assert_credential_arrived(&net, "/echo/no-flag", 1);
    eprintln!("{test}: {:.2} s", started.elapsed().as_secs_f64());
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

/// The private VM kit `vm_warden` runs with (`WARDEN_VM_CACHE`).
static VM_KIT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// `warden ARGS` with the private kit of `vm_kit_of_this_warden`.
fn vm_warden(args: &[&str]) -> std::process::Output {
    let kit = VM_KIT.get().expect("the private kit is made first");
    common::machine::warden_with(args, &[(warden::host::vm::KIT_VAR, kit)])
}

/// A kit of the shared one's kernel, volumes and root disks, whose
/// initramfs's /init is this build's warden: the shared kit's may be
/// older than opened hosts. Its initramfs is the shared one with a second
/// cpio archive appended holding `init` (the kernel unpacks both, the
/// later file replacing the earlier); the rest are links. Removed with
/// the guard.
fn vm_kit_of_this_warden(shared: &Path) -> common::machine::Gone {
    let kit = tempfile::Builder::new()
        .prefix("warden-kit-")
        .tempdir_in("/var/tmp")
        .unwrap()
        .keep();
    let gone = common::machine::Gone(kit.clone());
    for file in ["vmlinuz", "data.ext4", "workspace.ext4", "rootfs.ext4"] {
        let target = std::fs::canonicalize(shared.join(file)).unwrap();
        std::os::unix::fs::symlink(target, kit.join(file)).unwrap();
    }
    // The root disks made per image: linked, so none is made again (on a
    // fresh host no VM has made one yet: this VM makes its own).
    let images = kit.join("images");
    std::fs::create_dir(&images).unwrap();
    std::fs::set_permissions(&images, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let made = match std::fs::read_dir(shared.join("images")) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        listed => listed.unwrap().flatten().collect(),
    };
    for disk in made {
        if disk.file_name().to_string_lossy().ends_with(".ext4") {
            std::os::unix::fs::symlink(disk.path(), images.join(disk.file_name())).unwrap();
        }
    }
    // warden without its debug info: a smaller initramfs to unpack under
    // emulation.
    let stage = kit.join("stage");
    std::fs::create_dir(&stage).unwrap();
    let out = std::process::Command::new("strip")
        .args(["--strip-debug", "-o"])
        .arg(stage.join("init"))
        .arg(warden_bin())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("strip", &out));
    std::fs::copy(shared.join("initrd.gz"), kit.join("initrd.gz")).unwrap();
    let pack = format!(
        "cd '{}' && echo init | cpio -o -H newc -R 0:0 --quiet | gzip >> '{}'",
        stage.display(),
        kit.join("initrd.gz").display()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &pack])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("cpio", &out));
    std::fs::remove_dir_all(&stage).unwrap();
    gone
}

/// A VM machine on the internet through the host's relay (as in
/// vm_network.rs), one boot: the credential from the owner's `.env` is
/// handed to the guest's warden over vsock, its proxy adds it to shell's
/// plain curl (the machine's bundle trusted with no flag), the origin
/// receives it, and nothing the owner reads holds it.
#[test]
fn a_vm_adds_the_owners_credential_through_the_hosts_relay() {
    let test = "a_vm_adds_the_owners_credential_through_the_hosts_relay";
    let Some(_one) = common::vm::ready(test) else {
        return;
    };
    let started = Instant::now();
    let shared = common::vm::kit(test).unwrap().dir;
    let kit = vm_kit_of_this_warden(&shared);
    VM_KIT.get_or_init(|| kit.0.clone());
    assert_eq!(VM_KIT.get(), Some(&kit.0), "one private kit per run");
    let net = Internet::start();
    let id = common::machine::machine_id("vm-opened");
    let state = warden::host::machine::state_dir(&id);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let m = TestMachine::in_folder(id, dir, vm_warden, state);
    let ca = owners_files(m.dir.path(), &net);
    m.define(merged(
        merged(json!({"image": IMAGE, "kind": "vm"}), opened(&ca)),
        on_the_internet(&net),
    ));
    eprintln!("kit and internet: {:.2} s", started.elapsed().as_secs_f64());

    let out = m.up();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(said.contains("credentials handed to warden: 1"), "{said}");
    assert!(said.contains("the VM's relay listening"), "{said}");
    assert_no_secret("up", &said);

    let timed = Instant::now();
    let out = m.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "60",
        "https://allowed.test/echo",
    ]);
    eprintln!("curl in the VM: {:.2} s", timed.elapsed().as_secs_f64());
    assert_masked_echo("curl in the VM", &out, &|| {
        vm_warden(&["machine", "audit", &m.id])
    });
    assert_credential_arrived(&net, "/echo", 1);

    assert_status_shows_the_opened_host(&vm_warden, &m.id, 1);
    let out = vm_warden(&["machine", "audit", &m.id]);
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(said.contains("chain intact"), "{said}");
    assert!(said.contains("credentials_handed"), "{said}");
    assert_no_secret("audit", &said);
    let out = vm_warden(&["machine", "logs", &m.id]);
    assert_no_secret("logs", &(text(&out.stdout) + &text(&out.stderr)));
    eprintln!("{test}: {:.2} s", started.elapsed().as_secs_f64());
}

/// `docker ARGS`.
fn docker(args: &[&str]) -> std::process::Output {
    std::process::Command::new("docker")
        .args(args)
        .output()
        .unwrap()
}

/// `warden ARGS` with Docker as the engine.
fn docker_warden(args: &[&str]) -> std::process::Output {
    std::process::Command::new(warden_bin())
        .args(args)
        .env("WARDEN_ENGINE", "docker")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Root, a Docker daemon that answers, and the base image in it (as
/// machines_docker.rs asks).
fn docker_ready(test: &str) -> bool {
    if !common::privileged(test) {
        return false;
    }
    let out = docker(&["image", "inspect", "--format", "{{.Id}}", IMAGE]);
    if out.status.success() {
        return true;
    }
    let problem = format!(
        "{test}: needs a Docker daemon with {IMAGE} (scripts/test starts dockerd and loads it): {}",
        text(&out.stderr).trim()
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{problem}, and CI=true forbids skipping");
    }
    common::skipped(&problem);
    false
}

/// Docker, its machine built from a Dockerfile of this build's warden:
/// the credential from the owner's `.env` reaches the origin on shell's
/// plain curl, the echo comes back masked, and the runtime's `.env`
/// holds its own key only. The tests' daemon has no bridge (scripts/test
/// starts it with --bridge=none, keeping the host's network as it is) and
/// Docker cannot join a namespace by path: the machine is made on "none"
/// and a link from the internet laid into its namespace, as the bridge
/// would be; the name server the engine wrote in its resolv.conf is
/// answered by the internet's.
#[test]
fn a_docker_machine_adds_the_owners_credential() {
    let test = "a_docker_machine_adds_the_owners_credential";
    if !docker_ready(test) {
        return;
    }
    let started = Instant::now();
    let net = Internet::start();
    let id = common::machine::machine_id("dk-opened");
    let state = warden::host::machine::state_dir(&id);
    let m = TestMachine::in_folder(id, tempfile::tempdir().unwrap(), docker_warden, state);
    let ca = owners_files(m.dir.path(), &net);
    std::fs::copy(warden_bin(), m.dir.path().join("warden")).unwrap();
    std::fs::write(
        m.dir.path().join("Dockerfile"),
        format!("FROM {IMAGE}\nCOPY warden /sbin/warden\n"),
    )
    .unwrap();
    m.define(merged(
        opened(&ca),
        json!({
            "dockerfile": "Dockerfile",
            "network": "none",
            "allow_addresses": [format!("{}/32", net.v4), format!("{}/128", net.v6)],
        }),
    ));
    let out = m.up();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(said.contains("credentials handed to warden: 1"), "{said}");
    assert_no_secret("up", &said);
    let container = m.container();
    let out = docker(&["inspect", "--format", "{{.State.Pid}}", &container]);
    let pid = text(&out.stdout).trim().to_string();
    let out = docker(&["exec", &container, "cat", "/etc/resolv.conf"]);
    let name_servers: Vec<std::net::Ipv4Addr> = text(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("nameserver "))
        .filter_map(|a| a.trim().parse().ok())
        .collect();
    assert!(!name_servers.is_empty(), "{}", show("resolv.conf", &out));
    link_into(&net, &pid, &name_servers);

    let out = m.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "20",
        "https://allowed.test/echo",
    ]);
    assert_masked_echo("curl on Docker", &out, &|| {
        docker_warden(&["machine", "audit", &m.id])
    });
    assert_credential_arrived(&net, "/echo", 1);
    // The runtime's .env (read as the container's root): its key alone.
    let out = docker(&["exec", &container, "cat", "/home/runtime/.env"]);
    assert!(out.status.success(), "{}", show("cat .env", &out));
    assert_eq!(text(&out.stdout), format!("API_TOKEN={RUNTIME_KEY}\n"));
    assert_status_shows_the_opened_host(&docker_warden, &m.id, 1);
    let out = docker_warden(&["machine", "audit", &m.id]);
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(said.contains("chain intact"), "{said}");
    assert_no_secret("audit", &said);
    let out = docker_warden(&["machine", "logs", &m.id]);
    assert_no_secret("logs", &(text(&out.stdout) + &text(&out.stderr)));
    eprintln!("{test}: {:.2} s", started.elapsed().as_secs_f64());
}

/// Rootless podman, as the owner `warden-owner` (tests/common/rootless.rs),
/// its machine built from a Dockerfile of this build's warden: the
/// credential from the owner's `.env` reaches the origin on shell's plain
/// curl, the echo comes back masked, and the runtime's `.env` holds its
/// own key only. A rootless owner cannot join the internet's namespace
/// (root's: the launcher refuses it), and "private" (slirp4netns) reaches
/// only the host's own networks, which the tests may not send to: the
/// machine is made on "none", its image naming the internet's name
/// server, and a link from the internet laid into its namespace by the
/// host's root, with a route to the internet's address through it. (Here
/// "private" is refused anyway: the owner cannot open /dev/net/tun.)
#[test]
fn a_rootless_machine_adds_the_owners_credential() {
    let test = "a_rootless_machine_adds_the_owners_credential";
    if !ready(test) {
        return;
    }
    let started = Instant::now();
    let owner = common::rootless::owner();
    let net = Internet::start();
    let m = common::rootless::rootless_machine("rl-opened", json!({}));
    let ca = owners_files(m.dir.path(), &net);
    std::fs::copy(warden_bin(), m.dir.path().join("warden")).unwrap();
    // The internet's name server in the image's own resolv.conf, which
    // podman leaves in place on "none" (it writes none there, and the
    // definition's `dns` needs a network of the machine's own).
    std::fs::write(
        m.dir.path().join("resolv.conf"),
        format!("nameserver {}\n", net.v4),
    )
    .unwrap();
    std::fs::write(
        m.dir.path().join("Dockerfile"),
        format!("FROM {IMAGE}\nCOPY warden /sbin/warden\nCOPY resolv.conf /etc/resolv.conf\n"),
    )
    .unwrap();
    m.edit(|d| {
        d.as_object_mut().unwrap().remove("image");
        let fields = merged(
            opened(&ca),
            json!({
                "dockerfile": "Dockerfile",
                "network": "none",
                "allow_addresses": [format!("{}/32", net.v4), format!("{}/128", net.v6)],
            }),
        );
        d.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
    });
    // All of it the owner's, as their own project would be.
    let out = std::process::Command::new("chown")
        .args(["-R", &owner.uid.to_string()])
        .arg(m.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("chown", &out));
    eprintln!(
        "owner and internet: {:.2} s",
        started.elapsed().as_secs_f64()
    );

    let out = m.up();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(said.contains("credentials handed to warden: 1"), "{said}");
    assert_no_secret("up", &said);
    let container = m.container();
    let as_owner = |args: &[&str]| owner.command("podman", args).output().unwrap();
    let out = as_owner(&["inspect", "--format", "{{.State.Pid}}", &container]);
    let pid = text(&out.stdout).trim().to_string();
    assert!(!pid.is_empty(), "{}", show("inspect", &out));
    link_into(&net, &pid, &[]);

    let out = m.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "20",
        "https://allowed.test/echo",
    ]);
    assert_masked_echo("curl rootless", &out, &|| {
        owner.warden(&["machine", "audit", &m.id])
    });
    assert_credential_arrived(&net, "/echo", 1);
    let out = as_owner(&["exec", "-u", "0", &container, "cat", "/home/runtime/.env"]);
    assert!(out.status.success(), "{}", show("cat .env", &out));
    assert_eq!(text(&out.stdout), format!("API_TOKEN={RUNTIME_KEY}\n"));
    assert_status_shows_the_opened_host(&|args: &[&str]| owner.warden(args), &m.id, 1);
    let out = owner.warden(&["machine", "audit", &m.id]);
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(said.contains("chain intact"), "{said}");
    assert_no_secret("audit", &said);
    let out = owner.warden(&["machine", "logs", &m.id]);
    assert_no_secret("logs", &(text(&out.stdout) + &text(&out.stderr)));
    eprintln!("{test}: {:.2} s", started.elapsed().as_secs_f64());
}
