//! Machines played from `warden machine kube`'s manifests with rootful
//! `podman kube play`, for the Kubernetes tests: the pod made as a
//! kubelet would make it, warden's status and commands through `podman
//! exec`, the owner's TCP door reached from inside the pod's network
//! namespace, and everything removed whatever happened.

use super::machine::{machine_id, podman, show, IMAGE};
use super::{skipped, text, warden_bin};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The pod's TCP door, as `kubectl port-forward pod/NAME 7000:7000` makes
/// it reachable (here: from inside the pod's network namespace).
pub const DOOR: &str = "127.0.0.1:7000";

/// A machine played from `warden machine kube`'s manifests, in a folder
/// of its own, with an image of this warden. Dropped, whatever happened,
/// its pod, volumes, podman secrets and image are removed.
pub struct Played {
    pub id: String,
    pub dir: tempfile::TempDir,
    pub image: String,
    /// Held until the pod is gone: podman 4.3 reserves the pod's
    /// containerPort (the door's 7000) on the host, so two pods cannot
    /// run at once.
    _alone: std::sync::MutexGuard<'static, ()>,
}

static ONE_POD: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Played {
    pub fn new(tag: &str) -> Played {
        // A test that failed holding it poisoned it: its pod is gone all
        // the same (dropped while unwinding).
        let alone = ONE_POD.lock().unwrap_or_else(|e| e.into_inner());
        let id = machine_id(tag);
        Played {
            image: format!("localhost/warden-kube-{id}:test"),
            dir: tempfile::tempdir().unwrap(),
            id,
            _alone: alone,
        }
    }

    pub fn pod(&self) -> String {
        format!("warden-{}", self.id)
    }

    /// The machine's container, as podman names it: `<pod>-<container>`.
    pub fn container(&self) -> String {
        format!("warden-{}-machine", self.id)
    }

    /// The base image with this build's warden as /sbin/warden: the
    /// manifests' `keys_from` is newer than a base image built earlier.
    pub fn build_image(&self) {
        self.build_image_with(&[]);
    }

    /// As `build_image`, with files of the host's copied into the image:
    /// `(from, at)`, `at` absolute.
    pub fn build_image_with(&self, files: &[(&Path, &str)]) {
        let context = self.dir.path().join("image");
        std::fs::create_dir(&context).unwrap();
        std::fs::copy(warden_bin(), context.join("warden")).unwrap();
        let mut file = format!("FROM {IMAGE}\nCOPY warden /sbin/warden\n");
        for (i, (from, at)) in files.iter().enumerate() {
            std::fs::copy(from, context.join(format!("file-{i}"))).unwrap();
            file += &format!("COPY file-{i} {at}\n");
        }
        std::fs::write(context.join("Containerfile"), file).unwrap();
        let out = podman(&["build", "-q", "-t", &self.image, &context.to_string_lossy()]);
        assert!(out.status.success(), "{}", show("build", &out));
    }

    /// `podman kube play --start=false`, with this host's limits as
    /// podman's default ulimits: podman's own (a million open files)
    /// exceed a hard limit a pod without CAP_SYS_RESOURCE cannot raise.
    pub fn play(&self, yaml: &Path) -> Output {
        let host = warden::host::this_host::get().unwrap_or_else(|e| panic!("{e}"));
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

    /// What a kubelet does with the Pod's Secret and ConfigMap volumes,
    /// and podman 4.3 leaves undone, done before the pod starts: it writes
    /// a Secret's `data` undecoded, and leaves every file 0644 where the
    /// volume asks its `defaultMode` (0400: warden refuses a machine key
    /// others may read, and its config is root's alone, as the local
    /// launcher leaves it).
    pub fn as_a_kubelet_would(&self, docs: &[Value]) {
        use base64::Engine;
        use std::os::unix::fs::PermissionsExt;
        let pod = docs.iter().find(|d| d["kind"] == "Pod").unwrap();
        for volume in pod["spec"]["volumes"].as_array().unwrap() {
            let (name, mode) = match (&volume["secret"], &volume["configMap"]) {
                (Value::Object(s), _) => (&s["secretName"], &s["defaultMode"]),
                (_, Value::Object(c)) => (&c["name"], &c["defaultMode"]),
                _ => continue,
            };
            let name = name.as_str().unwrap();
            let mode = mode.as_u64().unwrap() as u32;
            let source = docs
                .iter()
                .find(|d| d["metadata"]["name"] == name && d["kind"] != "Pod")
                .unwrap();
            let out = podman(&["volume", "inspect", "--format", "{{.Mountpoint}}", name]);
            assert!(out.status.success(), "{}", show("volume inspect", &out));
            let folder = PathBuf::from(text(&out.stdout).trim());
            for (file, value) in source["data"].as_object().unwrap() {
                let value = value.as_str().unwrap();
                let path = folder.join(file);
                let undecoded = std::fs::read_to_string(&path).is_ok_and(|t| t == value);
                if source["kind"] == "Secret" && undecoded {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(value)
                        .unwrap();
                    std::fs::write(&path, bytes).unwrap();
                }
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
    }

    /// Plays `docs`, starts the pod and waits for warden's status.
    pub fn up(&self, docs: &[Value], file: &str) -> Value {
        let yaml = self.dir.path().join(file);
        let joined: Vec<String> = docs.iter().map(Value::to_string).collect();
        std::fs::write(&yaml, joined.join("\n---\n")).unwrap();
        let out = self.play(&yaml);
        assert!(out.status.success(), "{}", show("kube play", &out));
        self.as_a_kubelet_would(docs);
        let out = podman(&["pod", "start", &self.pod()]);
        assert!(out.status.success(), "{}", show("pod start", &out));
        self.status()
    }

    /// warden's status, read through its unix socket inside the machine.
    pub fn status(&self) -> Value {
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
    pub fn exec(&self, argv: &[&str]) -> Output {
        self.exec_as("0", argv)
    }

    /// `podman exec` in the machine, as `user`.
    pub fn exec_as(&self, user: &str, argv: &[&str]) -> Output {
        let container = self.container();
        let mut args = vec!["exec", "-u", user, &container];
        args.extend(argv);
        podman(&args)
    }

    /// A command for shell, through warden's API (`warden run`).
    pub fn run(&self, script: &str) -> Output {
        self.exec(&["warden", "run", "--", "sh", "-c", script])
    }

    /// As `run`, in (and free to write) the workspace's folder `folder`.
    pub fn run_in(&self, folder: &str, script: &str) -> Output {
        self.exec(&[
            "warden", "run", "--folder", folder, "--", "sh", "-c", script,
        ])
    }

    pub fn down(&self) {
        let yaml = self.dir.path().join("manifests.yaml");
        let out = podman(&["kube", "down", &yaml.to_string_lossy()]);
        assert!(out.status.success(), "{}", show("kube down", &out));
    }

    /// The machine's warden on the host, as podman sees it: the pod's
    /// network namespace is that process's.
    pub fn warden_pid(&self) -> String {
        let out = podman(&["inspect", "--format", "{{.State.Pid}}", &self.container()]);
        assert!(out.status.success(), "{}", show("inspect", &out));
        text(&out.stdout).trim().to_string()
    }

    /// `warden ARGS` on the host, in the pod's network namespace: where
    /// `kubectl port-forward` connects, so the door's `127.0.0.1:7000`.
    pub fn through_door(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.warden_pid(), "-n", "--"])
            .arg(warden_bin())
            .args(args)
            .output()
            .unwrap()
    }

    /// `warden machine ACTION --connect DOOR --key-file KEY REST...`, as
    /// the owner, through the pod's door.
    pub fn door(&self, key: &Path, action: &str, rest: &[&str]) -> Output {
        let key = key.to_str().unwrap();
        let mut args = vec!["machine", action, "--connect", DOOR, "--key-file", key];
        args.extend(rest);
        self.through_door(&args)
    }

    /// The machine's key, from the printed Secret, into a file of the
    /// owner's (mode 0600).
    pub fn key_file(&self, docs: &[Value], name: &str) -> PathBuf {
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

    pub fn volume_exists(&self, name: &str) -> bool {
        podman(&["volume", "exists", name]).status.success()
    }
}

impl Drop for Played {
    fn drop(&mut self) {
        let _ = podman(&["pod", "rm", "-f", &self.pod()]);
        let base = self.pod();
        for suffix in ["", "-data", "-work", "-key", "-keys", "-credentials"] {
            let _ = podman(&["volume", "rm", "-f", &format!("{base}{suffix}")]);
        }
        for suffix in ["-key", "-keys", "-credentials"] {
            let _ = podman(&["secret", "rm", &format!("{base}{suffix}")]);
        }
        let _ = podman(&["rmi", "-f", &self.image]);
    }
}

/// podman makes a pod's pause image with catatonit.
pub fn has_catatonit(test: &str) -> bool {
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
