//! Warden to client: the events, a command's exit report, the error
//! codes, and a detached command as `list` shows it.

use super::status::{GateState, ProxyState, Status};
use serde::{Deserialize, Serialize};

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
