//! `warden machine ...` end to end, with rootful podman and the base image
//! localhost/warden-machine:latest: a machine is made from a definition,
//! gets only its named keys, answers only with its key, is kept when
//! nothing changed, stops with warden's status and leaves nothing behind.

mod common;

use common::{privileged, warden_bin};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

const IMAGE: &str = "localhost/warden-machine:latest";
const CANARY: &str = "canary-xyz-123";

/// Root, and the base image present; else skip (or fail under CI=true).
fn ready(test: &str) -> bool {
    if !privileged(test) {
        return false;
    }
    let image = Command::new("podman")
        .args(["image", "exists", IMAGE])
        .status()
        .is_ok_and(|s| s.success());
    if image {
        return true;
    }
    let reason = format!("{test}: needs {IMAGE} (build it with `sudo machine/build`)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason}, and CI=true forbids skipping");
    }
    common::skipped(&reason);
    false
}

fn warden(args: &[&str]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"])
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn show(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Removes the machine, its volumes and state folder, whatever happened.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = warden(&["machine", "rm", &self.0, "--volumes"]);
    }
}

/// A definition in a temp folder, with its `.env`, a lent folder and a
/// setup script.
struct Fixture {
    dir: tempfile::TempDir,
    id: String,
}

impl Fixture {
    fn new(tag: &str, keys: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let id = format!("t{}-{tag}", std::process::id());
        let lent = dir.path().join("lent");
        std::fs::create_dir(&lent).unwrap();
        std::fs::write(lent.join("file.txt"), "lent-content\n").unwrap();
        std::fs::write(
            dir.path().join(".env"),
            format!("API_TOKEN={CANARY}\nOTHER=no\n"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("setup.sh"),
            "set -e\necho made-by-setup > setup-marker\n",
        )
        .unwrap();
        let definition = serde_json::json!({
            "id": id,
            "image": IMAGE,
            "keys": keys,
            "lend": [{"host": lent, "at": "/lent/src", "mode": "read"}],
            "setup": "setup.sh",
        });
        std::fs::write(dir.path().join("def.json"), definition.to_string()).unwrap();
        Fixture { dir, id }
    }

    fn definition(&self) -> PathBuf {
        self.dir.path().join("def.json")
    }

    fn up(&self) -> Output {
        let started = Instant::now();
        let out = warden(&["machine", "up", self.definition().to_str().unwrap()]);
        eprintln!("up took {:.2} s", started.elapsed().as_secs_f64());
        out
    }

    fn exec(&self, argv: &[&str]) -> Output {
        let mut args = vec!["machine", "exec", &self.id, "--"];
        args.extend(argv);
        warden(&args)
    }

    fn container(&self) -> String {
        format!("warden-{}", self.id)
    }
}

fn inspect(container: &str, format: &str) -> String {
    text(&podman(&["inspect", "--format", format, container]).stdout)
        .trim()
        .to_string()
}

/// Anything left with this machine's label (containers or volumes).
/// Only one label filter: podman ORs filters on the same key, and other
/// tests' machines carry the same owner label.
fn leftovers(id: &str) -> String {
    let machine = format!("label=warden.machine={id}");
    let containers = podman(&["ps", "-a", "--filter", &machine, "-q"]);
    let volumes = podman(&["volume", "ls", "--filter", &machine, "-q"]);
    format!("{}{}", text(&containers.stdout), text(&volumes.stdout))
}

#[test]
fn a_machine_is_made_keyed_kept_stopped_and_removed() {
    if !ready("a_machine_is_made_keyed_kept_stopped_and_removed") {
        return;
    }
    let fx = Fixture::new("life", &["API_TOKEN"]);
    let _cleanup = Cleanup(fx.id.clone());

    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let first_id = inspect(&fx.container(), "{{.Id}}");

    let out = fx.exec(&["id", "-un"]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("id", &out));

    let out = fx.exec(&["env"]);
    assert!(out.status.success(), "{}", show("env", &out));
    let env = text(&out.stdout);
    assert!(!env.contains(CANARY) && !env.contains("API_TOKEN"), "{env}");

    let out = fx.exec(&["cat", "/home/runtime/.env"]);
    assert!(!out.status.success(), "{}", show("cat .env", &out));
    assert!(!text(&out.stdout).contains(CANARY));

    // The runtime's .env holds the named key only.
    let out = podman(&[
        "exec",
        "-u",
        "0",
        &fx.container(),
        "cat",
        "/home/runtime/.env",
    ]);
    let dotenv = text(&out.stdout);
    assert!(dotenv.contains(&format!("API_TOKEN={CANARY}")), "{dotenv}");
    assert!(!dotenv.contains("OTHER"), "{dotenv}");

    // The setup script ran once, as runtime, in the workspace.
    let out = podman(&[
        "exec",
        "-u",
        "0",
        &fx.container(),
        "stat",
        "-c",
        "%u %n",
        "/home/runtime/workspace/setup-marker",
    ]);
    assert!(
        text(&out.stdout).starts_with("2000 "),
        "{}",
        show("stat", &out)
    );

    // The lend is mounted read-only.
    let out = podman(&[
        "exec",
        "-u",
        "0",
        &fx.container(),
        "cat",
        "/lent/src/file.txt",
    ]);
    assert_eq!(
        text(&out.stdout),
        "lent-content\n",
        "{}",
        show("lend", &out)
    );
    let out = podman(&["exec", "-u", "0", &fx.container(), "touch", "/lent/src/new"]);
    assert!(!out.status.success(), "the lend is writable");
    // shell gets the lend as lent: readable (Landlock grants it read-only),
    // not writable.
    let out = fx.exec(&["cat", "/lent/src/file.txt"]);
    assert_eq!(
        text(&out.stdout),
        "lent-content\n",
        "{}",
        show("cat lend", &out)
    );
    let out = fx.exec(&["touch", "/lent/src/by-shell"]);
    assert!(!out.status.success(), "{}", show("write lend", &out));

    let out = warden(&["machine", "status", &fx.id]);
    let status = text(&out.stdout);
    assert!(out.status.success(), "{}", show("status", &out));
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("layer firewall") && l.contains(" holds ")),
        "{status}"
    );

    // Nothing changed: the container is kept.
    let out = fx.up();
    assert!(out.status.success(), "{}", show("second up", &out));
    assert!(text(&out.stdout).contains("unchanged, kept"));
    assert_eq!(inspect(&fx.container(), "{{.Id}}"), first_id);

    wrong_key_is_refused_and_audited(&fx);

    let out = warden(&["machine", "stop", &fx.id]);
    assert!(out.status.success(), "{}", show("stop", &out));
    assert_eq!(inspect(&fx.container(), "{{.State.ExitCode}}"), "143");

    let out = warden(&["machine", "rm", &fx.id, "--volumes"]);
    assert!(out.status.success(), "{}", show("rm", &out));
    assert_eq!(leftovers(&fx.id), "");
    assert!(!Path::new("/var/lib/warden/machines").join(&fx.id).exists());
}

