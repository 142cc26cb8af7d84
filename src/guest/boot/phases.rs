//! The phases of warden's boot that prepare the machine (3 to 8), what it
//! says once ready, and its last phase (14); the boot's `mod.rs` runs
//! them in order (its `phases`), with the ones that bind sockets and start processes.

use crate::guest::accounts::layout;
use crate::guest::accounts::users;
use crate::guest::audit::{payload, Audit, Rotation};
use crate::guest::confine::cgroups::{self, Cgroups};
use crate::guest::confine::{self, Confinement};
use crate::guest::net::proxy;
use crate::guest::net::Network;
use crate::guest::supervisor::Supervisor;
use crate::guest::vm::Vm;
use crate::shared::config::{self, MachineConfig};
use crate::shared::policy::Policy;
use crate::shared::redact::Redactor;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Why warden refuses to boot, by phase; said on the console, and the
/// machine ends with status 1.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("{0}")]
    Config(String),
    #[error("VM volumes: {0}")]
    Volumes(String),
    #[error("users: {0}")]
    Users(String),
    #[error("{0}")]
    Layout(String),
    #[error("keys: {0}")]
    Keys(String),
    #[error("audit log in {dir}: {error}")]
    Audit { dir: PathBuf, error: String },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("api socket {path}: {error}")]
    ApiSocket {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the machine's key: {0}")]
    Key(String),
    #[error("host socket {path}: {error}")]
    HostSocket {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("vsock port {port}: {error}")]
    Vsock { port: u32, error: String },
    #[error("tcp door {address}: {error}")]
    TcpDoor {
        address: std::net::SocketAddr,
        error: std::io::Error,
    },
}

/// What warden is started with: its machine config file (None: the
/// default path) and the main process to run (empty: none).
pub struct InitArgs {
    pub config: Option<PathBuf>,
    pub main: Vec<String>,
}

/// 3. The machine's config and its confinement policy (the command line's
///    `-- ARGV` is the main process, over the config's).
pub fn load_config(args: InitArgs) -> Result<(MachineConfig, PathBuf, Policy), BootError> {
    let (config_path, explicit) = match &args.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(config::DEFAULT_PATH), false),
    };
    let mut config = MachineConfig::load(&config_path, explicit)
        .map_err(|e| BootError::Config(e.to_string()))?;
    if !args.main.is_empty() {
        config.main = args.main;
    }
    let policy = Policy::load(&config.policy_dir).map_err(|e| BootError::Config(e.to_string()))?;
    Ok((config, config_path, policy))
}

/// 3, in a VM: its data and workspace disks, where the config puts the
///    runtime's home, and its lent folders.
pub fn mount_volumes(vm: Option<&Vm>, config: &MachineConfig) -> Result<Vec<String>, BootError> {
    match vm.map(|vm| vm.mount_volumes(&config.runtime.home, &config.vm_lends)) {
        None => Ok(Vec::new()),
        Some(Ok(mounted)) => Ok(mounted),
        Some(Err(e)) => Err(BootError::Volumes(e.to_string())),
    }
}

/// 4. The two users, made if missing; conflicts refused.
pub fn make_users(config: &MachineConfig) -> Result<[users::Account; 2], BootError> {
    users::ensure(Path::new("/etc"), [&config.runtime, &config.shell])
        .map_err(|e| BootError::Users(e.to_string()))
}

/// 5. The layout, with the modes the README lists (a lent routines folder
///    kept as lent, if shell cannot write it), and the keys a VM's
///    launcher handed over with its files (or a cluster's Secret names in
///    `keys_from`), made the runtime's `.env`.
pub fn make_layout(
    config: &MachineConfig,
    accounts: &[users::Account; 2],
) -> Result<(layout::Paths, Vec<String>), BootError> {
    let paths = layout::Paths::of_machine(&accounts[0], &accounts[1], config.audit_dir());
    let changes = layout::ensure(&layout::specs(&paths, &accounts[0], &accounts[1]))
        .map_err(|e| BootError::Layout(e.to_string()))?;
    if paths.routines_lent {
        let shell = &accounts[1];
        let who = layout::Who {
            uid: shell.uid,
            gid: shell.gid,
            groups: &shell.groups,
        };
        layout::check_lent_routines(&paths.routines, who)
            .map_err(|e| BootError::Layout(e.to_string()))?;
        crate::say!("routines: lent by the owner, kept as lent (shell cannot write them)");
    }
    match layout::hand_over_keys(Path::new(layout::HANDED_KEYS), &paths.env_file) {
        Ok(true) => crate::say!("the runtime's keys were handed over"),
        Ok(false) => {}
        Err(e) => return Err(BootError::Keys(e.to_string())),
    }
    if let Some(from) = &config.keys_from {
        let r = &accounts[0];
        let names =
            crate::guest::accounts::runtime_keys::copy_mounted(from, &paths.env_file, r.uid, r.gid)
                .map_err(|e| BootError::Keys(e.to_string()))?;
        crate::say!(
            "the runtime's keys were read from {}: {}",
            from.display(),
            names.len()
        );
    }
    Ok((paths, changes))
}

