//! `warden machine ...`: the launcher's commands, and what every kind of
//! machine shares. `up` loads the definition, reads the runtime's keys,
//! prepares the state folder (`/var/lib/warden/machines/<id>/` rootful,
//! the owner's data folder rootless; mode 0700: the machine's key, the
//! config and policy warden reads inside, and `run/`, where warden puts its
//! host socket), builds the image, and hands over to the machine's backend
//! (`backend.rs`); a failed `up` removes what it made. The other commands
//! ask the backend of the machine as it exists.

pub use super::agent_setup::{published, size_of};
pub mod container;
mod found;
pub mod handed;
pub mod serve;
pub mod warm;

use super::backend::{Backend, Made, Prepared};
use super::definition::{valid_id, Definition, Kind};
use super::engine;
pub use super::engine::host;
use super::error::LaunchError;
use super::kept;
use super::ps::Row;
pub use super::state::{container, key, socket, state_dir, PREFIX};
use super::state::{give, prepare_state};
use super::this_host::Host;
use super::vm::{self, Vm};
use super::{sha256_hex, step};
use crate::wire::client::Client;
use container::Container;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// For `check`: what a machine on the network "private" gets here, where
/// that is in doubt (a Docker daemon may run without its bridge).
pub fn private_network(host: &Host) -> Option<String> {
    if host.engine != super::this_host::Engine::Docker {
        return None;
    }
    Some(match engine::has_bridge() {
        true => "network \"private\": the daemon's bridge".to_string(),
        false => format!(
            "network \"private\": refused here: {}",
            container::NO_BRIDGE
        ),
    })
}

/// Makes (or reuses) and starts the machine `definition` describes. When
/// a step fails, what this `up` made (container, volumes, image, state
/// folder) is removed again, and the error names the step.
pub fn up(
    definition: &Path,
    env_file: Option<&Path>,
    as_vm: bool,
    force_setup: bool,
) -> Result<(), LaunchError> {
    up_as(
        definition,
        env_file,
        as_vm,
        force_setup,
        None,
        Instant::now(),
    )
}

