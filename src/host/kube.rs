//! `warden machine kube DEF`: the Kubernetes manifests of a machine
//! definition, for a cluster that admits pods under the baseline Pod
//! Security Standard (see `docs/kubernetes.md`). Printed as JSON documents
//! between `---` lines, which is YAML that `kubectl apply -f -` and
//! `podman kube play` read.
//!
//! What is printed: the machine's key and the runtime's keys as Secrets,
//! mounted where root alone may enter; warden's config and policy as a
//! ConfigMap; the data and workspace volumes as PersistentVolumeClaims; a
//! NetworkPolicy that shuts the pod off where the definition's network is
//! "none"; and the machine itself, a Pod, or with `--sandbox` an
//! agent-sandbox `Sandbox` (agents.x-k8s.io/v1alpha1) whose claims are
//! its own. What a cluster has no equivalent for is refused, naming the
//! field. `manifests` is pure; `kube` reads the files and the key.

use super::agent::Restart;
use super::create::CAPS;
use super::definition::{Definition, Kind, Network, Source, Workspace};
use super::error::LaunchError;
use super::machine::{inputs_bytes, keys_for};
use super::state::{fresh_key, limits_policy, network_policy, PREFIX};
use serde_json::{json, Map, Value};
use std::path::Path;

/// The capabilities the baseline Pod Security Standard allows a pod to
/// add (Kubernetes' pod-security-standards, "Capabilities").
pub const BASELINE_ALLOWED: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Pure: the capabilities warden asks a cluster for: those of
/// `create::CAPS` that the baseline Pod Security Standard allows. NET_ADMIN
/// (the firewall) and SYS_ADMIN (shell's own /tmp, /dev/shm and IPC
/// namespace; /proc with hidepid) are not among them.
pub fn baseline_caps() -> Vec<&'static str> {
    CAPS.into_iter()
        .filter(|c| BASELINE_ALLOWED.contains(c))
        .collect()
}

/// Where the Secrets are mounted: in root's home, which no one else may
/// enter (mode 0700), whatever modes the cluster gives the files.
pub const MACHINE_KEY_DIR: &str = "/root/warden/machine";
pub const RUNTIME_KEYS_DIR: &str = "/root/warden/runtime";
pub const CREDENTIALS_DIR: &str = "/root/warden/credentials";
/// Where the ConfigMap is mounted: warden's own folder, in place of the
/// image's (as the local launcher mounts its config and policy over it).
pub const CONFIG_DIR: &str = "/etc/warden";

/// The pod's TCP door: warden's API on the pod's loopback, for the owner
/// with the machine's key, reached with `kubectl port-forward` (the
/// config's `tcp_door`, and the container's port `warden`).
pub const DOOR_PORT: u16 = 7000;

/// What each claim asks for: a definition gives no size for its volumes.
pub const DATA_STORAGE: &str = "1Gi";
pub const WORK_STORAGE: &str = "10Gi";

/// The Sandbox's API (kubernetes-sigs/agent-sandbox).
pub const SANDBOX_API: &str = "agents.x-k8s.io/v1alpha1";

/// How long the cluster waits between SIGTERM and SIGKILL: warden's own
/// grace (10 s) and a margin.
const GRACE_SECONDS: u64 = 15;

/// Everything the manifests are made of.
pub struct Inputs<'a> {
    pub def: &'a Definition,
    /// The definition's text, for the inputs digest.
    pub text: &'a str,
    /// The uid of the owner, as the local launcher labels machines.
    pub owner: u32,
    /// The runtime's `.env`: only the keys the definition names.
    pub keys_text: &'a str,
    /// The values of the credentials warden's proxy adds.
    pub credentials_text: &'a str,
    pub machine_key: &'a str,
    pub sandbox: bool,
    pub runtime_class: Option<&'a str>,
}

/// Reads the definition and the runtime's keys, makes a machine key, and
/// returns the manifests as text.
pub fn kube(
    definition: &Path,
    env_file: Option<&Path>,
    sandbox: bool,
    runtime_class: Option<&str>,
) -> Result<String, LaunchError> {
    let def = Definition::load(definition)?;
    let text = std::fs::read_to_string(definition).map_err(|e| LaunchError::io(definition, e))?;
    let keys_text = keys_for(&def, definition, env_file)?;
    let credentials_text = super::machine::credentials_for(&def, definition, env_file)?;
    let machine_key = fresh_key().map_err(|e| LaunchError::new("machine key", e.to_string()))?;
    let inputs = Inputs {
        def: &def,
        text: &text,
        owner: super::engine::owner(),
        keys_text: &keys_text,
        credentials_text: &credentials_text,
        machine_key: &machine_key,
        sandbox,
        runtime_class,
    };
    Ok(render(&manifests(&inputs)?))
}

