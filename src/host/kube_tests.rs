//! Tests of `kube`: what a cluster is refused, and what each field of a
//! definition becomes in the manifests.

use super::*;
use crate::shared::config::MachineConfig;
use serde_json::Value;

const KEY: &str = "k3y-0123456789abcdef0123456789abcdef";

/// The smallest definition with `fields` laid over it.
fn def(fields: Value) -> Definition {
    let mut base = json!({"id": "demo", "image": "localhost/warden-machine:latest"});
    if let (Some(base), Value::Object(over)) = (base.as_object_mut(), fields) {
        base.extend(over);
    }
    Definition::parse(Path::new("/defs/demo.json"), &base.to_string())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn inputs<'a>(def: &'a Definition, sandbox: bool, class: Option<&'a str>) -> Inputs<'a> {
    Inputs {
        def,
        text: "{}",
        owner: 1000,
        keys_text: "API_TOKEN=t0ken\n",
        credentials_text: "",
        machine_key: KEY,
        sandbox,
        runtime_class: class,
    }
}

fn docs(def: &Definition, sandbox: bool) -> Vec<Value> {
    manifests(&inputs(def, sandbox, None)).unwrap_or_else(|e| panic!("{e}"))
}

fn kinds(docs: &[Value]) -> Vec<String> {
    let kind = |d: &Value| {
        format!(
            "{}/{}",
            d["kind"].as_str().unwrap(),
            d["metadata"]["name"].as_str().unwrap()
        )
    };
    docs.iter().map(kind).collect()
}

/// The one document of `kind`.
fn of<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let mut found = docs.iter().filter(|d| d["kind"] == kind);
    let one = found.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(found.next().is_none(), "one {kind}");
    one
}

/// The pod's spec: the Pod's, or the Sandbox's template.
fn pod_of(docs: &[Value]) -> &Value {
    match docs.iter().find(|d| d["kind"] == "Pod") {
        Some(pod) => &pod["spec"],
        None => &of(docs, "Sandbox")["spec"]["podTemplate"]["spec"],
    }
}

#[test]
fn refusals_name_the_field() {
    let cases = [
        (
            json!({"image": null, "dockerfile": "/defs/Dockerfile"}),
            "dockerfile",
        ),
        (
            json!({"lend": [{"host": "/h", "at": "/lent", "mode": "read"}]}),
            "lend[0]",
        ),
        (json!({"workspace": "/home/me/w"}), "workspace"),
        (json!({"network": "host"}), "network \"host\""),
        (json!({"network": "/run/netns/x"}), "network"),
        (json!({"keep_id": "shell"}), "keep_id"),
        (json!({"setup": "/defs/setup.sh"}), "setup"),
        (json!({"kind": "vm"}), "kind \"vm\""),
        (
            json!({"network": "private", "ports": [{"port": 7000, "host": 7000}]}),
            "ports 7000",
        ),
    ];
    for (fields, field) in cases {
        let d = def(fields.clone());
        let e = manifests(&inputs(&d, false, None)).expect_err(&fields.to_string());
        assert!(
            e.to_string().starts_with(&format!("{field}: ")),
            "{fields}: {e}"
        );
    }
    // A VM becomes the pod's RuntimeClass; a required firewall passes
    // (the connect gate holds it without NET_ADMIN).
    let vm = def(json!({"kind": "vm", "firewall": "required"}));
    let docs = manifests(&inputs(&vm, false, Some("kata"))).unwrap();
    assert_eq!(pod_of(&docs)["runtimeClassName"], "kata");
}

#[test]
fn a_pod_has_its_secrets_config_claims_and_policy() {
    let cases: [(Value, bool, Vec<&str>); 4] = [
        (
            json!({"keys": ["API_TOKEN"]}),
            false,
            vec![
                "Secret/warden-demo-key",
                "Secret/warden-demo-keys",
                "ConfigMap/warden-demo",
                "NetworkPolicy/warden-demo",
                "PersistentVolumeClaim/warden-demo-data",
                "PersistentVolumeClaim/warden-demo-work",
                "Pod/warden-demo",
            ],
        ),
        (
            json!({"network": "private"}),
            false,
            vec![
                "Secret/warden-demo-key",
                "ConfigMap/warden-demo",
                "PersistentVolumeClaim/warden-demo-data",
                "PersistentVolumeClaim/warden-demo-work",
                "Pod/warden-demo",
            ],
        ),
        (
            json!({"network": "private", "keys": ["API_TOKEN"]}),
            true,
            vec![
                "Secret/warden-demo-key",
                "Secret/warden-demo-keys",
                "ConfigMap/warden-demo",
                "Sandbox/warden-demo",
            ],
        ),
        (
            json!({}),
            true,
            vec![
                "Secret/warden-demo-key",
                "ConfigMap/warden-demo",
                "NetworkPolicy/warden-demo",
                "Sandbox/warden-demo",
            ],
        ),
    ];
    for (fields, sandbox, want) in cases {
        let d = def(fields.clone());
        let docs = docs(&d, sandbox);
        assert_eq!(kinds(&docs), want, "{fields}");
        for doc in &docs {
            let labels = &doc["metadata"]["labels"];
            assert_eq!(labels["warden.owner"], "1000", "{fields}");
            assert_eq!(labels["warden.machine"], "demo", "{fields}");
        }
        let pod = pod_of(&docs);
        let mounts = pod["containers"][0]["volumeMounts"].as_array().unwrap();
        let volumes = pod["volumes"].as_array().unwrap();
        let named = |list: &[Value], name: &str| list.iter().any(|v| v["name"] == name);
        for name in ["data", "work", "config", "machine-key"] {
            assert!(named(mounts, name), "{fields}: mount {name}");
        }
        assert_eq!(
            named(mounts, "runtime-keys"),
            !d.keys.is_empty(),
            "{fields}"
        );
        assert_eq!(
            named(volumes, "runtime-keys"),
            !d.keys.is_empty(),
            "{fields}"
        );
        // A Sandbox's claims are the controller's to add, by name.
        assert_eq!(named(volumes, "data"), !sandbox, "{fields}");
    }
}