/// 6. The audit log: root's, readable by the runtime's group, redacted
///    with the runtime's keys.
pub fn open_audit(
    config: &MachineConfig,
    paths: &layout::Paths,
    accounts: &[users::Account; 2],
) -> Result<Audit, BootError> {
    let redactor = Redactor::new(paths.env_file.clone());
    let rotation = Rotation {
        max_bytes: config.audit_max_bytes,
        max_files: config.audit_max_files,
    };
    Audit::open_with(
        &paths.audit_dir,
        Some(accounts[0].gid),
        Some(redactor),
        rotation,
    )
    .map_err(|e| BootError::Audit {
        dir: paths.audit_dir.clone(),
        error: e.to_string(),
    })
}

/// 7. The confinement of commands, prepared once (per-command cgroups
///    where the machine has a hierarchy of its own), and the network policy.
pub fn prepare_confinement(
    policy: Policy,
    pid1: bool,
    own_cgroups: bool,
    [runtime_uid, shell_uid]: [u32; 2],
) -> (Confinement, Network) {
    let proc_hidden = if pid1 {
        confine::hide_processes()
    } else {
        Err(confine::ProcHiddenError::NotPid1)
    };
    // Only a hierarchy that is the machine's own: on a host's, warden
    // would move the host's processes about.
    let cgroups = match own_cgroups && pid1 {
        true => Cgroups::set_up(Path::new(cgroups::ROOT)),
        false => Err(cgroups::CgroupsError::NotOwn),
    };
    let network = Network::new(policy.network.clone(), shell_uid, runtime_uid);
    (Confinement::new(policy, proc_hidden, cgroups), network)
}

/// 8. The machine's authority for the hosts the proxy opens, made now and
///    published over the system bundle before any command's mount
///    namespace is made (a later mount would not reach commands); and the
///    credentials' values a cluster's Secret holds (`credentials_from`).
pub fn open_hosts(network: &mut Network, config: &MachineConfig, audit: &Audit) {
    let name = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "machine".into());
    let prices = crate::shared::spend::prices::load(&config.policy_dir);
    if let (Err(e), false) = (&prices, network.policy.providers.is_empty()) {
        crate::say!("model providers: {e}; their requests are refused");
    }
    let opener = match proxy::Opener::new(&name, &network.policy.spend, prices) {
        Ok(opener) => Arc::new(opener),
        Err(e) => {
            crate::say!("opened hosts: {e}");
            network.opener = Err(e.clone());
            network.trust = Err(e.into());
            return;
        }
    };
    if let Some(from) = &config.credentials_from {
        read_credentials(&opener.vault, from, audit);
    }
    let own_dir = config.socket.parent().unwrap_or(Path::new("/run/warden"));
    network.trust = crate::guest::net::opened::trust::publish(opener.ca.pem(), own_dir);
    // Said where it matters now (status says it always).
    let opens = !network.policy.credentials.is_empty() || !network.policy.rules.is_empty();
    match (&network.trust, opens) {
        (Err(e), true) => crate::say!("the machine's authority is not trusted by its tools: {e}"),
        (Ok(published), true) => {
            if let Some(why) = &published.beside_because {
                crate::say!(
                    "the machine's bundle is {} ({why}): tools that read the system bundle alone do not trust it",
                    published.bundle.display()
                );
            }
        }
        _ => {}
    }
    network.opener = Ok(opener);
}