/// Pure: the documents as YAML (JSON documents between `---` lines).
pub fn render(documents: &[Value]) -> String {
    let mut out = String::from("# warden machine kube: see docs/kubernetes.md\n");
    for document in documents {
        out.push_str("---\n");
        out.push_str(&serde_json::to_string_pretty(document).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// Pure: the manifests, in the order a cluster applies them (what the
/// machine mounts first), or the first field a cluster cannot carry.
pub fn manifests(inputs: &Inputs) -> Result<Vec<Value>, LaunchError> {
    refuse(inputs.def, inputs.runtime_class)?;
    let def = inputs.def;
    let meta = |name: String| metadata(name, &def.id, inputs.owner, None);
    let mut out = vec![
        secret(meta(key_secret(&def.id)), "key", inputs.machine_key),
        config_map(meta(def.container(PREFIX)), def),
    ];
    if !def.keys.is_empty() {
        out.insert(
            1,
            secret(meta(keys_secret(&def.id)), "runtime.env", inputs.keys_text),
        );
    }
    if !def.opened.keys().is_empty() {
        let credentials = secret(
            meta(credentials_secret(&def.id)),
            "credentials.env",
            inputs.credentials_text,
        );
        out.insert(1, credentials);
    }
    if def.network == Network::None {
        out.push(network_policy_none(meta(def.container(PREFIX)), &def.id));
    }
    let digest = kube_digest(inputs.text, image(def));
    let machine = metadata(def.container(PREFIX), &def.id, inputs.owner, Some(&digest));
    let pod = pod_spec(inputs);
    if inputs.sandbox {
        let claims = [("data", DATA_STORAGE), ("work", WORK_STORAGE)]
            .map(|(name, size)| claim_template(name, size, &def.id, inputs.owner));
        out.push(json!({
            "apiVersion": SANDBOX_API,
            "kind": "Sandbox",
            "metadata": machine.clone(),
            "spec": {
                "podTemplate": {"metadata": template_meta(&machine), "spec": pod},
                "volumeClaimTemplates": claims,
            },
        }));
    } else {
        out.push(claim(meta(def.data_volume(PREFIX)), DATA_STORAGE));
        out.push(claim(meta(def.work_volume(PREFIX)), WORK_STORAGE));
        out.push(json!({"apiVersion": "v1", "kind": "Pod", "metadata": machine, "spec": pod}));
    }
    Ok(out)
}

/// Pure: the inputs digest (`machine::inputs_digest`, of the image's
/// reference: a cluster pulls it) in base64url, 43 characters: podman
/// before 5.0 refuses an annotation's value past 63, as if it were a
/// label's.
pub fn kube_digest(text: &str, image: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(inputs_bytes(text, image));
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
}

/// The Secret of the machine's key: `warden-<id>-key`.
pub fn key_secret(id: &str) -> String {
    format!("{PREFIX}-{id}-key")
}

/// The Secret of the runtime's keys: `warden-<id>-keys`.
pub fn keys_secret(id: &str) -> String {
    format!("{PREFIX}-{id}-keys")
}

/// The Secret of the credentials warden's proxy adds:
/// `warden-<id>-credentials`, read by warden at boot into its memory.
pub fn credentials_secret(id: &str) -> String {
    format!("{PREFIX}-{id}-credentials")
}

/// The image reference (a Dockerfile is refused before this is asked).
fn image(def: &Definition) -> &str {
    match &def.source {
        Source::Image(image) => image,
        Source::Dockerfile(_) => "",
    }
}

/// Pure: the first field of the definition a cluster cannot carry under
/// the baseline Pod Security Standard, said with what to do instead.
pub fn refuse(def: &Definition, runtime_class: Option<&str>) -> Result<(), LaunchError> {
    let no = |field: String, why: &str| Err(LaunchError::new(field, why));
    if let Source::Dockerfile(_) = def.source {
        return no("dockerfile".into(), "a cluster pulls its images: build it, push it where the cluster pulls from, and name it in \"image\"");
    }
    if let Some((i, _)) = def.lend.iter().enumerate().next() {
        return no(format!("lend[{i}]"), "a cluster has no folder of this host to lend (hostPath is forbidden under the baseline Pod Security Standard): put it in the image, or copy it into the workspace");
    }
    if let Workspace::Folder(_) = def.workspace {
        return no("workspace".into(), "a folder of this host cannot be lent on a cluster (hostPath is forbidden under baseline): use \"volume\", a PersistentVolumeClaim");
    }
    match &def.network {
        Network::Host => return no("network \"host\"".into(), "hostNetwork is forbidden under the baseline Pod Security Standard: use \"private\" or \"none\""),
        Network::Namespace(_) => return no("network".into(), "a namespace of this host does not exist on a cluster: use \"private\" or \"none\""),
        Network::None | Network::Private => {}
    }
    if def.keep_id.is_on() {
        return no("keep_id".into(), "rootless podman's mapping of the owner's uid has no equivalent in a pod, whose volumes are the cluster's");
    }
    if def.setup.is_some() {
        return no("setup".into(), "`warden machine up` runs it once in the machine; manifests cannot: run it in the image's build");
    }
    if def.ports.iter().any(|p| p.port == DOOR_PORT) {
        return no(format!("ports {DOOR_PORT}"), "in a pod this port is warden's own door (its API on loopback, for `kubectl port-forward`): serve on another port");
    }
    if def.kind == Kind::Vm && runtime_class.is_none() {
        return no("kind \"vm\"".into(), "on a cluster a VM is the pod's RuntimeClass: name one with --runtime-class (a Kata Containers class, for example)");
    }
    Ok(())
}

/// Pure: metadata with the labels the local launcher puts on machines
/// (`warden.owner`, `warden.machine`) and, for the machine itself, the
/// inputs digest as an annotation (a label's value holds 63 characters).
fn metadata(name: String, id: &str, owner: u32, digest: Option<&str>) -> Value {
    let mut meta = json!({
        "name": name,
        "labels": {"warden.owner": owner.to_string(), "warden.machine": id},
    });
    if let Some(digest) = digest {
        meta["annotations"] = json!({"warden.inputs": digest});
    }
    meta
}

/// The pod template's metadata: the machine's labels and annotations.
fn template_meta(machine: &Value) -> Value {
    json!({"labels": machine["labels"], "annotations": machine["annotations"]})
}

/// A Secret of one file. Its `data` (base64), not `stringData`: podman
/// 4.3 mounts only `data`.
fn secret(meta: Value, key: &str, value: &str) -> Value {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(value);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {key: encoded},
    })
}

/// Pure: warden's config and policy files, as the local launcher writes
/// them, for a pod: the keys from their Secrets, the policy beside the
/// config. The firewall stays as the definition says (required by
/// default): without NET_ADMIN, warden's connect gate holds it.
fn config_map(meta: Value, def: &Definition) -> Value {
    let mut config = json!({
        "key_file": format!("{MACHINE_KEY_DIR}/key"),
        "tcp_door": format!("127.0.0.1:{DOOR_PORT}"),
        "policy_dir": CONFIG_DIR,
        "idle_stop_s": def.idle_stop_minutes.map(|m| (m * 60.0).round().max(1.0) as u64),
    });
    if !def.keys.is_empty() {
        config["keys_from"] = json!(format!("{RUNTIME_KEYS_DIR}/runtime.env"));
    }
    if !def.opened.keys().is_empty() {
        config["credentials_from"] = json!(format!("{CREDENTIALS_DIR}/credentials.env"));
    }
    if let Some(ports) = super::state::runtime_ports(def) {
        config["runtime_ports"] = ports;
    }
    let network = network_policy(def).unwrap_or_else(|| json!({}));
    let mut data = Map::new();
    data.insert("machine.json".into(), json!(format!("{config:#}\n")));
    data.insert("network.json".into(), json!(format!("{network:#}\n")));
    if let Some(limits) = limits_policy(def) {
        data.insert("limits.json".into(), json!(format!("{limits:#}\n")));
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
}

fn claim_spec(size: &str) -> Value {
    json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}})
}

