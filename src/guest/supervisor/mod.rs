//! The state warden shares between its API, its signal loop and shutdown:
//! who the users are, where things live, and what is running (by id, pid
//! and tag: a command's life is `command`'s, which reads this state).
//! Beside it: the machine's activity and idle stop (`activity`), its
//! readiness, the settings a reload takes again, and the firewall and
//! connect gate layers as proven on every status (`firewall_layer`).

use crate::guest::accounts::layout::{self, Paths, Spec};
use crate::guest::accounts::users::Account;
use crate::guest::audit::Audit;
use crate::guest::confine::probe::Probe;
use crate::guest::confine::shell_space::LinksUnprotected;
use crate::guest::confine::spawn::{Grouping, Identity, Launch, LaunchError, Stdio, Workdir};
use crate::guest::confine::spawner::{Spawner, SpawnerError};
use crate::guest::confine::{Confinement, ProbeError};
use crate::guest::process::reaper::Reaper;
use crate::shared::config::MachineConfig;
use crate::wire::Limits;
use crate::wire::{GateState, LayerState};
use crate::wire::{MainState, RunningCommand, Status, UserState, SUPPORTED_VERSIONS};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub mod activity;
mod firewall_layer;
pub mod readiness;
pub mod settings;

pub struct Supervisor {
    pub config: MachineConfig,
    pub runtime: Account,
    pub shell: Account,
    pub paths: Paths,
    pub specs: Vec<Spec>,
    pub reaper: Arc<Reaper>,
    /// Forks every shell command (and the probe), under the seccomp filter.
    pub spawner: Spawner,
    /// shell's own /tmp, /dev/shm and IPC namespace: what holds, or why not.
    shell_space: Result<String, SpawnerError>,
    /// The kernel's protections against planted links and files in shared
    /// sticky folders: what holds, or why not.
    link_protections: Result<String, LinksUnprotected>,
    /// warden's (and so the runtime's) place for the OOM killer.
    oom_order: Result<String, OomScoreError>,
    pub audit: Audit,
    pub confinement: Confinement,
    pub network: crate::guest::net::Network,
    pub pid1: bool,
    started: Instant,
    shutting_down: AtomicBool,
    next_command: AtomicU64,
    running: Mutex<HashMap<u64, Running>>,
    main: Mutex<Option<MainState>>,
    /// warden's boot time, in ms, once it is ready (as f64 bits).
    boot_ms: AtomicU64,
    /// A client asked for the machine to stop (the `shutdown` request).
    stop_requested: tokio::sync::Notify,
    /// The runtime's gate: closed (with its reason) or open, and since when.
    gate: Mutex<(Option<String>, Instant)>,
    /// When the machine was last used, and the runtime's hold.
    pub activity: crate::guest::supervisor::activity::Activity,
    /// The runtime's keys, once the host handed them over.
    pub keys: crate::guest::accounts::runtime_keys::HandedKeys,
    /// Whether the machine is ready, by what its definition waits for.
    pub readiness: readiness::Readiness,
    /// Each command's lifetime tag.
    pub tags: crate::guest::process::lifetime::Tags,
    /// What the commands that ended spent, all together.
    spent: Mutex<crate::wire::SpentTotal>,
}

struct Running {
    pid: Pid,
    /// Its lifetime tag (see `lifetime`).
    tag: u32,
    argv: Vec<String>,
    folder: Option<String>,
    requester_uid: u32,
    since: Instant,
}

impl Supervisor {
    pub fn new(
        config: MachineConfig,
        [runtime, shell]: [Account; 2],
        audit: Audit,
        confinement: Confinement,
        network: crate::guest::net::Network,
        pid1: bool,
    ) -> Supervisor {
        let paths = Paths::of_machine(&runtime, &shell, config.audit_dir());
        let config_idle = config.idle_stop_s;
        let config_ready = config.ready;
        let specs = layout::specs(&paths, &runtime, &shell);
        let reaper = Arc::new(Reaper::default());
        let started = Spawner::start(
            reaper.clone(),
            confinement.spawner_filters(),
            config.shell_tmp.clone(),
            confinement.last_cap(),
        );
        if let Err(e) = &started.filtered {
            // The probe will find seccomp not holding and say so.
            crate::say!("{e}");
        }
        if let Err(e) = &started.bounded {
            crate::say!("{e}; each command drops what is left before exec");
        }
        let spawner = started.spawner;
        let mut confinement = confinement;
        confinement.open_rules(&paths.routines, &shell.home, &|p| {
            spawner.in_commands_view(p)
        });
        let shell_space = started.space;
        let link_protections = crate::guest::confine::shell_space::protect_links();
        let oom_order = last_for_the_oom_killer();
        Supervisor {
            config,
            runtime,
            shell,
            paths,
            specs,
            reaper,
            spawner,
            shell_space,
            link_protections,
            oom_order,
            audit,
            confinement,
            network,
            pid1,
            started: Instant::now(),
            boot_ms: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            next_command: AtomicU64::new(1),
            running: Mutex::new(HashMap::new()),
            main: Mutex::new(None),
            stop_requested: tokio::sync::Notify::new(),
            gate: Mutex::new((None, Instant::now())),
            activity: crate::guest::supervisor::activity::Activity::new(config_idle),
            readiness: readiness::Readiness::new(config_ready),
            keys: Default::default(),
            tags: Default::default(),
            spent: Default::default(),
        }
    }

