//! The container engine as the launcher uses it: podman (rootful or
//! rootless) or Docker, found once per process (see `host`). Every engine
//! failure comes back as one line naming the step, the first line of the
//! engine's stderr, and what it means when it is a known quirk of hosts
//! (see `this_host::hint`).

use super::error::LaunchError;
use super::this_host::{self, Engine, Host};
use std::io::Write;
use std::process::{Command, Stdio};

/// The host as the engine runs machines on it; an error says why this
/// host cannot run one.
pub fn host() -> Result<&'static Host, LaunchError> {
    this_host::get()
}

/// The uid that owns the machines made by this process.
pub(super) fn owner() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// The engine's command, with the options this host needs.
pub(super) fn command() -> Result<Command, LaunchError> {
    let host = host()?;
    let mut command = Command::new(host.engine.program());
    command.args(&host.global);
    // Docker's legacy builder ignores `<Dockerfile>.dockerignore`, and with
    // it the rule that keeps `.env` out of images: BuildKit only.
    if host.engine == Engine::Docker {
        command.env("DOCKER_BUILDKIT", "1");
    }
    Ok(command)
}

/// Set by `warden machine serve` where systemd runs: the machines it
/// starts go into scopes of their own, not its unit's cgroup, which a
/// restart of serve would end with them.
static STARTS_IN_OWN_SCOPE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// From now on, `start` runs in a systemd scope of its own.
pub fn start_in_own_scope() {
    STARTS_IN_OWN_SCOPE.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The engine's command for `args`: a `start` in a scope of its own when
/// asked (see `start_in_own_scope`).
fn command_for(args: &[&str]) -> Result<Command, LaunchError> {
    let scoped = STARTS_IN_OWN_SCOPE.load(std::sync::atomic::Ordering::SeqCst);
    let (Some(&"start"), true) = (args.first(), scoped) else {
        let mut command = command()?;
        command.args(args);
        return Ok(command);
    };
    let host = host()?;
    let mut full: Vec<String> = host.global.clone();
    full.extend(args.iter().map(|a| a.to_string()));
    let unit = format!("warden-start-{}", args.last().unwrap_or(&"machine"));
    let (program, scoped_args) =
        super::scope::in_own_scope(true, &unit, host.engine.program(), full);
    let mut command = Command::new(program);
    command.args(scoped_args);
    if host.engine == Engine::Docker {
        command.env("DOCKER_BUILDKIT", "1");
    }
    Ok(command)
}

/// Whether the engine has a bridge network: a Docker daemon started with
/// `--bridge=none` has only `host` and `none`, and a container asked for
/// the bridge there gets no network and publishes no port.
pub fn has_bridge() -> bool {
    run("bridge network", &["network", "inspect", "bridge"]).is_ok()
}

/// Runs the engine; returns its stdout, or one line naming `step` and the
/// first line of the engine's stderr (with a hint when it is a known one).
pub(super) fn run(step: &str, args: &[&str]) -> Result<String, LaunchError> {
    run_with_input(step, args, None)
}

/// As `podman`, feeding `input` on stdin (secrets and scripts go there,
/// never on a command line).
pub(super) fn run_with_input(
    step: &str,
    args: &[&str],
    input: Option<&[u8]>,
) -> Result<String, LaunchError> {
    let engine = host()?.engine.program();
    let mut child = command_for(args)?
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LaunchError::new(step, format!("cannot run {engine}: {e}")))?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // A write error shows as podman's own failure below.
        let _ = stdin.write_all(bytes);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| LaunchError::new(step, format!("{engine}: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(failure(step, engine, &out.status, &stderr, &stdout))
}

/// The step, the engine's first line of output (stdout when stderr is
/// empty), and a hint when the error is a known quirk of hosts.
pub(super) fn failure(
    step: &str,
    engine: &str,
    status: &std::process::ExitStatus,
    stderr: &str,
    stdout: &str,
) -> LaunchError {
    let first = this_host::first_line(if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    });
    LaunchError::new(step, format!("{engine} failed ({status}): {first}"))
        .with_hint(this_host::hint(stderr))
}

/// True when the engine can inspect the object (both engines have
/// `container|image|volume inspect`).
pub(super) fn exists(kind: &str, name: &str) -> bool {
    run("exists", &[kind, "inspect", name]).is_ok()
}

/// An image's id and, when it exists, a container's inspect, in one
/// engine call where both answer (each call is a process of the engine's,
/// about 0.1 s here); the image's id alone otherwise.
pub(super) fn image_and_container(
    image: &str,
    container: &str,
) -> Result<(String, Option<serde_json::Value>), LaunchError> {
    let both = run("inspect", &["inspect", image, container]).ok();
    if let Some(pair) = both
        .as_deref()
        .and_then(|out| split_inspect(out, container))
    {
        return Ok(pair);
    }
    Ok((image_id(image)?, None))
}

/// The engine's id of an image (`sha256:<hex>`).
pub(super) fn image_id(image: &str) -> Result<String, LaunchError> {
    let id = run(
        "image id",
        &["image", "inspect", "--format", "{{.Id}}", image],
    )?;
    Ok(id.trim().to_string())
}

/// Pure: of `inspect IMAGE CONTAINER`'s JSON array, the image's id and the
/// container's object; None unless the first is an image (no `State`) and
/// the second the container of that name (a name both could mean is
/// looked up the long way).
fn split_inspect(out: &str, container: &str) -> Option<(String, Option<serde_json::Value>)> {
    let serde_json::Value::Array(mut objects) = serde_json::from_str(out).ok()? else {
        return None;
    };
    if objects.len() != 2 {
        return None;
    }
    let second = objects.pop()?;
    let first = objects.pop()?;
    let is_container = |v: &serde_json::Value| v.get("State").is_some();
    let name = second.get("Name")?.as_str()?.trim_start_matches('/');
    if is_container(&first) || !is_container(&second) || name != container {
        return None;
    }
    Some((first.get("Id")?.as_str()?.to_string(), Some(second)))
}

/// Stops (warden gets SIGTERM and 10 s) and removes a container.
pub(super) fn remove_container(step: &str, name: &str) -> Result<(), LaunchError> {
    let _ = run(step, &["stop", "-t", "10", name]);
    run(step, &["rm", "-f", name]).map(drop)
}

pub(super) fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_image_then_its_container_in_one_inspect() {
        let image = r#"{"Id":"sha256:aa","RootFS":{}}"#;
        let box_ = r#"{"Id":"cc","Name":"warden-m","State":{"Running":false}}"#;
        let other = r#"{"Id":"dd","Name":"/warden-x","State":{}}"#;
        let cases: [(String, Option<&str>); 6] = [
            (format!("[{image},{box_}]"), Some("sha256:aa")),
            (
                format!("[{image},{}]", box_.replace("warden-m", "/warden-m")),
                Some("sha256:aa"),
            ),
            (format!("[{box_},{image}]"), None),
            (format!("[{image},{other}]"), None),
            (format!("[{image}]"), None),
            ("not json".to_string(), None),
        ];
        for (out, id) in cases {
            let got = super::split_inspect(&out, "warden-m");
            assert_eq!(got.as_ref().map(|(i, _)| i.as_str()), id, "{out}");
            if let Some((_, c)) = got {
                assert_eq!(c.unwrap()["Id"], "cc");
            }
        }
    }

    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn failure_table() {
        let status = std::process::ExitStatus::from_raw(125 << 8);
        // (stderr, stdout, what is printed, whether a hint is given)
        let cases = [
            (
                "Error: no such container warden-a\nmore\n",
                "",
                "start: podman failed (exit status: 125): Error: no such container warden-a",
                false,
            ),
            (
                "  \n",
                "\nfrom stdout\n",
                "start: podman failed (exit status: 125): from stdout",
                false,
            ),
            (
                "",
                "",
                "start: podman failed (exit status: 125): (no output)",
                false,
            ),
            (
                "Error: open /dev/net/tun: permission denied",
                "",
                "start: podman failed (exit status: 125): Error: open /dev/net/tun: permission denied\n  hint: a rootless private network needs /dev/net/tun, which this user cannot open: use network none, or a namespace made as root",
                true,
            ),
            (
                "x\nError: potentially insufficient UIDs or GIDs available",
                "",
                "start: podman failed (exit status: 125): x\n  hint: the owner's subordinate id range is too small (see /etc/subuid, /etc/subgid)",
                true,
            ),
        ];
        for (stderr, stdout, want, hinted) in cases {
            let e = failure("start", "podman", &status, stderr, stdout);
            assert_eq!(e.to_string(), want, "{stderr:?}");
            assert_eq!(e.step, "start");
            assert_eq!(e.hint.is_some(), hinted, "{stderr:?}");
            assert!(!e.line.contains('\n'), "one line: {:?}", e.line);
        }
    }
}