fn claim(meta: Value, size: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": claim_spec(size),
    })
}

/// A Sandbox's claim: the controller names it `<name>-<sandbox>` and
/// mounts it as the pod's volume `<name>`.
fn claim_template(name: &str, size: &str, id: &str, owner: u32) -> Value {
    json!({"metadata": metadata(name.into(), id, owner, None), "spec": claim_spec(size)})
}

/// Pure: no traffic in or out of the machine's pod ("network": "none";
/// held where the cluster's network enforces NetworkPolicy).
fn network_policy_none(meta: Value, id: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": {
            "podSelector": {"matchLabels": {"warden.machine": id}},
            "policyTypes": ["Ingress", "Egress"],
        },
    })
}

/// Pure: the pod: warden as PID 1 (the image's entrypoint) with the
/// definition's command, the baseline's capabilities only, the volumes,
/// the limits and the name servers.
fn pod_spec(inputs: &Inputs) -> Value {
    let def = inputs.def;
    let mut spec = json!({
        "hostname": def.id,
        "restartPolicy": restart_policy(def.restart),
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container(inputs)],
        "volumes": volumes(inputs),
    });
    if let Some(class) = inputs.runtime_class {
        spec["runtimeClassName"] = json!(class);
    }
    if !def.dns.is_empty() {
        spec["dnsPolicy"] = json!("None");
        spec["dnsConfig"] = json!({"nameservers": def.dns});
    }
    spec
}

