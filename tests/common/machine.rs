//! Machines made by `warden machine ...` with rootful podman, for the
//! launcher's tests: the prerequisites (root, the base image), the engine
//! with this host's options, a machine removed whatever happened, what a
//! machine left behind, and a plain HTTP GET to a published port.

use super::{privileged, skipped, text, warden_bin};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const IMAGE: &str = "localhost/warden-machine:latest";
pub const ROOTFS: &str = "localhost/warden-rootfs:bookworm";

/// Root, and the image present; else skip (or fail under CI=true).
pub fn ready_with(test: &str, image: &str) -> bool {
    if !privileged(test) {
        return false;
    }
    let found = Command::new("podman")
        .args(["image", "exists", image])
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return true;
    }
    let reason = format!("{test}: needs {image} (build it with `sudo machine/build`)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason}, and CI=true forbids skipping");
    }
    skipped(&reason);
    false
}

pub fn ready(test: &str) -> bool {
    ready_with(test, IMAGE)
}

/// The static release warden (`scripts/test` builds it first): what the
/// launcher lends an image without warden.
pub fn static_warden(test: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/x86_64-unknown-linux-gnu/release/warden");
    if path.exists() {
        return Some(path);
    }
    let reason = format!(
        "{test}: needs the static release warden at {} (scripts/test builds it)",
        path.display()
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason}, and CI=true forbids skipping");
    }
    skipped(&reason);
    None
}