/// `up`, the machine named `as_id` rather than the definition's id (a
/// spare of a warm pool, `warm.rs`); everything else as the definition
/// says. Its steps and its time count from `start`.
fn up_as(
    definition: &Path,
    env_file: Option<&Path>,
    as_vm: bool,
    force_setup: bool,
    as_id: Option<&str>,
    start: Instant,
) -> Result<(), LaunchError> {
    let host = host()?;
    let mut def = Definition::load(definition)?;
    if as_vm {
        def.kind = Kind::Vm;
    }
    if let Some(id) = as_id {
        def.id = id.to_string();
    }
    let backend = for_kind(def.kind);
    backend.fits(&def, host)?;
    let existing = of(&def.id);
    let exists = existing.noun() != backend.noun()
        && (def.kind == Kind::Container || engine::exists("container", &container(&def.id)));
    if exists {
        return Err(LaunchError::new(
            format!("machine {}", def.id),
            format!(
                "it exists as a {}; `warden machine rm {} --volumes` first to make it a {}",
                existing.noun(),
                def.id,
                backend.noun(),
            ),
        ));
    }
    let text = std::fs::read_to_string(definition).map_err(|e| LaunchError::io(definition, e))?;
    // The keys first: a missing one stops `up` before anything is made.
    let keys_text = keys_for(&def, definition, env_file)?;
    let credentials_text = credentials_for(&def, definition, env_file)?;
    let mut made = Made::default();
    let inputs = Inputs {
        definition,
        text: &text,
        keys_text: &keys_text,
        credentials_text: &credentials_text,
        force_setup,
    };
    let result = bring_up(&def, &inputs, host, start, &mut made);
    match result {
        Ok(()) => {
            let env_file = owner_env_file(definition, env_file);
            handed::keep(&state_dir(&def.id), &def, definition, &env_file);
            // Not ready in time is an error, but the machine stays: its
            // logs say why.
            let timeout = Duration::from_secs(def.ready.timeout_s);
            if let Some(by) = super::ready::wait(&def.id, timeout, || connect(&def.id, None))? {
                step(start, &format!("ready: {by}"));
            }
            let kind = if def.kind == Kind::Vm { " (VM)" } else { "" };
            println!(
                "machine {} up{kind} in {:.2} s",
                def.id,
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Err(e) => Err(match undo(made) {
            removed if removed.is_empty() => e,
            removed => e.note(format!(
                "removed what this `up` made: {}",
                removed.join(", ")
            )),
        }),
    }
}

/// Removes everything `made` records; returns what it removed (and what
/// it could not, said as such).
fn undo(made: Made) -> Vec<String> {
    let mut said = Vec::new();
    let mut note = |what: String, done: Result<(), LaunchError>| match done {
        Ok(()) => said.push(what),
        Err(e) => said.push(format!("{what} NOT removed ({e})")),
    };
    if let Some(name) = made.container {
        note(
            format!("container {name}"),
            engine::remove_container("undo", &name),
        );
    }
    let mut volumes = made.volumes;
    if let Some((names, since)) = &made.volumes_since {
        match engine::volumes_made_since(names, *since) {
            Ok(newer) => volumes.extend(newer),
            Err(e) => note(format!("volumes {}", names.join(", ")), Err(e)),
        }
    }
    for volume in volumes {
        let done = engine::run("undo", &["volume", "rm", "-f", &volume]).map(drop);
        note(format!("volume {volume}"), done);
    }
    if let Some(image) = made.image {
        let done = engine::run("undo", &["rmi", "-f", &image]).map(drop);
        note(format!("image {image}"), done);
    }
    if let Some(state) = made.state {
        if host().is_ok_and(|h| h.rootless) {
            let _ = give(&[state.join("etc"), state.join("run")], false);
        }
        let done =
            std::fs::remove_dir_all(&state).map_err(|e| LaunchError::sentence(e.to_string()));
        note(format!("state folder {}", state.display()), done);
    }
    said
}

/// The steps every kind shares (state folder, image, inputs digest), each
/// recording in `made` what it made; then the backend's own.
/// What `up` was given beside the definition.
struct Inputs<'a> {
    /// The definition's file, and its text.
    definition: &'a Path,
    text: &'a str,
    /// The runtime's `.env`.
    keys_text: &'a str,
    /// The values of the credentials warden's proxy adds.
    credentials_text: &'a str,
    force_setup: bool,
}

fn bring_up(
    def: &Definition,
    inputs: &Inputs,
    host: &Host,
    start: Instant,
    made: &mut Made,
) -> Result<(), LaunchError> {
    let text = inputs.text;
    let fresh_state = !state_dir(&def.id).exists();
    let state = prepare_state(def)?;
    if fresh_state {
        made.state = Some(state.clone());
    }
    step(start, &format!("state folder {}", state.display()));
    let record = kept::load(&state);
    let store = record.as_ref().map(|r| r.store.as_path());
    let image = super::image::image(def, inputs.definition, &state, store, start, host)?;
    if image.made {
        made.image = Some(image.name.clone());
    }
    // What makes the machine: a container's warden reads some fields
    // again at `reload`, which then need not make it again.
    let counted = super::made_from::counted(text, def.kind == Kind::Container);
    let kept = record
        .filter(|_| def.kind == Kind::Container)
        .and_then(|record| unchanged(record, &image.name, &counted));
    let (image_id, looked) = match (&kept, def.kind) {
        (Some((image_id, _)), _) => (image_id.clone(), engine::Looked::default()),
        (None, Kind::Container) => {
            let podman = host.engine == super::this_host::Engine::Podman;
            let looked = match (fresh_state && podman).then(|| assumed(&image.name, start)) {
                Some(Some(looked)) => looked,
                _ => {
                    let volumes = container::volumes(def);
                    engine::look_up(&image.name, &container(&def.id), &volumes)?
                }
            };
            (looked.image_id.clone(), looked)
        }
        (None, _) => (engine::image_id(&image.name)?, engine::Looked::default()),
    };
    let digest = inputs_digest(&counted, &image_id);
    let made_from = super::made_from::MadeFrom::now(text, &image_id);
    let kept = kept.map(|(_, record)| record);
    let prepared = Prepared {
        def,
        host,
        state,
        image,
        image_id,
        looked,
        kept,
        made_from,
        digest,
        keys_text: inputs.keys_text,
        credentials_text: inputs.credentials_text,
        setup_digest: setup_digest(def)?,
        force_setup: inputs.force_setup,
        start,
    };
    for_kind(def.kind).up(&prepared, made)?;
    // A VM's ports are its relay's: serve is told of it only to freeze it
    // when idle (a container's backend has serve front its ports itself).
    if def.kind == Kind::Vm {
        match def.sleep.serve {
            true => step(start, &serve::fronted::watch(&prepared)?),
            false => serve::fronted::forget(&prepared.state),
        }
    }
    Ok(())
}

/// What a new machine's `up` takes without asking the engine: its image's
/// id and entrypoint as `seen.rs` knows them, no container, no volumes.
fn assumed(image: &str, start: Instant) -> Option<engine::Looked> {
    let (image_id, entrypoint) = crate::host::seen::load().image(image)?;
    let short = image_id.get(..12).unwrap_or(&image_id);
    step(
        start,
        &format!("new machine, image {short} known: the engine not asked before its run"),
    );
    Some(engine::Looked {
        image_id,
        entrypoint: Some(entrypoint),
        container: None,
        volumes: Some(Vec::new()),
        assumed: true,
    })
}

/// The image's id and `record`, the last `up`'s of the container, when it
/// is of this machine's inputs as they are now (`kept.rs`); `counted` is
/// the definition's part that makes the machine.
fn unchanged(record: kept::Record, image: &str, counted: &str) -> Option<(String, kept::Record)> {
    let image_id = kept::image_id(&record, image)?;
    (inputs_digest(counted, &image_id) == record.inputs).then_some((image_id, record))
}

/// The digest of what the setup is made of: its script's bytes, and the
/// definition's `env` and key names, which it runs with. A setup runs
/// again only when this changes (or with `up --setup`), not whenever the
/// machine is made again.
fn setup_digest(def: &Definition) -> Result<Option<String>, LaunchError> {
    let Some(script) = &def.setup else {
        return Ok(None);
    };
    let bytes = std::fs::read(script)
        .map_err(|e| LaunchError::new(format!("setup {}", script.display()), e.to_string()))?;
    Ok(Some(setup_digest_of(&bytes, &def.env, &def.keys)))
}

/// Pure: the setup's digest from its parts.
pub fn setup_digest_of(script: &[u8], env: &BTreeMap<String, String>, keys: &[String]) -> String {
    // The script's length first, then the rest as JSON: no script can
    // pass for another one and some env lines, nor a value for a name.
    let mut bytes = format!("{}\0", script.len()).into_bytes();
    bytes.extend_from_slice(script);
    bytes.extend_from_slice(
        serde_json::json!({"env": env, "keys": keys})
            .to_string()
            .as_bytes(),
    );
    sha256_hex(&bytes)
}

/// Pure: the digest of a machine's inputs (the definition's text, or the
/// part of it that makes the machine, its image, this warden's version),
/// never of the runtime's keys: a machine
/// is made again when it changes, and it is kept as the machine's label
/// (or a cluster's annotation) `warden.inputs`.
pub fn inputs_digest(text: &str, image: &str) -> String {
    sha256_hex(&inputs_bytes(text, image))
}

/// Pure: what the inputs digest is the SHA-256 of.
pub(super) fn inputs_bytes(text: &str, image: &str) -> Vec<u8> {
    format!("{text}\0{image}\0{}", env!("CARGO_PKG_VERSION")).into_bytes()
}

/// Parses a `.env` file: `NAME=VALUE` lines (an `export ` prefix, blank
/// lines and `#` comments allowed).
pub fn parse_env_file(text: &str) -> BTreeMap<String, String> {
    crate::shared::redact::env_pairs(text)
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

/// The runtime's `.env`: the named keys, from `env_file`, or the `.env`
/// next to the definition.
pub(super) fn keys_for(
    def: &Definition,
    definition: &Path,
    env_file: Option<&Path>,
) -> Result<String, LaunchError> {
    read_named("keys", &def.keys, &owner_env_file(definition, env_file))
}

/// The values of the credentials warden's proxy adds (a `.env` text of
/// the keys `credentials` and `providers` name), from the same `.env` as
/// the runtime's keys: handed to warden alone, never written in the
/// machine.
pub fn credentials_for(
    def: &Definition,
    definition: &Path,
    env_file: Option<&Path>,
) -> Result<String, LaunchError> {
    let file = owner_env_file(definition, env_file);
    read_named("credentials", &def.opened.keys(), &file)
}

/// The owner's `.env`: `env_file`, or the one next to the definition.
pub(super) fn owner_env_file(definition: &Path, env_file: Option<&Path>) -> std::path::PathBuf {
    env_file
        .map(Path::to_path_buf)
        .unwrap_or_else(|| definition.parent().unwrap_or(Path::new(".")).join(".env"))
}

/// A `.env` text of the `names` given, from the owner's `.env`; `field`
/// names what asks for them in an error.
fn read_named(field: &str, names: &[String], env_file: &Path) -> Result<String, LaunchError> {
    let owner_env = match std::fs::read_to_string(env_file) {
        Ok(text) => parse_env_file(&text),
        Err(e) if names.is_empty() && e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => {
            return Err(LaunchError::new(
                format!("{field} {}", names.join(", ")),
                format!("cannot read {}: {e}", env_file.display()),
            ))
        }
    };
    runtime_env(names, &owner_env).map_err(|missing| {
        LaunchError::new(
            field,
            format!("{} missing from {}", missing.join(", "), env_file.display()),
        )
    })
}

/// Lists this owner's machines, every kind: a table, or with `json` a
/// JSON array of the same rows (`ps::Row`). One engine call lists the
/// containers; each running machine's idle time is its warden's word.
pub fn ps(json: bool) -> Result<(), LaunchError> {
    host()?;
    let mut rows = Vec::new();
    for backend in every_backend() {
        rows.extend(backend.list()?);
    }
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    warm::mark_spares(&mut rows);
    ask_idle(&mut rows);
    match json {
        true => {
            let text = serde_json::to_string_pretty(&rows)
                .map_err(|e| LaunchError::new("ps --json", e.to_string()))?;
            println!("{text}");
        }
        false => print!("{}", super::ps::table(&rows)),
    }
    Ok(())
}

/// How long `ps` waits for a machine's status.
const IDLE_WAIT: Duration = Duration::from_secs(5);

/// Asks each running machine's warden for its status, all at once (a
/// status only read is no activity: asking resets no idle time); one that
/// does not answer in `IDLE_WAIT` keeps no idle time. A frozen one is not
/// asked (nor thawed).
fn ask_idle(rows: &mut [Row]) {
    std::thread::scope(|scope| {
        for row in rows.iter_mut().filter(|r| r.running && r.state != "paused") {
            scope.spawn(move || row.idle_ms = idle_of(row));
        }
    });
}

fn idle_of(row: &Row) -> Option<u64> {
    let _awake = serve::awake(&row.id, None).ok()??;
    let mut client = match row.kind {
        "vm" => Vm.connect(&row.id, None),
        _ => Container.connect(&row.id, None),
    }
    .ok()?;
    client.set_read_timeout(Some(IDLE_WAIT)).ok()?;
    super::ps::idle_of(&client.status().ok()?)
}

/// Takes the machine down, when its agent is done: stopped and removed,
/// what its next `up` finds again kept (see `Backend::down`).
pub fn down(id: &str) -> Result<(), LaunchError> {
    host()?;
    thawed_first(id);
    of(id).down(id)
}

/// Stops the machine: warden is asked, and killed after a grace.
pub fn stop(id: &str) -> Result<(), LaunchError> {
    host()?;
    thawed_first(id);
    of(id).stop(id)
}

/// A frozen machine is thawed before it is stopped, taken down or removed:
/// its warden ends it in order (and a frozen VM's vsock is never reached).
/// A thaw that fails is said, and the stop goes on: a machine that does
/// not answer is killed after its grace.
fn thawed_first(id: &str) {
    if let Err(e) = serve::thaw_frozen(id, &state_dir(id)) {
        eprintln!("warden: {e}");
    }
}

/// Prints the machine's own output.
pub fn logs(id: &str) -> Result<(), LaunchError> {
    host()?;
    of(id).logs(id)
}

/// Removes the machine; with `volumes`, its volumes and state folder too.
pub fn rm(id: &str, volumes: bool) -> Result<(), LaunchError> {
    host()?;
    thawed_first(id);
    of(id).remove(id, volumes)?;
    warm::forget(id);
    if volumes {
        let state = state_dir(id);
        match std::fs::remove_dir_all(&state) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(LaunchError::new(
                    format!("state folder {}", state.display()),
                    e.to_string(),
                ))
            }
            _ => {}
        }
    }
    // An image built from the machine's Dockerfile is the machine's too.
    let image = format!("localhost/{PREFIX}-{id}:latest");
    if engine::exists("image", &image) {
        engine::run("remove image", &["rmi", "-f", &image])?;
        println!("removed image {image}");
    }
    Ok(())
}

