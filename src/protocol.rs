//! The API's wire protocol (versions 1 to 5), shared by warden and its clients.
//!
//! Every message is a frame: a 9-byte header (kind: u8, id: u32 big-endian,
//! len: u32 big-endian) and `len` payload bytes. Control frames carry one
//! JSON object; data frames carry raw bytes, so output streams without any
//! encoding cost. `docs/protocol.md` is the reference; keep the two in step.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The protocol versions this build speaks, newest last. Version 2 adds
/// the `shutdown` request (and its `shutting_down` answer); version 3 the
/// `stop_shell` request (`shell_stopped`), shell's processes in status,
/// and the runtime's gate (`close_gate`, `open_gate`, `gate`); version 4
/// terminals, detached commands, `hand_keys` and `hold`; version 5 the
/// audit log read through the API (`read_audit`, `audit_end`); version 6
/// the setup (`run_setup`); version 7 the credentials the proxy adds
/// (`hand_credentials`); version 8 runs and their budgets (`begin_run`,
/// `end_run`, `card`).
pub const SUPPORTED_VERSIONS: &[u32] = &[1, 2, 3, 4, 5, 6, 7, 8, 9];
pub const HEADER_LEN: usize = 9;
/// No frame may carry more than this; a larger one closes the connection.
pub const MAX_FRAME: u32 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A JSON request (client to warden) or event (warden to client).
    Control = 1,
    Stdout = 2,
    Stderr = 3,
    /// Bytes for a command's stdin; an empty frame closes it.
    Stdin = 4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    /// The client's name for a command (0: the connection itself).
    pub id: u32,
    pub len: u32,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME} bytes")]
    TooLarge(u32),
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0] = self.kind as u8;
        out[1..5].copy_from_slice(&self.id.to_be_bytes());
        out[5..9].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    /// Pure decoder of the fixed header; the length limit is part of the
    /// format, so a peer can never make warden allocate more than it allows.
    pub fn decode(raw: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
        let kind = match raw[0] {
            1 => Kind::Control,
            2 => Kind::Stdout,
            3 => Kind::Stderr,
            4 => Kind::Stdin,
            other => return Err(FrameError::UnknownKind(other)),
        };
        let id = u32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]);
        let len = u32::from_be_bytes([raw[5], raw[6], raw[7], raw[8]]);
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        Ok(Header { kind, id, len })
    }
}

