//! What this host's container engine needs to run a machine, found once
//! per launcher process: the engine (podman, or Docker where it exists),
//! rootful or rootless, the OCI runtime and cgroup manager the host's
//! cgroups allow, limits under the host's hard limits, and the state
//! folder. When the host cannot run a machine, the error says why and what
//! to do, instead of a raw engine error.
//!
//! Each choice can be set by the owner: `WARDEN_ENGINE` (podman, docker),
//! `WARDEN_OCI_RUNTIME`, `WARDEN_CGROUP_MANAGER` (podman only).

use super::error::LaunchError;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Podman,
    Docker,
}

impl Engine {
    pub fn program(self) -> &'static str {
        match self {
            Engine::Podman => "podman",
            Engine::Docker => "docker",
        }
    }

    fn parse(name: &str) -> Result<Engine, LaunchError> {
        match name {
            "podman" => Ok(Engine::Podman),
            "docker" => Ok(Engine::Docker),
            other => Err(LaunchError::new(
                format!("WARDEN_ENGINE={other:?}"),
                "the engines are podman and docker",
            )),
        }
    }
}

/// How the host mounts cgroups (see `cgroup_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cgroups {
    /// cgroup v2 only: every runtime works.
    Unified,
    /// v1 controllers with a v2 hierarchy beside them: crun refuses it.
    Hybrid,
    /// v1 only: crun refuses it too.
    Legacy,
}

/// The host, as the launcher runs machines on it.
#[derive(Debug)]
pub struct Host {
    pub engine: Engine,
    pub rootless: bool,
    pub cgroups: Cgroups,
    /// Options before the engine's subcommand (runtime, cgroup manager).
    pub global: Vec<String>,
    /// `--ulimit` options at or under the host's hard limits.
    pub ulimits: Vec<String>,
    /// What was found and chosen, one line each, for `warden machine check`.
    pub facts: Vec<String>,
}

/// Where a rootful launcher keeps machines.
pub const ROOTFUL_STATE: &str = "/var/lib/warden/machines";

/// The ids warden's users have inside a machine (see machine/README.md):
/// a rootless owner's subordinate range must reach past them.
pub const IDS_NEEDED: u64 = 2002;

/// The limits a machine asks for, lowered to the host's hard limits
/// (raising a hard limit is refused without CAP_SYS_RESOURCE).
const NOFILE_WANTED: u64 = 1 << 20;
const NPROC_WANTED: u64 = 32768;

static HOST: OnceLock<Result<Host, LaunchError>> = OnceLock::new();

/// The host, found at first use.
pub fn get() -> Result<&'static Host, LaunchError> {
    HOST.get_or_init(detect).as_ref().map_err(Clone::clone)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Looks `program` up in PATH.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

