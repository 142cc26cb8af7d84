//! `warden machine ...`: makes, starts, stops and removes agent machines
//! with podman (rootful or rootless) or Docker, from machine definitions.
//!
//! Each machine is a container `warden-<id>` with two volumes
//! (`warden-<id>-data`, `warden-<id>-work`) and a state folder on the host
//! (`/var/lib/warden/machines/<id>/` rootful, the owner's data folder
//! rootless; mode 0700), holding the machine's key,
//! the config and policy warden reads inside, and `run/`, the folder where
//! warden puts its host socket. The host talks to warden only through that
//! socket, presenting the key; `podman exec` is used only to hand the
//! runtime its keys and to run the definition's setup script.
//!
//! Every engine failure comes back as one line naming the step, the first
//! line of the engine's stderr, and what it means when it is a known
//! quirk of hosts (see `host::hint`).

use super::agent_setup::{check_requires, engine_size, hand_keys, host_ports};
pub use super::agent_setup::{published, size_of};
use super::create::{
    create_args, entrypoint_is_warden, static_warden, CreatePlan, Entry, RUNTIME_UID, SHELL_UID,
};
use super::definition::{valid_id, Definition, Kind, Network, Workspace};
use super::host::{self, Engine, Host};
use super::state::{give, prepare_state, write_machine_files};
use super::vm;
use crate::client::Client;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Names the containers and volumes.
pub const PREFIX: &str = "warden";

/// How long `up` waits for warden's host socket to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// The host as the engine runs machines on it; an error says why this
/// host cannot run one.
pub fn host() -> Result<&'static Host, String> {
    host::get()
}

/// The uid that owns the machines made by this process.
fn owner() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// The machine's state folder.
pub fn state_dir(id: &str) -> PathBuf {
    match host::state_root() {
        Ok(root) => root.join(id),
        // Unreachable in practice: every command asks for the root first.
        Err(_) => Path::new(host::ROOTFUL_STATE).join(id),
    }
}

/// The host socket warden serves for this machine.
pub fn socket(id: &str) -> PathBuf {
    state_dir(id).join("run/api.sock")
}

pub fn container(id: &str) -> String {
    format!("{PREFIX}-{id}")
}

/// Reads the machine's key from its state folder.
pub fn key(id: &str) -> Result<String, String> {
    let path = state_dir(id).join("key");
    std::fs::read_to_string(&path)
        .map(|k| k.trim().to_string())
        .map_err(|e| format!("machine {id}: key {}: {e}", path.display()))
}

/// The engine's command, with the options this host needs.
pub(super) fn engine_command() -> Result<Command, String> {
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
pub(super) fn podman(step: &str, args: &[&str]) -> Result<String, String> {
    podman_with_input(step, args, None)
}

/// As `podman`, feeding `input` on stdin (secrets and scripts go there,
/// never on a command line).
fn podman_with_input(step: &str, args: &[&str], input: Option<&[u8]>) -> Result<String, String> {
    let engine = host()?.engine.program();
    let mut child = engine_command()?
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{step}: cannot run {engine}: {e}"))?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // A write error shows as podman's own failure below.
        let _ = stdin.write_all(bytes);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{step}: {engine}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(failure(step, engine, &out.status, &stderr, &stdout))
}

/// One line: the step, the engine's first line of output, and a hint
/// when the error is a known quirk of hosts.
pub(super) fn failure(
    step: &str,
    engine: &str,
    status: &std::process::ExitStatus,
    stderr: &str,
    stdout: &str,
) -> String {
    let first = host::first_line(if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    });
    match host::hint(stderr) {
        Some(hint) => format!("{step}: {engine} failed ({status}): {first}\n  hint: {hint}"),
        None => format!("{step}: {engine} failed ({status}): {first}"),
    }
}

/// True when the engine can inspect the object (both engines have
/// `container|image|volume inspect`).
pub(super) fn exists(kind: &str, name: &str) -> bool {
    podman("exists", &[kind, "inspect", name]).is_ok()
}

/// Stops (warden gets SIGTERM and 10 s) and removes a container.
fn remove_container(step: &str, name: &str) -> Result<(), String> {
    let _ = podman(step, &["stop", "-t", "10", name]);
    podman(step, &["rm", "-f", name]).map(drop)
}

fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    crate::audit::hex(&Sha256::digest(bytes))
}