#[test]
fn the_pod_asks_for_baseline_and_no_more() {
    let d = def(json!({"keys": ["API_TOKEN"]}));
    for sandbox in [false, true] {
        let docs = docs(&d, sandbox);
        let pod = pod_of(&docs);
        let context = &pod["containers"][0]["securityContext"];
        assert_eq!(context["capabilities"]["drop"], json!(["ALL"]));
        let added: Vec<&str> = context["capabilities"]["add"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert!(
            added.iter().all(|c| BASELINE_ALLOWED.contains(c)),
            "{added:?}"
        );
        // Everything the local launcher grants, but what baseline forbids.
        let left: Vec<&str> = CAPS.into_iter().filter(|c| !added.contains(c)).collect();
        assert_eq!(left, ["NET_ADMIN", "SYS_ADMIN"]);
        assert_eq!(context["privileged"], false);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(pod["automountServiceAccountToken"], false);
        let text = serde_json::to_string(&docs).unwrap();
        for forbidden in [
            "hostPath",
            "hostNetwork",
            "hostPID",
            "hostIPC",
            "Unconfined",
        ] {
            assert!(!text.contains(forbidden), "{forbidden}");
        }
        // Every Secret and the config are root's alone.
        for volume in pod["volumes"].as_array().unwrap() {
            for source in ["secret", "configMap"] {
                if volume[source].is_object() {
                    assert_eq!(volume[source]["defaultMode"], 0o400, "{volume}");
                }
            }
        }
    }
}

#[test]
fn fields_become_the_pods() {
    // (fields, JSON pointer into the pod's spec, value)
    let cases = [
        (json!({}), "/restartPolicy", json!("Never")),
        (
            json!({"restart": "on-failure"}),
            "/restartPolicy",
            json!("OnFailure"),
        ),
        (
            json!({"restart": "always"}),
            "/restartPolicy",
            json!("Always"),
        ),
        (json!({}), "/hostname", json!("demo")),
        (
            json!({}),
            "/containers/0/image",
            json!("localhost/warden-machine:latest"),
        ),
        (json!({}), "/containers/0/args", Value::Null),
        (
            json!({"command": ["node", "s.js"]}),
            "/containers/0/args",
            json!(["node", "s.js"]),
        ),
        (
            json!({}),
            "/containers/0/resources/limits",
            json!({"cpu": "2000m", "memory": "2147483648"}),
        ),
        (
            json!({"cpus": 0.5, "memory": "512m"}),
            "/containers/0/resources/limits",
            json!({"cpu": "500m", "memory": "536870912"}),
        ),
        (
            json!({"env": {"EDITOR": "vi"}}),
            "/containers/0/env",
            json!([{"name": "EDITOR", "value": "vi"}]),
        ),
        (
            json!({"network": "private", "ports": [{"port": 3000, "host": 3100}]}),
            "/containers/0/ports",
            json!([{"name": "warden", "containerPort": 7000, "protocol": "TCP"},
                   {"containerPort": 3000, "protocol": "TCP"}]),
        ),
        (
            json!({}),
            "/containers/0/ports",
            json!([{"name": "warden", "containerPort": 7000, "protocol": "TCP"}]),
        ),
        (json!({}), "/dnsPolicy", Value::Null),
        (
            json!({"network": "private", "dns": ["10.0.0.53"]}),
            "/dnsPolicy",
            json!("None"),
        ),
        (
            json!({"network": "private", "dns": ["10.0.0.53"]}),
            "/dnsConfig/nameservers",
            json!(["10.0.0.53"]),
        ),
        (json!({}), "/runtimeClassName", Value::Null),
    ];
    for (fields, pointer, want) in cases {
        let d = def(fields.clone());
        let docs = docs(&d, false);
        let got = pod_of(&docs)
            .pointer(pointer)
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(got, want, "{fields} {pointer}");
    }
}

#[test]
fn the_config_is_what_warden_reads() {
    let cases = [
        (json!({}), None, json!({}), false),
        (
            json!({"keys": ["API_TOKEN"], "hosts": ["example.org"], "firewall": "best-effort", "limits": {"timeout_ms": 1000}, "idle_stop_minutes": 2}),
            Some("/root/warden/runtime/runtime.env"),
            json!({"hosts": ["example.org"], "firewall": "best-effort"}),
            true,
        ),
    ];
    for (fields, keys_from, network, limits) in cases {
        let d = def(fields.clone());
        let docs = docs(&d, false);
        let data = &of(&docs, "ConfigMap")["data"];
        let config = MachineConfig::parse(data["machine.json"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{fields}: {e}"));
        assert_eq!(
            config.keys_from.as_deref(),
            keys_from.map(Path::new),
            "{fields}"
        );
        assert_eq!(config.key_file, Path::new("/root/warden/machine/key"));
        assert_eq!(config.policy_dir, Path::new(CONFIG_DIR));
        assert!(config.host_socket.is_none() && !config.main_waits_for_keys);
        // The owner's way in: the TCP door on the pod's loopback.
        assert_eq!(config.tcp_door, Some("127.0.0.1:7000".parse().unwrap()));
        assert_eq!(config.idle_stop_s, d.idle_stop_minutes.map(|_| 120));
        let file = (
            Path::new("network.json").to_path_buf(),
            data["network.json"].as_str().unwrap().to_string(),
        );
        crate::shared::policy::NetworkPolicy::parse(&file).unwrap_or_else(|e| panic!("{e}"));
        let got: Value = serde_json::from_str(&file.1).unwrap();
        assert_eq!(got, network, "{fields}");
        assert_eq!(data["limits.json"].is_string(), limits, "{fields}");
    }
}

#[test]
fn names_keys_and_digest() {
    let d = def(json!({"keys": ["API_TOKEN"]}));
    let docs = docs(&d, false);
    use base64::Engine;
    let secret = |name: &str, key: &str| {
        let doc = docs.iter().find(|x| x["metadata"]["name"] == name).unwrap();
        let data = doc["data"][key].as_str().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap();
        String::from_utf8(bytes).unwrap()
    };
    assert_eq!(secret("warden-demo-key", "key"), KEY);
    assert_eq!(
        secret("warden-demo-keys", "runtime.env"),
        "API_TOKEN=t0ken\n"
    );
    let pod = of(&docs, "Pod");
    let digest = kube_digest("{}", "localhost/warden-machine:latest");
    assert_eq!(digest.len(), 43);
    // The same digest as the local launcher's, in base64url.
    let hex = super::super::machine::inputs_digest("{}", "localhost/warden-machine:latest");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&digest)
        .unwrap();
    assert_eq!(crate::shared::audit_chain::hex(&bytes), hex);
    assert_eq!(
        pod["metadata"]["annotations"]["warden.inputs"],
        digest.as_str()
    );
    // The Sandbox carries the same, on itself and on its pod.
    let docs = self::docs(&d, true);
    let sandbox = of(&docs, "Sandbox");
    assert_eq!(sandbox["apiVersion"], SANDBOX_API);
    assert_eq!(
        sandbox["metadata"]["annotations"]["warden.inputs"],
        digest.as_str()
    );
    let template = &sandbox["spec"]["podTemplate"]["metadata"];
    assert_eq!(template["annotations"]["warden.inputs"], digest.as_str());
    assert_eq!(template["labels"]["warden.machine"], "demo");
    let claims: Vec<&Value> = sandbox["spec"]["volumeClaimTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["metadata"]["name"])
        .collect();
    assert_eq!(claims, [&json!("data"), &json!("work")]);
}

#[test]
fn rendered_documents_are_the_manifests() {
    let d = def(json!({"keys": ["API_TOKEN"]}));
    let docs = docs(&d, false);
    let text = render(&docs);
    assert!(text.starts_with("# "));
    let back: Vec<Value> = text
        .split("\n---\n")
        .skip(1)
        .map(|doc| serde_json::from_str(doc).unwrap())
        .collect();
    assert_eq!(back, docs);
}

#[test]
fn the_runtimes_ports_are_its_only_listens_where_its_gate_holds_it() {
    let ports = json!([{"port": 3000, "host": 3100}]);
    let cases = [
        (json!({"network": "private", "ports": ports}), vec![], false),
        (
            json!({"network": "private", "ports": ports, "runtime_hosts": ["api.example.com"]}),
            vec![3000u16],
            true,
        ),
    ];
    for (fields, want, written) in cases {
        let d = def(fields.clone());
        let docs = docs(&d, false);
        let text = of(&docs, "ConfigMap")["data"]["machine.json"]
            .as_str()
            .unwrap()
            .to_string();
        // Written only with runtime_hosts: an older warden refuses it.
        assert_eq!(text.contains("runtime_ports"), written, "{fields}");
        let config = MachineConfig::parse(&text).unwrap_or_else(|e| panic!("{fields}: {e}"));
        assert_eq!(config.runtime_ports, want, "{fields}");
    }
}
