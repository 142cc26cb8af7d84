//! What `up` sets up for the agent that lives in the machine, with the
//! engine and warden: the host ports its server is published on, the
//! machine's size, the runtime's keys (through the host socket), and the
//! commands the image must hold.

use super::agent::{free_port, HostPort, AUTO_SPAN};
use super::definition::Definition;
use super::engine;
use super::error::LaunchError;
use super::state::connect;
use super::this_host::Host;

/// Each command `requires` names must be on warden's PATH, as shell finds
/// it; the missing ones are named in one line. `connect` reaches the
/// machine's warden (a container's host socket, a VM's vsock).
pub(super) fn check_requires(
    def: &Definition,
    connect: impl FnOnce() -> Result<crate::wire::client::Client, LaunchError>,
) -> Result<(), LaunchError> {
    if def.requires.is_empty() {
        return Ok(());
    }
    let script = "for c; do command -v \"$c\" >/dev/null 2>&1 || printf '%s ' \"$c\"; done";
    let mut argv = vec!["sh".to_string(), "-c".into(), script.into(), "sh".into()];
    argv.extend(def.requires.iter().cloned());
    let request = crate::wire::RunRequest {
        argv: Some(argv),
        ..Default::default()
    };
    let out = connect()?
        .run(request)
        .map_err(|e| LaunchError::new("requires", format!("the check could not run: {e}")))?;
    let missing = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !missing.is_empty() {
        return Err(LaunchError::new(
            "requires",
            format!("the image has no {missing} (looked up on warden's PATH, as shell)"),
        ));
    }
    match (out.exit.status, &out.exit.error) {
        (0, None) => Ok(()),
        (status, error) => Err(LaunchError::new(
            "requires",
            format!(
                "the check failed (status {status}{}): {}",
                error
                    .as_deref()
                    .map(|e| format!(", {e}"))
                    .unwrap_or_default(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        )),
    }
}

/// The machine's published ports, as the engine lists them.
pub fn published(name: &str) -> Vec<String> {
    engine::run("ports", &["port", name])
        .map(|out| out.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The machine's size for the engine, None where it cannot hold one (a
/// rootless owner on cgroup v1: the engine ignores limits there).
pub(super) fn engine_size(def: &Definition, host: &Host) -> Option<(f64, u64, u64)> {
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let size = def.size.resolved(host_cpus);
    match host.rootless && host.cgroups != super::this_host::Cgroups::Unified {
        true => None,
        false => Some(size),
    }
}

/// The engine's inspect format for a machine's size (see `said_size`).
pub(super) const SIZE_FORMAT: &str =
    "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} {{.HostConfig.PidsLimit}}";

/// The machine's size as the engine holds it, for people.
pub fn size_of(name: &str) -> Option<String> {
    let out = engine::run(
        "inspect",
        &["container", "inspect", "--format", SIZE_FORMAT, name],
    )
    .ok()?;
    said_size(&out)
}

/// Pure: a size as `SIZE_FORMAT` gives it, for people.
pub(super) fn said_size(out: &str) -> Option<String> {
    let mut parts = out
        .split_whitespace()
        .map(|v| v.parse::<i64>().unwrap_or(0));
    let (nano, memory, pids) = (parts.next()?, parts.next()?, parts.next()?);
    let say = |v: i64, f: &dyn Fn(i64) -> String| if v > 0 { f(v) } else { "unlimited".into() };
    Some(format!(
        "cpus {}, memory {}, processes {}",
        say(nano, &|n| format!("{}", n as f64 / 1e9)),
        say(memory, &|m| format!("{} MiB", m >> 20)),
        say(pids, &|p| p.to_string()),
    ))
}

/// The host port of each of the runtime's ports: as given (when free), or
/// the first free one from its base.
pub(super) fn host_ports(def: &Definition) -> Result<Vec<(u16, u16)>, LaunchError> {
    let mut chosen: Vec<(u16, u16)> = Vec::new();
    for (i, port) in def.ports.iter().enumerate() {
        let taken: Vec<u16> = chosen.iter().map(|(h, _)| *h).collect();
        let host = match port.host {
            HostPort::Fixed(h) => {
                if std::net::TcpListener::bind(("127.0.0.1", h)).is_err() {
                    return Err(LaunchError::new(
                        format!("ports[{i}]"),
                        format!("127.0.0.1:{h} is taken on this host"),
                    ));
                }
                h
            }
            HostPort::Auto { from } => free_port(from, &taken).ok_or_else(|| {
                LaunchError::new(
                    format!("ports[{i}]"),
                    format!(
                        "no free port on 127.0.0.1 from {from} to {}",
                        from.saturating_add(AUTO_SPAN)
                    ),
                )
            })?,
        };
        chosen.push((host, port.port));
    }
    Ok(chosen)
}

/// Hands warden the values of the credentials its proxy adds (protocol
/// version 7), through its host door: they live in its memory alone, so
/// they are handed at every start. Nothing to hand: nothing is asked.
pub(super) fn hand_credentials(
    text: &str,
    connect: impl FnOnce() -> Result<crate::wire::client::Client, LaunchError>,
) -> Result<usize, LaunchError> {
    if text.is_empty() {
        return Ok(0);
    }
    connect()?
        .hand_credentials(text)
        .map(|names| names.len())
        .map_err(|e| LaunchError::new("hand the credentials over", e.to_string()))
}

/// Hands the runtime its keys through warden's host socket (protocol
/// version 4): never on a command line, never through the engine. warden
/// writes them as the runtime's `.env` and starts the main process with
/// them.
pub(super) fn hand_keys(id: &str, text: &str) -> Result<(), LaunchError> {
    let mut client = connect(id, None)?;
    client
        .hand_keys(text)
        .map(drop)
        .map_err(|e| LaunchError::new("hand the keys over", e.to_string()))
}