/// Runs the engine for what another backend needs of it (an image's id,
/// its export), as `podman` does.
pub fn engine_output(step: &str, args: &[&str]) -> Result<String, String> {
    podman(step, args)
}

/// Prints one step with the seconds since `start`.
pub fn step(start: Instant, what: &str) {
    println!("[{:6.2} s] {what}", start.elapsed().as_secs_f64());
}

/// Makes (or reuses) and starts the machine `definition` describes. When
/// a step fails, what this `up` made (container, volumes, image, state
/// folder) is removed again, and the error names the step.
pub fn up(definition: &Path, env_file: Option<&Path>, as_vm: bool) -> Result<(), String> {
    let host = host()?;
    let start = Instant::now();
    let mut def = Definition::load(definition).map_err(|e| e.to_string())?;
    if as_vm {
        def.kind = Kind::Vm;
    }
    match def.kind {
        Kind::Container => fits(&def, host)?,
        Kind::Vm => vm::fits(&def, host.rootless)?,
    }
    let is_vm = vm::is_vm(&def.id);
    if is_vm != (def.kind == Kind::Vm) && (is_vm || exists("container", &container(&def.id))) {
        return Err(format!(
            "machine {}: it exists as a {}; `warden machine rm {} --volumes` first to make it a {}",
            def.id,
            if is_vm { "VM" } else { "container" },
            def.id,
            if is_vm { "container" } else { "VM" },
        ));
    }
    let text = std::fs::read_to_string(definition)
        .map_err(|e| format!("{}: {e}", definition.display()))?;
    // The keys first: a missing one stops `up` before anything is made.
    let env_file = env_file
        .map(Path::to_path_buf)
        .unwrap_or_else(|| definition.parent().unwrap_or(Path::new(".")).join(".env"));
    let keys_text = read_keys(&def, &env_file)?;
    let mut made = Made::default();
    let result = bring_up(&def, &text, &keys_text, host, start, &mut made);
    match result {
        Ok(()) => {
            let kind = if def.kind == Kind::Vm { " (VM)" } else { "" };
            println!(
                "machine {} up{kind} in {:.2} s",
                def.id,
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Err(e) => Err(match made.undo() {
            removed if removed.is_empty() => e,
            removed => format!("{e}\n  removed what this `up` made: {}", removed.join(", ")),
        }),
    }
}

/// What one `up` made, in the order made: undone in reverse when a later
/// step fails. What an earlier `up` made is never touched.
#[derive(Default)]
struct Made {
    state: Option<PathBuf>,
    image: Option<String>,
    volumes: Vec<String>,
    container: Option<String>,
}

impl Made {
    /// Removes everything recorded; returns what it removed (and what it
    /// could not, said as such).
    fn undo(self) -> Vec<String> {
        let mut said = Vec::new();
        let mut note = |what: String, done: Result<(), String>| match done {
            Ok(()) => said.push(what),
            Err(e) => said.push(format!("{what} NOT removed ({e})")),
        };
        if let Some(name) = self.container {
            note(format!("container {name}"), remove_container("undo", &name));
        }
        for volume in self.volumes {
            let done = podman("undo", &["volume", "rm", "-f", &volume]).map(drop);
            note(format!("volume {volume}"), done);
        }
        if let Some(image) = self.image {
            note(
                format!("image {image}"),
                podman("undo", &["rmi", "-f", &image]).map(drop),
            );
        }
        if let Some(state) = self.state {
            if host().is_ok_and(|h| h.rootless) {
                let _ = give(&[state.join("etc"), state.join("run")], false);
            }
            let done = std::fs::remove_dir_all(&state).map_err(|e| e.to_string());
            note(format!("state folder {}", state.display()), done);
        }
        said
    }
}

/// The steps of `up`, each recording in `made` what it made.
fn bring_up(
    def: &Definition,
    text: &str,
    keys_text: &str,
    host: &Host,
    start: Instant,
    made: &mut Made,
) -> Result<(), String> {
    let fresh_state = !state_dir(&def.id).exists();
    let state = prepare_state(def)?;
    if fresh_state {
        made.state = Some(state.clone());
    }
    step(start, &format!("state folder {}", state.display()));
    let built = super::image::image(def, &state, start, host)?;
    if built.made {
        made.image = Some(built.name.clone());
    }
    let image_id = podman(
        "image id",
        &["image", "inspect", "--format", "{{.Id}}", &built.name],
    )?;
    let digest = sha256_hex(
        format!("{text}\0{}\0{}", image_id.trim(), env!("CARGO_PKG_VERSION")).as_bytes(),
    );
    if def.kind == Kind::Vm {
        write_machine_files(def, &state, host)?;
        // The keys travel in the VM's initramfs: new values remake it.
        let inputs = sha256_hex(format!("{digest}\0{keys_text}").as_bytes());
        return vm::up(def, &built.name, &inputs, keys_text, start);
    }
    let name = def.container(PREFIX);
    let created = match current_inputs(&name).as_deref() {
        Some(found) if found == digest => {
            step(start, &format!("{name}: unchanged, kept"));
            false
        }
        found => {
            if found.is_some() {
                remove_container("remove old container", &name)?;
                step(
                    start,
                    &format!("{name}: inputs changed, old container removed"),
                );
            }
            write_machine_files(def, &state, host)?;
            create(def, &state, &built.name, &digest, made)?;
            made.container = Some(name.clone());
            step(start, &format!("{name}: created"));
            true
        }
    };
    if let Some(old) = &built.replaced {
        super::image::remove_replaced(old, start);
    }
    if !running(&name)? {
        podman("start", &["start", &name])?;
        step(start, &format!("{name}: started"));
    }
    let key = key(&def.id)?;
    wait_ready(&def.id, &key)?;
    step(start, "warden answers on the host socket");
    hand_keys(&def.id, keys_text)?;
    step(
        start,
        &format!("keys handed to the runtime: {}", def.keys.len()),
    );
    check_requires(def)?;
    if let Some(script) = &def.setup {
        // Once per container: a failed setup runs again at the next `up`.
        let done = state.join("setup.done");
        let ran = !created && std::fs::read_to_string(&done).is_ok_and(|d| d == digest);
        if !ran {
            run_setup(&name, script)?;
            std::fs::write(&done, &digest).map_err(|e| format!("{}: {e}", done.display()))?;
            step(start, &format!("setup {} ran", script.display()));
        }
    }
    for line in published(&name) {
        step(start, &format!("published: {line}"));
    }
    match size_of(&name) {
        Some(size) if engine_size(def, host).is_some() => step(start, &format!("size: {size}")),
        _ => step(start, "size: not held (a rootless engine on cgroup v1 ignores limits); commands keep their own rlimits"),
    }
    Ok(())
}

/// Refuses a definition this host cannot run as written, saying why.
pub fn fits(def: &Definition, host: &Host) -> Result<(), String> {
    let engine = host.engine.program();
    let rootless = host.rootless;
    match &def.network {
        Network::Host if !rootless => return Err("network \"host\": refused rootful, since warden's firewall would then be the host's own; use \"private\" or a namespace".into()),
        Network::Namespace(path) if host.engine == Engine::Docker => return Err(format!("network {}: Docker cannot join a namespace by path; use podman", path.display())),
        Network::Namespace(path) if rootless => return Err(format!("network {}: a rootless owner cannot join a namespace made by root; use \"none\" or \"private\"", path.display())),
        Network::Namespace(path) if !path.exists() => return Err(format!("network {}: no such namespace (make it with `ip netns add`)", path.display())),
        Network::Private if rootless && host.engine == Engine::Podman => {
            if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/net/tun") {
                return Err(format!("network \"private\": rootless podman needs /dev/net/tun, which this user cannot open ({e}); use \"none\", or run as root"));
            }
        }
        _ => {}
    }
    if !def.dns.is_empty() && matches!(def.network, Network::None | Network::Host) {
        return Err("dns: name servers need a network of the machine's own (\"private\" or a namespace); on \"none\" or \"host\" the engine refuses them".into());
    }
    if def.keep_id.is_on() && !(rootless && host.engine == Engine::Podman) {
        return Err(format!("keep_id: needs rootless podman ({engine} {} here): rootful, files written in lent folders belong to the machine's uids on the host ({RUNTIME_UID}, {SHELL_UID})", if rootless { "rootless" } else { "rootful" }));
    }
    Ok(())
}

/// The inputs digest of an existing container, None when there is none.
fn current_inputs(name: &str) -> Option<String> {
    if !exists("container", name) {
        return None;
    }
    let format = "{{index .Config.Labels \"warden.inputs\"}}";
    podman(
        "inspect",
        &["container", "inspect", "--format", format, name],
    )
    .ok()
    .map(|s| s.trim().to_string())
}

fn running(name: &str) -> Result<bool, String> {
    let out = podman(
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

/// Makes the volumes (labelled with the owner, so `prune` finds them)
/// when missing; podman would make them unlabelled otherwise.
fn ensure_volume(name: &str, id: &str, made: &mut Made) -> Result<(), String> {
    if exists("volume", name) {
        return Ok(());
    }
    made.volumes.push(name.to_string());
    let owner = format!("warden.owner={}", owner());
    let machine = format!("warden.machine={id}");
    podman(
        "create volume",
        &[
            "volume", "create", "--label", &owner, "--label", &machine, name,
        ],
    )
    .map(drop)
}

/// `podman create` with everything the definition asks for; the volumes
/// it makes are recorded in `made`.
fn create(
    def: &Definition,
    state: &Path,
    image: &str,
    digest: &str,
    made: &mut Made,
) -> Result<(), String> {
    let host = host()?;
    let data = def.data_volume(PREFIX);
    ensure_volume(&data, &def.id, made)?;
    let workspace = match &def.workspace {
        Workspace::Volume => {
            let v = def.work_volume(PREFIX);
            ensure_volume(&v, &def.id, made)?;
            v
        }
        Workspace::Folder(path) => path.to_string_lossy().into_owned(),
    };
    let entry = match entrypoint_is_warden(&podman(
        "inspect image",
        &[
            "image",
            "inspect",
            "--format",
            "{{json .Config.Entrypoint}}",
            image,
        ],
    )?) {
        true => Entry::Image,
        false => Entry::Lent(static_warden().map_err(|e| format!("lend warden: {e}"))?),
    };
    let name = def.container(PREFIX);
    let plan = CreatePlan {
        engine: host.engine,
        name: &name,
        id: &def.id,
        owner: owner(),
        digest,
        network: network_option(&def.network, host.rootless),
        data_volume: &data,
        workspace,
        state,
        ulimits: &host.ulimits,
        keep_id: def.keep_id,
        lends: &def.lend,
        dns: &def.dns,
        env: def
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        ports: host_ports(def)?,
        restart: def.restart,
        size: engine_size(def, host),
        entry,
        command: def.command.as_deref(),
        image,
    };
    let args = create_args(&plan);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    podman("create container", &args).map(drop)
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
fn wait_ready(id: &str, key: &str) -> Result<(), String> {
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
                let logs = engine_command()?
                    .args(["logs", "--tail", "5", &container(id)])
                    .output()
                    .map(|o| {
                        let (out, err) = (o.stdout, o.stderr);
                        format!("{}{}", text(&out), text(&err))
                    })
                    .unwrap_or_default();
                return Err(format!(
                    "wait for warden: the machine stopped before warden answered; its last lines:\n{}",
                    logs.trim_end()
                ));
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "wait for warden: {} did not answer in {} s: {error} (see `warden machine logs {id}`)",
                socket.display(),
                READY_TIMEOUT.as_secs()
            ));
        }
        // A short step: warden boots in tens of milliseconds.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Parses a `.env` file: `NAME=VALUE` lines (an `export ` prefix, blank
/// lines and `#` comments allowed).
pub fn parse_env_file(text: &str) -> BTreeMap<String, String> {
    crate::redact::env_pairs(text)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The `.env` the runtime gets: only the keys the definition names.
pub fn runtime_env(
    keys: &[String],
    owner_env: &BTreeMap<String, String>,
) -> Result<String, Vec<String>> {
    let missing: Vec<String> = keys
        .iter()
        .filter(|k| !owner_env.contains_key(*k))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    Ok(keys
        .iter()
        .map(|k| format!("{k}={}\n", owner_env[k]))
        .collect())
}

/// The runtime's `.env`: the named keys, from the owner's `.env`.
fn read_keys(def: &Definition, env_file: &Path) -> Result<String, String> {
    let owner_env = match std::fs::read_to_string(env_file) {
        Ok(text) => parse_env_file(&text),
        Err(e) if def.keys.is_empty() && e.kind() == std::io::ErrorKind::NotFound => {
            BTreeMap::new()
        }
        Err(e) => {
            return Err(format!(
                "keys {}: cannot read {}: {e}",
                def.keys.join(", "),
                env_file.display()
            ))
        }
    };
    runtime_env(&def.keys, &owner_env).map_err(|missing| {
        format!(
            "keys: {} missing from {}",
            missing.join(", "),
            env_file.display()
        )
    })
}

/// Runs the setup script once, as runtime, in the workspace.
fn run_setup(name: &str, script: &Path) -> Result<(), String> {
    let text = std::fs::read(script).map_err(|e| format!("setup {}: {e}", script.display()))?;
    let engine = host()?.engine.program();
    let mut child = engine_command()?
        .args([
            "exec",
            "-i",
            "-u",
            &RUNTIME_UID.to_string(),
            "-w",
            "/home/runtime/workspace",
            name,
            "sh",
            "-s",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("setup: cannot run {engine}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&text);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("setup: {engine}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "setup {} failed ({}):\n{}{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Lists this owner's machines.
pub fn ps() -> Result<(), String> {
    host()?;
    let filter = format!("label=warden.owner={}", owner());
    let out = podman(
        "ps",
        &[
            "ps",
            "-a",
            "--filter",
            &filter,
            "--format",
            "{{.Names}}\t{{.Status}}",
        ],
    )?;
    for line in out.lines() {
        let name = line.split('\t').next().unwrap_or_default();
        let ports = published(name).join(", ");
        match ports.is_empty() {
            true => println!("{line}"),
            false => println!("{line}\t{ports}"),
        }
    }
    for line in vm::list() {
        println!("{line}");
    }
    Ok(())
}

/// Stops the machine (warden gets SIGTERM, then SIGKILL after 10 s).
pub fn stop(id: &str) -> Result<(), String> {
    host()?;
    if vm::is_vm(id) {
        return vm::stop(id);
    }
    podman("stop", &["stop", "-t", "10", &container(id)]).map(drop)
}

pub fn logs(id: &str) -> Result<(), String> {
    let engine = host()?.engine.program();
    if vm::is_vm(id) {
        return vm::logs(id);
    }
    let status = engine_command()?
        .args(["logs", &container(id)])
        .status()
        .map_err(|e| format!("logs: cannot run {engine}: {e}"))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("logs: {engine} failed ({status})")),
    }
}

/// Removes the container; with `volumes`, its volumes and state folder too.
pub fn rm(id: &str, volumes: bool) -> Result<(), String> {
    host()?;
    if vm::is_vm(id) {
        vm::remove(id, volumes)?;
    }
    let name = container(id);
    if exists("container", &name) {
        remove_container("rm", &name)?;
        println!("removed {name}");
    }
    if volumes {
        remove_volumes_and_state(id)?;
    }
    // An image built from the machine's Dockerfile is the machine's too.
    let image = format!("localhost/{PREFIX}-{id}:latest");
    if exists("image", &image) {
        podman("remove image", &["rmi", "-f", &image])?;
        println!("removed image {image}");
    }
    Ok(())
}

fn remove_volumes_and_state(id: &str) -> Result<(), String> {
    let state = state_dir(id);
    if host()?.rootless {
        // What an earlier `up` handed to the machine's root comes back
        // first, or the owner could not remove it.
        give(&[state.join("etc"), state.join("run")], false)?;
    }
    for volume in [format!("{PREFIX}-{id}-data"), format!("{PREFIX}-{id}-work")] {
        if exists("volume", &volume) {
            podman("remove volume", &["volume", "rm", "-f", &volume])?;
            println!("removed volume {volume}");
        }
    }
    match std::fs::remove_dir_all(&state) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("state folder {}: {e}", state.display()))
        }
        _ => Ok(()),
    }
}

/// Removes every container and volume labelled with this owner's uid, and
/// their state folders; nothing else.
pub fn prune() -> Result<(), String> {
    let host = host()?;
    let filter = format!("label=warden.owner={}", owner());
    let format = match host.engine {
        Engine::Podman => "{{index .Labels \"warden.machine\"}}",
        Engine::Docker => "{{.Label \"warden.machine\"}}",
    };
    let ids = podman(
        "list containers",
        &["ps", "-a", "--filter", &filter, "--format", format],
    )?;
    let volume_ids = podman(
        "list volumes",
        &["volume", "ls", "--filter", &filter, "--format", format],
    )?;
    let vms: Vec<String> = vm::list()
        .iter()
        .filter_map(|line| {
            line.split('\t')
                .next()?
                .strip_prefix("warden-")
                .map(String::from)
        })
        .collect();
    let mut all: Vec<&str> = ids
        .lines()
        .chain(volume_ids.lines())
        .chain(vms.iter().map(String::as_str))
        .collect();
    all.retain(|id| valid_id(id));
    all.sort_unstable();
    all.dedup();
    for id in all {
        rm(id, true)?;
    }
    Ok(())
}

/// Checks an id given on the command line.
pub fn check_id(id: &str) -> Result<(), String> {
    match valid_id(id) {
        true => Ok(()),
        false => Err(format!(
            "{id:?}: not a machine id ([a-z0-9][a-z0-9-]{{0,30}})"
        )),
    }
}

/// Copies the machine's audit log to `<state>/audit-copy`; returns its
/// files in chain order and the anchor's path.
/// The anchor is None when the copy may lag behind the log (a running
/// VM's disk): checking it then could report a cut that is not there.
pub fn copy_audit(id: &str) -> Result<(Vec<PathBuf>, Option<PathBuf>), String> {
    host()?;
    let state = state_dir(id);
    let copy = state.join("audit-copy");
    // podman cp into an existing folder would nest the copy inside it.
    match std::fs::remove_dir_all(&copy) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("{}: {e}", copy.display()))
        }
        _ => {}
    }
    let mut anchor = Some(state.join("anchor.json"));
    if vm::is_vm(id) {
        std::fs::create_dir(&copy).map_err(|e| format!("{}: {e}", copy.display()))?;
        if vm::copy_audit(id, &copy)? {
            println!("the VM runs: this copy, read from its data disk, may lack its last lines (not yet written to the disk); the anchor is checked once it is stopped");
            anchor = None;
        }
    } else {
        let from = format!("{}:/home/runtime/data/audit", container(id));
        podman("copy audit log", &["cp", &from, &copy.to_string_lossy()])?;
    }
    let files = crate::audit::log_files(&copy).map_err(|e| format!("{}: {e}", copy.display()))?;
    Ok((files, anchor))
}

