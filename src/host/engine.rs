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

/// The engine's command for `args`: a `start` (or a `run`, which starts
/// what it makes) in a scope of its own when asked (see
/// `start_in_own_scope`).
fn command_for(args: &[&str]) -> Result<Command, LaunchError> {
    let scoped = STARTS_IN_OWN_SCOPE.load(std::sync::atomic::Ordering::SeqCst);
    let starts = matches!(args.first(), Some(&"start") | Some(&"run"));
    let (true, true) = (starts, scoped) else {
        let mut command = command()?;
        command.args(args);
        return Ok(command);
    };
    let host = host()?;
    let mut full: Vec<String> = host.global.clone();
    full.extend(args.iter().map(|a| a.to_string()));
    let named = args.iter().find_map(|a| a.strip_prefix("--name="));
    let unit = format!(
        "warden-start-{}",
        named.or(args.last().copied()).unwrap_or("machine")
    );
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

/// What one engine call said of a container machine's parts (each call
/// is a process of the engine's, tens of milliseconds here).
#[derive(Debug, Default)]
pub struct Looked {
    /// The image's id.
    pub image_id: String,
    /// The image's entrypoint as JSON text (what `create::entrypoint_is_warden`
    /// reads); None when the inspect did not say it.
    pub entrypoint: Option<String>,
    /// The machine's container, when it exists.
    pub container: Option<serde_json::Value>,
    /// Which of the volumes asked for exist; None when the answer did not
    /// say (each is then asked on its own).
    pub volumes: Option<Vec<String>>,
    /// Nothing was asked (a new machine, its image known, `seen.rs`): no
    /// container and no volume is assumed, and the engine's refusal to
    /// make one that exists says otherwise.
    pub assumed: bool,
}

/// The image, the machine's container and its volumes in one `inspect`:
/// the engine prints what it found and fails for what it did not, so its
/// output is read whatever its exit. When the answer does not say the
/// image (or cannot be told apart), the image's id is asked the long way
/// and the rest is left unknown.
pub(super) fn look_up(
    image: &str,
    container: &str,
    volumes: &[String],
) -> Result<Looked, LaunchError> {
    let mut args = vec!["inspect", image, container];
    args.extend(volumes.iter().map(String::as_str));
    let out = command_for(&args)?
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok();
    let said = out.as_ref().map(|o| text(&o.stdout));
    if let Some(looked) = said.and_then(|out| looked_in(&out, container, volumes)) {
        return Ok(looked);
    }
    Ok(Looked {
        image_id: image_id(image)?,
        ..Looked::default()
    })
}

/// The engine's id of an image (`sha256:<hex>`).
pub(super) fn image_id(image: &str) -> Result<String, LaunchError> {
    let id = run(
        "image id",
        &["image", "inspect", "--format", "{{.Id}}", image],
    )?;
    Ok(id.trim().to_string())
}

/// Pure: `look_up`'s answer from the engine's JSON array. None unless
/// exactly one image is in it, and every container in it is the machine's
/// (a volume's name that a container holds too is looked up the long way).
fn looked_in(out: &str, container: &str, volumes: &[String]) -> Option<Looked> {
    let serde_json::Value::Array(objects) = serde_json::from_str(out).ok()? else {
        return None;
    };
    let name_of = |v: &serde_json::Value| {
        v.get("Name")
            .and_then(|n| n.as_str())
            .map(|n| n.trim_start_matches('/').to_string())
    };
    let (mut images, mut looked) = (Vec::new(), Looked::default());
    let mut found_volumes = Vec::new();
    for object in objects {
        if object.get("State").is_some() {
            (name_of(&object)? == container).then_some(())?;
            looked.container = Some(object);
        } else if object.get("Mountpoint").is_some() {
            let name = name_of(&object)?;
            volumes.contains(&name).then_some(())?;
            found_volumes.push(name);
        } else {
            images.push(object);
        }
    }
    let [image] = <[serde_json::Value; 1]>::try_from(images).ok()?;
    looked.image_id = image.get("Id")?.as_str()?.to_string();
    looked.entrypoint = image.get("Config").map(|c| {
        c.get("Entrypoint")
            .unwrap_or(&serde_json::Value::Null)
            .to_string()
    });
    looked.volumes = Some(found_volumes);
    Some(looked)
}

/// Of the volumes `names`, those the engine made at or after `since`
/// (the ones not there are left out; one there whose age cannot be
/// asked is an error, never taken as made).
pub(super) fn volumes_made_since(
    names: &[String],
    since: std::time::SystemTime,
) -> Result<Vec<String>, LaunchError> {
    let since = since
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut made = Vec::new();
    for name in names {
        let format = "{{.CreatedAt.Unix}}";
        let out = match run(
            "volume age",
            &["volume", "inspect", "--format", format, name],
        ) {
            Ok(out) => out,
            Err(_) if !exists("volume", name) => continue,
            Err(e) => return Err(e),
        };
        let created: u64 = out.trim().parse().map_err(|_| {
            LaunchError::new("volume age", format!("{name}: not a time: {}", out.trim()))
        })?;
        if created >= since {
            made.push(name.clone());
        }
    }
    Ok(made)
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
    fn an_image_its_container_and_volumes_in_one_inspect() {
        let image =
            r#"{"Id":"sha256:aa","RootFS":{},"Config":{"Entrypoint":["/usr/local/bin/warden"]}}"#;
        let bare = r#"{"Id":"sha256:bb","RootFS":{},"Config":{}}"#;
        let box_ = r#"{"Id":"cc","Name":"warden-m","State":{"Running":false}}"#;
        let other = r#"{"Id":"dd","Name":"/warden-x","State":{}}"#;
        let data = r#"{"Name":"warden-m-data","Mountpoint":"/v"}"#;
        let stray = r#"{"Name":"warden-q-data","Mountpoint":"/v"}"#;
        // (inspect's output, the image's id, its entrypoint, the container's
        // id, the volumes found)
        type Case = (
            String,
            Option<&'static str>,
            Option<&'static str>,
            Option<&'static str>,
            &'static [&'static str],
        );
        let entry = Some(r#"["/usr/local/bin/warden"]"#);
        let cases: Vec<Case> = vec![
            (
                format!("[{image},{box_}]"),
                Some("sha256:aa"),
                entry,
                Some("cc"),
                &[],
            ),
            (
                format!("[{image},{}]", box_.replace("warden-m", "/warden-m")),
                Some("sha256:aa"),
                entry,
                Some("cc"),
                &[],
            ),
            (
                format!("[{box_},{image},{data}]"),
                Some("sha256:aa"),
                entry,
                Some("cc"),
                &["warden-m-data"],
            ),
            (
                format!("[{image},{data}]"),
                Some("sha256:aa"),
                entry,
                None,
                &["warden-m-data"],
            ),
            (
                format!("[{bare}]"),
                Some("sha256:bb"),
                Some("null"),
                None,
                &[],
            ),
            (format!("[{image},{other}]"), None, None, None, &[]),
            (format!("[{image},{stray}]"), None, None, None, &[]),
            (format!("[{image},{bare}]"), None, None, None, &[]),
            (format!("[{box_}]"), None, None, None, &[]),
            ("[]".to_string(), None, None, None, &[]),
            ("not json".to_string(), None, None, None, &[]),
        ];
        let volumes = ["warden-m-data".to_string(), "warden-m-work".to_string()];
        for (out, id, entrypoint, container, found) in cases {
            let got = super::looked_in(&out, "warden-m", &volumes);
            assert_eq!(got.as_ref().map(|l| l.image_id.as_str()), id, "{out}");
            let Some(got) = got else { continue };
            assert_eq!(got.entrypoint.as_deref(), entrypoint, "{out}");
            let id_of = |c: &serde_json::Value| c["Id"].as_str().map(str::to_string);
            assert_eq!(
                got.container.as_ref().and_then(id_of).as_deref(),
                container,
                "{out}"
            );
            assert_eq!(got.volumes.unwrap(), found, "{out}");
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
