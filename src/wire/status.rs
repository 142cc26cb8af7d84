//! What `status` reports: warden, its users and layout, what runs, each
//! confinement layer (`LayerState`, which the guest's confinement and
//! network build and the host reads), the gate, the machine's activity and
//! readiness, and the egress proxy.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub protocol: u32,
    pub pid1: bool,
    pub uptime_ms: u64,
    /// warden's own boot: from its first instruction to the API served,
    /// with every layer applied and proven.
    #[serde(default)]
    pub boot_ms: f64,
    pub users: Vec<UserState>,
    pub layout: Vec<PathState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main: Option<MainState>,
    pub running: Vec<RunningCommand>,
    /// Version 3: every process of shell now (at most 64 listed;
    /// `shell_process_count` is whole), the ones commands left behind
    /// included. Absent on older connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_processes: Option<Vec<ShellProcess>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_process_count: Option<usize>,
    /// Version 3: the runtime's gate for shell commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateState>,
    /// Version 4: when the machine was last used, and its idle stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<ActivityState>,
    /// Version 4: what the commands that ended have spent, all together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<SpentTotal>,
    /// Version 9: whether the machine is ready, and what says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadyState>,
    pub commands_started: u64,
    pub audit_log: String,
    /// Each confinement layer of shell commands, as the last probe found it.
    pub layers: Vec<LayerState>,
    /// Why commands are refused, when a required layer does not hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusing: Option<String>,
    /// Why the audit log cannot be written now, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_failing: Option<String>,
    /// The egress proxy, when it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyState>,
}

/// Whether the machine is ready (version 9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyState {
    /// What the machine's definition waits for: `runtime` (the runtime
    /// says `ready`) or `port N` (its port N accepts a connection); absent:
    /// nothing, the machine is ready once warden answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted: Option<String>,
    /// Since when it is ready, in ms after warden started; absent: not yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
    /// What made it ready: `runtime` or `port N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl ReadyState {
    /// Whether whoever waits for the machine may stop waiting.
    pub fn is_ready(&self) -> bool {
        self.wanted.is_none() || self.after_ms.is_some()
    }
}

/// The machine's commands' spending, summed since boot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpentTotal {
    pub commands: u64,
    pub wall_ms: f64,
    pub cpu_user_ms: f64,
    pub cpu_system_ms: f64,
    /// The largest resident set any one command reached, in KiB.
    pub max_rss_kb: u64,
}

/// How long the machine has been idle, what holds it, and when it stops.
#[derive(Default, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityState {
    /// Since the last request or command's end.
    pub idle_ms: u64,
    /// The runtime's hold, when one is in force (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until_ms: Option<u64>,
    /// The machine stops itself after this long idle; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_stop_s: Option<u64>,
    /// Version 9: the runtime's next job (Unix ms), when it said one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_job_at_ms: Option<u64>,
    /// Version 9: commands running now (attached or detached): a machine
    /// running one is not idle, whatever `idle_ms` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<usize>,
}

/// Whether shell commands may run, as the runtime last said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateState {
    pub closed: bool,
    /// Why it is closed, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How long it has been in this state.
    pub since_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShellProcess {
    pub pid: i32,
    /// Its name (comm), control characters escaped.
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyState {
    /// Where it listens (loopback only).
    pub listening: Vec<String>,
    /// "network.json" or "default".
    pub hosts_from: String,
    pub hosts: Vec<String>,
    pub allow_addresses: Vec<String>,
    /// Connections carried and refused since boot.
    pub carried: u64,
    pub refused: u64,
    /// With `runtime_hosts`: the runtime's own list, and its traffic
    /// through the proxy by host since boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_hosts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_traffic: Option<Vec<HostTraffic>>,
    /// The hosts the proxy opens (credentials, rules), and its authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened: Option<Box<OpenedState>>,
}

/// What the proxy opens, and with what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenedState {
    /// The SHA-256 of the machine's authority's certificate.
    pub ca_sha256: String,
    /// The bundle that makes tools trust it, or why there is none.
    pub trust: Result<String, String>,
    /// Why that bundle is beside the system bundle rather than mounted
    /// over it (then only tools that read the variables trust it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_beside: Option<String>,
    pub hosts: Vec<String>,
    pub credentials: Vec<CredentialState>,
    /// Whether warden's memory (the values, the authority's key) could be
    /// dumped or read through /proc: false, as warden keeps it.
    pub memory_dumpable: bool,
    /// With providers (version 8): the open runs and the day's spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<SpendState>,
}

/// What provider requests have spent, by warden's ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendState {
    pub runs: Vec<RunState>,
    pub day_spent_micro_usd: u64,
    pub day_budget_micro_usd: u64,
}

/// An open run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    pub run: String,
    pub budget_micro_usd: u64,
    pub spent_micro_usd: u64,
    pub requests: u64,
}

/// One credential the proxy adds: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialState {
    pub host: String,
    pub key: String,
    pub header: String,
    #[serde(rename = "for")]
    pub holders: Vec<String>,
    /// Whether the owner handed its value over.
    pub handed: bool,
    /// Requests that got it since boot.
    pub requests: u64,
}

/// What the runtime moved through the proxy to one host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostTraffic {
    pub host: String,
    /// Connections carried, and refused.
    pub connections: u64,
    pub refused: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// The carried connections' time, added up.
    pub duration_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerState {
    pub layer: String,
    /// Required by the policy: commands are refused while it does not hold.
    pub required: bool,
    pub holds: bool,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserState {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub home: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathState {
    pub path: String,
    /// What it must be, e.g. "dir 0700 runtime:runtime".
    pub expected: String,
    /// What it is now, measured when the status was asked for.
    pub found: String,
    pub ok: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MainState {
    pub pid: i32,
    pub argv: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningCommand {
    pub command: u64,
    pub pid: i32,
    pub argv: Vec<String>,
    pub folder: Option<String>,
    pub requester_uid: u32,
    pub running_ms: u64,
}
