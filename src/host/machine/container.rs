//! The container backend: a machine as a container `warden-<id>` with two
//! volumes (`warden-<id>-data`, `warden-<id>-work`), made by podman
//! (rootful or rootless) or Docker. The host talks to warden only through
//! the host socket in the machine's state folder, presenting the key;
//! `podman exec` is used only to run the definition's setup script.

use super::found::{found, found_in, wake, Found};
use crate::host::agent::RUNTIME_HOME;
use crate::host::agent_setup::published;
use crate::host::agent_setup::{
    check_requires, engine_size, hand_credentials, hand_keys, host_ports,
};
use crate::host::backend::{Backend, Made, Prepared};
use crate::host::create::{
    create_args, entrypoint_is_warden, static_warden, CreatePlan, Entry, RUNTIME_UID, SHELL_UID,
};
use crate::host::definition::{Definition, Network, Workspace};
use crate::host::engine;
use crate::host::error::LaunchError;
use crate::host::kept;
use crate::host::made_from;
use crate::host::ps::{self, Row};
use crate::host::state::{container, give, key, socket, state_dir, write_machine_files, PREFIX};
use crate::host::step;
use crate::host::this_host::{Engine, Host};
use crate::wire::client::Client;
use crate::wire::Request;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long `up` waits for warden's host socket to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// The container backend.
pub struct Container;

impl Backend for Container {
    fn noun(&self) -> &'static str {
        "container"
    }

    fn fits(&self, def: &Definition, host: &Host) -> Result<(), LaunchError> {
        fits(def, host)
    }

    fn up(&self, prepared: &Prepared, made: &mut Made) -> Result<(), LaunchError> {
        up(prepared, made)
    }

    fn start(&self, id: &str) -> Result<(), LaunchError> {
        start(id)
    }

    fn stop(&self, id: &str) -> Result<(), LaunchError> {
        engine::run("stop", &["stop", "-t", "10", &container(id)]).map(drop)
    }

    fn logs(&self, id: &str) -> Result<(), LaunchError> {
        logs(id)
    }

    fn remove(&self, id: &str, volumes: bool) -> Result<(), LaunchError> {
        remove(id, volumes)
    }

    fn connect(&self, id: &str, first: Option<(u32, &Request)>) -> Result<Client, LaunchError> {
        crate::host::state::connect(id, first)
    }

    fn copy_audit(&self, id: &str, copy: &Path) -> Result<bool, LaunchError> {
        let from = format!("{}:/home/runtime/data/audit", container(id));
        engine::run("copy audit log", &["cp", &from, &copy.to_string_lossy()])?;
        Ok(false)
    }

    fn list(&self) -> Result<Vec<Row>, LaunchError> {
        list()
    }

    fn down(&self, id: &str) -> Result<(), LaunchError> {
        down(id)
    }

    fn ids(&self) -> Result<Vec<String>, LaunchError> {
        ids()
    }
}

