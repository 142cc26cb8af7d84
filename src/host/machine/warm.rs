//! Spares made ahead: `warden machine up --warm N DEFINITION` brings up a
//! machine of the definition in the time of a start rather than of a
//! create, by taking one of N machines made from it ahead and stopped.
//!
//! A container's name, labels, volumes and hostname are fixed when it is
//! made, so a spare cannot become a machine of the caller's choosing: the
//! definition's id names the pool, and its machines are `<id>-<k>`. `up
//! --warm` prints the id of the machine it brought up; that machine is
//! then an ordinary one (`exec`, `stop`, `rm` by its id), no longer the
//! pool's. After it, a detached `up --warm N --fill` makes what the pool
//! lacks (each spare brought up once, its setup run, then stopped) and
//! removes spares beyond N, or made from another text of the definition.
//!
//! The pool's folder (`<state root>/../pools/<id>/`) holds:
//! - `spares/<machine id>`: one per spare ready to take, holding the digest
//!   of the definition's text it was made from. Taking one is removing
//!   its file: of two callers, one alone succeeds.
//! - `ids/<k>`: every number handed out, made with `create_new`, so that
//!   two callers never make the same machine and no id comes back.
//! - `fill.lock` (one fill at a time) and `fill.log` (what fills said).

use super::{rm, stop, up_as};
use crate::host::definition::{valid_id, Definition, Kind};
use crate::host::error::LaunchError;
use crate::host::{sha256_hex, step, this_host};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The most spares one pool keeps.
pub const MOST: usize = 16;

/// What a pool keeps: how many spares, and whether they wait frozen
/// (their memory held; a take is a thaw) or stopped (nothing held; a take
/// is a start).
#[derive(Debug, Clone, Copy)]
pub struct Spares {
    pub count: usize,
    pub paused: bool,
}

/// `up --warm N`: a spare started (or, when none is ready, a machine made
/// as `up` makes one), its id printed by `up`; then the pool filled again
/// in the background.
pub fn up_warm(
    definition: &Path,
    env_file: Option<&Path>,
    setup: bool,
    spares: Spares,
) -> Result<(), LaunchError> {
    let warm = spares.count;
    let start = Instant::now();
    let (def, digest) = load(definition, warm)?;
    let pool = Pool::of(&def.id)?;
    let id = match pool.take(&digest) {
        Some(id) => {
            step(
                start,
                &format!("{id}: a spare of pool {}, made ahead", def.id),
            );
            thaw_if_frozen(&id)?;
            id
        }
        None => {
            let id = pool.new_id()?;
            step(
                start,
                &format!("{id}: no spare ready in pool {}; made now", def.id),
            );
            id
        }
    };
    let brought = up_as(definition, env_file, false, setup, Some(&id), start);
    // Filled again whether or not this one came up: the next caller's
    // spare should not wait on this one's failure.
    match pool.start_fill(definition, env_file, spares) {
        Ok(log) => step(
            start,
            &format!(
                "pool {}: filling to {warm} spares in the background (its log: {})",
                def.id,
                log.display()
            ),
        ),
        Err(e) => eprintln!("warden: pool {}: not filled again: {e}", def.id),
    }
    brought
}

/// `up --warm N --fill`: the pool brought to N spares of this text of the
/// definition, one fill at a time.
pub fn fill(definition: &Path, env_file: Option<&Path>, spares: Spares) -> Result<(), LaunchError> {
    let (start, warm) = (Instant::now(), spares.count);
    let (def, digest) = load(definition, warm)?;
    let pool = Pool::of(&def.id)?;
    let _held = pool.lock()?;
    for id in pool.stale(&digest) {
        step(
            start,
            &format!("{id}: made from another text of the definition; removed"),
        );
        remove(&id);
    }
    while pool.ready(&digest).len() > warm {
        let Some(id) = pool.take(&digest) else { break };
        step(start, &format!("{id}: more spares than {warm}; removed"));
        remove(&id);
    }
    while pool.ready(&digest).len() < warm {
        let id = pool.new_id()?;
        make_spare(definition, env_file, &id, spares.paused).map_err(|e| {
            remove(&id);
            e.note(format!("spare {id} removed; the pool stays short"))
        })?;
        pool.offer(&id, &digest)?;
        step(start, &format!("{id}: spare ready"));
    }
    Ok(())
}

/// Forgets the spare `id` of any pool (it was removed).
pub fn forget(id: &str) {
    for pool in pool_folders() {
        let _ = std::fs::remove_file(pool.join("spares").join(id));
    }
}

