//! A cgroup of its own for every command, where the machine has a cgroup v2
//! hierarchy it may write with the memory and pids controllers (a VM, whose
//! warden mounts it; a container given cgroup v2 by its host): each command
//! runs in `<root>/commands/<tag>` with `memory.max` (no swap),
//! `pids.max`, `cpu.max` and `memory.oom.group`, and ends with
//! `cgroup.kill`, which reaches every process it started, whatever they
//! did to escape. Where there is none (cgroup v1, a read-only hierarchy),
//! status says so plainly, and the lifetime tags (`lifetime.rs`) and the
//! rlimits stand in.

use crate::wire::Limits;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where warden looks for the machine's cgroup v2 hierarchy.
pub const ROOT: &str = "/sys/fs/cgroup";
/// The controllers a command's cgroup must have for the layer to hold;
/// `cpu` is used when present.
const NEEDED: [&str; 2] = ["memory", "pids"];
/// The cgroup warden and the runtime move to when the hierarchy's root is
/// not the kernel's (a container's): a cgroup with processes cannot hand
/// controllers to its children.
const SUPERVISOR: &str = "supervisor";
/// cpu.max's period, in microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;
/// How long a command's end waits for its killed processes to be gone
/// before leaving its cgroup to be removed later.
const EMPTY_WAIT: Duration = Duration::from_secs(2);