/// The container's part of `up`: made (or kept when its inputs are the
/// same), started, warden waited for, the keys handed over, `requires`
/// checked and `setup` run once.
fn up(p: &Prepared, made: &mut Made) -> Result<(), LaunchError> {
    let (def, start) = (p.def, p.start);
    let name = def.container(PREFIX);
    let woken = p.kept.as_ref().and_then(|r| wake(r, &def.id, &name, start));
    let woke = woken.is_some();
    let mut found = match (woken, &p.looked.container) {
        (Some(woken), _) => Some(woken),
        (None, Some(inspect)) => found_in(inspect),
        // The one inspect said there is none: not asked again.
        (None, None) if p.looked.volumes.is_some() => None,
        (None, None) => found(&name),
    };
    let mut reloads = made_from::reloaded(made_from::load(&p.state).as_ref(), &p.made_from);
    let created = match made_or_kept(p, &name, found.as_ref(), &mut reloads, made) {
        // Assumed new, the container was there after all (its state
        // folder was not): looked at, then kept or made again as any.
        Err(e) if p.looked.assumed && e.to_string().contains("already in use") => {
            step(start, &format!("{name}: there already: looked at"));
            found = self::found(&name);
            made_or_kept(p, &name, found.as_ref(), &mut reloads, made)?
        }
        other => other?,
    };
    // What the engine holds of a new container, asked while its warden
    // boots: the inspect's tens of milliseconds are off `up`'s path.
    let closing = created.then(|| {
        let name = name.clone();
        std::thread::spawn(move || self::found(&name))
    });
    if let Some(old) = &p.image.replaced {
        crate::host::image::remove_replaced(old, start);
    }
    if !created && !found.as_ref().is_some_and(|f| f.running) {
        engine::run("start", &["start", &name])?;
        step(start, &format!("{name}: started"));
    }
    wait_ready(&def.id, &key(&def.id)?)?;
    step(start, "warden answers on the host socket");
    if !reloads.is_empty() {
        crate::host::reloaded::reload(&def.id, &reloads, start)?;
    }
    // The credentials before the keys: the main process, which may wait
    // for its keys, finds the proxy ready to add them.
    let handed = hand_credentials(p.credentials_text, || {
        crate::host::state::connect(&def.id, None)
    })?;
    if handed > 0 {
        step(start, &format!("credentials handed to warden: {handed}"));
    }
    hand_keys(&def.id, p.keys_text)?;
    step(
        start,
        &format!("keys handed to the runtime: {}", def.keys.len()),
    );
    check_requires(def, || crate::host::state::connect(&def.id, None))?;
    if let (Some(script), Some(digest)) = (&def.setup, &p.setup_digest) {
        setup_once(p, &name, script, digest, created)?;
    }
    if !def.sleep.serve {
        super::serve::fronted::forget(&p.state);
    }
    if let Some(closing) = closing {
        found = closing.join().unwrap_or(None);
    }
    say_what_was_made(p, &name, woke, found)
}

/// The container kept when `found` is of the inputs as they are now, else
/// made (again); true when made.
fn made_or_kept(
    p: &Prepared,
    name: &str,
    found: Option<&Found>,
    reloads: &mut Vec<String>,
    made: &mut Made,
) -> Result<bool, LaunchError> {
    let start = p.start;
    match found.map(|f| f.inputs.as_str()) {
        Some(found) if found == p.digest => {
            crate::host::reloaded::keep(p, name, reloads)?;
            Ok(false)
        }
        found => {
            if found.is_some() {
                let why = made_from::why_again(made_from::load(&p.state).as_ref(), &p.made_from);
                kept::forget(&p.state);
                engine::remove_container("remove old container", name)?;
                step(start, &format!("{name}: made again: {why}"));
            }
            write_machine_files(p.def, &p.state, p.host, None)?;
            create_and_start(p, made)?;
            made_from::keep(&p.state, &p.made_from);
            step(start, &format!("{name}: created and started"));
            reloads.clear();
            Ok(true)
        }
    }
}

/// The end of `up`: the ports published, the size the engine holds, and
/// the container's record kept for the next `up` (a woken machine's is the
/// one `up` began from).
fn say_what_was_made(
    p: &Prepared,
    name: &str,
    woke: bool,
    found: Option<Found>,
) -> Result<(), LaunchError> {
    let (def, start) = (p.def, p.start);
    // Asked only when there is something to list: an engine call costs.
    let published = match (def.ports.is_empty(), def.sleep.serve) {
        (true, _) => Vec::new(),
        (false, true) => super::serve::fronted::front(p)?,
        (false, false) => published(name),
    };
    for line in published {
        step(start, &format!("published: {line}"));
    }
    // Docker's inspect knows no podman fields: its size asked apart.
    let size = found
        .as_ref()
        .and_then(|f| f.size.clone())
        .or_else(|| crate::host::agent_setup::size_of(name));
    // A woken machine's record is the one `up` began from: kept as it is.
    if !woke {
        match (
            found.as_ref().and_then(|f| f.record(&p.digest)),
            p.host.engine,
        ) {
            (Some(record), Engine::Podman) => kept::save(&p.state, &record),
            _ => kept::forget(&p.state),
        }
    }
    // What the next new machine's `up` need not ask (`seen.rs`).
    if p.host.engine == Engine::Podman && !p.looked.assumed {
        let store = found.as_ref().and_then(|f| f.store.as_deref());
        let image = p
            .looked
            .entrypoint
            .as_deref()
            .map(|e| (p.image_id.as_str(), e));
        crate::host::seen::learn(store, image);
    }
    match (engine_size(def, p.host), size) {
        (None, _) => step(start, "size: not held (a rootless engine on cgroup v1 ignores limits); commands keep their own rlimits"),
        (Some(_), Some(size)) => step(start, &format!("size: {size}")),
        (Some(_), None) => step(start, "size: the engine did not say what it holds"),
    }
    Ok(())
}