/// Client to warden.
// A request lives for one frame; boxing `Run` would buy nothing but a
// harder-to-build request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Must be the first frame of a connection.
    Hello {
        versions: Vec<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<String>,
        /// The machine's key: required on the host socket, ignored on the
        /// machine's own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
    Run(RunRequest),
    /// Signal the whole process group of the running command `target`
    /// (a frame id of this connection).
    Signal {
        target: u32,
        signal: String,
    },
    Status,
    /// Reads the network policy again now (the proxy also notices a
    /// changed file by itself, at its next connection).
    Reload,
    /// Appends an event of the runtime's own to the audit log (marked
    /// `runtime`, with the requester's uid).
    Audit {
        kind: String,
        #[serde(default)]
        fields: serde_json::Value,
    },
    /// Version 2: stop the machine, as SIGTERM would (in a VM: then power
    /// it off).
    Shutdown,
    /// Version 3: signal every process of shell, wherever it went (a new
    /// session, a double fork, kept in the background); with KILL, round
    /// after round until none is left.
    StopShell {
        #[serde(default = "kill")]
        signal: String,
    },
    /// Version 3: refuse every shell command from now on, saying
    /// `reason`, until the gate is opened again (e.g. for the rest of a
    /// reply once a tool has read from outside).
    CloseGate {
        reason: String,
    },
    /// Version 3: let shell commands run again.
    OpenGate,
    /// Version 4, the host's door only: the runtime's keys (a `.env`
    /// text), written as its `.env` and given to the main process, which
    /// may wait for them to start.
    HandKeys {
        text: String,
    },
    /// Version 7, the host's door only: the values of the credentials the
    /// proxy adds (a `.env` text), kept in warden's memory alone; the
    /// whole set, replacing any earlier one.
    HandCredentials {
        text: String,
    },
    /// Version 8: opens a run, whose provider requests count against
    /// `budget_usd` (the machine's `spend.per_run_usd` when left out).
    BeginRun {
        run: String,
        #[serde(default)]
        budget_usd: Option<f64>,
    },
    /// Version 9, the runtime's: it is ready (serving what it serves); the
    /// launcher's `up` and `--start` wait for it where the definition says
    /// `ready: "runtime"`. Said again, it is noted once.
    Ready,
    /// Version 9, the host's door only: the launcher woke the machine
    /// (started it, or thawed it), for `cause`: `port` (a connection to a
    /// published port), `job` (a job due), `start` (`--start`) or `door`
    /// (a request to its door).
    Wake {
        cause: String,
    },
    /// Version 9, the host's door only: the launcher is about to freeze
    /// the machine (`idle: "pause"`), idle for `idle_ms`.
    Pause {
        idle_ms: u64,
    },
    /// Version 9, the runtime's: its next job is due at `at_ms` (Unix ms;
    /// 0: none). The machine does not stop for being idle within five
    /// minutes of it, and `warden machine serve` starts it ahead of it.
    NextJob {
        at_ms: u64,
    },
    /// Version 8: ends an open run.
    EndRun {
        run: String,
    },
    /// Version 8: a run's card, built from the audit log.
    Card {
        run: String,
    },
    /// Version 6, the host's door only: runs `script` (a shell script, on
    /// sh's stdin) as the runtime, in its workspace, with the main
    /// process's environment; answered with `setup_ended` when it ends.
    RunSetup {
        script: String,
    },
    /// Version 4: resize the terminal of the running command `target` (a
    /// frame id of this connection).
    Resize {
        target: u32,
        rows: u16,
        cols: u16,
    },
    /// Version 4: the detached commands, running or lately ended.
    List,
    /// Version 4: follow a detached command on this frame id: what it
    /// printed while nobody was attached, then live, then its exit; stdin
    /// frames and `resize` on this id reach it.
    Attach {
        command: u64,
    },
    /// Version 4: answered with the detached command's exit, on this frame
    /// id, once it has ended.
    Wait {
        command: u64,
    },
    /// Version 4: signal a detached command's whole process group.
    SignalCommand {
        command: u64,
        signal: String,
    },
    /// Version 4: keep the machine awake until `until_ms` (Unix time in
    /// milliseconds; a time past lets go), whatever its idle stop says.
    Hold {
        until_ms: u64,
    },
    /// Version 5: the audit log's lines from `from_seq` on (the oldest
    /// kept, if it was rotated away) to the last written when this is
    /// read, as they are on disk: stdout frames on this frame id, then
    /// `audit_end`.
    ReadAudit {
        #[serde(default = "first_seq")]
        from_seq: u64,
    },
}

fn first_seq() -> u64 {
    1
}

fn kill() -> String {
    "KILL".into()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The program and its arguments (searched in PATH when it has no '/').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// A line for `/bin/sh -c`, instead of `argv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// A folder under the workspace, made if missing; absent: shell's home.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    #[serde(default, skip_serializing_if = "StdinMode::is_null")]
    pub stdin: StdinMode,
    /// Variables added to the clean environment, each named explicitly.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Leave processes the command started in its group running after it
    /// exits (they are still killed at shutdown).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_background: bool,
    /// Limits for this command; each only lowers the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::confine::policy::Limits>,
    /// Version 4: run it on a terminal of this size (its stdin, stdout and
    /// stderr; output comes as stdout frames, stdin frames are typed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
    /// Version 4: the command outlives this connection: answered with
    /// `detached`, its output kept (bounded) for whoever attaches.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detach: bool,
    /// Version 4, with `detach`: a name for it, shown by `list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// A terminal's size, in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PtySize {
    pub rows: u16,
    pub cols: u16,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    /// stdin is /dev/null.
    #[default]
    Null,
    /// stdin is fed by Stdin frames with this command's id.
    Pipe,
}

impl StdinMode {
    fn is_null(&self) -> bool {
        *self == StdinMode::Null
    }
}

