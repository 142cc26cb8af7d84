//! The confinement of `shell` commands as a whole: prepared at boot from
//! the policy, handed to each command, and verified by behaviour with a
//! probe (a child that applies every layer, then tests each from inside).

mod capabilities;
pub mod cgroups;
mod child_stack;
pub mod landlock;
pub mod memory;
pub mod probe;
pub mod runtime_spawner;
pub mod seccomp;
pub mod shell_space;
pub mod spawn;
pub mod spawner;

use crate::shared::policy::{Limits, Policy, Requirement};
use crate::wire::LayerState;
use cgroups::{Cgroups, CgroupsError, CommandCgroup};
use landlock::{Coverage, LandlockError, StaticRules};
use probe::{NetProbe, Probe};
use seccomp::SeccompError;
use seccompiler::BpfProgram;
use spawn::{Confine, LaunchError, SpawnError};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Why a command (or a probe, or the runtime) cannot have its layers.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("landlock ruleset: {0}")]
    Ruleset(#[source] LandlockError),
    /// The runtime's ruleset, which refuses it every TCP connect of its own.
    #[error(transparent)]
    RuntimeRuleset(LandlockError),
    #[error("the command's cgroup {}/{name}: {source}", dir.display())]
    Cgroup {
        dir: PathBuf,
        name: String,
        source: std::io::Error,
    },
}

/// Why /proc shows shell other users' processes.
#[derive(Debug, thiserror::Error)]
pub enum ProcHiddenError {
    #[error(
        "cannot remount /proc with hidepid=invisible: {0}; shell can list the runtime's processes"
    )]
    Remount(#[source] nix::Error),
    #[error("not PID 1: /proc belongs to the host; shell can list other processes")]
    NotPid1,
}

/// Why a probe could not run to its findings: then nothing is proven.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Confine(#[from] ConfineError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// /dev/null, its stdin, stdout and stderr.
    #[error("{0}")]
    Stdio(#[source] std::io::Error),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("the probe ran past its checks")]
    RanPast,
}

pub struct Confinement {
    /// The policy as read at boot; its limits are `limits()` from then on.
    pub policy: Policy,
    /// The limits every command gets now: the policy's, or what a reload
    /// of limits.json read since (see `supervisor::settings`).
    limits: RwLock<Limits>,
    seccomp: Result<Arc<Vec<BpfProgram>>, SeccompError>,
    rules: StaticRules,
    pub coverage: Coverage,
    last_cap: u32,
    proc_hidden: Result<(), ProcHiddenError>,
    /// Per-command cgroups, or why there are none.
    cgroups: Result<Cgroups, CgroupsError>,
    /// The layers as the last probe found them.
    layers: Mutex<Vec<LayerState>>,
    /// Whether the connect gate is on: commands then get no TCP connect
    /// of their own from Landlock (see `net::connect_gate`).
    gated: AtomicBool,
}

impl Confinement {
    /// The confinement of `policy`; its Landlock rules are opened by
    /// `open_rules`, once commands' mount namespace exists.
    pub fn new(
        policy: Policy,
        proc_hidden: Result<(), ProcHiddenError>,
        cgroups: Result<Cgroups, CgroupsError>,
    ) -> Confinement {
        let mut policy = policy;
        // Commands reach the network through the proxy: Landlock must let
        // them connect to its port (of any address: Landlock knows ports
        // only; the firewall narrows it to loopback).
        let port = policy.network.proxy_port;
        if !policy.landlock.tcp_connect.contains(&port) {
            policy.landlock.tcp_connect.push(port);
        }
        let seccomp = seccomp::build(&policy.seccomp.extra_deny).map(Arc::new);
        let rules = StaticRules::unopened(&policy.landlock);
        let coverage = landlock::coverage(landlock::kernel_abi(), &policy.landlock);
        Confinement {
            limits: RwLock::new(policy.limits),
            seccomp,
            rules,
            coverage,
            last_cap: last_capability(),
            proc_hidden,
            cgroups,
            policy,
            layers: Mutex::new(Vec::new()),
            gated: AtomicBool::new(false),
        }
    }

