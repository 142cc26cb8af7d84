//! A VM's host side, one process per VM (`warden machine vm-relay`, root's,
//! started by `up` before QEMU, ended by `stop`): the egress relay when
//! the VM has a network (`egress.rs`), and its published ports (`ports.rs`).
//! The VM has no network device; both go over its vsock, whose host end is
//! vhost-device-vsock's unix sockets in the machine's folder.

use super::egress::{EgressConfig, Relay};
use super::ports::Forward;
use crate::host::definition::{Definition, Network};
use crate::host::error::LaunchError;
use crate::wire::vsock_ports;
use serde::{Deserialize, Serialize};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Why the relay could not start, or serve: each names the file, socket
/// or port it failed on.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// `relay.json`, unread.
    #[error("{}: {source}", path.display())]
    ReadConfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    ParseConfig {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A published port's listener on the host's loopback.
    #[error("127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("{}: {source}", path.display())]
    OpenNetns {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("joining {}: {source}", path.display())]
    JoinNetns { path: PathBuf, source: nix::Error },
    #[error("runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("ports need the VM's vsock socket")]
    NoVsock,
    #[error("port: {0}")]
    Port(#[source] std::io::Error),
    /// The egress relay's unix socket.
    #[error("{}: {source}", path.display())]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Policy(#[from] crate::shared::policy::PolicyError),
    #[error(transparent)]
    Key(#[from] crate::shared::machine_key::KeyFileError),
    #[error("network.json lists no hosts: a VM's relay decides by the machine's own list")]
    NoHosts,
    #[error(transparent)]
    Hosts(#[from] crate::shared::egress::hosts::HostsError),
    #[error(transparent)]
    Resolver(#[from] crate::shared::egress::reach::ResolverError),
}

/// What the process is started with (`relay.json`, written by `up`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// The egress relay; None for a VM without a network.
    #[serde(default)]
    pub egress: Option<EgressConfig>,
    /// The published ports, carried to the guest through `vsock`.
    #[serde(default)]
    pub ports: Vec<Forward>,
    /// vhost-device-vsock's socket for connections into the guest.
    #[serde(default)]
    pub vsock: Option<PathBuf>,
    /// The machine: the relay ends once its VM, seen running, is gone.
    #[serde(default)]
    pub machine: Option<String>,
}

/// Whether the VM of `def` needs its host side at all.
pub fn needed(def: &Definition) -> bool {
    def.network != Network::None || !def.ports.is_empty()
}

/// Starts the machine's relay (ending one left from an earlier run), and
/// waits until it listens. `ports` are the chosen (host, guest) pairs.
pub fn start(def: &Definition, ports: &[(u16, u16)]) -> Result<(), LaunchError> {
    let vm = super::dir(&def.id);
    super::stop_backend(&def.id);
    let listen = vm.join(format!("vsock.sock_{}", vsock_ports::RELAY_PORT));
    let _ = std::fs::remove_file(&listen);
    let state = crate::host::state::state_dir(&def.id);
    let egress = (def.network != Network::None).then(|| EgressConfig {
        listen: listen.clone(),
        key_file: state.join("key"),
        policy_dir: state.join("etc/policy"),
        dns: def.dns.clone(),
        netns: match &def.network {
            Network::Namespace(path) => Some(path.clone()),
            _ => None,
        },
    });
    let config = RelayConfig {
        egress,
        ports: ports
            .iter()
            .map(|&(host, guest)| Forward { host, guest })
            .collect(),
        vsock: Some(vm.join("vsock.sock")),
        machine: Some(def.id.clone()),
    };
    let file = vm.join("relay.json");
    let text = serde_json::to_string_pretty(&config).unwrap_or_default();
    std::fs::write(&file, text).map_err(|e| LaunchError::io(&file, e))?;
    let ready = vm.join("relay.ready");
    let _ = std::fs::remove_file(&ready);
    let log_file = vm.join("relay.log");
    let mut child = spawn(&def.id, &file, &log_file)?;
    let pid_file = vm.join("relay.pid");
    std::fs::write(&pid_file, child.id().to_string()).map_err(|e| LaunchError::io(&pid_file, e))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ready.exists() {
        let gone = !matches!(child.try_wait(), Ok(None));
        if std::time::Instant::now() > deadline || gone {
            super::stop_backend(&def.id);
            let said = std::fs::read_to_string(&log_file).unwrap_or_default();
            return Err(LaunchError::new(
                "the VM's relay did not start",
                said.lines()
                    .last()
                    .unwrap_or("no word in relay.log")
                    .to_string(),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Runs `warden machine vm-relay --config FILE` in a session (and, where
/// systemd runs, a scope) of its own.
fn spawn(id: &str, config: &Path, log_file: &Path) -> Result<std::process::Child, LaunchError> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file)
        .map_err(|e| LaunchError::io(log_file, e))?;
    let warden = std::env::current_exe()
        .map_err(|e| LaunchError::new("warden's own path", e.to_string()))?;
    let args = vec![
        "machine".to_string(),
        "vm-relay".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    let unit = format!("warden-{id}-relay");
    let systemd = crate::host::scope::systemd_runs();
    let (program, args) =
        crate::host::scope::in_own_scope(systemd, &unit, &warden.display().to_string(), args);
    std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| LaunchError::new("the VM's relay", e.to_string()))
}

/// `warden machine vm-relay --config FILE`: serves until killed. The
/// published ports are bound on the host's loopback first, then the
/// process joins the machine's network namespace for the egress.
pub fn run(config_file: &Path, keep_awake: super::ports::KeepAwake) -> Result<(), RelayError> {
    let path = || config_file.to_path_buf();
    let text = std::fs::read_to_string(config_file).map_err(|source| RelayError::ReadConfig {
        path: path(),
        source,
    })?;
    let config: RelayConfig =
        serde_json::from_str(&text).map_err(|source| RelayError::ParseConfig {
            path: path(),
            source,
        })?;
    let ports = super::ports::bind(&config.ports)?;
    // Before any thread: setns moves only the calling thread.
    if let Some(ns) = config.egress.as_ref().and_then(|e| e.netns.as_ref()) {
        enter_netns(ns)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(RelayError::Runtime)?;
    runtime.block_on(async {
        let mut serving = tokio::task::JoinSet::new();
        if let Some(egress) = &config.egress {
            let relay = Arc::new(Relay::new(egress)?);
            let listener = listen(&egress.listen)?;
            serving.spawn(relay.serve_all(listener));
        }
        if !ports.is_empty() {
            let vsock = config.vsock.clone().ok_or(RelayError::NoVsock)?;
            for (listener, guest) in ports {
                let listener =
                    tokio::net::TcpListener::from_std(listener).map_err(RelayError::Port)?;
                let machine = config.machine.clone();
                serving.spawn(super::ports::serve(
                    listener,
                    vsock.clone(),
                    guest,
                    machine,
                    keep_awake,
                ));
            }
        }
        if let Some(id) = config.machine.clone() {
            serving.spawn(outlive_not(id));
        }
        ready(config_file);
        // The first to end (the VM gone) ends the relay.
        serving.join_next().await;
        Ok(())
    })
}

/// Returns once the VM `id`, seen running, has powered off (by itself:
/// its main process ended, or it was idle): its ports and its way out go
/// with it.
async fn outlive_not(id: String) {
    let mut seen = false;
    loop {
        match super::qemu_pid(&id) {
            Some(_) => seen = true,
            None if seen => {
                log(serde_json::json!({"relay": "the VM is gone: ending"}));
                return;
            }
            None => {}
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Says the relay listens: `relay.ready` beside its config.
fn ready(config_file: &Path) {
    if let Some(dir) = config_file.parent() {
        let _ = std::fs::write(dir.join("relay.ready"), std::process::id().to_string());
    }
}

fn enter_netns(path: &Path) -> Result<(), RelayError> {
    let ns = std::fs::File::open(path).map_err(|source| RelayError::OpenNetns {
        path: path.to_path_buf(),
        source,
    })?;
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|source| {
        RelayError::JoinNetns {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Binds `path` (root's alone), replacing a socket left from a last run.
fn listen(path: &Path) -> Result<tokio::net::UnixListener, RelayError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
    let failed = |source| RelayError::Listen {
        path: path.to_path_buf(),
        source,
    };
    let listener = tokio::net::UnixListener::bind(path).map_err(failed)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(failed)?;
    Ok(listener)
}

/// One JSON line on stderr (`relay.log`), with the time.
pub(super) fn log(mut line: serde_json::Value) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    line["time"] = now.into();
    eprintln!("{line}");
}
