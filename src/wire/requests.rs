//! Client to warden: the requests, the `run` request's fields, and a
//! terminal's size.

use super::limits::Limits;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    pub limits: Option<Limits>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