/// The credentials' values from a mounted Secret, into warden's memory.
/// A file that cannot be read leaves none: each request that needs one is
/// refused, saying so.
fn read_credentials(vault: &crate::guest::net::opened::vault::Vault, from: &Path, audit: &Audit) {
    let read = std::fs::read_to_string(from).map_err(|e| e.to_string());
    match read.and_then(|text| vault.hand(&text).map_err(|e| e.to_string())) {
        Ok(names) => {
            audit.hide_also(vault.all_text());
            audit.record(&payload::CredentialsHanded {
                names: &names,
                from: Some(from),
            });
        }
        Err(e) => {
            crate::say!("credentials_from {}: {e}", from.display());
            audit.record(&payload::KeysFailed {
                credentials_from: Some(from),
                error: e,
            });
        }
    }
}

/// 8. Loopback, and the egress proxy's listening sockets (none: the
///    firewall probe finds the proxy unreachable and says so).
pub fn bind_proxy(network: &mut Network) -> Vec<std::net::TcpListener> {
    match crate::guest::net::loopback_up() {
        Ok(true) => crate::say!("brought the loopback interface up"),
        Ok(false) => {}
        Err(e) => crate::say!("{e}"),
    }
    match proxy::bind(network.policy.proxy_port) {
        Ok((listeners, missing)) => {
            if let Some(m) = missing {
                crate::say!("{m}; the proxy listens on IPv4 only");
            }
            network.listening = listeners
                .iter()
                .filter_map(|l| l.local_addr().ok())
                .map(|a| a.to_string())
                .collect();
            listeners
        }
        Err(e) => {
            crate::say!("{e}: shell has no way out");
            Vec::new()
        }
    }
}

/// 8, then: the supervisor of everything that follows; keys handed over at
///    an earlier boot are the main process's from the start; from here on
///    every diagnostic line is redacted like the audit log.
pub fn supervisor(
    config: MachineConfig,
    accounts: [users::Account; 2],
    audit: Audit,
    confinement: Confinement,
    network: Network,
    pid1: bool,
) -> Arc<Supervisor> {
    let sup = Arc::new(Supervisor::new(
        config,
        accounts,
        audit,
        confinement,
        network,
        pid1,
    ));
    if let Some(text) =
        crate::guest::accounts::runtime_keys::earlier(&sup.paths.env_file, sup.runtime.uid)
    {
        sup.keys.arrive(&text);
    }
    let weak = Arc::downgrade(&sup);
    crate::shared::diag::set_redaction(Box::new(move |text| match weak.upgrade() {
        Some(sup) => sup.audit.redact(text).into_owned(),
        None => text.to_string(),
    }));
    sup
}

/// Says on the console what does not hold, whether commands are refused,
/// and that warden is ready.
pub fn announce(
    sup: &Supervisor,
    layers: &[crate::wire::LayerState],
    boot: Instant,
    vsock_port: Option<u32>,
) {
    for layer in layers.iter().filter(|l| !l.holds) {
        let what = if layer.required {
            "required"
        } else {
            "best effort"
        };
        crate::say!("{} ({what}) does not hold: {}", layer.layer, layer.detail);
    }
    if let Some(reason) = sup.confinement.refusal() {
        crate::say!("commands will be refused: {reason}");
    }
    let mut vsock = vsock_port
        .map(|p| format!(" and vsock port {p}"))
        .unwrap_or_default();
    if let Some(door) = sup.config.tcp_door {
        vsock.push_str(&format!(" and tcp {door}"));
    }
    crate::say!(
        "ready in {:.1} ms: api on {}{vsock}, audit log {}",
        boot.elapsed().as_secs_f64() * 1e3,
        sup.config.socket.display(),
        sup.audit.path().display()
    );
}

/// 14. Leave the books in order: the sockets removed, the firewall's
///     table too, every count written, the last line, the log on disk.
pub fn leave_the_books_in_order(sup: &Supervisor, status: i32) -> i32 {
    let _ = std::fs::remove_file(&sup.config.socket);
    if let Some(host) = &sup.config.host_socket {
        let _ = std::fs::remove_file(host);
    }
    sup.network.remove();
    crate::guest::api::end_runs(sup);
    sup.audit.write_all_counts();
    sup.audit.record(&payload::Shutdown { status });
    sup.audit.sync();
    crate::say!("exiting with status {status}");
    status
}
