//! `warden machine kube` for real: the Pod it prints runs under rootful
//! `podman kube play` with the baseline Pod Security Standard's
//! capabilities only. warden boots as PID 1, says in `status` what holds
//! and what cannot (the firewall and shell's own namespaces, without
//! NET_ADMIN and SYS_ADMIN), runs commands as shell, gives the runtime its
//! keys and never shell, and `podman kube down` keeps the claims, which a
//! second play finds again. The owner's way in, the TCP door on the pod's
//! loopback, is reached as `kubectl port-forward` reaches it: from inside
//! the pod's network namespace (here `nsenter -t PID -n`, PID the
//! machine's warden), with the machine's key from the printed Secret.

mod common;

use common::machine::{machine_id, podman, ready, show, IMAGE};
use common::{skipped, text, warden_bin};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const CANARY: &str = "canary-kube-7f3a";

/// A machine played from `warden machine kube`'s manifests, in a folder
/// of its own, with an image of this warden. Dropped, whatever happened,
/// its pod, volumes, podman secrets and image are removed.
struct Played {
    id: String,
    dir: tempfile::TempDir,
    image: String,
}

impl Played {
    fn new(tag: &str) -> Played {
        let id = machine_id(tag);
        Played {
            image: format!("localhost/warden-kube-{id}:test"),
            dir: tempfile::tempdir().unwrap(),
            id,
        }
    }

    fn pod(&self) -> String {
        format!("warden-{}", self.id)
    }

    /// The machine's container, as podman names it: `<pod>-<container>`.
    fn container(&self) -> String {
        format!("warden-{}-machine", self.id)
    }

    /// The base image with this build's warden as /sbin/warden: the
    /// manifests' `keys_from` is newer than a base image built earlier.
    fn build_image(&self) {
        let context = self.dir.path().join("image");
        std::fs::create_dir(&context).unwrap();
        std::fs::copy(warden_bin(), context.join("warden")).unwrap();
        let file = format!("FROM {IMAGE}\nCOPY warden /sbin/warden\n");
        std::fs::write(context.join("Containerfile"), file).unwrap();
        let out = podman(&["build", "-q", "-t", &self.image, &context.to_string_lossy()]);
        assert!(out.status.success(), "{}", show("build", &out));
    }

    /// `podman kube play --start=false`, with this host's limits as
    /// podman's default ulimits: podman's own (a million open files)
    /// exceed a hard limit a pod without CAP_SYS_RESOURCE cannot raise.
    fn play(&self, yaml: &Path) -> Output {
        let host = warden::launcher::host::get().unwrap_or_else(|e| panic!("{e}"));
        let limits: Vec<String> = host
            .ulimits
            .iter()
            .filter(|u| *u != "--ulimit")
            .map(|u| format!("{u:?}"))
            .collect();
        let conf = self.dir.path().join("containers.conf");
        let text = format!("[containers]\ndefault_ulimits = [{}]\n", limits.join(", "));
        std::fs::write(&conf, text).unwrap();
        Command::new(host.engine.program())
            .args(&host.global)
            .args(["kube", "play", "--start=false"])
            .arg(yaml)
            .env("CONTAINERS_CONF", &conf)
            .output()
            .unwrap()
    }

    /// Podman 4.3 writes a Secret's `data` into its volume undecoded (a
    /// kubelet decodes it): decode what it left so, before the pod starts.
    fn decode_secrets(&self, docs: &[Value]) {
        use base64::Engine;
        use std::os::unix::fs::PermissionsExt;
        for secret in docs.iter().filter(|d| d["kind"] == "Secret") {
            let name = secret["metadata"]["name"].as_str().unwrap();
            let out = podman(&["volume", "inspect", "--format", "{{.Mountpoint}}", name]);
            assert!(out.status.success(), "{}", show("volume inspect", &out));
            let folder = PathBuf::from(text(&out.stdout).trim());
            for (file, encoded) in secret["data"].as_object().unwrap() {
                let encoded = encoded.as_str().unwrap();
                let path = folder.join(file);
                if std::fs::read_to_string(&path).is_ok_and(|t| t == encoded) {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(encoded)
                        .unwrap();
                    std::fs::write(&path, bytes).unwrap();
                }
                // It also leaves the files 0644 where the manifests ask
                // 0400 (`defaultMode`, which a kubelet applies): warden
                // refuses a machine key others may read.
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
            }
        }
    }