    /// The limits a command gets now (the upper bounds a request may only
    /// tighten).
    pub fn limits(&self) -> Limits {
        *self.limits.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Commands started from now on get `limits`; running ones keep theirs.
    pub fn set_limits(&self, limits: Limits) {
        *self.limits.write().unwrap_or_else(|e| e.into_inner()) = limits;
    }

    /// Commands forked from now on connect over TCP only through the
    /// connect gate (or not at all, when `on` is false again).
    pub fn set_gated(&self, on: bool) {
        self.gated.store(on, Ordering::SeqCst);
    }

    pub fn gated(&self) -> bool {
        self.gated.load(Ordering::SeqCst)
    }

    /// Opens the Landlock rules' paths as `view` shows them (see
    /// `StaticRules::open`), with `routines` read-only and `shell_home`
    /// writable.
    pub fn open_rules(
        &mut self,
        routines: &Path,
        shell_home: &Path,
        view: &dyn Fn(&Path) -> PathBuf,
    ) {
        self.rules = StaticRules::open(&self.policy.landlock, routines, shell_home, view);
    }

    /// The highest capability this kernel knows.
    pub fn last_cap(&self) -> u32 {
        self.last_cap
    }

    /// The seccomp filters the spawner thread carries (and so every command
    /// it forks): none when the policy turns seccomp off.
    pub fn spawner_filters(&self) -> Vec<BpfProgram> {
        match (&self.seccomp, self.policy.seccomp.require) {
            (Ok(programs), Requirement::Required | Requirement::BestEffort) => programs.to_vec(),
            _ => Vec::new(),
        }
    }

    /// Everything one command gets; `folder` is its workspace folder.
    pub fn for_command(
        &self,
        folder: Option<&OwnedFd>,
        limits: &Limits,
        probe: bool,
    ) -> Result<Confine, ConfineError> {
        let landlock = match self.policy.landlock.require {
            Requirement::Off => None,
            _ => self
                .rules
                .ruleset(folder, self.gated())
                .map_err(ConfineError::Ruleset)?,
        };
        Ok(Confine {
            landlock,
            rlimits: rlimits(limits),
            last_cap: self.last_cap,
            bounding_set_empty: false,
            probe,
            net_probe: None,
            cgroup: None,
        })
    }

    /// The cgroup `name` for one command, with the fd its child joins
    /// through; None unless the probe proved the layer holds: a command in
    /// a cgroup loses RLIMIT_NPROC to its pids.max, which must be real.
    pub fn command_cgroup(
        &self,
        name: &str,
        limits: &Limits,
    ) -> Result<Option<(CommandCgroup, OwnedFd)>, ConfineError> {
        let proven = self
            .layers()
            .iter()
            .any(|l| l.layer == "cgroups" && l.holds);
        match proven {
            true => self.cgroup(name, limits),
            false => Ok(None),
        }
    }

    /// The probe's own cgroup, which is how the layer gets proven.
    pub fn probe_cgroup(
        &self,
        limits: &Limits,
    ) -> Result<Option<(CommandCgroup, OwnedFd)>, ConfineError> {
        self.cgroup("probe", limits)
    }

    fn cgroup(
        &self,
        name: &str,
        limits: &Limits,
    ) -> Result<Option<(CommandCgroup, OwnedFd)>, ConfineError> {
        let Ok(cgroups) = &self.cgroups else {
            return Ok(None);
        };
        cgroups
            .for_command(name, limits)
            .map(Some)
            .map_err(|source| ConfineError::Cgroup {
                dir: cgroups.dir().into(),
                name: name.into(),
                source,
            })
    }

    /// The firewall probe's layers: those of a command but Landlock, whose
    /// TCP rule would hide whether the firewall holds. Under the connect
    /// gate, a command's exactly: the gate is what is proven then.
    pub fn for_network_probe(&self, probe: NetProbe) -> Result<Confine, ConfineError> {
        let landlock = match self.gated() {
            true => self
                .rules
                .ruleset(None, true)
                .map_err(ConfineError::Ruleset)?,
            false => None,
        };
        Ok(Confine {
            landlock,
            rlimits: rlimits(&self.limits()),
            last_cap: self.last_cap,
            bounding_set_empty: false,
            probe: false,
            net_probe: Some(probe),
            cgroup: None,
        })
    }

    /// The runtime's network probe: nothing of a command's but what any
    /// child of warden gets (the runtime is not confined; only its
    /// network is, by the firewall).
    /// The runtime's processes where warden's connect gate decides its
    /// network: Landlock refuses it every TCP connect of its own (the
    /// gate makes them for it), no capabilities, no_new_privs; nothing
    /// else of it is restricted. `probe`: knock instead of exec.
    pub fn for_gated_runtime(&self, probe: Option<NetProbe>) -> Result<Confine, ConfineError> {
        Ok(Confine {
            landlock: Some(landlock::no_tcp_connect().map_err(ConfineError::RuntimeRuleset)?),
            rlimits: Vec::new(),
            last_cap: self.last_cap,
            bounding_set_empty: false,
            probe: false,
            net_probe: probe,
            cgroup: None,
        })
    }

    pub fn for_runtime_network_probe(&self, probe: NetProbe) -> Confine {
        Confine {
            landlock: None,
            rlimits: Vec::new(),
            last_cap: self.last_cap,
            bounding_set_empty: false,
            probe: false,
            net_probe: Some(probe),
            cgroup: None,
        }
    }

    /// Turns a probe's findings, and the firewall's state, into the layer
    /// report, and keeps it.
    /// Keeps the layers the probe proved, with `more` proven elsewhere
    /// (the firewall, shell's own space).
    pub fn record(
        &self,
        probe: Result<Probe, ProbeError>,
        more: Vec<LayerState>,
    ) -> Vec<LayerState> {
        let mut layers = self.judge(probe);
        layers.extend(more);
        *self.layers.lock().unwrap_or_else(|e| e.into_inner()) = layers.clone();
        layers
    }

    pub fn layers(&self) -> Vec<LayerState> {
        self.layers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Why commands must be refused: a required layer that did not hold.
    pub fn refusal(&self) -> Option<String> {
        let layers = self.layers();
        let down: Vec<String> = layers
            .iter()
            .filter(|l| l.required && !l.holds)
            .map(|l| format!("{} did not hold ({})", l.layer, l.detail))
            .collect();
        (!down.is_empty()).then(|| down.join("; "))
    }

    fn judge(&self, probe: Result<Probe, ProbeError>) -> Vec<LayerState> {
        let probe = match probe {
            Ok(p) => p,
            Err(e) => return self.unproven(&e),
        };
        let landlock_required = self.policy.landlock.require == Requirement::Required;
        let seccomp_required = self.policy.seccomp.require == Requirement::Required;
        let (landlock_holds, landlock_detail) = self.landlock_verdict(probe);
        let seccomp_detail = self.seccomp_detail(probe);
        let proc_detail = match &self.proc_hidden {
            Ok(()) => "/proc mounted with hidepid=invisible".to_string(),
            Err(e) => e.to_string(),
        };
        vec![
            state(
                "identity",
                true,
                probe.has(Probe::IDENTITY),
                "uid, gid and groups of shell".into(),
            ),
            state(
                "capabilities",
                true,
                probe.has(Probe::NO_CAPABILITIES),
                "all five sets empty, read back".into(),
            ),
            state(
                "no_new_privs",
                true,
                probe.has(Probe::NO_NEW_PRIVS),
                "setuid binaries gain nothing".into(),
            ),
            state(
                "landlock",
                landlock_required,
                landlock_holds,
                landlock_detail,
            ),
            state(
                "seccomp",
                seccomp_required,
                probe.has(Probe::SECCOMP) && self.seccomp.is_ok(),
                seccomp_detail,
            ),
            state("rlimits", true, true, describe_limits(&self.limits())),
            state("proc_hidden", false, self.proc_hidden.is_ok(), proc_detail),
            self.cgroups_state(probe),
            self.lifetime_state(probe),
        ]
    }

    /// The layers when the probe could not even start: nothing is
    /// proven, and cgroups and lifetime are judged on an empty probe.
    fn unproven(&self, e: &ProbeError) -> Vec<LayerState> {
        [
            "identity",
            "capabilities",
            "no_new_privs",
            "landlock",
            "seccomp",
        ]
        .iter()
        .map(|layer| state(layer, true, false, format!("the probe failed: {e}")))
        .chain([self.cgroups_state(Probe(0)), self.lifetime_state(Probe(0))])
        .collect()
    }

    /// Whether landlock holds, and the detail saying what it enforces,
    /// what is missing and which absent paths were skipped.
    fn landlock_verdict(&self, probe: Probe) -> (bool, String) {
        let c = &self.coverage;
        let fs_ok = !c.filesystem || probe.has(Probe::LANDLOCK_FILESYSTEM);
        let tcp_ok = !c.tcp || probe.has(Probe::LANDLOCK_TCP);
        let landlock_holds = c.missing.is_empty() && fs_ok && tcp_ok;
        if self.policy.landlock.require == Requirement::Off {
            return (landlock_holds, "off by policy (landlock.json)".into());
        }
        let mut enforced = Vec::new();
        if c.filesystem && fs_ok {
            enforced.push("filesystem");
        }
        if c.tcp && tcp_ok {
            enforced.push("tcp");
        }
        if c.scopes {
            enforced.push("scopes");
        }
        let mut landlock_detail = format!("ABI {}: enforced [{}]", c.abi, enforced.join(", "));
        if !c.missing.is_empty() {
            landlock_detail += &format!("; missing: {}", c.missing.join("; "));
        }
        if !fs_ok || !tcp_ok {
            landlock_detail += "; the probe got through a rule the kernel claims to enforce";
        }
        if !self.rules.skipped.is_empty() {
            let skipped: Vec<String> = self
                .rules
                .skipped
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            landlock_detail += &format!("; absent paths skipped: {}", skipped.join(" "));
        }
        (landlock_holds, landlock_detail)
    }

    /// The seccomp detail: what the filter carries and whether a denied
    /// syscall was refused, or that policy turned it off.
    fn seccomp_detail(&self, probe: Probe) -> String {
        if self.policy.seccomp.require == Requirement::Off {
            return "off by policy (seccomp.json)".into();
        }
        match (&self.seccomp, probe.has(Probe::SECCOMP)) {
            (Err(e), _) => format!("cannot compile the filter: {e}"),
            (Ok(p), true) => format!(
                "{} program{} carried by the spawner thread, inherited by every command; a denied syscall got EPERM",
                p.len(),
                if p.len() == 1 { "" } else { "s" }
            ),
            (Ok(_), false) => "a denied syscall was not refused".to_string(),
        }
    }

    /// The cgroups layer: it holds when commands get cgroups and the
    /// probe, in a cgroup allowing one process, could not fork.
    fn cgroups_state(&self, probe: Probe) -> LayerState {
        let cgroups = match &self.cgroups {
            Err(e) => return state("cgroups", false, false, format!("{e}; commands get no cgroup of their own: lifetime tags end what they leave behind, rlimits bound each process (memory by address space, which memfd and shared memory escape), the machine's own limits bound them all")),
            Ok(c) => c,
        };
        let l = &self.limits();
        let show = |v: Option<u64>| v.map_or("max".to_string(), |v| v.to_string());
        let cpu = match cgroups.has_cpu() {
            true => match l.cpu_percent {
                Some(p) => format!("cpu.max {p}% of a CPU (cpu_percent)"),
                None => "cpu.max max (cpu_percent)".to_string(),
            },
            false => "no cpu controller: no CPU bound".to_string(),
        };
        match probe.has(Probe::FORK_REFUSED) {
            true => state("cgroups", false, true, format!("each command in a cgroup of its own under {}: memory.max {} (memory_bytes), no swap, pids.max {} (processes), {cpu}, memory.oom.group; ended with cgroup.kill; a probe in a cgroup of pids.max 1 could not fork", cgroups.dir().display(), show(l.memory_bytes), show(l.processes))),
            false => state("cgroups", false, false, format!("the probe, in a cgroup of pids.max 1 under {}, could still fork: commands' cgroups are not trusted", cgroups.dir().display())),
        }
    }

    /// How a command's leftovers end: by its cgroup where that holds,
    /// else by its tag.
    fn lifetime_state(&self, probe: Probe) -> LayerState {
        let tags = format!(
            "each command's processes carry a group of its own ({}-{}), kept through setsid, double forks and daemon()",
            crate::guest::process::lifetime::TAG_BASE,
            crate::guest::process::lifetime::TAG_BASE + crate::guest::process::lifetime::TAG_COUNT - 1
        );
        let detail = match self.cgroups.is_ok() && probe.has(Probe::FORK_REFUSED) {
            true => format!("cgroup.kill: whatever is left in a command's cgroup when it ends is killed (keep_background: its group's processes at stop_shell or the machine's stop); {tags}"),
            false => format!("{tags}; whatever carries it when the command ends is killed (keep_background: at stop_shell or the machine's stop); no cgroup needed"),
        };
        state("lifetime", true, true, detail)
    }
}

pub fn state(layer: &str, required: bool, holds: bool, detail: String) -> LayerState {
    LayerState {
        layer: layer.to_string(),
        required,
        holds,
        detail,
    }
}

fn describe_limits(l: &Limits) -> String {
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    format!(
        "cpu_seconds {}, address_space_bytes {}, processes {}, file_size_bytes {}, open_files {}, output_bytes {}, timeout_ms {}",
        show(l.cpu_seconds),
        show(l.address_space_bytes),
        show(l.processes),
        show(l.file_size_bytes),
        show(l.open_files),
        show(l.output_bytes),
        show(l.timeout_ms)
    )
}

/// The rlimits for `limits`: (resource, soft, hard).
pub fn rlimits(l: &Limits) -> Vec<(u32, u64, u64)> {
    let mut out = vec![(libc::RLIMIT_CORE, 0, 0)];
    if let Some(s) = l.cpu_seconds {
        // SIGXCPU at the soft limit names the limit; SIGKILL a second later.
        out.push((libc::RLIMIT_CPU, s, s.saturating_add(1)));
    }
    let same = [
        (libc::RLIMIT_AS, l.address_space_bytes),
        (libc::RLIMIT_NPROC, l.processes),
        (libc::RLIMIT_FSIZE, l.file_size_bytes),
        (libc::RLIMIT_NOFILE, l.open_files),
    ];
    out.extend(same.iter().filter_map(|(r, v)| v.map(|v| (*r, v, v))));
    out
}

fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// Remounts /proc so that a user sees only its own processes.
pub fn hide_processes() -> Result<(), ProcHiddenError> {
    use nix::mount::{mount, MsFlags};
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        flags,
        Some("hidepid=invisible"),
    )
    .map_err(ProcHiddenError::Remount)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rlimits_table() {
        let l = Limits {
            cpu_seconds: Some(5),
            processes: Some(10),
            ..Default::default()
        };
        let got = rlimits(&l);
        assert!(got.contains(&(libc::RLIMIT_CPU, 5, 6)));
        assert!(got.contains(&(libc::RLIMIT_NPROC, 10, 10)));
        assert!(got.contains(&(libc::RLIMIT_CORE, 0, 0)));
        assert_eq!(got.len(), 3);
        // Huge values from a request never overflow.
        let huge = Limits {
            cpu_seconds: Some(u64::MAX),
            ..Default::default()
        };
        assert!(rlimits(&huge).contains(&(libc::RLIMIT_CPU, u64::MAX, u64::MAX)));
    }
}