/// Every pool's folder (none when there is no pool yet).
fn pool_folders() -> Vec<PathBuf> {
    let Ok(root) = pools_root() else {
        return Vec::new();
    };
    match std::fs::read_dir(root) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// `ps`: a stopped machine that waits in a pool says `spare`.
pub fn mark_spares(rows: &mut [crate::host::ps::Row]) {
    let spares: Vec<String> = pool_folders()
        .into_iter()
        .filter_map(|pool| std::fs::read_dir(pool.join("spares")).ok())
        .flat_map(|entries| entries.flatten())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    for row in rows.iter_mut().filter(|r| !r.running) {
        if spares.contains(&row.id) {
            row.state = "spare".into();
        }
    }
}

/// The definition, checked for a pool, and the digest of its text.
fn load(definition: &Path, warm: usize) -> Result<(Definition, String), LaunchError> {
    let def = Definition::load(definition)?;
    let text = std::fs::read(definition).map_err(|e| LaunchError::io(definition, e))?;
    let refused = why_not_pooled(&def, warm);
    match refused {
        Some(why) => Err(LaunchError::new("--warm", why)),
        None => Ok((def, sha256_hex(&text))),
    }
}

/// Pure: why a definition cannot have spares, if it cannot.
pub fn why_not_pooled(def: &Definition, warm: usize) -> Option<String> {
    if warm > MOST {
        return Some(format!("at most {MOST} spares, not {warm}"));
    }
    if def.kind == Kind::Vm {
        return Some("spares are containers; a VM's definition has none".into());
    }
    if !def.ports.is_empty() {
        return Some("the definition publishes ports: a spare's host ports are chosen when it is made and held only while it runs, so two spares could be given the same; front them with `warden machine serve` by a machine of their own".into());
    }
    // Room for "-" and a number of up to six digits.
    if !valid_id(&format!("{}-999999", def.id)) {
        return Some(format!(
            "the pool's machines are named {}-<k>: its id must be at most 24 characters",
            def.id
        ));
    }
    None
}

/// A spare: the machine brought up once (its image, volumes, setup), then
/// stopped, or frozen (its memory kept, as serve freezes a machine).
fn make_spare(
    definition: &Path,
    env_file: Option<&Path>,
    id: &str,
    paused: bool,
) -> Result<(), LaunchError> {
    up_as(definition, env_file, false, false, Some(id), Instant::now())?;
    match paused {
        true => super::serve::freeze(id, &super::state_dir(id), 0),
        false => stop(id),
    }
}

/// A frozen spare thawed, its wake in its audit log (cause `start`: its
/// owner's `up` started it).
fn thaw_if_frozen(id: &str) -> Result<(), LaunchError> {
    if super::serve::thaw_frozen(id, &super::state_dir(id))? {
        super::serve::note_wake(id, "start");
    }
    Ok(())
}

/// A spare or a stale one removed with its volumes; what fails is said.
fn remove(id: &str) {
    if let Err(e) = rm(id, true) {
        eprintln!("warden: {id}: not removed: {e}");
    }
}

/// Where the pools live: beside the machines' state folders.
fn pools_root() -> Result<PathBuf, LaunchError> {
    let machines = this_host::state_root()?;
    let parent = machines.parent().unwrap_or(Path::new("/"));
    Ok(parent.join("pools"))
}

/// One pool's folder.
struct Pool {
    id: String,
    dir: PathBuf,
}

impl Pool {
    fn of(id: &str) -> Result<Pool, LaunchError> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = pools_root()?.join(id);
        // The owner's alone, as the machines' state folders are.
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true).mode(0o700);
        for sub in ["spares", "ids"] {
            builder
                .create(dir.join(sub))
                .map_err(|e| LaunchError::io(&dir, e))?;
        }
        Ok(Pool {
            id: id.to_string(),
            dir,
        })
    }

    /// The spares made from `digest`, lowest number first.
    fn ready(&self, digest: &str) -> Vec<String> {
        self.spares()
            .into_iter()
            .filter(|(_, of)| of == digest)
            .map(|(id, _)| id)
            .collect()
    }

    /// The spares made from another text, each taken (no caller gets it).
    fn stale(&self, digest: &str) -> Vec<String> {
        self.spares()
            .into_iter()
            .filter(|(id, of)| of != digest && self.claim(id))
            .map(|(id, _)| id)
            .collect()
    }

    /// Every spare's id and digest, in the order of their numbers.
    fn spares(&self) -> Vec<(String, String)> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("spares")) else {
            return Vec::new();
        };
        let mut spares: Vec<(String, String)> = entries
            .flatten()
            .filter_map(|e| {
                let id = e.file_name().into_string().ok()?;
                let digest = std::fs::read_to_string(e.path()).ok()?;
                Some((id, digest.trim().to_string()))
            })
            .collect();
        spares.sort_by_key(|(id, _)| number_of(&self.id, id));
        spares
    }

    /// Takes the first spare made from `digest`; None when none is left.
    fn take(&self, digest: &str) -> Option<String> {
        self.ready(digest).into_iter().find(|id| self.claim(id))
    }

    /// Removes the spare's file: true for the one caller that did.
    fn claim(&self, id: &str) -> bool {
        std::fs::remove_file(self.dir.join("spares").join(id)).is_ok()
    }

    /// Offers a made spare to the next caller.
    fn offer(&self, id: &str, digest: &str) -> Result<(), LaunchError> {
        let path = self.dir.join("spares").join(id);
        let temporary = self.dir.join(format!(".{id}.new"));
        std::fs::write(&temporary, digest)
            .and_then(|()| std::fs::rename(&temporary, &path))
            .map_err(|e| LaunchError::io(&path, e))
    }

    /// A number never handed out before, and no machine's of this host.
    fn new_id(&self) -> Result<String, LaunchError> {
        for k in 1..1_000_000u32 {
            let id = format!("{}-{k}", self.id);
            if super::state_dir(&id).exists() {
                continue;
            }
            let mark = self.dir.join("ids").join(k.to_string());
            match OpenOptions::new().write(true).create_new(true).open(&mark) {
                Ok(_) => return Ok(id),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(LaunchError::io(&mark, e)),
            }
        }
        Err(LaunchError::new(
            format!("pool {}", self.id),
            "every machine number is taken",
        ))
    }

    /// The pool's fill lock, held until dropped (a second fill waits).
    fn lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>, LaunchError> {
        let path = self.dir.join("fill.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| LaunchError::io(&path, e))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| LaunchError::new(path.display().to_string(), e.to_string()))
    }

    /// Starts `up --warm N --fill` apart from the caller (its own process
    /// group, its output in the pool's log), not waited for.
    fn start_fill(
        &self,
        definition: &Path,
        env_file: Option<&Path>,
        spares: Spares,
    ) -> Result<PathBuf, LaunchError> {
        use std::os::unix::process::CommandExt;
        let log_path = self.dir.join("fill.log");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| LaunchError::io(&log_path, e))?;
        let err = log.try_clone().map_err(|e| LaunchError::io(&log_path, e))?;
        let exe = std::env::current_exe()
            .map_err(|e| LaunchError::new("warden's path", e.to_string()))?;
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut command = std::process::Command::new(exe);
        command
            .args([
                "machine",
                "up",
                "--fill",
                "--warm",
                &spares.count.to_string(),
            ])
            .arg(absolute(definition));
        if spares.paused {
            command.arg("--paused");
        }
        if let Some(env) = env_file {
            command.arg("--env-file").arg(absolute(env));
        }
        command
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| LaunchError::new("start the pool's fill", e.to_string()))?;
        Ok(log_path)
    }
}