/// Starts the stopped container and waits for its warden; a running one
/// is left as it is.
fn start(id: &str) -> Result<(), LaunchError> {
    let name = container(id);
    // One engine call (a running container's start changes nothing); a
    // start that fails is looked into only then.
    if let Err(e) = engine::run("start", &["start", &name]) {
        return Err(match engine::exists("container", &name) {
            false => LaunchError::new(
                format!("machine {id}"),
                "no such machine (make it with `warden machine up`)",
            ),
            true => e,
        });
    }
    wait_ready(id, &key(id)?)
}

fn logs(id: &str) -> Result<(), LaunchError> {
    let engine = engine::host()?.engine.program();
    let status = engine::command()?
        .args(["logs", &container(id)])
        .status()
        .map_err(|e| LaunchError::new("logs", format!("cannot run {engine}: {e}")))?;
    match status.success() {
        true => Ok(()),
        false => Err(LaunchError::new(
            "logs",
            format!("{engine} failed ({status})"),
        )),
    }
}

/// Removes the container; with `volumes`, its volumes too.
fn remove(id: &str, volumes: bool) -> Result<(), LaunchError> {
    let name = container(id);
    if engine::exists("container", &name) {
        engine::remove_container("rm", &name)?;
        println!("removed {name}");
    }
    // The record names the container just removed.
    kept::forget(&state_dir(id));
    if !volumes {
        return Ok(());
    }
    if engine::host()?.rootless {
        // What an earlier `up` handed to the machine's root comes back
        // first, or the owner could not remove the state folder.
        let state = state_dir(id);
        give(&[state.join("etc"), state.join("run")], false)?;
    }
    for volume in [format!("{PREFIX}-{id}-data"), format!("{PREFIX}-{id}-work")] {
        if engine::exists("volume", &volume) {
            engine::run("remove volume", &["volume", "rm", "-f", &volume])?;
            println!("removed volume {volume}");
        }
    }
    Ok(())
}

/// This owner's containers, in one engine call (labels, state, image and
/// ports all come in the listing).
fn list() -> Result<Vec<Row>, LaunchError> {
    let engine = engine::host()?.engine;
    let filter = format!("label=warden.owner={}", engine::owner());
    let format = match engine {
        Engine::Podman => "json",
        Engine::Docker => ps::DOCKER_FORMAT,
    };
    let out = engine::run("ps", &["ps", "-a", "--filter", &filter, "--format", format])?;
    let rows = match engine {
        Engine::Podman => ps::podman_rows(&out),
        Engine::Docker => ps::docker_rows(&out),
    };
    rows.map_err(|e| {
        LaunchError::new(
            "ps",
            format!("cannot read {}'s listing: {e}", engine.program()),
        )
    })
}