/// Removes every machine of this owner's (every container labelled with
/// its uid, every volume named as a machine's under podman or labelled
/// with its uid under Docker, every VM in its state root), and their state
/// folders; nothing else.
pub fn prune() -> Result<(), LaunchError> {
    host()?;
    let mut all = Vec::new();
    for backend in every_backend() {
        all.extend(backend.ids()?);
    }
    all.retain(|id| valid_id(id));
    all.sort_unstable();
    all.dedup();
    for id in all {
        rm(&id, true)?;
    }
    Ok(())
}

/// Checks an id given on the command line.
/// The machine's published ports, `3000/tcp -> 127.0.0.1:3100` each.
pub fn published_ports(id: &str) -> Vec<String> {
    match super::vm::is_vm(id) {
        true => super::vm::ports::published(id),
        false => published(&container(id)),
    }
}

pub fn check_id(id: &str) -> Result<(), LaunchError> {
    match valid_id(id) {
        true => Ok(()),
        false => Err(LaunchError::new(
            format!("{id:?}"),
            "not a machine id ([a-z0-9][a-z0-9-]{0,30})",
        )),
    }
}

/// Copies the machine's audit log to `<state>/audit-copy`; returns its
/// files in chain order and the anchor's path. A running machine's log is
/// read through its warden (`read_audit`): whole, to its last line, for a
/// container and a VM alike. A stopped one's is copied from where it is
/// kept (the container's volume, the VM's data disk).
/// The anchor is None when the copy may lag behind the log (a running
/// VM's disk, read where its warden speaks no `read_audit`): checking it
/// then could report a cut that is not there.
pub fn copy_audit(id: &str) -> Result<(Vec<PathBuf>, Option<PathBuf>), LaunchError> {
    host()?;
    let state = state_dir(id);
    let copy = state.join("audit-copy");
    // Copying into an existing folder would nest the copy inside it.
    match std::fs::remove_dir_all(&copy) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(LaunchError::io(&copy, e))
        }
        _ => {}
    }
    let anchor = Some(state.join("anchor.json"));
    // A machine that answers is read through its warden.
    if let Ok(mut client) = connect(id, None) {
        if client.version >= 5 {
            std::fs::create_dir(&copy).map_err(|e| LaunchError::io(&copy, e))?;
            return Ok((read_audit_into(&mut client, &copy)?, anchor));
        }
    }
    let mut anchor = anchor;
    if of(id).copy_audit(id, &copy)? {
        println!("the VM runs: this copy, read from its data disk, may lack its last lines (not yet written to the disk); the anchor is checked once it is stopped");
        anchor = None;
    }
    let files =
        crate::shared::audit_chain::log_files(&copy).map_err(|e| LaunchError::io(&copy, e))?;
    Ok((files, anchor))
}