/// The last `n` lines of the log, for people.
pub fn describe_tail(files: &[PathBuf], n: usize) -> Vec<String> {
    let texts: Vec<String> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    let lines: Vec<&str> = texts.iter().flat_map(|t| t.lines()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .filter_map(|l| crate::audit::describe(l).map(|(_, text)| text))
        .collect()
}

/// Connects to the machine's warden with its key: through the host socket
/// of a container, or the host's end of a VM's vsock.
pub fn connect(
    id: &str,
    first: Option<(u32, &crate::protocol::Request)>,
) -> Result<Client, String> {
    // No engine is asked: a command's round trip is the API's alone.
    host::state_root()?;
    if vm::is_vm(id) {
        return vm::connect(id, first);
    }
    let key = key(id)?;
    let socket = socket(id);
    Client::connect_keyed(&socket, Some(&key), first)
        .map_err(|e| format!("{}: {e}", socket.display()))
}

/// Starts a machine that exists but is stopped, and waits for its warden
/// (`exec --start`, `status --start`). A running one is left as it is.
pub fn start(id: &str) -> Result<(), String> {
    host()?;
    if vm::is_vm(id) {
        return Err(format!(
            "machine {id}: --start is for containers; `warden machine up` starts a VM"
        ));
    }
    let name = container(id);
    if !exists("container", &name) {
        return Err(format!(
            "machine {id}: no such machine (make it with `warden machine up`)"
        ));
    }
    if !running(&name)? {
        let started = Instant::now();
        podman("start", &["start", &name])?;
        wait_ready(id, &key(id)?)?;
        eprintln!(
            "machine {id} started in {:.2} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Warden's status of the machine.
pub fn status(id: &str) -> Result<crate::protocol::Status, String> {
    connect(id, None)?.status().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_keeps_only_named_keys() {
        let env = parse_env_file("# c\nexport A=1\nB=x=y\n\nC=3\n");
        let keys = vec!["A".to_string(), "B".to_string()];
        assert_eq!(runtime_env(&keys, &env).unwrap(), "A=1\nB=x=y\n");
        let missing = vec!["Z".to_string()];
        assert_eq!(runtime_env(&missing, &env).unwrap_err(), vec!["Z"]);
    }

    #[test]
    fn ids() {
        assert!(valid_id("t123-a"));
        assert!(!valid_id("../x"));
        assert!(!valid_id(""));
        assert!(!valid_id("-a"));
    }
}