    /// Why commands are refused because of the audit log, if they are.
    pub fn audit_refusal(&self) -> Option<String> {
        match self.config.audit_when_full {
            crate::shared::config::WhenFull::Refuse => self.audit.retry().map(|why| {
                format!(
                    "the audit log cannot be written ({why}); commands are refused until it can"
                )
            }),
            crate::shared::config::WhenFull::Run => None,
        }
    }

    /// Closes the gate (`Some(reason)`) or opens it; returns it as it now is.
    pub fn set_gate(&self, reason: Option<String>) -> GateState {
        let mut gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        *gate = (reason, Instant::now());
        gate_state(&gate)
    }

    pub fn gate(&self) -> GateState {
        gate_state(&self.gate.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Only root and the runtime may use the API.
    pub fn may_connect(&self, uid: u32) -> bool {
        uid == 0 || uid == self.runtime.uid
    }

    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Asks the supervising task to stop the machine, as SIGTERM would.
    pub fn request_stop(&self) {
        self.stop_requested.notify_one();
    }

    /// Resolves once a stop was requested (at most once: the permit is
    /// taken).
    pub async fn stop_requested(&self) {
        self.stop_requested.notified().await;
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub fn drain_period(&self) -> Duration {
        Duration::from_millis(self.config.drain_ms)
    }

    pub fn grace_period(&self) -> Duration {
        Duration::from_millis(self.config.grace_period_ms)
    }

    /// The environment of a command: built from nothing, then the request's
    /// explicitly named variables.
    pub fn shell_env(&self, extra: &[(String, String)]) -> Vec<(String, String)> {
        let name = self.shell.name.clone();
        let mut env: BTreeMap<String, String> = BTreeMap::from([
            ("PATH".to_string(), self.config.path.clone()),
            ("HOME".to_string(), self.shell.home.display().to_string()),
            ("USER".to_string(), name.clone()),
            ("LOGNAME".to_string(), name),
            ("LANG".to_string(), self.config.lang.clone()),
        ]);
        env.extend(self.network.env.iter().cloned());
        env.extend(self.network.trust_env());
        env.extend(extra.iter().cloned());
        env.into_iter().collect()
    }

    /// Applies every layer in a child as shell and has it test each from
    /// inside; records and returns what holds.
    pub fn probe(self: &Arc<Self>) -> Vec<LayerState> {
        let found = self.run_probe();
        let landlock_tcp = self.confinement.coverage.tcp
            && found.as_ref().is_ok_and(|p| p.has(Probe::LANDLOCK_TCP));
        // The filter carries the socket rules: proven installed by the probe.
        let seccomp_sockets = found.as_ref().is_ok_and(|p| p.has(Probe::SECCOMP));
        let firewall = self.firewall_layer(landlock_tcp, seccomp_sockets);
        fn space<E: std::fmt::Display>(layer: &str, found: &Result<String, E>) -> LayerState {
            let (holds, detail) = match found {
                Ok(d) => (true, d.clone()),
                Err(e) => (false, e.to_string()),
            };
            crate::guest::confine::state(layer, false, holds, detail)
        }
        let commands_first = found.as_ref().is_ok_and(|p| p.has(Probe::OOM_FIRST));
        let more = vec![
            firewall,
            space("shell_space", &self.shell_space),
            space("link_protections", &self.link_protections),
            space("listen", &self.network.listens()),
            oom_order(commands_first, &self.oom_order),
        ];
        let more = more
            .into_iter()
            .chain(self.runtime_network_layer())
            .collect();
        self.confinement.record(found, more)
    }

    /// The firewall probe: a child as shell knocking where `plan` says
    /// (without Landlock, but under the connect gate).
    fn run_net_probe(
        &self,
        plan: crate::guest::confine::probe::NetProbe,
    ) -> Result<Probe, ProbeError> {
        let confine = self.confinement.for_network_probe(plan)?;
        self.spawn_probe("warden-net-probe", confine)
    }

    fn run_probe(&self) -> Result<Probe, ProbeError> {
        let mut confine = self
            .confinement
            .for_command(None, &self.confinement.limits(), true)?;
        // A cgroup that allows one process: the probe's fork must fail.
        let one = Limits {
            processes: Some(1),
            ..Default::default()
        };
        let cgroup = self.confinement.probe_cgroup(&one)?;
        let cgroup = cgroup.map(|(cgroup, procs)| {
            confine.join_cgroup(procs);
            cgroup
        });
        let found = self.spawn_probe("warden-probe", confine);
        if let Some(cgroup) = cgroup {
            cgroup.remove();
        }
        found
    }

    fn spawn_probe(
        &self,
        name: &str,
        confine: crate::guest::confine::spawn::Confine,
    ) -> Result<Probe, ProbeError> {
        self.spawn_probe_as(name, confine, &self.shell)
    }

    /// A probe child as `who`: forked by the spawner thread (so carrying
    /// the commands' filters) for shell, as the main process is for the
    /// runtime.
    fn spawn_probe_as(
        &self,
        name: &str,
        confine: crate::guest::confine::spawn::Confine,
        who: &Account,
    ) -> Result<Probe, ProbeError> {
        let home = c_path(&who.home)?;
        let launch = Launch::new(
            &[name.to_string()],
            &[],
            "",
            identity(who),
            Grouping::Session,
            Workdir::At(home),
            Some(confine),
        )?;
        let null = || {
            std::fs::File::options()
                .read(true)
                .write(true)
                .open("/dev/null")
                .map(OwnedFd::from)
                .map_err(ProbeError::Stdio)
        };
        let stdio = Stdio {
            stdin: null()?,
            stdout: null()?,
            stderr: null()?,
            terminal: false,
        };
        let spawned = match who.uid == self.shell.uid {
            true => self.spawner.spawn_blocking(launch, stdio, true),
            false => self.spawn_runtime(launch, stdio, true),
        };
        match spawned {
            Ok(spawned) => {
                // Gone before the answer: a probe is never seen among
                // shell's processes (status lists them right after).
                let _ = spawned.exit.blocking_recv();
                spawned.probe.ok_or(ProbeError::RanPast)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Forks a process of the runtime's (the main process, its probe):
    /// from the runtime's spawner thread where warden's connect gate
    /// decides its network, so that it carries the gate's filter; else
    /// from the calling thread.
    pub fn spawn_runtime(
        &self,
        launch: Launch,
        stdio: crate::guest::confine::spawn::Stdio,
        kill_group: bool,
    ) -> Result<crate::guest::confine::spawn::Spawned, crate::guest::confine::spawn::SpawnError>
    {
        use crate::guest::confine::spawn::{spawn, SpawnError};
        match self.network.gate().and_then(|g| g.runtime_gate()) {
            Some(gate) => {
                let reaper = self.reaper.clone();
                gate.spawner
                    .run(move || spawn(&launch, stdio, &reaper, kill_group))
                    .map_err(|_| SpawnError::SpawnerGone)?
            }
            None => spawn(&launch, stdio, &self.reaper, kill_group),
        }
    }

    /// The main process: warden's own environment (the machine's, as a
    /// container engine set it) and the config's `main_env` (a VM's), with
    /// the runtime's identity variables.
    pub fn main_launch(&self, argv: &[String]) -> Result<Launch, LaunchError> {
        let mut env: BTreeMap<String, String> = std::env::vars().collect();
        env.extend(self.config.main_env.clone());
        env.entry("PATH".into())
            .or_insert_with(|| self.config.path.clone());
        // The runtime's keys, when the host handed them over: the
        // runtime's own, like its `.env` (but never its HOME or name).
        env.extend(self.keys.pairs());
        // The machine's authority, for the hosts the proxy opens.
        env.extend(self.network.trust_env());
        // Its model providers' SDKs, pointed at their metered endpoints.
        let port = self.network.policy.proxy_port;
        for provider in &self.network.policy.providers {
            let (name, url) = provider.base_url(port);
            env.insert(name.into(), url);
        }
        if self.network.policy.runtime_hosts.is_some() || self.config.egress_vsock_port.is_some() {
            // Its traffic goes through the proxy alone (its own list, or
            // a VM's only way out): its tools are pointed at it (Node 24
            // and later honour the variables for fetch with
            // NODE_USE_ENV_PROXY).
            env.extend(self.network.env.iter().cloned());
            env.insert("NODE_USE_ENV_PROXY".into(), "1".into());
        }
        if let Some(path) = env.get_mut("PATH") {
            *path = self.runtime_path(path);
        }
        env.insert("HOME".into(), self.runtime.home.display().to_string());
        env.insert("USER".into(), self.runtime.name.clone());
        env.insert("LOGNAME".into(), self.runtime.name.clone());
        let env: Vec<(String, String)> = env.into_iter().collect();
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        // Where the gate decides its network, Landlock refuses it every
        // TCP connect of its own: without that, no start.
        let confine = match self.network.gate().and_then(|g| g.runtime_gate()) {
            Some(_) => Some(
                self.confinement
                    .for_gated_runtime(None)
                    .map_err(LaunchError::Confinement)?,
            ),
            None => None,
        };
        Launch::new(
            argv,
            &env,
            &path,
            identity(&self.runtime),
            Grouping::ProcessGroup,
            Workdir::At(c_path(&self.runtime.home)?),
            confine,
        )
    }

    /// `path` without the folders shell writes (`layout::shell_writes`):
    /// the runtime would run, keys in hand, what shell put there. Each one
    /// left out is said.
    fn runtime_path(&self, path: &str) -> String {
        let kept: Vec<&str> = path
            .split(':')
            .filter(|dir| {
                let theirs = layout::shell_writes(&self.paths, Path::new(dir));
                if theirs {
                    crate::say!("the runtime's PATH: {dir} left out (shell writes there)");
                }
                !theirs
            })
            .collect();
        kept.join(":")
    }

    /// Adds an ended command's spending to the machine's.
    pub fn count_spent(&self, report: &crate::wire::ExitReport) {
        let mut total = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        total.commands += 1;
        total.wall_ms += report.duration_ms;
        total.cpu_user_ms += report.cpu_user_ms.unwrap_or(0.0);
        total.cpu_system_ms += report.cpu_system_ms.unwrap_or(0.0);
        total.max_rss_kb = total.max_rss_kb.max(report.max_rss_kb.unwrap_or(0));
    }

    /// Gives back every tag but the running commands' (once shell has no
    /// process left that a kept command started).
    pub fn free_kept_tags(&self) {
        let running: std::collections::HashSet<u32> =
            self.running().values().map(|r| r.tag).collect();
        self.tags.give_back_kept(&running);
    }

    pub fn next_command_id(&self) -> u64 {
        self.next_command.fetch_add(1, Ordering::SeqCst)
    }

    fn running(&self) -> MutexGuard<'_, HashMap<u64, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn command_started(
        &self,
        command: u64,
        pid: Pid,
        (argv, folder): (Vec<String>, Option<String>),
        requester_uid: u32,
        tag: u32,
    ) {
        self.running().insert(
            command,
            Running {
                pid,
                tag,
                argv,
                folder,
                requester_uid,
                since: Instant::now(),
            },
        );
    }

    /// The running command whose processes carry `tag`: its id and argv.
    /// The running command whose lifetime tag `tag` is: its id, and the
    /// SHA-256 of its argv joined by NUL (what audit lines say of it, so
    /// that no argument reaches them whole).
    pub fn command_digest_of_tag(&self, tag: u32) -> Option<(u64, String)> {
        let (command, argv) = self.command_of_tag(tag)?;
        let digest = <sha2::Sha256 as sha2::Digest>::digest(argv.join("\0").as_bytes());
        Some((command, format!("{digest:x}")))
    }

    pub fn command_of_tag(&self, tag: u32) -> Option<(u64, Vec<String>)> {
        self.running()
            .iter()
            .find(|(_, r)| r.tag == tag)
            .map(|(id, r)| (*id, r.argv.clone()))
    }

    pub fn command_ended(&self, command: u64) {
        self.activity.touch();
        let mut running = self.running();
        running.remove(&command);
        if running.is_empty() && self.shell_space.is_ok() {
            // What the commands left in shell's IPC namespace goes now.
            self.spawner.empty_ipc(self.shell.uid);
        }
    }

    pub fn running_count(&self) -> usize {
        self.running().len()
    }

    /// Commands started since boot.
    pub fn commands_started(&self) -> u64 {
        self.next_command.load(Ordering::SeqCst) - 1
    }

    /// Signals every running command's whole process group.
    pub fn signal_commands(&self, sig: Signal) -> usize {
        let pids: Vec<Pid> = self.running().values().map(|r| r.pid).collect();
        pids.iter()
            .filter(|pid| self.reaper.signal(**pid, sig, true))
            .count()
    }

    pub fn set_main(&self, main: Option<MainState>) {
        *self.main.lock().unwrap_or_else(|e| e.into_inner()) = main;
    }

    pub fn set_boot_ms(&self, ms: f64) {
        self.boot_ms.store(ms.to_bits(), Ordering::Relaxed);
    }

    pub fn status(&self) -> Status {
        let now = Instant::now();
        let mut running: Vec<RunningCommand> = self
            .running()
            .iter()
            .map(|(command, r)| RunningCommand {
                command: *command,
                pid: r.pid.as_raw(),
                argv: r.argv.clone(),
                folder: r.folder.clone(),
                requester_uid: r.requester_uid,
                running_ms: now.duration_since(r.since).as_millis() as u64,
            })
            .collect();
        running.sort_by_key(|r| r.command);
        let (shell_processes, shell_process_count) =
            crate::guest::process::shell_procs::census(self.shell.uid);
        Status {
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: *SUPPORTED_VERSIONS.last().unwrap_or(&1),
            pid1: self.pid1,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            boot_ms: f64::from_bits(self.boot_ms.load(Ordering::Relaxed)),
            users: [&self.runtime, &self.shell].map(user_state).to_vec(),
            layout: layout::measure(&self.specs),
            main: self.main.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            running,
            shell_processes: Some(shell_processes),
            shell_process_count: Some(shell_process_count),
            gate: Some(self.gate()),
            spent: Some(self.spent.lock().unwrap_or_else(|e| e.into_inner()).clone()),
            activity: Some(crate::wire::ActivityState {
                idle_ms: self.activity.idle().as_millis() as u64,
                held_until_ms: self.activity.held_until_ms(),
                idle_stop_s: self.activity.idle_stop().map(|d| d.as_secs()),
                next_job_at_ms: self.activity.next_job_ms(),
                running: Some(self.running_count()),
            }),
            ready: Some(self.readiness.state()),
            commands_started: self.commands_started(),
            audit_log: self.audit.path().display().to_string(),
            audit_failing: self.audit.failing(),
            layers: self.confinement.layers(),
            refusing: self.confinement.refusal(),
            proxy: self.network.state(),
        }
    }
}

fn gate_state((reason, since): &(Option<String>, Instant)) -> GateState {
    GateState {
        closed: reason.is_some(),
        reason: reason.clone(),
        since_ms: since.elapsed().as_millis() as u64,
    }
}

/// Puts warden last in line for the OOM killer (and the runtime, which
/// inherits it); commands put themselves first (`spawn`). Lowering needs
/// CAP_SYS_RESOURCE, which a container may not grant: then it says so.
/// Asks for warden's (and so the runtime's) place last in the OOM
/// killer's line; what it got.
fn last_for_the_oom_killer() -> Result<String, OomScoreError> {
    match std::fs::write("/proc/self/oom_score_adj", "-1000") {
        Ok(()) => Ok("warden and the runtime last (-1000)".into()),
        Err(source) => {
            let now = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap_or_default();
            Err(OomScoreError {
                now: now.trim().to_string(),
                source,
            })
        }
    }
}

/// warden's oom_score_adj could not be lowered: where it stays, and why.
#[derive(Debug, thiserror::Error)]
#[error("warden and the runtime stay at {now} (lowering needs CAP_SYS_RESOURCE: {source})")]
pub struct OomScoreError {
    now: String,
    source: std::io::Error,
}

/// The OOM order as proven: shell's commands first only when the probe,
/// set up as a command is, read its own oom_score_adj back as 1000.
fn oom_order(commands_first: bool, warden: &Result<String, OomScoreError>) -> LayerState {
    let commands = match commands_first {
        true => "shell's commands first (oom_score_adj 1000, read back by the probe)",
        false => "shell's commands NOT first: the probe did not read oom_score_adj 1000",
    };
    let (warden_last, said) = match warden {
        Ok(d) => (true, d.clone()),
        Err(e) => (false, e.to_string()),
    };
    crate::guest::confine::state(
        "oom_order",
        false,
        commands_first && warden_last,
        format!("{commands}; {said}"),
    )
}

/// The ids a process of `account` runs with.
pub fn identity(account: &Account) -> Identity {
    Identity {
        uid: account.uid,
        gid: account.gid,
        groups: account.groups.clone(),
    }
}

fn user_state(account: &Account) -> UserState {
    UserState {
        name: account.name.clone(),
        uid: account.uid,
        gid: account.gid,
        groups: account.groups.clone(),
        home: account.home.display().to_string(),
    }
}

/// `path` as the C string a launch takes.
pub fn c_path(path: &Path) -> Result<CString, LaunchError> {
    Ok(CString::new(path.as_os_str().as_bytes())?)
}