fn detect() -> Result<Host, LaunchError> {
    let engine = Engine::parse(&env("WARDEN_ENGINE").unwrap_or_else(|| "podman".into()))?;
    let program = engine.program();
    if which(program).is_none() {
        return Err(match engine {
            Engine::Podman => LaunchError::new(
                "podman is not installed",
                "apt-get install podman (or set WARDEN_ENGINE=docker where a Docker engine runs)",
            ),
            Engine::Docker => LaunchError::sentence("docker is not installed"),
        });
    }
    let uid = nix::unistd::geteuid().as_raw();
    // Docker's daemon is root unless it says otherwise, whoever runs the
    // client (a member of the docker group is root by another name).
    let rootless = match engine {
        Engine::Podman => uid != 0,
        Engine::Docker => docker_security()?.contains("rootless"),
    };
    let mut facts = vec![format!(
        "engine: {program}, {}",
        if rootless {
            format!("rootless (uid {uid})")
        } else {
            "rootful".into()
        }
    )];
    let cgroups = cgroup_mode(Path::new("/sys/fs/cgroup"));
    facts.push(format!("cgroups: {cgroups:?}"));
    let mut global = Vec::new();
    if engine == Engine::Podman {
        if rootless {
            let user = user_name(uid).unwrap_or_else(|| uid.to_string());
            let subuid = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
            let subgid = std::fs::read_to_string("/etc/subgid").unwrap_or_default();
            facts.push(subordinate_ids(&user, uid, &subuid, &subgid)?);
        }
        let runtime = match env("WARDEN_OCI_RUNTIME") {
            Some(r) => Some((r, "set by WARDEN_OCI_RUNTIME")),
            None => choose_runtime(cgroups, which("runc").is_some())?,
        };
        if let Some((runtime, why)) = runtime {
            facts.push(format!("OCI runtime: {runtime} ({why})"));
            global.extend(["--runtime".to_string(), runtime]);
        }
        let (manager, why) = match env("WARDEN_CGROUP_MANAGER") {
            Some(m) => (m, "set by WARDEN_CGROUP_MANAGER"),
            None => choose_cgroup_manager(
                Path::new("/run/systemd/system").is_dir(),
                rootless,
                env("DBUS_SESSION_BUS_ADDRESS").is_some(),
            ),
        };
        facts.push(format!("cgroup manager: {manager} ({why})"));
        global.extend(["--cgroup-manager".to_string(), manager]);
    }
    let nofile = hard_limit(nix::sys::resource::Resource::RLIMIT_NOFILE);
    let nproc = hard_limit(nix::sys::resource::Resource::RLIMIT_NPROC);
    let nofile = under(NOFILE_WANTED, nofile);
    let nproc = under(NPROC_WANTED, nproc);
    facts.push(format!(
        "limits: nofile {nofile}, nproc {nproc} (at or under this host's hard limits)"
    ));
    let ulimits = vec![
        "--ulimit".into(),
        format!("nofile={nofile}:{nofile}"),
        "--ulimit".into(),
        format!("nproc={nproc}:{nproc}"),
    ];
    facts.push(format!("state folders: {}", state_root()?.display()));
    Ok(Host {
        engine,
        rootless,
        cgroups,
        global,
        ulimits,
        facts,
    })
}

/// The Docker daemon's security options; a client with no engine behind
/// it fails here, with that said.
fn docker_security() -> Result<String, LaunchError> {
    let out = std::process::Command::new("docker")
        .args(["info", "--format", "{{.SecurityOptions}}"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| LaunchError::new("docker", e.to_string()))?;
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(LaunchError::new(
            "docker",
            format!(
                "no Docker engine answers ({}); start one, or use podman",
                first_line(&String::from_utf8_lossy(&out.stderr))
            ),
        )),
    }
}

pub fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
}

/// Reads the cgroup mode from the filesystem mounted at `root`.
pub fn cgroup_mode(root: &Path) -> Cgroups {
    let magic = nix::sys::statfs::statfs(root).map(|s| s.filesystem_type());
    match magic {
        Ok(t) if t == nix::sys::statfs::CGROUP2_SUPER_MAGIC => Cgroups::Unified,
        _ if root.join("unified").is_dir() => Cgroups::Hybrid,
        _ => Cgroups::Legacy,
    }
}

/// The runtime to ask for, if any: podman's default is right on a unified
/// host; on v1 or hybrid cgroups crun fails where runc works.
pub fn choose_runtime(
    cgroups: Cgroups,
    have_runc: bool,
) -> Result<Option<(String, &'static str)>, LaunchError> {
    match (cgroups, have_runc) {
        (Cgroups::Unified, _) => Ok(None),
        (_, true) => Ok(Some((
            "runc".into(),
            "cgroup v1 controllers are mounted; crun refuses them",
        ))),
        (mode, false) => Err(LaunchError::new(
            format!(
                "this host mounts cgroups in {} mode, which crun refuses, and runc is not installed",
                if mode == Cgroups::Hybrid { "hybrid" } else { "v1" }
            ),
            "apt-get install runc (or set WARDEN_OCI_RUNTIME)",
        )),
    }
}