/// Reads the whole log kept through `client` (`read_audit` from its
/// first line) into the file `warden.jsonl` of the folder `copy`; returns
/// the files to verify.
pub fn read_audit_into(client: &mut Client, copy: &Path) -> Result<Vec<PathBuf>, LaunchError> {
    let path = copy.join(crate::shared::audit_chain::FILE_NAME);
    let file = std::fs::File::create(&path).map_err(|e| LaunchError::io(&path, e))?;
    let mut out = std::io::BufWriter::new(file);
    let read = client
        .read_audit(1, &mut out)
        .map_err(|e| LaunchError::new("read the audit log through the API", e.to_string()))?;
    std::io::Write::flush(&mut out).map_err(|e| LaunchError::io(&path, e))?;
    let lines = match read.first_seq {
        Some(first) => format!("lines {first} to {}", read.last_seq),
        None => "no lines".to_string(),
    };
    println!(
        "read through the machine's warden: {lines} ({} bytes)",
        read.bytes
    );
    Ok(vec![path])
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
        .filter_map(|l| crate::shared::audit_chain::describe(l).map(|(_, text)| text))
        .collect()
}

/// Connects to the machine's warden with its key: through the host socket
/// of a container, or the host's end of a VM's vsock.
pub fn connect(
    id: &str,
    first: Option<(u32, &crate::wire::Request)>,
) -> Result<Client, LaunchError> {
    // No engine is asked: a command's round trip is the API's alone (and
    // a look whether the machine may be frozen, which thaws it).
    super::this_host::state_root()?;
    let awake = serve::awake(id, Some("door"))?;
    let mut client = of(id).connect(id, first)?;
    client.keep_alongside(Box::new(awake));
    Ok(client)
}

