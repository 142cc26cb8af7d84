//! The state warden shares between its API, its signal loop and shutdown:
//! who the users are, where things live, the gate, and whether it is
//! shutting down. The state it holds has owners beside it: the running
//! commands (`running`), the machine's activity and idle stop
//! (`activity`), its readiness, and the settings a reload takes again.
//! Its set-up steps live beside it too: the probe that proves the layers
//! (`probe`, and `firewall_layer` for the firewall and connect gate on
//! every status) and the runtime's launches (`launches`). A command's
//! life is `command`'s, which records here.
use crate::guest::accounts::layout::{self, Paths, Spec};
use crate::guest::accounts::users::Account;
use crate::guest::audit::Audit;
use crate::guest::confine::shell_space::LinksUnprotected;
use crate::guest::confine::spawner::{Spawner, SpawnerError};
use crate::guest::confine::Confinement;
use crate::guest::process::reaper::Reaper;
use crate::shared::config::MachineConfig;
use crate::wire::GateState;
use crate::wire::{MainState, Status, UserState, SUPPORTED_VERSIONS};
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub mod activity;
mod firewall_layer;
mod launches;
mod probe;
pub mod readiness;
pub mod running;

pub use launches::{c_path, identity};
use probe::OomScoreError;
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
    /// The commands running now, and the ids given since boot.
    pub commands: running::RunningCommands,
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
        let oom_order = probe::last_for_the_oom_killer();
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
            commands: Default::default(),
            main: Mutex::new(None),
            stop_requested: tokio::sync::Notify::new(),
            gate: Mutex::new((None, Instant::now())),
            activity: crate::guest::supervisor::activity::Activity::new(config_idle),
            readiness: readiness::Readiness::new(config_ready),
            keys: Default::default(),
            tags: Default::default(),
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

    /// Gives back every tag but the running commands' (once shell has no
    /// process left that a kept command started).
    pub fn free_kept_tags(&self) {
        self.tags.give_back_kept(&self.commands.tags());
    }

    /// Takes an ended command off the list; the machine was used.
    pub fn command_ended(&self, command: u64) {
        self.activity.touch();
        if self.commands.ended(command) && self.shell_space.is_ok() {
            // What the commands left in shell's IPC namespace goes now.
            self.spawner.empty_ipc(self.shell.uid);
        }
    }

    /// Signals every running command's whole process group.
    pub fn signal_commands(&self, sig: Signal) -> usize {
        self.commands
            .pids()
            .iter()
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
        let running = self.commands.listing();
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
            spent: Some(self.commands.spent()),
            activity: Some(crate::wire::ActivityState {
                idle_ms: self.activity.idle().as_millis() as u64,
                held_until_ms: self.activity.held_until_ms(),
                idle_stop_s: self.activity.idle_stop().map(|d| d.as_secs()),
                next_job_at_ms: self.activity.next_job_ms(),
                running: Some(self.commands.count()),
            }),
            ready: Some(self.readiness.state()),
            commands_started: self.commands.started_since_boot(),
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

fn user_state(account: &Account) -> UserState {
    UserState {
        name: account.name.clone(),
        uid: account.uid,
        gid: account.gid,
        groups: account.groups.clone(),
        home: account.home.display().to_string(),
    }
}