/// systemd manages cgroups only where it runs (and, rootless, where the
/// user has a session bus); cgroupfs everywhere else.
pub fn choose_cgroup_manager(
    systemd: bool,
    rootless: bool,
    session_bus: bool,
) -> (String, &'static str) {
    match (systemd, rootless, session_bus) {
        (true, false, _) | (true, true, true) => ("systemd".into(), "systemd runs this host"),
        (true, true, false) => (
            "cgroupfs".into(),
            "systemd runs, but this user has no session bus",
        ),
        (false, ..) => ("cgroupfs".into(), "systemd does not run this host"),
    }
}

fn hard_limit(resource: nix::sys::resource::Resource) -> Option<u64> {
    nix::sys::resource::getrlimit(resource)
        .ok()
        .map(|(_, hard)| hard)
}

/// `wanted`, lowered to `hard` (None or RLIM_INFINITY: no lowering).
pub fn under(wanted: u64, hard: Option<u64>) -> u64 {
    match hard {
        Some(h) if h != nix::libc::RLIM_INFINITY => wanted.min(h),
        _ => wanted,
    }
}

/// Rootless podman maps a machine's users through the owner's
/// subordinate ids: both files need a range for the owner (by name or
/// uid) of at least IDS_NEEDED ids.
pub fn subordinate_ids(
    user: &str,
    uid: u32,
    subuid: &str,
    subgid: &str,
) -> Result<String, LaunchError> {
    let count = |text: &str| -> u64 {
        text.lines()
            .filter_map(|l| {
                let mut f = l.trim().split(':');
                let (who, _start, count) = (f.next()?, f.next()?, f.next()?);
                (who == user || who == uid.to_string())
                    .then(|| count.parse::<u64>().ok())
                    .flatten()
            })
            .sum()
    };
    let (uids, gids) = (count(subuid), count(subgid));
    if uids < IDS_NEEDED || gids < IDS_NEEDED {
        return Err(LaunchError::new(
            format!("rootless podman needs at least {IDS_NEEDED} subordinate ids for {user} (found {uids} in /etc/subuid, {gids} in /etc/subgid)"),
            format!("as root, usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}"),
        ));
    }
    Ok(format!(
        "subordinate ids of {user}: {uids} uids, {gids} gids"
    ))
}

/// The name of `uid` in /etc/passwd.
fn user_name(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
    })
}

/// Where the machines' state folders live: the launcher's files are its
/// user's, root's in /var/lib, anyone else's in their own data folder.
/// Found without asking the engine: `exec` and `status` need only this.
pub fn state_root() -> Result<PathBuf, LaunchError> {
    match nix::unistd::geteuid().is_root() {
        true => Ok(PathBuf::from(ROOTFUL_STATE)),
        false => user_state_root(env("XDG_DATA_HOME"), env("HOME")),
    }
}

/// A rootless owner's machines live in their own data folder.
pub fn user_state_root(
    xdg_data: Option<String>,
    home: Option<String>,
) -> Result<PathBuf, LaunchError> {
    let absolute = |p: String| Some(PathBuf::from(p)).filter(|p| p.is_absolute());
    match (xdg_data.and_then(absolute), home.and_then(absolute)) {
        (Some(data), _) => Ok(data.join("warden/machines")),
        (None, Some(home)) => Ok(home.join(".local/share/warden/machines")),
        (None, None) => Err(LaunchError::new("rootless", "neither XDG_DATA_HOME nor HOME is set to an absolute path: nowhere to keep the machines' state")),
    }
}