/// Takes the machine down: its warden asked to stop (SIGTERM, killed
/// after 10 s) and its container removed; its volumes (or workspace
/// folder), state folder and image stay, and the next `up` makes a new
/// container over them (its setup, which ran on this data, not again).
fn down(id: &str) -> Result<(), LaunchError> {
    let (name, state) = (container(id), state_dir(id));
    let exists = engine::exists("container", &name);
    if !exists && !state.exists() {
        return Err(LaunchError::new(
            format!("machine {id}"),
            "no such machine (make it with `warden machine up`)",
        ));
    }
    match exists {
        true => engine::remove_container("down", &name)?,
        false => println!("{name}: no container (already down)"),
    }
    // The record names the container just removed: the next `up` asks
    // the engine instead.
    kept::forget(&state);
    let mut kept: Vec<String> = volumes_of(id)?
        .into_iter()
        .map(|v| format!("volume {v}"))
        .collect();
    kept.push(format!("state folder {}", state.display()));
    println!(
        "machine {id} down: container {name} removed; kept for its next up: {}",
        kept.join(", ")
    );
    Ok(())
}

/// The names of this owner's volumes of machine `id`. Under podman, by
/// their names (see `ensure_volumes`); under Docker, by the machine's
/// label alone, the owner's read from each (two label filters are taken
/// as either, not both).
fn volumes_of(id: &str) -> Result<Vec<String>, LaunchError> {
    if engine::host()?.engine == Engine::Podman {
        let mut names = podman_volumes()?;
        names.retain(|(_, of)| of == id);
        return Ok(names.into_iter().map(|(name, _)| name).collect());
    }
    let machine = format!("label=warden.machine={id}");
    let format = "{{.Name}}\t{{.Label \"warden.owner\"}}";
    let out = engine::run(
        "list volumes",
        &["volume", "ls", "--filter", &machine, "--format", format],
    )?;
    let owner = engine::owner().to_string();
    let mut names: Vec<String> = out
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .filter(|(_, of)| of.trim() == owner)
        .map(|(name, _)| name.to_string())
        .collect();
    names.sort();
    Ok(names)
}

/// The machine ids on this owner's containers and volumes.
fn ids() -> Result<Vec<String>, LaunchError> {
    let filter = format!("label=warden.owner={}", engine::owner());
    let format = match engine::host()?.engine {
        Engine::Podman => "{{index .Labels \"warden.machine\"}}",
        Engine::Docker => "{{.Label \"warden.machine\"}}",
    };
    let containers = engine::run(
        "list containers",
        &["ps", "-a", "--filter", &filter, "--format", format],
    )?;
    let mut ids: Vec<String> = containers.lines().map(String::from).collect();
    match engine::host()?.engine {
        Engine::Podman => ids.extend(podman_volumes()?.into_iter().map(|(_, id)| id)),
        Engine::Docker => {
            let volumes = engine::run(
                "list volumes",
                &["volume", "ls", "--filter", &filter, "--format", format],
            )?;
            ids.extend(volumes.lines().map(String::from));
        }
    }
    Ok(ids)
}

/// podman's volumes of machines, by their names: each with its machine's
/// id, sorted.
fn podman_volumes() -> Result<Vec<(String, String)>, LaunchError> {
    let out = engine::run("list volumes", &["volume", "ls", "--format", "{{.Name}}"])?;
    let mut named: Vec<(String, String)> = out
        .lines()
        .filter_map(|name| Some((name.to_string(), machine_of_volume(name)?.to_string())))
        .collect();
    named.sort();
    Ok(named)
}

/// Pure: the machine whose volume `name` is (`warden-<id>-data` or
/// `warden-<id>-work`, `id` a machine's id).
pub fn machine_of_volume(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(PREFIX)?.strip_prefix('-')?;
    let id = rest
        .strip_suffix("-data")
        .or_else(|| rest.strip_suffix("-work"))?;
    crate::host::definition::valid_id(id).then_some(id)
}

/// Why a Docker daemon without its bridge cannot give a machine a network.
pub const NO_BRIDGE: &str = "this Docker daemon has no bridge network (it was started with --bridge=none): the machine would have no network and publish none of its ports; start dockerd with its bridge (for example --bip 172.31.250.1/24), or use \"none\"";