/// `warden ARGS`, with extra environment.
pub fn warden_with(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(warden_bin());
    command.args(args).stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

pub fn warden(args: &[&str]) -> Output {
    warden_with(args, &[])
}

/// podman with the options the launcher found this host needs.
pub fn podman(args: &[&str]) -> Output {
    let host = warden::host::this_host::get().unwrap_or_else(|e| panic!("{e}"));
    Command::new(host.engine.program())
        .args(&host.global)
        .args(args)
        .output()
        .unwrap()
}

pub fn show(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

pub fn inspect(container: &str, format: &str) -> String {
    text(&podman(&["inspect", "--format", format, container]).stdout)
        .trim()
        .to_string()
}

/// A fresh machine id for this test run.
pub fn machine_id(tag: &str) -> String {
    format!("t{}-{tag}", std::process::id())
}

/// A machine made by `warden machine up` from a definition in a folder of
/// its own. Dropped, whatever happened (a failed assertion too), it is
/// removed with its volumes, and its state folder is deleted; then the
/// folder goes.
pub struct TestMachine {
    pub id: String,
    /// Where the definition is, with whatever it names (lends, a
    /// Dockerfile, `.env`).
    pub dir: tempfile::TempDir,
    /// `warden ARGS` as whoever owns the machine.
    warden: fn(&[&str]) -> Output,
    state: PathBuf,
}

impl TestMachine {
    /// Machine `machine_id(tag)`, rootful, with a folder the machine's
    /// users can read (tempdirs are 0700). Nothing is made yet.
    pub fn new(tag: &str) -> TestMachine {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let id = machine_id(tag);
        let state = warden::host::machine::state_dir(&id);
        TestMachine::in_folder(id, dir, warden, state)
    }

    /// `new`, with `definition` written.
    pub fn defined(tag: &str, definition: serde_json::Value) -> TestMachine {
        let machine = TestMachine::new(tag);
        machine.define(definition);
        machine
    }

    /// Machine `id`, its definition in `dir`, made and removed by `warden`,
    /// its state folder at `state`.
    pub fn in_folder(
        id: String,
        dir: tempfile::TempDir,
        warden: fn(&[&str]) -> Output,
        state: PathBuf,
    ) -> TestMachine {
        TestMachine {
            id,
            dir,
            warden,
            state,
        }
    }

    pub fn definition(&self) -> PathBuf {
        self.dir.path().join("def.json")
    }

    /// Writes `definition`, with this machine's id.
    pub fn define(&self, mut definition: serde_json::Value) {
        definition["id"] = self.id.clone().into();
        std::fs::write(self.definition(), definition.to_string()).unwrap();
    }

    /// The definition, changed by `edit` and written back.
    pub fn edit(&self, edit: impl FnOnce(&mut serde_json::Value)) {
        let path = self.definition();
        let mut definition: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut definition);
        std::fs::write(&path, definition.to_string()).unwrap();
    }

    /// `warden machine up` with the definition, timed.
    pub fn up(&self) -> Output {
        let started = Instant::now();
        let out = (self.warden)(&["machine", "up", self.definition().to_str().unwrap()]);
        eprintln!("up took {:.2} s", started.elapsed().as_secs_f64());
        out
    }

    /// `warden machine exec ID -- ARGV`.
    pub fn exec(&self, argv: &[&str]) -> Output {
        let mut args = vec!["machine", "exec", &self.id, "--"];
        args.extend(argv);
        (self.warden)(&args)
    }

    pub fn container(&self) -> String {
        format!("warden-{}", self.id)
    }

    /// `warden ARGS` as the machine's owner.
    pub fn warden(&self, args: &[&str]) -> Output {
        (self.warden)(args)
    }

    /// Its audit lines (`warden machine audit`); fails the test when that
    /// fails.
    pub fn audit(&self) -> String {
        let out = self.warden(&["machine", "audit", &self.id]);
        assert!(out.status.success(), "{}", show("audit", &out));
        text(&out.stdout)
    }

    /// Its state folder, in its owner's state root.
    pub fn state(&self) -> &Path {
        &self.state
    }
}

impl Drop for TestMachine {
    fn drop(&mut self) {
        let _ = (self.warden)(&["machine", "rm", &self.id, "--volumes"]);
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// Anything left of the machine: containers or volumes with its label,
/// and its state folder.
pub fn leftovers(id: &str) -> String {
    let machine = format!("label=warden.machine={id}");
    let containers = podman(&["ps", "-a", "--filter", &machine, "-q"]);
    // By name: podman's `run` makes a machine's volumes unlabelled.
    let names = [format!("warden-{id}-data"), format!("warden-{id}-work")];
    let volumes = podman(&["volume", "ls", "-q"]);
    let volumes: String = text(&volumes.stdout)
        .lines()
        .filter(|v| names.iter().any(|n| n == v))
        .map(|v| format!("{v}\n"))
        .collect();
    let state = warden::host::machine::state_dir(id);
    let state = match state.exists() {
        true => format!("state folder {}\n", state.display()),
        false => String::new(),
    };
    format!("{}{volumes}{state}", text(&containers.stdout))
}

/// Waits (bounded) until the container has exited.
pub fn wait_exited(container: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if inspect(container, "{{.State.Running}}") == "false" {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The host port the engine published for a container's TCP `port`.
pub fn host_port(container: &str, port: u16) -> Option<u16> {
    let out = podman(&["port", container, &format!("{port}/tcp")]);
    text(&out.stdout)
        .lines()
        .next()?
        .rsplit(':')
        .next()?
        .trim()
        .parse()
        .ok()
}

/// GET `path` from 127.0.0.1:`port` (HTTP/1.0), retrying until the server
/// answers or `limit` passes; the body of a 200, or why not.
pub fn http_get(port: u16, path: &str, limit: Duration) -> Result<String, String> {
    let deadline = Instant::now() + limit;
    loop {
        let attempt = (|| -> std::io::Result<String> {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
            let mut reply = String::new();
            stream.read_to_string(&mut reply)?;
            Ok(reply)
        })();
        match attempt {
            Ok(reply) if reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200") => {
                return Ok(reply
                    .split_once("\r\n\r\n")
                    .map(|(_, b)| b.to_string())
                    .unwrap_or_default())
            }
            Ok(reply) if !reply.is_empty() => return Err(reply),
            other if Instant::now() > deadline => return Err(format!("{other:?}")),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// A folder removed (with all it holds) whatever happened.
pub struct Gone(pub PathBuf);

impl Drop for Gone {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A project folder at a path under /home, as an owner's would be,
/// writable by the machine's users (rootful: they are not its owner); the
/// guard removes it.
pub fn project_under_home(tag: &str) -> (PathBuf, Gone) {
    use std::os::unix::fs::PermissionsExt;
    let home = Path::new("/home").join(format!("wt-{}-{tag}", std::process::id()));
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::set_permissions(&project, std::fs::Permissions::from_mode(0o777)).unwrap();
    (project, Gone(home))
}

/// An agent folder holding the small Node runtime of tests/agent.
pub fn agent_folder(parent: &Path) -> PathBuf {
    let routines = parent.join("agent");
    std::fs::create_dir(&routines).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agent/server.mjs"),
        routines.join("server.mjs"),
    )
    .unwrap();
    routines
}

/// A secret of the owner's that must never reach shell.
pub const CANARY: &str = "canary-xyz-123";

/// A machine whose definition has its `.env`, a lent folder and a setup
/// script.
pub fn fixture(tag: &str, keys: &[&str]) -> TestMachine {
    let fx = TestMachine::new(tag);
    let dir = fx.dir.path();
    let lent = dir.join("lent");
    std::fs::create_dir(&lent).unwrap();
    std::fs::write(lent.join("file.txt"), "lent-content\n").unwrap();
    std::fs::write(dir.join(".env"), format!("API_TOKEN={CANARY}\nOTHER=no\n")).unwrap();
    std::fs::write(
        dir.join("setup.sh"),
        "set -e\necho made-by-setup > \"$HOME/workspace/setup-marker\"\n",
    )
    .unwrap();
    fx.define(serde_json::json!({
        "image": IMAGE,
        "keys": keys,
        "lend": [{"host": lent, "at": "/lent/src", "mode": "read"}],
        "setup": "setup.sh",
        // A main process that runs until stopped, as an agent would.
        "command": ["sleep", "infinity"],
    }));
    fx
}

/// `podman exec -u USER C sh -c SCRIPT`.
pub fn sh_in(fx: &TestMachine, user: &str, script: &str) -> Output {
    podman(&["exec", "-u", user, &fx.container(), "sh", "-c", script])
}

/// The engine's id of `image`.
pub fn image_id(image: &str) -> String {
    text(&podman(&["image", "inspect", "--format", "{{.Id}}", image]).stdout)
        .trim()
        .to_string()
}

/// The row of machine `id` in `warden machine ps`'s table, its cells
/// split (MACHINE KIND ENGINE OWNER STATE IDLE IMAGE, then the ports).
pub fn ps_row(table: &str, id: &str) -> Option<Vec<String>> {
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .find(|cells| cells.first().map(String::as_str) == Some(id))
}

/// An image removed when dropped: declared before the machine, it goes
/// after it.
pub struct Image(pub String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = podman(&["rmi", "-f", &self.0]);
    }
}

/// The base image with this build's warden as /sbin/warden (the base
/// image's may be older than what a test asks of it), named after `what`
/// and the machine.
pub fn this_wardens_image(fx: &TestMachine, what: &str) -> Image {
    let image = Image(format!("localhost/warden-{what}-{}:test", fx.id));
    let context = fx.dir.path().join("image");
    std::fs::create_dir(&context).unwrap();
    std::fs::copy(super::warden_bin(), context.join("warden")).unwrap();
    let file = format!("FROM {IMAGE}\nCOPY warden /sbin/warden\n");
    std::fs::write(context.join("Containerfile"), file).unwrap();
    let out = podman(&["build", "-q", "-t", &image.0, &context.to_string_lossy()]);
    assert!(out.status.success(), "{}", show("build", &out));
    image
}
