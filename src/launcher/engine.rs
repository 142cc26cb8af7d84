//! The container engine as the launcher uses it: podman (rootful or
//! rootless) or Docker, found once per process (see `host`). Every engine
//! failure comes back as one line naming the step, the first line of the
//! engine's stderr, and what it means when it is a known quirk of hosts
//! (see `host::hint`).

use super::error::LaunchError;
use super::host::{self, Engine, Host};
use std::io::Write;
use std::process::{Command, Stdio};

/// The host as the engine runs machines on it; an error says why this
/// host cannot run one.
pub fn host() -> Result<&'static Host, LaunchError> {
    host::get()
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
    let mut child = command()?
        .args(args)
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
    let first = host::first_line(if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    });
    LaunchError::new(step, format!("{engine} failed ({status}): {first}"))
        .with_hint(host::hint(stderr))
}

/// True when the engine can inspect the object (both engines have
/// `container|image|volume inspect`).
pub(super) fn exists(kind: &str, name: &str) -> bool {
    run("exists", &[kind, "inspect", name]).is_ok()
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