/// Refuses a definition this host cannot run as written, saying why.
pub fn fits(def: &Definition, host: &Host) -> Result<(), LaunchError> {
    let engine = host.engine.program();
    let rootless = host.rootless;
    match &def.network {
        Network::Host if !rootless => return Err(LaunchError::new("network \"host\"", "refused rootful, since warden's firewall would then be the host's own; use \"private\" or a namespace")),
        Network::Namespace(path) if host.engine == Engine::Docker => return Err(namespace(path, "Docker cannot join a namespace by path; use podman")),
        Network::Namespace(path) if rootless => return Err(namespace(path, "a rootless owner cannot join a namespace made by root; use \"none\" or \"private\"")),
        Network::Namespace(path) if !path.exists() => return Err(namespace(path, "no such namespace (make it with `ip netns add`)")),
        Network::Private if host.engine == Engine::Docker && !engine::has_bridge() => return Err(LaunchError::new("network \"private\"", NO_BRIDGE)),
        Network::Private if rootless && host.engine == Engine::Podman => {
            if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/net/tun") {
                return Err(LaunchError::new("network \"private\"", format!("rootless podman needs /dev/net/tun, which this user cannot open ({e}); use \"none\", or run as root")));
            }
        }
        _ => {}
    }
    if !def.dns.is_empty() && matches!(def.network, Network::None | Network::Host) {
        return Err(LaunchError::new("dns", "name servers need a network of the machine's own (\"private\" or a namespace); on \"none\" or \"host\" the engine refuses them"));
    }
    let unified = host.cgroups == crate::host::this_host::Cgroups::Unified;
    if def.sleep.idle == crate::host::definition::Idle::Pause && rootless && !unified {
        return Err(LaunchError::new("idle \"pause\"", "a rootless engine on cgroup v1 cannot freeze a container (it has no freezer of its own there); use \"stop\", or run as root"));
    }
    if def.keep_id.is_on() && !(rootless && host.engine == Engine::Podman) {
        return Err(LaunchError::new("keep_id", format!("needs rootless podman ({engine} {} here): rootful, files written in lent folders belong to the machine's uids on the host ({RUNTIME_UID}, {SHELL_UID})", if rootless { "rootless" } else { "rootful" })));
    }
    Ok(())
}

/// A namespace the definition names that this host cannot join.
fn namespace(path: &Path, why: &str) -> LaunchError {
    LaunchError::new(format!("network {}", path.display()), why)
}

fn running(name: &str) -> Result<bool, LaunchError> {
    let out = engine::run(
        "inspect",
        &[
            "container",
            "inspect",
            "--format",
            "{{.State.Running}}",
            name,
        ],
    )?;
    Ok(out.trim() == "true")
}

/// The volumes a machine's container mounts: its data, and its workspace
/// unless that is a folder of the host's.
pub(super) fn volumes(def: &Definition) -> Vec<String> {
    let mut volumes = vec![def.data_volume(PREFIX)];
    if let Workspace::Volume = def.workspace {
        volumes.push(def.work_volume(PREFIX));
    }
    volumes
}

/// Makes the volumes that `up`'s inspect did not find (or, when it could
/// not say, that the engine does not have), labelled with the owner and
/// the machine, so that `ps`, `down` and `prune` find them. Under podman
/// `run` makes them with the container (two engine calls fewer), and
/// they are found by their names: a podman engine is its owner's alone,
/// root's or one user's, so an owner's label would say nothing more.
/// One after the other: two at once took longer here (the engine locks
/// its volume store). Each made is recorded in `made`.
fn ensure_volumes(p: &Prepared, made: &mut Made) -> Result<(), LaunchError> {
    if let (Engine::Podman, Some(found)) = (p.host.engine, &p.looked.volumes) {
        let missing: Vec<String> = volumes(p.def)
            .into_iter()
            .filter(|v| !found.contains(v))
            .collect();
        // Made by `run` from now on, unless (assumed new) one was there.
        let since = std::time::SystemTime::now();
        made.volumes_since = (!missing.is_empty()).then_some((missing, since));
        return Ok(());
    }
    let owner = format!("warden.owner={}", engine::owner());
    let machine = format!("warden.machine={}", p.def.id);
    for name in volumes(p.def) {
        let found = match &p.looked.volumes {
            Some(found) => found.contains(&name),
            None => engine::exists("volume", &name),
        };
        if found {
            continue;
        }
        let args = [
            "volume", "create", "--label", &owner, "--label", &machine, &name,
        ];
        engine::run("create volume", &args)?;
        made.volumes.push(name);
    }
    Ok(())
}