fn restart_policy(restart: Restart) -> &'static str {
    match restart {
        Restart::No => "Never",
        Restart::OnFailure => "OnFailure",
        Restart::Always => "Always",
    }
}

/// Pure: the machine's one container.
fn container(inputs: &Inputs) -> Value {
    let def = inputs.def;
    let (cpus, memory, _) = def.size.resolved(usize::MAX);
    let mut mounts = vec![
        json!({"name": "data", "mountPath": "/home/runtime/data"}),
        json!({"name": "work", "mountPath": "/home/runtime/workspace"}),
        json!({"name": "config", "mountPath": CONFIG_DIR, "readOnly": true}),
        json!({"name": "machine-key", "mountPath": MACHINE_KEY_DIR, "readOnly": true}),
    ];
    if !def.keys.is_empty() {
        mounts
            .push(json!({"name": "runtime-keys", "mountPath": RUNTIME_KEYS_DIR, "readOnly": true}));
    }
    if !def.opened.keys().is_empty() {
        mounts.push(json!({"name": "credentials", "mountPath": CREDENTIALS_DIR, "readOnly": true}));
    }
    let mut container = json!({
        "name": "machine",
        "image": image(def),
        "securityContext": {
            "privileged": false,
            "capabilities": {"drop": ["ALL"], "add": baseline_caps()},
        },
        "resources": {"limits": {
            "cpu": format!("{}m", (cpus * 1000.0).round() as u64),
            "memory": memory.to_string(),
        }},
        "volumeMounts": mounts,
    });
    // The image's entrypoint is warden (`/sbin/warden init --`): the
    // command follows it, as with the local launcher.
    if let Some(argv) = &def.command {
        container["args"] = json!(argv);
    }
    if !def.env.is_empty() {
        let env: Vec<Value> = def
            .env
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        container["env"] = json!(env);
    }
    // warden's door first (on the pod's loopback: only a port-forward
    // reaches it), then the runtime's servers.
    let mut ports = vec![json!({"name": "warden", "containerPort": DOOR_PORT, "protocol": "TCP"})];
    ports.extend(
        def.ports
            .iter()
            .map(|p| json!({"containerPort": p.port, "protocol": "TCP"})),
    );
    container["ports"] = json!(ports);
    container
}

/// Pure: the pod's volumes. A Sandbox's claims are added by its
/// controller, from its volumeClaimTemplates.
fn volumes(inputs: &Inputs) -> Vec<Value> {
    let def = inputs.def;
    // Readable by root alone; the files are warden's.
    const ROOT_ONLY: u32 = 0o400;
    // `optional` said, as Kubernetes' default: podman 4.3 crashes on a
    // secret volume without it.
    let secret =
        |name: String| json!({"secretName": name, "defaultMode": ROOT_ONLY, "optional": false});
    let mut volumes = vec![
        json!({"name": "config", "configMap": {"name": def.container(PREFIX), "defaultMode": ROOT_ONLY}}),
        json!({"name": "machine-key", "secret": secret(key_secret(&def.id))}),
    ];
    if !def.keys.is_empty() {
        volumes.push(json!({"name": "runtime-keys", "secret": secret(keys_secret(&def.id))}));
    }
    if !def.opened.keys().is_empty() {
        volumes.push(json!({"name": "credentials", "secret": secret(credentials_secret(&def.id))}));
    }
    if !inputs.sandbox {
        for (name, claim) in [
            ("data", def.data_volume(PREFIX)),
            ("work", def.work_volume(PREFIX)),
        ] {
            volumes.push(json!({"name": name, "persistentVolumeClaim": {"claimName": claim}}));
        }
    }
    volumes
}

#[cfg(test)]
#[path = "kube_tests.rs"]
mod tests;