    /// Plays `docs`, starts the pod and waits for warden's status.
    fn up(&self, docs: &[Value], file: &str) -> Value {
        let yaml = self.dir.path().join(file);
        let joined: Vec<String> = docs.iter().map(Value::to_string).collect();
        std::fs::write(&yaml, joined.join("\n---\n")).unwrap();
        let out = self.play(&yaml);
        assert!(out.status.success(), "{}", show("kube play", &out));
        self.decode_secrets(docs);
        let out = podman(&["pod", "start", &self.pod()]);
        assert!(out.status.success(), "{}", show("pod start", &out));
        self.status()
    }

    /// warden's status, read through its unix socket inside the machine.
    fn status(&self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.exec(&["warden", "status", "--json"]);
            if out.status.success() {
                return serde_json::from_slice(&out.stdout).unwrap();
            }
            if Instant::now() > deadline {
                let logs = podman(&["logs", &self.container()]);
                panic!("{}\n{}", show("status", &out), show("logs", &logs));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `podman exec` in the machine, as root.
    fn exec(&self, argv: &[&str]) -> Output {
        self.exec_as("0", argv)
    }

    /// `podman exec` in the machine, as `user`.
    fn exec_as(&self, user: &str, argv: &[&str]) -> Output {
        let container = self.container();
        let mut args = vec!["exec", "-u", user, &container];
        args.extend(argv);
        podman(&args)
    }

    /// A command for shell, through warden's API (`warden run`).
    fn run(&self, script: &str) -> Output {
        self.exec(&["warden", "run", "--", "sh", "-c", script])
    }

    /// As `run`, in (and free to write) the workspace's folder `folder`.
    fn run_in(&self, folder: &str, script: &str) -> Output {
        self.exec(&[
            "warden", "run", "--folder", folder, "--", "sh", "-c", script,
        ])
    }

    fn down(&self) {
        let yaml = self.dir.path().join("manifests.yaml");
        let out = podman(&["kube", "down", &yaml.to_string_lossy()]);
        assert!(out.status.success(), "{}", show("kube down", &out));
    }

    /// The machine's warden on the host, as podman sees it: the pod's
    /// network namespace is that process's.
    fn warden_pid(&self) -> String {
        let out = podman(&["inspect", "--format", "{{.State.Pid}}", &self.container()]);
        assert!(out.status.success(), "{}", show("inspect", &out));
        text(&out.stdout).trim().to_string()
    }

    /// `warden ARGS` on the host, in the pod's network namespace: where
    /// `kubectl port-forward` connects, so the door's `127.0.0.1:7000`.
    fn through_door(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.warden_pid(), "-n", "--"])
            .arg(warden_bin())
            .args(args)
            .output()
            .unwrap()
    }

    /// The machine's key, from the printed Secret, into a file of the
    /// owner's (mode 0600).
    fn key_file(&self, docs: &[Value], name: &str) -> PathBuf {
        use base64::Engine;
        use std::os::unix::fs::PermissionsExt;
        let secret = docs
            .iter()
            .find(|d| {
                d["kind"] == "Secret" && d["metadata"]["name"] == format!("{}-key", self.pod())
            })
            .unwrap();
        let key = base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["key"].as_str().unwrap())
            .unwrap();
        let path = self.dir.path().join(name);
        std::fs::write(&path, key).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    fn volume_exists(&self, name: &str) -> bool {
        podman(&["volume", "exists", name]).status.success()
    }
}

impl Drop for Played {
    fn drop(&mut self) {
        let _ = podman(&["pod", "rm", "-f", &self.pod()]);
        let base = self.pod();
        for suffix in ["", "-data", "-work", "-key", "-keys"] {
            let _ = podman(&["volume", "rm", "-f", &format!("{base}{suffix}")]);
        }
        for suffix in ["-key", "-keys"] {
            let _ = podman(&["secret", "rm", &format!("{base}{suffix}")]);
        }
        let _ = podman(&["rmi", "-f", &self.image]);
    }
}