/// `podman run --detach` with everything the definition asks for: one
/// engine call where create and start were two. The volumes it makes are
/// recorded in `made`, and so is the container when the engine made it,
/// whether or not it started.
fn create_and_start(p: &Prepared, made: &mut Made) -> Result<(), LaunchError> {
    let (def, host) = (p.def, engine::host()?);
    ensure_volumes(p, made)?;
    let workspace = match &def.workspace {
        Workspace::Volume => def.work_volume(PREFIX),
        Workspace::Folder(path) => path.to_string_lossy().into_owned(),
    };
    let entrypoint = match &p.looked.entrypoint {
        Some(json) => json.clone(),
        None => engine::run(
            "inspect image",
            &[
                "image",
                "inspect",
                "--format",
                "{{json .Config.Entrypoint}}",
                &p.image.name,
            ],
        )?,
    };
    let entry = match entrypoint_is_warden(&entrypoint) {
        true => Entry::Image,
        false => Entry::Lent(static_warden().map_err(|e| e.within("lend warden"))?),
    };
    let name = def.container(PREFIX);
    let data = def.data_volume(PREFIX);
    let plan = CreatePlan {
        engine: host.engine,
        name: &name,
        id: &def.id,
        owner: engine::owner(),
        digest: &p.digest,
        network: network_option(&def.network, host.rootless),
        data_volume: &data,
        workspace,
        state: &p.state,
        ulimits: &host.ulimits,
        keep_id: def.keep_id,
        lends: &def.lend,
        dns: &def.dns,
        env: def
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        // Fronted by serve: the engine publishes each on a port of its
        // own choosing (0), serve holds the definition's.
        ports: match def.sleep.serve {
            true => def.ports.iter().map(|p| (0, p.port)).collect(),
            false => host_ports(def)?,
        },
        restart: def.restart,
        size: engine_size(def, host),
        entry,
        command: def.command.as_deref(),
        image: &p.image.name,
    };
    let mut args = create_args(&plan);
    args.splice(0..1, ["run".to_string(), "--detach".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = engine::run("create and start container", &args).map(drop);
    // A container the engine made but could not start is undone with the
    // rest; one it never made is not named as made.
    if ran.is_ok() || engine::exists("container", &name) {
        made.container = Some(name);
    }
    ran
}

/// The engine's `--network` value.
fn network_option(network: &Network, rootless: bool) -> String {
    match network {
        Network::None => "none".into(),
        Network::Private if rootless => "slirp4netns".into(),
        Network::Private => "bridge".into(),
        Network::Host => "host".into(),
        Network::Namespace(path) => format!("ns:{}", path.display()),
    }
}

/// Waits (bounded) until warden answers a keyed hello on the host socket.
fn wait_ready(id: &str, key: &str) -> Result<(), LaunchError> {
    let socket = socket(id);
    let started = Instant::now();
    let deadline = started + READY_TIMEOUT;
    let mut next_look = started + Duration::from_millis(250);
    loop {
        let error = match Client::connect_keyed(&socket, Some(key), None) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        // A machine whose warden refused to start ends at once: say so
        // with its last words rather than wait out the deadline.
        if Instant::now() > next_look {
            next_look = Instant::now() + Duration::from_millis(250);
            if !running(&container(id))? {
                let logs = engine::command()?
                    .args(["logs", "--tail", "5", &container(id)])
                    .output()
                    .map(|o| {
                        let (out, err) = (o.stdout, o.stderr);
                        format!("{}{}", engine::text(&out), engine::text(&err))
                    })
                    .unwrap_or_default();
                return Err(LaunchError::new(
                    "wait for warden",
                    format!(
                        "the machine stopped before warden answered; its last lines:\n{}",
                        logs.trim_end()
                    ),
                ));
            }
        }
        if Instant::now() > deadline {
            return Err(LaunchError::new(
                "wait for warden",
                format!(
                    "{} did not answer in {} s: {error} (see `warden machine logs {id}`)",
                    socket.display(),
                    READY_TIMEOUT.as_secs()
                ),
            ));
        }
        // A short step: warden boots in tens of milliseconds.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Where a container's data volume keeps the digest of the setup that ran
/// there (root's: the runtime may remove it, never forge another's).
const SETUP_RAN: &str = "/home/runtime/data/.setup-ran";

/// Runs the setup when what it is made of changed since it ran on this
/// machine's data, or when asked (`up --setup`); a failed one runs again
/// at the next `up`. The digest is kept in the data volume, where the
/// setup's work is, so a container made again over the same volume does
/// not run it again, and in the state folder, so an unchanged container
/// costs no engine call to know it.
fn setup_once(
    p: &Prepared,
    name: &str,
    script: &Path,
    digest: &str,
    created: bool,
) -> Result<(), LaunchError> {
    let done = p.state.join("setup.done");
    let recorded = match created {
        false => std::fs::read_to_string(&done).ok(),
        true => engine::run(
            "read the setup's digest",
            &["exec", "-u", "0", name, "cat", SETUP_RAN],
        )
        .ok(),
    };
    if p.setup_ran(script, recorded.as_deref()) {
        return Ok(());
    }
    run_setup(name, script)?;
    let keep = format!("umask 077 && cat > {SETUP_RAN}");
    engine::run_with_input(
        "keep the setup's digest",
        &["exec", "-i", "-u", "0", name, "sh", "-c", &keep],
        Some(digest.as_bytes()),
    )?;
    std::fs::write(&done, digest).map_err(|e| LaunchError::io(&done, e))?;
    step(p.start, &format!("setup {} ran", script.display()));
    Ok(())
}

/// Runs the setup script once, as runtime, in a fresh folder of its data
/// (see `shared::setup_script::SETUP_SCRIPT`).
fn run_setup(name: &str, script: &Path) -> Result<(), LaunchError> {
    let text = std::fs::read(script)
        .map_err(|e| LaunchError::new(format!("setup {}", script.display()), e.to_string()))?;
    let engine = engine::host()?.engine.program();
    let mut child = engine::command()?
        .args([
            "exec",
            "-i",
            "-u",
            &RUNTIME_UID.to_string(),
            "-w",
            RUNTIME_HOME,
            name,
            "sh",
            "-c",
            crate::shared::setup_script::SETUP_SCRIPT,
            "sh",
            &format!(
                "{RUNTIME_HOME}/data/{}",
                crate::shared::setup_script::SETUP_FOLDER
            ),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LaunchError::new("setup", format!("cannot run {engine}: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&text);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| LaunchError::new("setup", format!("{engine}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    // The script's whole output, on lines of their own: no step to name.
    Err(LaunchError::sentence(format!(
        "setup {} failed ({}):\n{}{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )))
}

#[cfg(test)]
mod tests {
    use super::machine_of_volume;

    #[test]
    fn a_volume_names_its_machine() {
        let cases: &[(&str, Option<&str>)] = &[
            ("warden-a-data", Some("a")),
            ("warden-agent-7-work", Some("agent-7")),
            // The last part decides: machine x-data's workspace.
            ("warden-x-data-work", Some("x-data")),
            ("warden-a-cache", None),
            ("warden--data", None),
            ("warden-A-data", None),
            ("other-a-data", None),
            ("wardena-data", None),
            ("warden-a-data-", None),
        ];
        for (name, want) in cases {
            assert_eq!(machine_of_volume(name), *want, "{name}");
        }
    }
}
