//! A machine's state folder on the host and what the machine sees of it:
//! the key (made once, 0600), warden's own copy, its config and network,
//! Landlock and limits policies, all readable by root alone inside, and
//! `run/`, where warden puts the host socket. Under keep-id the files
//! warden alone reads are handed to the machine's root.

use super::definition::{Definition, LendMode};
use super::engine;
use super::error::LaunchError;
use super::this_host;
use super::this_host::Host;
use crate::wire::client::Client;
use crate::wire::Request;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Names the containers and volumes.
pub const PREFIX: &str = "warden";

/// The mark a frozen machine's state folder holds: a freeze writes it
/// before the engine (or a VM's monitor) freezes the machine, a thaw
/// removes it; `ps` shows such a machine `paused`.
pub const PAUSED: &str = "paused";

/// The machine's state folder.
pub fn state_dir(id: &str) -> PathBuf {
    match this_host::state_root() {
        Ok(root) => root.join(id),
        // Unreachable in practice: every command asks for the root first.
        Err(_) => Path::new(this_host::ROOTFUL_STATE).join(id),
    }
}

/// The host socket warden serves for this machine.
pub fn socket(id: &str) -> PathBuf {
    state_dir(id).join("run/api.sock")
}

/// The engine's name of the machine (its container; a VM's name too).
pub fn container(id: &str) -> String {
    format!("{PREFIX}-{id}")
}

/// Reads the machine's key from its state folder.
pub fn key(id: &str) -> Result<String, LaunchError> {
    let path = state_dir(id).join("key");
    std::fs::read_to_string(&path)
        .map(|k| k.trim().to_string())
        .map_err(|e| {
            LaunchError::new(
                format!("machine {id}"),
                format!("key {}: {e}", path.display()),
            )
        })
}

/// A client of the machine's warden through the host socket in its state
/// folder, keyed.
pub fn connect(id: &str, first: Option<(u32, &Request)>) -> Result<Client, LaunchError> {
    let key = key(id)?;
    let socket = socket(id);
    Client::connect_keyed(&socket, Some(&key), first).map_err(|e| LaunchError::io(&socket, e))
}

/// Makes the state folder and what warden reads from it; the key is made
/// once and kept.
pub(super) fn prepare_state(def: &Definition) -> Result<PathBuf, LaunchError> {
    let state = state_dir(&def.id);
    let io = |what: &str, e: std::io::Error| state_error(&state, what, e);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&state)
        .map_err(|e| io("create", e))?;
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io("chmod", e))?;
    make_key(&state.join("key")).map_err(|e| io("key", e))?;
    Ok(state)
}

/// Writes what the machine sees (etc/ and run/, mounted into a container,
/// packed into a VM's initramfs). Only ever while no container mounts
/// them: a kept container keeps the files it was made with.
pub(super) fn write_machine_files(
    def: &Definition,
    state: &Path,
    host: &Host,
    main: Option<&[String]>,
) -> Result<(), LaunchError> {
    let io = |what: &str, e: std::io::Error| state_error(state, what, e);
    // An earlier `up` may have handed them to the machine's root: take
    // them back to write them.
    let seen = [state.join("etc"), state.join("run")];
    if host.rootless {
        give(&seen, false)?;
    }
    std::fs::create_dir_all(state.join("etc/policy")).map_err(|e| io("etc", e))?;
    // warden reads its own copy; the host keeps `key` for itself.
    let machine_key = key(&def.id)?;
    let copy = state.join("etc/key");
    let _ = std::fs::remove_file(&copy);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&copy)
        .and_then(|mut f| f.write_all(machine_key.as_bytes()))
        .map_err(|e| io("etc/key", e))?;
    let config = serde_json::json!({
        "host_socket": "/run/warden-host/api.sock",
        "key_file": "/etc/warden/key",
        // The keys come through the host socket right after boot: a main
        // process waits for them, to start with them. (Given here, the
        // main process is a VM's, whose keys are on its disk at boot.)
        "main_waits_for_keys": !def.keys.is_empty() && main.is_none(),
        "main": main.unwrap_or_default(),
        // A machine serve fronts sleeps when serve says: serve sees the
        // connections to its ports, which warden does not.
        "idle_stop_s": def.idle_stop_s().filter(|_| !def.sleep.serve),
    });
    // A VM's only way out: its host's relay. Written only then: an image's
    // own, older warden refuses fields it does not know.
    let mut config = config;
    if def.kind == super::definition::Kind::Vm && def.network != super::definition::Network::None {
        config["egress_vsock_port"] = crate::wire::vsock_ports::RELAY_PORT.into();
    }
    // Written only when asked for, as the relay's port above.
    if let Some(when) = def.ready.when {
        config["ready"] = serde_json::json!(when);
    }
    if let Some(ports) = runtime_ports(def) {
        config["runtime_ports"] = ports;
    }
    std::fs::write(state.join("etc/machine.json"), format!("{config:#}\n"))
        .map_err(|e| io("machine.json", e))?;
    write_network(def, &state.join("etc/policy/network.json")).map_err(|e| io("network", e))?;
    write_policy(
        &state.join("etc/policy/landlock.json"),
        (!def.lend.is_empty()).then(|| landlock_for(def)),
    )
    .map_err(|e| io("landlock", e))?;
    write_policy(&state.join("etc/policy/limits.json"), limits_policy(def))
        .map_err(|e| io("limits", e))?;
    // warden alone reads them (as root): not shell, whose Landlock grants
    // it /etc to read.
    close_to_all_but_root(&state.join("etc")).map_err(|e| io("etc modes", e))?;
    let run = state.join("run");
    std::fs::create_dir_all(&run).map_err(|e| io("run", e))?;
    // Warden inside (root, no user namespace) makes the socket here.
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io("run", e))?;
    if def.keep_id.is_on() {
        // Under keep-id the owner's files are a user's inside: what warden
        // alone may read goes to the machine's root (uid 1 of the owner's
        // namespace, the first subordinate id). `run` stays the owner's:
        // warden gives the host socket to its folder's owner (mode 0600),
        // and refuses shell, who is that uid inside, by its pid.
        give(&seen[..1], true)?;
    }
    Ok(())
}