/// Why commands get no cgroup of their own here.
#[derive(Debug, thiserror::Error)]
pub enum CgroupsError {
    #[error("{} is not a cgroup v2 hierarchy of the machine's own (cgroup v1 or none)", root.display())]
    NotCgroup2 { root: PathBuf },
    #[error("{}: no {missing} controller here (has: {available})", root.display())]
    NoController {
        root: PathBuf,
        missing: &'static str,
        available: String,
    },
    #[error("{}: cannot enable controllers: {source}", dir.display())]
    Enable {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: cannot move warden aside: {source}", root.display())]
    MoveAside {
        root: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", dir.display())]
    Make {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// Not looked for: the hierarchy here is not the machine's own.
    #[error("the machine has no cgroup v2 hierarchy of its own (command_cgroups is off; a VM always has one)")]
    NotOwn,
}

/// The commands' parent cgroup, its controllers enabled.
#[derive(Debug)]
pub struct Cgroups {
    commands: PathBuf,
    cpu: bool,
}

/// One command's cgroup.
#[derive(Debug)]
pub struct CommandCgroup {
    dir: PathBuf,
}

impl Cgroups {
    /// The commands' parent cgroup.
    pub fn dir(&self) -> &Path {
        &self.commands
    }

    /// Whether commands get a CPU bound (the cpu controller is here).
    pub fn has_cpu(&self) -> bool {
        self.cpu
    }

    /// Prepares the commands' parent cgroup under `root`; the error says
    /// why commands cannot have cgroups here.
    pub fn set_up(root: &Path) -> Result<Cgroups, CgroupsError> {
        if !is_cgroup2(root) {
            return Err(CgroupsError::NotCgroup2 { root: root.into() });
        }
        let available = read(&root.join("cgroup.controllers")).unwrap_or_default();
        let available: Vec<&str> = available.split_whitespace().collect();
        if let Some(missing) = NEEDED.iter().find(|c| !available.contains(c)) {
            return Err(CgroupsError::NoController {
                root: root.into(),
                missing,
                available: available.join(" "),
            });
        }
        let cpu = available.contains(&"cpu");
        let wanted = enable_line(cpu);
        let enable = |dir: &Path, source| CgroupsError::Enable {
            dir: dir.into(),
            source,
        };
        if let Err(e) = write(&root.join("cgroup.subtree_control"), &wanted) {
            if e.raw_os_error() != Some(libc::EBUSY) {
                return Err(enable(root, e));
            }
            // Processes live in this (non-root) cgroup: they move to a
            // leaf of their own first.
            move_all(root, &root.join(SUPERVISOR)).map_err(|source| CgroupsError::MoveAside {
                root: root.into(),
                source,
            })?;
            write(&root.join("cgroup.subtree_control"), &wanted).map_err(|e| enable(root, e))?;
        }
        let commands = root.join("commands");
        make_dir(&commands).map_err(|source| CgroupsError::Make {
            dir: commands.clone(),
            source,
        })?;
        write(&commands.join("cgroup.subtree_control"), &wanted)
            .map_err(|e| enable(&commands, e))?;
        Ok(Cgroups { commands, cpu })
    }

    /// The cgroup `name` (a command's tag, or the probe's), with `limits`
    /// written, and its `cgroup.procs` opened for the child to join before
    /// exec.
    pub fn for_command(
        &self,
        name: &str,
        limits: &Limits,
    ) -> std::io::Result<(CommandCgroup, OwnedFd)> {
        let dir = self.commands.join(name);
        if dir.exists() {
            // Left by an earlier holder of the tag whose processes took
            // long to die: they are gone or go now.
            let old = CommandCgroup { dir: dir.clone() };
            old.kill()?;
            old.remove();
        }
        make_dir(&dir)?;
        for (file, value) in settings(limits, self.cpu) {
            match write(&dir.join(file), &value) {
                // No swap accounting in this kernel: then no swap to stretch
                // memory.max either.
                Err(e) if file == "memory.swap.max" && e.kind() == std::io::ErrorKind::NotFound => {
                }
                done => done?,
            }
        }
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(dir.join("cgroup.procs"))?;
        Ok((CommandCgroup { dir }, procs.into()))
    }
}

impl CommandCgroup {
    /// Kills every process in the cgroup; returns how many there were.
    pub fn kill(&self) -> std::io::Result<usize> {
        let there = read(&self.dir.join("cgroup.procs"))?.lines().count();
        if there > 0 {
            write(&self.dir.join("cgroup.kill"), "1")?;
        }
        Ok(there)
    }

    /// The limit of its cgroup that stopped the command, if one did.
    pub fn limit_hit(&self) -> Option<&'static str> {
        let count = |file: &str, key: &str| {
            read(&self.dir.join(file))
                .ok()
                .and_then(|text| flat_keyed(&text, key))
                .unwrap_or(0)
        };
        if count("memory.events", "oom_kill") > 0 {
            Some("memory")
        } else if count("pids.events", "max") > 0 {
            Some("processes")
        } else {
            None
        }
    }

    /// The command's end: kills what is left in its cgroup and removes
    /// the cgroup; (processes killed, processes still there after the
    /// wait: those are killed again when its tag is next used).
    pub fn end(&self) -> (usize, usize) {
        let killed = match self.kill() {
            Ok(n) => n,
            Err(e) => {
                crate::say!(
                    "cgroup {}: cannot kill what is left: {e}",
                    self.dir.display()
                );
                0
            }
        };
        self.remove();
        let left = match self.dir.exists() {
            true => read(&self.dir.join("cgroup.procs")).map_or(1, |p| p.lines().count().max(1)),
            false => 0,
        };
        (killed, left)
    }

    /// Removes the cgroup once its processes are gone (bounded wait); one
    /// still busy is removed when its tag is next used.
    pub fn remove(&self) {
        let deadline = Instant::now() + EMPTY_WAIT;
        while populated(&self.dir) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Pure: the files of a command's cgroup and what goes in them.
pub fn settings(limits: &Limits, cpu: bool) -> Vec<(&'static str, String)> {
    let max = |v: Option<u64>| v.map_or("max".to_string(), |v| v.to_string());
    let mut out = vec![
        ("memory.max", max(limits.memory_bytes)),
        // A limit that swap could stretch is no limit.
        ("memory.swap.max", "0".to_string()),
        // The OOM killer takes the whole command, not one of its processes.
        ("memory.oom.group", "1".to_string()),
        ("pids.max", max(limits.processes)),
    ];
    if cpu {
        let quota = limits
            .cpu_percent
            .map(|p| p.saturating_mul(CPU_PERIOD_US) / 100);
        out.push(("cpu.max", format!("{} {CPU_PERIOD_US}", max(quota))));
    }
    out
}

/// Pure: the value of `key` in a flat-keyed cgroup file ("key value"
/// lines).
pub fn flat_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The line that enables the controllers for a cgroup's children.
fn enable_line(cpu: bool) -> String {
    match cpu {
        true => "+memory +pids +cpu".into(),
        false => "+memory +pids".into(),
    }
}

fn is_cgroup2(path: &Path) -> bool {
    nix::sys::statfs::statfs(path).is_ok_and(|s| s.filesystem_type().0 == libc::CGROUP2_SUPER_MAGIC)
}

/// Moves every process of `from` into the cgroup `to` (made if needed).
fn move_all(from: &Path, to: &Path) -> std::io::Result<()> {
    make_dir(to)?;
    // A process may fork while we move: go round until none is left.
    for _ in 0..100 {
        let pids = read(&from.join("cgroup.procs"))?;
        if pids.trim().is_empty() {
            return Ok(());
        }
        for pid in pids.lines() {
            // One that ended meanwhile cannot be moved: nothing to do.
            let _ = write(&to.join("cgroup.procs"), pid);
        }
    }
    Err(std::io::Error::other("processes keep appearing"))
}

fn populated(dir: &Path) -> bool {
    read(&dir.join("cgroup.events"))
        .ok()
        .and_then(|t| flat_keyed(&t, "populated"))
        .is_some_and(|p| p > 0)
}

fn make_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

fn read(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

/// One write(2): cgroup files take a value per write.
fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_table() {
        let none = Limits::default();
        let some = Limits {
            memory_bytes: Some(64 << 20),
            processes: Some(32),
            cpu_percent: Some(150),
            ..Default::default()
        };
        type Case<'a> = (&'a Limits, bool, &'a [(&'a str, &'a str)]);
        let cases: &[Case] = &[
            (
                &none,
                false,
                &[
                    ("memory.max", "max"),
                    ("memory.swap.max", "0"),
                    ("memory.oom.group", "1"),
                    ("pids.max", "max"),
                ],
            ),
            (
                &some,
                true,
                &[
                    ("memory.max", "67108864"),
                    ("memory.swap.max", "0"),
                    ("memory.oom.group", "1"),
                    ("pids.max", "32"),
                    ("cpu.max", "150000 100000"),
                ],
            ),
            (
                &none,
                true,
                &[
                    ("memory.max", "max"),
                    ("memory.swap.max", "0"),
                    ("memory.oom.group", "1"),
                    ("pids.max", "max"),
                    ("cpu.max", "max 100000"),
                ],
            ),
        ];
        for (limits, cpu, want) in cases {
            let got = settings(limits, *cpu);
            let got: Vec<(&str, &str)> = got.iter().map(|(f, v)| (*f, v.as_str())).collect();
            assert_eq!(got, *want, "{limits:?} cpu {cpu}");
        }
    }

    #[test]
    fn flat_keyed_table() {
        let events = "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 1\n";
        let cases = [
            (events, "oom_kill", Some(1)),
            (events, "max", Some(2)),
            (events, "oom", Some(1)),
            (events, "missing", None),
            ("populated 0\nfrozen 0\n", "populated", Some(0)),
            ("max junk\n", "max", None),
            ("", "max", None),
        ];
        for (text, key, want) in cases {
            assert_eq!(flat_keyed(text, key), want, "{key} in {text:?}");
        }
    }

    #[test]
    fn a_hierarchy_that_is_not_cgroup2_is_refused_with_the_reason() {
        let dir = std::env::temp_dir();
        let e = Cgroups::set_up(&dir).unwrap_err().to_string();
        assert!(e.contains("is not a cgroup v2 hierarchy"), "{e}");
    }
}