/// Starts a machine that exists but is stopped, and waits until it is
/// ready (see `ready.rs`); true when it was not running. A running one is
/// left as it is, and waited for the same way.
pub fn start(id: &str) -> Result<bool, LaunchError> {
    host()?;
    let was_up = connect(id, None).is_ok();
    let started = Instant::now();
    of(id).start(id)?;
    if !was_up {
        eprintln!(
            "machine {id} started in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        handed::hand_again(id, &state_dir(id));
    }
    let timeout = super::ready::timeout_of(&state_dir(id));
    super::ready::wait(id, timeout, || connect(id, None))?;
    Ok(!was_up)
}

/// `start`, as the owner asks it (`exec --start`, `status --start`): a
/// machine it started says so in its audit log (`wake`, cause `start`).
pub fn start_asked(id: &str) -> Result<(), LaunchError> {
    // A spare the owner starts is the owner's, no longer the pool's.
    warm::forget(id);
    if start(id)? {
        serve::note_wake(id, "start");
    }
    Ok(())
}

/// Warden's status of the machine.
pub fn status(id: &str) -> Result<crate::wire::Status, LaunchError> {
    connect(id, None)?
        .status()
        .map_err(|e| LaunchError::sentence(e.to_string()))
}

/// Every backend, for what asks all of them (`ps`, `prune`).
fn every_backend() -> [&'static dyn Backend; 2] {
    [&Container, &Vm]
}

/// The backend of the machine `id` as it exists now.
fn of(id: &str) -> &'static dyn Backend {
    match vm::is_vm(id) {
        true => &Vm,
        false => &Container,
    }
}