/// podman makes a pod's pause image with catatonit.
fn has_catatonit(test: &str) -> bool {
    let found = ["/usr/libexec/podman/catatonit", "/usr/bin/catatonit"]
        .iter()
        .any(|p| Path::new(p).exists());
    if found {
        return true;
    }
    let reason =
        format!("{test}: needs catatonit for podman's pause image (scripts/test installs it)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason}, and CI=true forbids skipping");
    }
    skipped(&reason);
    false
}

/// The layer named `name` of a status.
fn layer<'a>(status: &'a Value, name: &str) -> &'a Value {
    let layers = status["layers"].as_array().unwrap();
    layers
        .iter()
        .find(|l| l["layer"] == name)
        .unwrap_or_else(|| panic!("no layer {name}"))
}

fn manifests(fx: &Played) -> Vec<Value> {
    let dir = fx.dir.path();
    let def = serde_json::json!({
        "id": fx.id,
        "image": fx.image,
        "keys": ["API_TOKEN"],
        "command": ["sleep", "infinity"],
    });
    std::fs::write(dir.join("def.json"), def.to_string()).unwrap();
    std::fs::write(
        dir.join(".env"),
        format!("API_TOKEN={CANARY}\nOTHER=not-named\n"),
    )
    .unwrap();
    let out = Command::new(warden_bin())
        .args(["machine", "kube"])
        .arg(dir.join("def.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("machine kube", &out));
    let yaml = text(&out.stdout);
    std::fs::write(dir.join("manifests.yaml"), &yaml).unwrap();
    yaml.split("\n---\n")
        .skip(1)
        .map(|doc| serde_json::from_str(doc).unwrap())
        .collect()
}

#[test]
fn a_pod_runs_under_baseline_with_its_keys_and_keeps_its_data() {
    let test = "a_pod_runs_under_baseline_with_its_keys_and_keeps_its_data";
    if !ready(test) || !has_catatonit(test) {
        return;
    }
    let fx = Played::new("kube");
    fx.build_image();
    let docs = manifests(&fx);
    let status = fx.up(&docs, "first.yaml");

    // What holds without NET_ADMIN and SYS_ADMIN, as status says it.
    for name in [
        "identity",
        "capabilities",
        "no_new_privs",
        "landlock",
        "seccomp",
        "rlimits",
        "lifetime",
    ] {
        let l = layer(&status, name);
        assert!(l["required"] == true && l["holds"] == true, "{l}");
    }
    let l = layer(&status, "shell_space");
    assert!(l["required"] == false && l["holds"] == false, "{l}");
    assert!(
        l["detail"].as_str().unwrap().contains("CAP_SYS_ADMIN"),
        "{l}"
    );
    // Without NET_ADMIN, nftables cannot hold: warden's connect gate holds
    // the (required) layer in its place, and says why.
    let l = layer(&status, "firewall");
    assert!(l["required"] == true && l["holds"] == true, "{l}");
    let detail = l["detail"].as_str().unwrap();
    assert!(detail.contains("held by warden's connect gate"), "{l}");
    assert!(detail.contains("CAP_NET_ADMIN"), "{l}");
    assert!(
        status.get("refusing").is_none_or(Value::is_null),
        "{status}"
    );

    // Commands run as shell, and the keys are the runtime's alone.
    let out = fx.run("id -un");
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("id", &out));
    let out = fx.exec(&["cat", "/home/runtime/.env"]);
    assert_eq!(
        text(&out.stdout),
        format!("API_TOKEN={CANARY}\n"),
        "{}",
        show(".env", &out)
    );
    let out = fx.exec_as(
        "2000",
        &[
            "sh",
            "-c",
            "tr '\\0' '\\n' < /proc/$(pgrep -x sleep)/environ",
        ],
    );
    assert!(
        text(&out.stdout).contains(CANARY),
        "{}",
        show("main's environ", &out)
    );
    let out = fx.run(
        "env; cat /home/runtime/.env /root/warden/runtime/runtime.env /root/warden/machine/key; \
         ls /root/warden; cat /proc/1/environ",
    );
    let seen = text(&out.stdout) + &text(&out.stderr);
    assert!(
        !seen.contains(CANARY) && !seen.contains("API_TOKEN"),
        "{seen}"
    );
    assert!(seen.contains("Permission denied"), "{seen}");

    // The owner's way in: the TCP door, with the key; refused without it.
    the_owner_comes_in_through_the_door(&fx, &docs);

    // What is written stays in the claims across `kube down`.
    let out = fx.run_in("kept", "echo kept-by-shell > marker");
    assert!(out.status.success(), "{}", show("write", &out));
    let out = fx.exec_as(
        "2000",
        &[
            "sh",
            "-c",
            "echo kept-by-runtime > /home/runtime/data/marker",
        ],
    );
    assert!(out.status.success(), "{}", show("write data", &out));
    fx.down();
    for claim in ["-data", "-work"] {
        assert!(
            fx.volume_exists(&format!("{}{claim}", fx.pod())),
            "{claim} kept"
        );
    }
    // The claims exist, as a cluster keeps them: podman 4.3 refuses to
    // make an existing volume again, so they are not played twice.
    let again: Vec<Value> = docs
        .into_iter()
        .filter(|d| d["kind"] != "PersistentVolumeClaim")
        .collect();
    let status = fx.up(&again, "second.yaml");
    assert_eq!(layer(&status, "landlock")["holds"], true);
    let out = fx.run_in("kept", "cat marker");
    assert_eq!(
        text(&out.stdout),
        "kept-by-shell\n",
        "{}",
        show("marker", &out)
    );
    let out = fx.exec(&["cat", "/home/runtime/data/marker"]);
    assert_eq!(
        text(&out.stdout),
        "kept-by-runtime\n",
        "{}",
        show("data", &out)
    );
}

/// `warden machine exec/status/audit --connect 127.0.0.1:7000 --key-file
/// K`, as after `kubectl port-forward pod/NAME 7000:7000`: a command runs
/// as shell, status and the log come back and the log verifies; a wrong
/// key is refused, and audited as the door's.
fn the_owner_comes_in_through_the_door(fx: &Played, docs: &[Value]) {
    const DOOR: &str = "127.0.0.1:7000";
    let key = fx.key_file(docs, "owner.key");
    let key = key.to_str().unwrap();
    let out = fx.through_door(&[
        "machine",
        "exec",
        "--connect",
        DOOR,
        "--key-file",
        key,
        "--",
        "id",
        "-un",
    ]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("exec", &out));
    let out = fx.through_door(&[
        "machine",
        "status",
        "--connect",
        DOOR,
        "--key-file",
        key,
        "--json",
    ]);
    assert!(out.status.success(), "{}", show("status", &out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(layer(&status, "landlock")["holds"], true);
    let out = fx.through_door(&["machine", "audit", "--connect", DOOR, "--key-file", key]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(
        said.contains("read through the machine's warden: lines 1 to"),
        "{said}"
    );
    assert!(said.contains("chain intact"), "{said}");
    // A wrong key, and none: refused.
    let wrong = fx.dir.path().join("wrong.key");
    std::fs::write(&wrong, "0".repeat(64)).unwrap();
    let out = fx.through_door(&[
        "machine",
        "exec",
        "--connect",
        DOOR,
        "--key-file",
        &wrong.to_string_lossy(),
        "--",
        "id",
    ]);
    assert!(!out.status.success(), "{}", show("wrong key", &out));
    assert!(
        text(&out.stderr).contains("wrong key"),
        "{}",
        show("wrong key", &out)
    );
    let out = fx.through_door(&["machine", "exec", "--connect", DOOR, "--", "id"]);
    assert!(!out.status.success(), "{}", show("no key", &out));
    assert!(
        text(&out.stderr).contains("needs the machine's key"),
        "{}",
        show("no key", &out)
    );
    let out = fx.exec(&["cat", "/home/runtime/data/audit/warden.jsonl"]);
    let log = text(&out.stdout);
    let refused = log
        .lines()
        .filter(|l| l.contains("\"kind\":\"connection_refused\"") && l.contains("\"via\":\"tcp\""))
        .count();
    assert_eq!(refused, 1, "{log}");
}
