"""`warden machine kube` against the official schemas: every manifest it
prints for a few definitions validates (strictly: no unknown field) against
Kubernetes 1.34's own schemas with kubernetes-validate, the Sandbox against
the agent-sandbox CRD's published schema (a copy beside this file; see
README.md), and every pod keeps to the baseline Pod Security Standard."""

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
#: The Kubernetes version the manifests are held to.
KUBERNETES = "1.34.0"
#: The binary to ask: $WARDEN_BIN, else the release build scripts/test makes.
WARDEN = Path(os.environ.get("WARDEN_BIN") or REPO / "target/x86_64-unknown-linux-gnu/release/warden")
SANDBOX_SCHEMA = json.loads((HERE / "sandbox-v1alpha1.schema.json").read_text())

#: What the baseline Pod Security Standard lets a container add.
BASELINE_CAPS = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

#: (name, definition's fields beyond id and image, command-line options)
CASES = [
    ("smallest", {}, []),
    ("keys", {"keys": ["API_TOKEN"], "command": ["sleep", "infinity"]}, []),
    (
        "private",
        {
            "network": "private",
            "keys": ["API_TOKEN"],
            "env": {"EDITOR": "vi"},
            "ports": [{"port": 3000, "host": 3100}],
            "dns": ["10.0.0.53"],
            "hosts": ["example.org"],
            "limits": {"timeout_ms": 60000},
            "cpus": 0.5,
            "memory": "512m",
            "restart": "on-failure",
            "idle_stop_minutes": 30,
        },
        [],
    ),
    ("class", {"kind": "vm"}, ["--runtime-class", "kata"]),
    ("sandbox", {"keys": ["API_TOKEN"]}, ["--sandbox"]),
    ("sandbox-private", {"network": "private", "restart": "always"}, ["--sandbox", "--runtime-class", "gvisor"]),
]


def manifests(tmp_path, fields, options):
    if not WARDEN.exists():
        pytest.fail(f"no warden at {WARDEN}: build it (scripts/test does) or set WARDEN_BIN")
    definition = {"id": "schema-test", "image": "localhost/warden-machine:latest", **fields}
    (tmp_path / "def.json").write_text(json.dumps(definition))
    (tmp_path / ".env").write_text("API_TOKEN=not-a-real-token\n")
    out = subprocess.run(
        [str(WARDEN), "machine", "kube", str(tmp_path / "def.json"), *options],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    # What kubectl and podman read: YAML.
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def pod_specs(docs):
    """Every pod spec: a Pod's, and a Sandbox's template."""
    for doc in docs:
        if doc["kind"] == "Pod":
            yield doc["metadata"]["name"], doc["spec"]
        elif doc["kind"] == "Sandbox":
            yield doc["metadata"]["name"], doc["spec"]["podTemplate"]["spec"]


def baseline_breaches(spec):
    """What in a pod spec the baseline Pod Security Standard forbids."""
    found = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            found.append(key)
    found += [f"hostPath volume {v['name']}" for v in spec.get("volumes", []) if "hostPath" in v]
    profiles = [spec.get("securityContext", {}).get("seccompProfile", {})]
    for c in spec["containers"] + spec.get("initContainers", []):
        context = c.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"{c['name']} privileged")
        extra = set(context.get("capabilities", {}).get("add", [])) - BASELINE_CAPS
        if extra:
            found.append(f"{c['name']} adds {sorted(extra)}")
        found += [f"{c['name']} hostPort" for p in c.get("ports", []) if p.get("hostPort")]
        profiles.append(context.get("seccompProfile", {}))
    found += ["seccomp Unconfined" for p in profiles if p.get("type") == "Unconfined"]
    return found


@pytest.mark.parametrize("name,fields,options", CASES, ids=[c[0] for c in CASES])
def test_every_manifest_validates(tmp_path, name, fields, options):
    docs = manifests(tmp_path, fields, options)
    kinds = [d["kind"] for d in docs]
    assert kinds.count("Sandbox") + kinds.count("Pod") == 1, kinds
    for doc in docs:
        if doc["kind"] == "Sandbox":
            jsonschema.validate(doc, SANDBOX_SCHEMA)
            # Its template is a pod: held to the Pod's own schema too.
            template = doc["spec"]["podTemplate"]
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": doc["metadata"]["name"], **template.get("metadata", {})}, "spec": template["spec"]}
            kubernetes_validate.validate(pod, KUBERNETES, strict=True)
        else:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    for pod, spec in pod_specs(docs):
        assert baseline_breaches(spec) == [], pod
        assert spec["containers"][0]["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_the_validators_refuse_what_is_wrong(tmp_path):
    """Each check above refuses a manifest broken on purpose."""
    docs = manifests(tmp_path, {"keys": ["API_TOKEN"]}, ["--sandbox"])
    sandbox = next(d for d in docs if d["kind"] == "Sandbox")
    wrong = json.loads(json.dumps(sandbox))
    wrong["spec"]["replicas"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, SANDBOX_SCHEMA)
    del wrong["spec"]["podTemplate"]
    wrong["spec"]["replicas"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, SANDBOX_SCHEMA)
    docs = manifests(tmp_path, {}, [])
    pod = next(d for d in docs if d["kind"] == "Pod")
    wrong = json.loads(json.dumps(pod))
    wrong["spec"]["containers"][0]["capabilties"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, KUBERNETES, strict=True)
    wrong = json.loads(json.dumps(pod))
    wrong["spec"]["hostNetwork"] = True
    wrong["spec"]["containers"][0]["securityContext"]["capabilities"]["add"].append("NET_ADMIN")
    wrong["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    assert len(baseline_breaches(wrong["spec"])) == 3


@pytest.mark.parametrize("fields,field", [
    ({"lend": [{"host": "/srv/p", "at": "/lent/p", "mode": "read"}]}, "lend[0]"),
    ({"network": "host"}, 'network "host"'),
])
def test_what_a_cluster_cannot_carry_is_refused(tmp_path, fields, field):
    definition = {"id": "schema-test", "image": "localhost/warden-machine:latest", **fields}
    (tmp_path / "def.json").write_text(json.dumps(definition))
    out = subprocess.run([str(WARDEN), "machine", "kube", str(tmp_path / "def.json")], capture_output=True, text=True, check=False)
    assert out.returncode != 0 and out.stdout == ""
    assert f"{field}: " in out.stderr, out.stderr