/// The backend a definition of `kind` asks for.
fn for_kind(kind: Kind) -> &'static dyn Backend {
    match kind {
        Kind::Vm => &Vm,
        Kind::Container => &Container,
    }
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
    fn a_setups_digest_changes_with_what_it_runs_with_and_nothing_else() {
        let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let keys =
            |names: &[&str]| -> Vec<String> { names.iter().map(|k| k.to_string()).collect() };
        let base = setup_digest_of(b"make\n", &env(&[("A", "1")]), &keys(&["K"]));
        assert_eq!(
            base,
            setup_digest_of(b"make\n", &env(&[("A", "1")]), &keys(&["K"]))
        );
        let changed = [
            setup_digest_of(b"make all\n", &env(&[("A", "1")]), &keys(&["K"])),
            setup_digest_of(b"make\n", &env(&[("A", "2")]), &keys(&["K"])),
            setup_digest_of(b"make\n", &env(&[]), &keys(&["K"])),
            setup_digest_of(b"make\n", &env(&[("A", "1")]), &keys(&["K", "L"])),
            // Neither the script nor a value can pass for what follows it.
            setup_digest_of(b"make\n{\"env\":{\"A\":\"1\"}", &env(&[]), &keys(&["K"])),
            setup_digest_of(b"make\n", &env(&[("A", "1\",\"keys\":[\"K")]), &keys(&[])),
        ];
        for digest in changed {
            assert_ne!(digest, base);
        }
    }

    #[test]
    fn ids() {
        assert!(valid_id("t123-a"));
        assert!(!valid_id("../x"));
        assert!(!valid_id(""));
        assert!(!valid_id("-a"));
        assert_eq!(check_id("t123-a"), Ok(()));
        assert_eq!(
            check_id("../x").unwrap_err().to_string(),
            r#""../x": not a machine id ([a-z0-9][a-z0-9-]{0,30})"#
        );
    }
}