/// `state folder {state}: {what}: {e}`.
fn state_error(state: &Path, what: &str, e: std::io::Error) -> LaunchError {
    LaunchError::new(
        format!("state folder {}", state.display()),
        format!("{what}: {e}"),
    )
}

/// Folders 0700 and files 0600, all the way down (no link is followed).
pub(super) fn close_to_all_but_root(dir: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            close_to_all_but_root(&entry.path())?;
        } else if kind.is_file() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// Hands `paths` to the machine's root (uid 1 of the rootless owner's
/// user namespace, the first subordinate id), or back to the owner (0).
pub(super) fn give(paths: &[PathBuf], to_machine_root: bool) -> Result<(), LaunchError> {
    let owner = if to_machine_root { "1:1" } else { "0:0" };
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let mine = |p: &PathBuf| std::fs::metadata(p).is_ok_and(|m| m.uid() == me);
    let present: Vec<String> = paths
        .iter()
        .filter(|p| p.exists() && (to_machine_root || !mine(p)))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if present.is_empty() {
        return Ok(());
    }
    let mut args = vec!["unshare", "chown", "-R", owner];
    args.extend(present.iter().map(String::as_str));
    engine::run("hand the state folder over", &args).map(drop)
}

/// A new machine key: 64 hex characters from /dev/urandom.
pub(super) fn fresh_key() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(crate::shared::audit_chain::hex(&bytes))
}

/// 64 hex characters from /dev/urandom, mode 0600; kept when present.
pub(super) fn make_key(path: &Path) -> std::io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let hex = fresh_key()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(hex.as_bytes())
}

/// The definition's network policy (hosts, allowed address blocks, the
/// firewall's requirement), or no file (warden's defaults).
pub(super) fn write_network(def: &Definition, path: &Path) -> std::io::Result<()> {
    write_policy(path, network_policy(def))
}

/// Pure: the definition's network policy, None when warden's defaults
/// hold (no hosts, no address blocks, no firewall requirement given).
pub(super) fn network_policy(def: &Definition) -> Option<serde_json::Value> {
    let mut policy = serde_json::Map::new();
    // A provider's host is on the list the runtime is decided by (its own,
    // or the host list), where a list is given: it reaches it metered.
    let providers: Vec<String> = def
        .opened
        .providers
        .iter()
        .map(|p| p.host.clone())
        .collect();
    let with_providers = |hosts: &Vec<String>| {
        let mut hosts = hosts.clone();
        hosts.extend(
            providers
                .iter()
                .filter(|p| !hosts.contains(p))
                .cloned()
                .collect::<Vec<_>>(),
        );
        hosts
    };
    if let Some(hosts) = &def.hosts {
        let hosts = match def.runtime_hosts {
            None => with_providers(hosts),
            Some(_) => hosts.clone(),
        };
        policy.insert("hosts".into(), serde_json::json!(hosts));
    }
    if let Some(hosts) = &def.runtime_hosts {
        policy.insert(
            "runtime_hosts".into(),
            serde_json::json!(with_providers(hosts)),
        );
    }
    if !def.allow_addresses.is_empty() {
        policy.insert(
            "allow_addresses".into(),
            serde_json::json!(def.allow_addresses),
        );
    }
    if let Some(firewall) = def.firewall {
        policy.insert("firewall".into(), serde_json::json!(firewall));
    }
    policy.extend(def.opened.policy());
    (!policy.is_empty()).then_some(policy.into())
}

/// Pure: the definition's limits for every command, None when it gives
/// none (the built-in ones hold).
pub(super) fn limits_policy(def: &Definition) -> Option<serde_json::Value> {
    (def.limits != Default::default()).then(|| serde_json::to_value(def.limits).unwrap_or_default())
}

/// Lent folders are granted to commands as lent: read-only ones read-only,
/// writable ones read-write, on top of what the built-in policy grants.
pub(super) fn landlock_for(def: &Definition) -> serde_json::Value {
    let built_in = crate::shared::policy::Policy::built_in().landlock;
    let mut read_only = built_in.read_only;
    let mut read_write = built_in.read_write;
    for lend in &def.lend {
        // The agent's routines are never shell's to write, however lent.
        let routines = lend.at == Path::new(super::agent::ROUTINES);
        match lend.mode {
            LendMode::Write if !routines => read_write.push(lend.at.clone()),
            _ => read_only.push(lend.at.clone()),
        }
    }
    serde_json::json!({"read_only": read_only, "read_write": read_write})
}

/// Writes a policy file, or removes it (the built-in one then holds).
pub(super) fn write_policy(path: &Path, value: Option<serde_json::Value>) -> std::io::Result<()> {
    match value {
        Some(v) => std::fs::write(path, format!("{v:#}\n")),
        None => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// The ports the runtime may listen on where warden's connect gate holds
/// it: its published ones. Written only with `runtime_hosts` (the gate's
/// case): an image's own, older warden refuses fields it does not know.
pub fn runtime_ports(def: &super::definition::Definition) -> Option<serde_json::Value> {
    def.runtime_hosts.as_ref()?;
    let ports: Vec<u16> = def.ports.iter().map(|p| p.port).collect();
    Some(serde_json::json!(ports))
}