/// Pure: the number of the pool's machine `id` (`<pool>-<k>`), for order;
/// anything else sorts last.
fn number_of(pool: &str, id: &str) -> u64 {
    id.strip_prefix(pool)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|k| k.parse().ok())
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_order_the_spares() {
        let cases: &[(&str, &str, u64)] = &[
            ("agent", "agent-1", 1),
            ("agent", "agent-10", 10),
            ("agent", "agent-x", u64::MAX),
            ("agent", "agents-1", u64::MAX),
            ("agent", "other-1", u64::MAX),
            ("a-b", "a-b-7", 7),
        ];
        for (pool, id, k) in cases {
            assert_eq!(number_of(pool, id), *k, "{pool} {id}");
        }
    }

    fn definition(text: &str) -> Definition {
        Definition::parse(Path::new("/tmp/def.json"), text).unwrap()
    }

    #[test]
    fn what_a_pool_refuses() {
        let plain = r#"{"id": "agent", "image": "localhost/x"}"#;
        let cases: &[(&str, usize, Option<&str>)] = &[
            (plain, 2, None),
            (plain, 0, None),
            (plain, MOST, None),
            (plain, MOST + 1, Some("at most 16 spares")),
            (
                r#"{"id": "agent", "image": "localhost/x", "kind": "vm"}"#,
                2,
                Some("a VM's definition"),
            ),
            (
                r#"{"id": "agent", "image": "localhost/x", "network": "private", "ports": [{"port": 3000, "host": "auto"}]}"#,
                2,
                Some("publishes ports"),
            ),
            (
                r#"{"id": "a234567890123456789012345", "image": "localhost/x"}"#,
                2,
                Some("at most 24 characters"),
            ),
            (
                r#"{"id": "a23456789012345678901234", "image": "localhost/x"}"#,
                2,
                None,
            ),
        ];
        for (text, warm, refused) in cases {
            let said = why_not_pooled(&definition(text), *warm);
            match refused {
                None => assert_eq!(said, None, "{text}"),
                Some(part) => assert!(
                    said.as_deref().is_some_and(|s| s.contains(part)),
                    "{text}: {said:?}"
                ),
            }
        }
    }
}
