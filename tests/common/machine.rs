//! Machines made by `warden machine ...` with rootful podman, for the
//! launcher's tests: the prerequisites (root, the base image), the engine
//! with this host's options, a machine removed whatever happened, what a
//! machine left behind, and a plain HTTP GET to a published port.

use super::{privileged, skipped, warden_bin};
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
    let host = warden::launcher::host::get().unwrap_or_else(|e| panic!("{e}"));
    Command::new(host.engine.program())
        .args(&host.global)
        .args(args)
        .output()
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
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

/// Removes the machine, its volumes and state folder, whatever happened.
pub struct Cleanup(pub String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = warden(&["machine", "rm", &self.0, "--volumes"]);
    }
}

/// A fresh machine id for this test run.
pub fn machine_id(tag: &str) -> String {
    format!("t{}-{tag}", std::process::id())
}

/// Anything left of the machine: containers or volumes with its label,
/// and its state folder.
pub fn leftovers(id: &str) -> String {
    let machine = format!("label=warden.machine={id}");
    let containers = podman(&["ps", "-a", "--filter", &machine, "-q"]);
    let volumes = podman(&["volume", "ls", "--filter", &machine, "-q"]);
    let state = warden::launcher::machine::state_dir(id);
    let state = match state.exists() {
        true => format!("state folder {}\n", state.display()),
        false => String::new(),
    };
    format!(
        "{}{}{state}",
        text(&containers.stdout),
        text(&volumes.stdout)
    )
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
