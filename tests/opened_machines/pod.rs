//! A pod of `warden machine kube`'s manifests under `podman kube play`:
//! the credential in a Secret of its own, read by warden at boot.

use super::{
    assert_credential_arrived, assert_masked_echo, assert_no_secret, link_into, RUNTIME_KEY, SECRET,
};
use crate::common;
use crate::common::internet::Internet;
use crate::common::kube::Played;
use crate::common::machine::{podman, ready, show, warden};
use crate::common::text;
use serde_json::{json, Value};
use std::time::Instant;

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
    the_pod_plays_linked_to_the_internet(&fx, &net, &docs);

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

    nothing_in_the_pod_holds_it_but_its_secret(&fx);

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

/// The pod on podman's own network, as played; the internet reached
/// through a link laid into its namespace, as a cluster's network
/// would carry it (podman 4.3 cannot put a pod on a namespace by path:
/// "pods presently do not support network mode path"; on "none" it
/// writes no name server). warden resolves and connects when asked,
/// after the link is there. Its status names the host, the credential
/// handed, and not its value.
fn the_pod_plays_linked_to_the_internet(fx: &Played, net: &Internet, docs: &[Value]) {
    let timed = Instant::now();
    let status = fx.up(docs, "manifests.yaml");
    eprintln!("kube play and boot: {:.2} s", timed.elapsed().as_secs_f64());
    link_into(net, &fx.warden_pid(), &[]);
    let said = status.to_string();
    assert_no_secret("status", &said);
    let opened = &status["proxy"]["opened"];
    assert_eq!(opened["hosts"], json!(["allowed.test"]), "{status}");
    assert_eq!(opened["credentials"][0]["handed"], true, "{opened}");
}

/// The runtime's .env holds its key alone; the Secret's file is root's;
/// neither shell, the audit log nor the logs hold the value.
fn nothing_in_the_pod_holds_it_but_its_secret(fx: &Played) {
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
}