/// A hint for engine errors this host is known to give, so that a raw
/// error never stands alone.
pub fn hint(stderr: &str) -> Option<&'static str> {
    const HINTS: [(&str, &str); 7] = [
        ("insufficient UIDs or GIDs", "the owner's subordinate id range is too small (see /etc/subuid, /etc/subgid)"),
        ("newuidmap", "rootless podman needs newuidmap and newgidmap: apt-get install uidmap"),
        ("RLIMIT_", "a limit above the host's hard limit was asked for; lower it or raise the host's"),
        ("cgroup", "the host's cgroups do not suit this runtime (set WARDEN_OCI_RUNTIME or WARDEN_CGROUP_MANAGER)"),
        ("/dev/net/tun", "a rootless private network needs /dev/net/tun, which this user cannot open: use network none, or a namespace made as root"),
        ("Cannot connect to the Docker daemon", "no Docker engine runs here"),
        ("image not known", "the image is not in this user's storage (rootless and rootful podman keep separate images): build or load it as this user"),
    ];
    HINTS
        .iter()
        .find(|(needle, _)| stderr.contains(needle))
        .map(|(_, hint)| *hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes() {
        assert_eq!(choose_runtime(Cgroups::Unified, false), Ok(None));
        assert_eq!(
            choose_runtime(Cgroups::Hybrid, true).unwrap().unwrap().0,
            "runc"
        );
        assert_eq!(
            choose_runtime(Cgroups::Legacy, true).unwrap().unwrap().0,
            "runc"
        );
        let e = choose_runtime(Cgroups::Hybrid, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("hybrid") && e.contains("apt-get install runc"),
            "{e}"
        );
    }

    #[test]
    fn cgroup_managers() {
        let table = [
            ((true, false, false), "systemd"),
            ((true, true, true), "systemd"),
            ((true, true, false), "cgroupfs"),
            ((false, false, true), "cgroupfs"),
            ((false, true, true), "cgroupfs"),
        ];
        for ((systemd, rootless, bus), want) in table {
            assert_eq!(
                choose_cgroup_manager(systemd, rootless, bus).0,
                want,
                "{systemd} {rootless} {bus}"
            );
        }
    }

    #[test]
    fn limits_stay_under_the_hard_ones() {
        assert_eq!(under(1 << 20, Some(20000)), 20000);
        assert_eq!(under(32768, Some(96365)), 32768);
        assert_eq!(under(32768, None), 32768);
        assert_eq!(under(32768, Some(nix::libc::RLIM_INFINITY)), 32768);
    }

    #[test]
    fn subordinate_id_table() {
        let ok = "alice:100000:65536\n";
        let table: [(&str, &str, bool); 7] = [
            (ok, ok, true),
            ("1000:100000:65536\n", ok, true),
            ("", ok, false),
            (ok, "", false),
            ("bob:100000:65536\n", ok, false),
            ("alice:100000:2001\n", ok, false),
            ("alice:100000:1000\nalice:200000:1002\n", ok, true),
        ];
        for (subuid, subgid, good) in table {
            let got = subordinate_ids("alice", 1000, subuid, subgid);
            assert_eq!(got.is_ok(), good, "{subuid:?} {subgid:?}: {got:?}");
            if let Err(e) = got {
                assert!(e.to_string().contains("usermod --add-subuids"), "{e}");
            }
        }
    }

    #[test]
    fn state_roots() {
        let s = |x: Option<&str>, h: Option<&str>| {
            user_state_root(x.map(String::from), h.map(String::from))
        };
        assert_eq!(
            s(Some("/d"), Some("/h")).unwrap(),
            Path::new("/d/warden/machines")
        );
        assert_eq!(
            s(Some("rel"), Some("/h")).unwrap(),
            Path::new("/h/.local/share/warden/machines")
        );
        assert!(s(None, Some("rel")).is_err());
        assert!(s(None, None).is_err());
    }

    #[test]
    fn engines() {
        assert_eq!(Engine::parse("podman"), Ok(Engine::Podman));
        assert_eq!(Engine::parse("docker"), Ok(Engine::Docker));
        assert!(Engine::parse("lxc").is_err());
    }

    #[test]
    fn hints() {
        let table = [
            (
                "Error: potentially insufficient UIDs or GIDs available",
                true,
            ),
            ("crun: cannot set limits: RLIMIT_NOFILE", true),
            ("Error: localhost/x: image not known", true),
            ("Error: no such container", false),
        ];
        for (stderr, some) in table {
            assert_eq!(hint(stderr).is_some(), some, "{stderr}");
        }
    }

    #[test]
    fn a_folder_without_cgroups_is_v1() {
        // A folder that is no cgroup2 mount and has no unified/ is v1.
        assert_eq!(cgroup_mode(Path::new("/nonexistent")), Cgroups::Legacy);
    }
}