/// Warden to client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    Hello {
        version: u32,
        server: String,
    },
    /// The command runs; `command` is warden's own name for it.
    Started {
        command: u64,
        pid: i32,
    },
    /// The command's last frame: it has ended and its output is drained.
    Exit(ExitReport),
    Signalled {
        target: u32,
        signal: String,
    },
    Status(Box<Status>),
    /// The network policy now in force, after a reload.
    Reloaded(ProxyState),
    /// An audit request was written, as line `seq`.
    Recorded {
        seq: u64,
    },
    /// Version 2: the answer to `shutdown`; the machine stops next.
    ShuttingDown,
    /// Version 3: the gate as it now is (the answer to `close_gate` and
    /// `open_gate`).
    Gate(GateState),
    /// Version 3: the answer to `stop_shell`: how many processes were
    /// signalled, and how many of shell's are still there.
    ShellStopped {
        signalled: usize,
        left: usize,
    },
    /// Version 4: the answer to `hand_keys`: the names of the keys now in
    /// the runtime's `.env` (never their values).
    KeysHanded {
        names: Vec<String>,
    },
    /// Version 7: the answer to `hand_credentials`: the names held now.
    CredentialsHanded {
        names: Vec<String>,
    },
    /// Version 8: the answer to `begin_run`.
    RunBegun {
        run: String,
        budget_micro_usd: u64,
    },
    /// Version 8: the answer to `end_run`: what the run spent, and how it
    /// ended (`ended`, or `budget` when it had reached its budget).
    RunEnded {
        run: String,
        spent_micro_usd: u64,
        how: String,
    },
    /// Version 8: the answer to `card`.
    Card {
        card: serde_json::Value,
    },
    /// Version 6: the answer to `run_setup`: its exit status (128+n after
    /// a death by signal n) and the last 64 KiB of its output (stdout and
    /// stderr together).
    SetupEnded {
        status: i32,
        output: String,
    },
    /// Version 4: the answer to a detached run: the command runs on,
    /// whoever is connected.
    Detached {
        command: u64,
        pid: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tag: Option<String>,
    },
    /// Version 4: the answer to `list`.
    Commands {
        commands: Vec<DetachedCommand>,
    },
    /// Version 4: the first answer to `attach`; `dropped_bytes` of its
    /// output were let go before anyone attached (the oldest first).
    Attached {
        command: u64,
        dropped_bytes: u64,
    },
    /// Version 4: the answer to `signal_command`.
    CommandSignalled {
        command: u64,
        signal: String,
    },
    /// Version 4: the answer to `resize`.
    Resized {
        target: u32,
        rows: u16,
        cols: u16,
    },
    /// Version 9: the answer to `wake` and `pause`: recorded.
    Noted,
    /// Version 9: the answer to `next_job`: the next job now due (Unix ms;
    /// 0: none).
    NextJobAt {
        at_ms: u64,
    },
    /// Version 9: the answer to `ready`: the machine has been ready since
    /// `after_ms` after warden started.
    ReadyNoted {
        after_ms: u64,
    },
    /// Version 4: the answer to `hold`: held until then (0: not held).
    Held {
        until_ms: u64,
    },
    /// Version 5: the end of a `read_audit` stream: `lines` whole lines
    /// (`bytes` bytes) were sent, the first of seq `first_seq` (none when
    /// nothing was sent), the last `last_seq`, the log's last line when
    /// the request was read.
    AuditEnd {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_seq: Option<u64>,
        last_seq: u64,
        lines: u64,
        bytes: u64,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitReport {
    /// Shell-style status: the exit code, or 128+n after a death by signal n.
    pub status: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The limit that ended the command, if one did (e.g. "timeout").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// Why the command could not start, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: f64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// False when output was still open after the drain period (a process
    /// kept in the background held the pipes) and was cut.
    pub drained: bool,
    /// Version 4: CPU time in user and kernel mode of the command and the
    /// children it waited for, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_user_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_system_ms: Option<f64>,
    /// Version 4: the largest resident set of any of them, in KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_kb: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The peer may not use this socket.
    Refused,
    HelloRequired,
    UnsupportedVersion,
    BadFrame,
    FrameTooLarge,
    BadJson,
    BadRequest,
    DuplicateId,
    UnknownId,
    ShuttingDown,
    /// A layer the policy requires does not hold: no command runs.
    NotConfined,
    /// The audit log cannot be written and the config says to refuse.
    AuditFailing,
    /// Version 3: the runtime closed the gate; the message is its reason.
    GateClosed,
    Internal,
}

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

/// A detached command, as `list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetachedCommand {
    pub command: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    pub pid: i32,
    /// When it started (Unix ms).
    pub started_ms: u64,
    /// `running` or `exited`.
    pub state: String,
    /// How it ended, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitReport>,
    /// Connections following it now.
    pub attached: usize,
    /// Output let go because nobody was attached and the buffer was full.
    pub dropped_bytes: u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_decoding_table() {
        let cases: &[([u8; 9], Result<Header, FrameError>)] = &[
            (
                [1, 0, 0, 0, 0, 0, 0, 0, 2],
                Ok(Header {
                    kind: Kind::Control,
                    id: 0,
                    len: 2,
                }),
            ),
            (
                [2, 0, 0, 1, 0, 0, 1, 0, 0],
                Ok(Header {
                    kind: Kind::Stdout,
                    id: 256,
                    len: 65536,
                }),
            ),
            (
                [4, 255, 255, 255, 255, 0, 0, 0, 0],
                Ok(Header {
                    kind: Kind::Stdin,
                    id: u32::MAX,
                    len: 0,
                }),
            ),
            (
                [3, 0, 0, 0, 7, 0, 16, 0, 0],
                Ok(Header {
                    kind: Kind::Stderr,
                    id: 7,
                    len: MAX_FRAME,
                }),
            ),
            (
                [3, 0, 0, 0, 7, 0, 16, 0, 1],
                Err(FrameError::TooLarge(MAX_FRAME + 1)),
            ),
            ([0, 0, 0, 0, 0, 0, 0, 0, 0], Err(FrameError::UnknownKind(0))),
            ([9, 0, 0, 0, 0, 0, 0, 0, 0], Err(FrameError::UnknownKind(9))),
            (
                [1, 0, 0, 0, 0, 255, 255, 255, 255],
                Err(FrameError::TooLarge(u32::MAX)),
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(&Header::decode(raw), want, "header {raw:?}");
        }
    }

    #[test]
    fn header_round_trips() {
        let h = Header {
            kind: Kind::Stderr,
            id: 0xdead_beef,
            len: 12345,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn the_examples_in_docs_protocol_md_are_what_the_code_sends() {
        let doc = include_str!("../docs/protocol.md");
        let hello = Request::Hello {
            versions: vec![1],
            client: None,
            key: None,
        };
        let run = Request::Run(RunRequest {
            argv: Some(vec!["echo".into(), "hi".into()]),
            ..Default::default()
        });
        let answer = Event::Hello {
            version: 1,
            server: "warden 0.1.0".into(),
        };
        let started = Event::Started { command: 1, pid: 9 };
        // Unframed examples, as the reference shows them.
        for json in [
            serde_json::to_string(&Request::StopShell {
                signal: "KILL".into(),
            })
            .unwrap(),
            serde_json::to_string(&Event::ShellStopped {
                signalled: 41,
                left: 0,
            })
            .unwrap(),
        ] {
            assert!(doc.contains(&json), "docs/protocol.md lacks {json}");
        }
        for json in [
            serde_json::to_string(&hello).unwrap(),
            serde_json::to_string(&run).unwrap(),
            serde_json::to_string(&answer).unwrap(),
            serde_json::to_string(&started).unwrap(),
        ] {
            let framed = format!("{:08x}  {json}", json.len());
            assert!(doc.contains(&framed), "docs/protocol.md lacks {framed}");
        }
    }

    #[test]
    fn request_parsing_table() {
        let ok: &[(&str, Request)] = &[
            (
                r#"{"type":"hello","versions":[1]}"#,
                Request::Hello {
                    versions: vec![1],
                    client: None,
                    key: None,
                },
            ),
            (r#"{"type":"status"}"#, Request::Status),
            (r#"{"type":"shutdown"}"#, Request::Shutdown),
            (
                r#"{"type":"stop_shell"}"#,
                Request::StopShell {
                    signal: "KILL".into(),
                },
            ),
            (
                r#"{"type":"stop_shell","signal":"TERM"}"#,
                Request::StopShell {
                    signal: "TERM".into(),
                },
            ),
            (
                r#"{"type":"signal","target":3,"signal":"TERM"}"#,
                Request::Signal {
                    target: 3,
                    signal: "TERM".into(),
                },
            ),
            (
                r#"{"type":"run","argv":["id","-un"],"folder":"p","stdin":"pipe"}"#,
                Request::Run(RunRequest {
                    argv: Some(vec!["id".into(), "-un".into()]),
                    folder: Some("p".into()),
                    stdin: StdinMode::Pipe,
                    ..Default::default()
                }),
            ),
        ];
        for (text, want) in ok {
            let got: Request = serde_json::from_str(text).expect(text);
            assert_eq!(&got, want, "{text}");
        }
        let bad = [
            r#"{"type":"nope"}"#,
            r#"{"versions":[1]}"#,
            r#"{"type":"hello","versions":"1"}"#,
            r#"{"type":"hello","versions":[1],"extra":true}"#,
            r#"{"type":"run","argv":["x"],"surprise":1}"#,
            r#"{"type":"run","stdin":"file"}"#,
            r#"{"type":"signal","target":-1,"signal":"TERM"}"#,
            r#"{"type":"run","timeout_ms":1e99}"#,
            r#"[]"#,
            r#"nul"#,
        ];
        for text in bad {
            assert!(
                serde_json::from_str::<Request>(text).is_err(),
                "{text} parsed"
            );
        }
    }
}
