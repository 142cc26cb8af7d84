//! The command line's error: what a `warden` command could not do, printed
//! as `warden: {error}` before it exits with 125. Each variant is one
//! thing that failed, with the launcher's, the client's or the system's
//! error inside; its words are the ones the command line has always
//! printed.

use std::path::PathBuf;
use warden::host::LaunchError;
use warden::wire::client::{ClientError, Message};
use warden::wire::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A step of the launcher (`warden machine ...`).
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// Talking to a warden already connected.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Connecting to a machine's socket.
    #[error("{}: {source}", path.display())]
    Socket { path: PathBuf, source: ClientError },
    /// Connecting to a warden's TCP door.
    #[error("{address}: {source}")]
    Door {
        address: String,
        source: ClientError,
    },
    /// Sending a request on a connection.
    #[error("{0}")]
    Send(#[source] std::io::Error),
    /// warden refused what was asked.
    #[error("{code:?}: {message}")]
    Refused { code: ErrorCode, message: String },
    #[error("unexpected answer: {0:?}")]
    Unexpected(Box<Message>),
    #[error("--env {0:?}: expected NAME=VALUE")]
    Env(String),
    #[error("-t: this is not run on a terminal")]
    NoTerminal,
    #[error("stdin is not a terminal: {0}")]
    NotATerminal(#[source] nix::Error),
    #[error("raw mode: {0}")]
    RawMode(#[source] nix::Error),
    #[error("name a machine, or --connect HOST:PORT")]
    NoMachine,
    #[error("--connect needs the machine's key: --key-file FILE (or WARDEN_KEY_FILE)")]
    NoKey,
    #[error("--start: only a machine of this host can be started")]
    StartNeedsId,
    #[error("--anchor goes with --connect: a machine of this host keeps its own")]
    AnchorNeedsConnect,
    /// A VM's relay, as it words what failed.
    #[error("{0}")]
    Relay(#[source] warden::host::vm::relay::RelayError),
    /// A run's card, as the card's builder words what failed.
    #[error("{0}")]
    Card(#[source] warden::shared::spend::card::CardError),
    #[error("no run has begun on {0} (its audit log has no run_begin line)")]
    NoRun(String),
    #[error("read the audit log through the API: {0}")]
    ReadAudit(#[source] ClientError),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A file the command reads.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Reading or writing what is already open (a file, stdout, a
    /// temporary folder).
    #[error("{0}")]
    Io(#[source] std::io::Error),
    /// `warden connect`: a host that cannot be asked for.
    #[error("{0:?}: not a host name or address")]
    NotAHost(String),
    #[error("the proxy at {proxy}: {source}")]
    Proxy {
        proxy: String,
        source: std::io::Error,
    },
    #[error("the proxy's answer is not HTTP")]
    NotHttp,
    #[error("refused by the proxy ({status}){}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    ProxyRefused { status: u16, reason: Option<String> },
    #[error("the proxy's answer head is too long")]
    HeadTooLong,
    #[error("the proxy closed the connection without an answer")]
    ProxyClosed,
    #[error("the proxy: {0}")]
    ProxyRead(#[source] std::io::Error),
}