/// A copy of the key with another value is refused on the host socket, and
/// the audit log (copied out and verified) says so.
fn wrong_key_is_refused_and_audited(fx: &Fixture) {
    let bad = fx.dir.path().join("bad-key");
    let key = std::fs::read_to_string(format!("/var/lib/warden/machines/{}/key", fx.id)).unwrap();
    let flipped: String = key
        .trim()
        .chars()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect();
    std::fs::write(&bad, flipped).unwrap();
    let socket = format!("/var/lib/warden/machines/{}/run/api.sock", fx.id);
    let out = warden(&[
        "--key-file",
        bad.to_str().unwrap(),
        "status",
        "--socket",
        &socket,
    ]);
    assert!(!out.status.success(), "{}", show("wrong key", &out));
    assert!(
        text(&out.stderr).contains("wrong key"),
        "{}",
        show("wrong key", &out)
    );

    let out = warden(&["machine", "audit", &fx.id]);
    let audit = text(&out.stdout);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(audit.contains("chain intact"), "{audit}");
    assert!(audit.contains("connection_refused"), "{audit}");
}

#[test]
fn a_missing_key_stops_up_before_anything_is_made() {
    if !ready("a_missing_key_stops_up_before_anything_is_made") {
        return;
    }
    let fx = Fixture::new("nokey", &["API_TOKEN", "NOT_THERE"]);
    let _cleanup = Cleanup(fx.id.clone());
    let out = fx.up();
    assert!(!out.status.success(), "{}", show("up", &out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("NOT_THERE") && !stderr.contains("API_TOKEN,"),
        "{stderr}"
    );
    assert!(!stderr.contains(CANARY), "{stderr}");
    assert_eq!(leftovers(&fx.id), "");
}

#[test]
fn a_failing_setup_fails_up_with_its_output() {
    if !ready("a_failing_setup_fails_up_with_its_output") {
        return;
    }
    let fx = Fixture::new("setup", &[]);
    let _cleanup = Cleanup(fx.id.clone());
    std::fs::write(
        fx.dir.path().join("setup.sh"),
        "echo setup-says-no >&2\nexit 3\n",
    )
    .unwrap();
    let out = fx.up();
    assert!(!out.status.success(), "{}", show("up", &out));
    assert!(
        text(&out.stderr).contains("setup-says-no"),
        "{}",
        show("up", &out)
    );
}
