//! What each kind of audit line carries besides `seq`, `time`, `kind`,
//! `prev` and `hash`: one struct per kind (or per shape several kinds
//! share), each field named once, as `docs/audit.md` names it. A payload
//! knows its kind, so it cannot be recorded under another.
//!
//! A field that a line has only sometimes is skipped when absent; one
//! that is always there is `null` when unknown.

use super::Event;
use crate::shared::policy::Requirement;
use crate::wire::{ErrorCode, LayerState, Limits};
use serde::Serialize;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// An audit line's fields, tied to its kind.
pub trait Payload: Serialize {
    fn event(&self) -> Event;
}

/// Ties each struct to the one kind it is recorded as.
macro_rules! kind {
    ($($payload:ident $(<$life:lifetime>)? => $event:ident),* $(,)?) => {
        $(impl $(<$life>)? Payload for $payload $(<$life>)? {
            fn event(&self) -> Event {
                Event::$event
            }
        })*
    };
}

/// A payload as the JSON object the line is made of.
pub fn fields_of<P: Payload + ?Sized>(payload: &P) -> Value {
    match serde_json::to_value(payload) {
        Ok(value) => value,
        // No payload here can fail (every map key is a string); were one
        // to, the line is still written, with its kind alone.
        Err(e) => {
            crate::say!("audit: the fields of a {} line: {e}", payload.event());
            Value::Object(Default::default())
        }
    }
}

#[derive(Serialize)]
pub struct Boot<'a> {
    pub version: &'static str,
    pub pid1: bool,
    pub pid: i32,
    pub config: &'a Path,
    pub users: [User<'a>; 2],
    pub layout_changes: &'a [String],
    pub socket: &'a Path,
    pub tcp_door: Option<SocketAddr>,
    pub policy: BootPolicy<'a>,
    pub layers: &'a [LayerState],
    pub vm: Option<BootVm<'a>>,
    pub boot_ms: f64,
    /// `[{"phase": name, "ms": ms}, ...]`, as the boot's clock says.
    pub boot_phases_ms: Value,
}

/// A user warden runs commands as (the runtime, shell).
#[derive(Serialize)]
pub struct User<'a> {
    pub name: &'a str,
    pub uid: u32,
    pub gid: u32,
    pub groups: &'a [u32],
}

impl<'a> From<&'a crate::guest::accounts::users::Account> for User<'a> {
    fn from(account: &'a crate::guest::accounts::users::Account) -> Self {
        User {
            name: &account.name,
            uid: account.uid,
            gid: account.gid,
            groups: &account.groups,
        }
    }
}

#[derive(Serialize)]
pub struct BootPolicy<'a> {
    pub dir: &'a Path,
    pub digest: &'a str,
}

#[derive(Serialize)]
pub struct BootVm<'a> {
    pub root: &'a str,
    pub modules: &'a [String],
    pub hostname: &'a str,
    pub volumes: &'a [String],
    pub vsock_port: Option<u32>,
}

#[derive(Serialize)]
pub struct Network<'a> {
    pub firewall: Firewall,
    pub firewall_via: Option<&'static str>,
    pub firewall_policy: Requirement,
    pub proxy: &'a [String],
    pub proxy_error: Option<String>,
    pub hosts_from: &'static str,
}

/// What became of the firewall: `applied`, `off`, or why not.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Firewall {
    Word(&'static str),
    Failed { error: String },
}

/// The default host list worked out, and where each host came from
/// (`net::registries::Found`).
#[derive(Serialize)]
pub struct DefaultHosts<'a, Found> {
    pub hosts: &'a [String],
    pub registries_found: &'a [Found],
}

impl<Found: Serialize> Payload for DefaultHosts<'_, Found> {
    fn event(&self) -> Event {
        Event::DefaultHosts
    }
}

/// Who opened a connection through the proxy, as far as warden can tell.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Origin {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv_sha256: Option<String>,
}

/// One connection's decision (see `net::proxy::line`).
#[derive(Serialize, Clone, Debug)]
pub struct Egress {
    pub allowed: bool,
    pub method: String,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub client: String,
    pub resolved: Vec<String>,
    pub address: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub list: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opened: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential_echo_removed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<&'static str>,
}

#[derive(Serialize, Clone, Debug)]
pub struct ProviderRequest {
    #[serde(flatten)]
    pub metered: crate::shared::spend::AuditLine,
    pub origin: Option<Origin>,
}

#[derive(Serialize, Clone, Debug)]
pub struct CredentialEchoRemoved {
    pub host: String,
    pub path: String,
    pub count: u64,
    pub origin: Option<Origin>,
}

#[derive(Serialize, Clone, Debug)]
pub struct PolicyReload {
    pub file: PathBuf,
    pub hosts_from: &'static str,
    pub hosts: Option<Vec<String>>,
    pub allow_addresses: Vec<String>,
}

#[derive(Serialize, Clone, Debug)]
pub struct PolicyReloadFailed {
    pub file: PathBuf,
    pub error: String,
    pub kept: &'static str,
}

/// A line of the egress proxy's.
#[derive(Serialize, Clone, Debug)]
#[serde(untagged)]
pub enum ProxyLine {
    Egress(Egress),
    ProviderRequest(ProviderRequest),
    CredentialEchoRemoved(CredentialEchoRemoved),
    PolicyReload(PolicyReload),
    PolicyReloadFailed(PolicyReloadFailed),
}

impl Payload for ProxyLine {
    fn event(&self) -> Event {
        match self {
            ProxyLine::Egress(_) => Event::Egress,
            ProxyLine::ProviderRequest(_) => Event::ProviderRequest,
            ProxyLine::CredentialEchoRemoved(_) => Event::CredentialEchoRemoved,
            ProxyLine::PolicyReload(_) => Event::PolicyReload,
            ProxyLine::PolicyReloadFailed(_) => Event::PolicyReloadFailed,
        }
    }
}

/// A connect(2) or listen(2) that warden's connect gate refused.
#[derive(Serialize)]
pub struct GateRefusal {
    #[serde(skip)]
    pub listen: bool,
    pub pid: u32,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv_sha256: Option<String>,
}

impl Payload for GateRefusal {
    fn event(&self) -> Event {
        match self.listen {
            true => Event::ListenRefused,
            false => Event::ConnectRefused,
        }
    }
}

#[derive(Serialize)]
pub struct SettingsReload {
    pub limits: Limits,
    pub idle_stop_s: Option<u64>,
}

#[derive(Serialize)]
pub struct IdleStop {
    pub idle_ms: u64,
    pub idle_stop_s: u64,
}

#[derive(Serialize)]
pub struct Ready<'a> {
    pub by: &'a str,
    pub after_ms: u64,
    pub wanted: Option<String>,
}

#[derive(Serialize)]
pub struct Wake<'a> {
    pub cause: &'a str,
}

#[derive(Serialize)]
pub struct Pause {
    pub idle_ms: u64,
}

#[derive(Serialize)]
pub struct NextJob {
    pub at_ms: u64,
    pub requester_uid: u32,
}

#[derive(Serialize)]
pub struct Hold {
    pub until_ms: u64,
    pub requester_uid: u32,
}

#[derive(Serialize)]
pub struct MainStart<'a> {
    pub pid: i32,
    pub argv: &'a [String],
}

#[derive(Serialize)]
pub struct MainFailed<'a> {
    pub argv: &'a [String],
    pub error: String,
}

#[derive(Serialize)]
pub struct MainExit {
    pub status: i32,
    /// Whether it is started again (not said when warden is stopping).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart: Option<bool>,
}

#[derive(Serialize)]
pub struct CommandStart<'a> {
    pub command: u64,
    pub pid: i32,
    pub requester_uid: u32,
    pub argv: &'a [String],
    pub folder: Option<String>,
    pub limits: &'a Limits,
    pub keep_background: bool,
    pub detached: bool,
    pub tag: Option<String>,
    pub terminal: bool,
}

#[derive(Serialize)]
pub struct CommandEnd<'a> {
    pub command: u64,
    pub status: i32,
    pub code: Option<i32>,
    pub signal: &'a Option<String>,
    pub limit: &'a Option<String>,
    pub duration_ms: f64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub drained: bool,
    pub cpu_user_ms: Option<f64>,
    pub cpu_system_ms: Option<f64>,
    pub max_rss_kb: Option<u64>,
    pub left_behind_killed: usize,
    pub left_behind_surviving: usize,
}

#[derive(Serialize)]
pub struct CommandFailed<'a> {
    pub requester_uid: u32,
    pub argv: &'a [String],
    pub folder: Option<String>,
    pub status: i32,
    pub error: &'a str,
}

#[derive(Serialize)]
pub struct CommandRefused<'a> {
    pub requester_uid: u32,
    pub reason: &'a str,
}

/// A peer turned away at a door: before a word was read (its uid and
/// pid), or at the host's door for its key (with the refusals not
/// written while one was).
#[derive(Serialize)]
pub struct ConnectionRefused<'a> {
    pub door: &'a str,
    pub via: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    pub reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub also_refused_unaudited: Option<u64>,
}

#[derive(Serialize)]
pub struct Connection<'a> {
    pub door: &'a str,
    pub via: &'a str,
    pub key: &'a str,
    pub peer_uid: u32,
}

#[derive(Serialize)]
pub struct RequestRefused<'a> {
    pub requester_uid: u32,
    pub id: u32,
    pub code: ErrorCode,
    pub message: &'a str,
}

/// The runtime's gate closed (with its reason) or opened.
#[derive(Serialize)]
pub struct GateChanged<'a> {
    #[serde(skip)]
    pub closed: bool,
    pub requester_uid: u32,
    pub reason: &'a Option<String>,
}

impl Payload for GateChanged<'_> {
    fn event(&self) -> Event {
        match self.closed {
            true => Event::GateClosed,
            false => Event::GateOpened,
        }
    }
}

/// Names handed over: the runtime's keys, or credentials (with the file
/// they came from, when read at boot).
#[derive(Serialize)]
pub struct KeysHanded<'a> {
    pub names: &'a [String],
}

#[derive(Serialize)]
pub struct CredentialsHanded<'a> {
    pub names: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<&'a Path>,
}

/// Keys or credentials that could not be handed over.
#[derive(Serialize)]
pub struct KeysFailed<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_from: Option<&'a Path>,
    pub error: String,
}

#[derive(Serialize)]
pub struct RunBegin<'a> {
    pub run: &'a str,
    pub budget_micro_usd: u64,
    pub requester_uid: u32,
}

#[derive(Serialize)]
pub struct RunEnd<'a> {
    pub run: &'a str,
    pub how: &'static str,
    pub budget_micro_usd: u64,
    pub spent_micro_usd: u64,
    pub requests: u64,
    /// Who ended it (none when the machine's stop did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requester_uid: Option<u32>,
}

#[derive(Serialize)]
pub struct Setup {
    pub status: i32,
    pub script_sha256: String,
    pub output_bytes: usize,
    pub duration_ms: u64,
}

/// An action on a detached command (attach, wait, signal).
#[derive(Serialize)]
pub struct OnDetached<'a> {
    #[serde(skip)]
    pub kind: DetachedAction,
    pub command: u64,
    pub requester_uid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<&'a str>,
}

#[derive(Clone, Copy)]
pub enum DetachedAction {
    Attached,
    Waited,
    Signalled,
}

impl Payload for OnDetached<'_> {
    fn event(&self) -> Event {
        match self.kind {
            DetachedAction::Attached => Event::CommandAttached,
            DetachedAction::Waited => Event::CommandWaited,
            DetachedAction::Signalled => Event::CommandSignalled,
        }
    }
}

#[derive(Serialize)]
pub struct ShellStopped {
    pub requester_uid: u32,
    pub signal: &'static str,
    pub signalled: usize,
    pub left: usize,
}

#[derive(Serialize)]
pub struct Signal<'a> {
    pub signal: &'static str,
    pub action: &'a str,
}

#[derive(Serialize)]
pub struct ShutdownRequested<'a> {
    pub requester_uid: u32,
    pub door: &'a str,
}

#[derive(Serialize)]
pub struct Stopped {
    pub terminated: usize,
    pub killed_after_grace: usize,
}

#[derive(Serialize)]
pub struct Shutdown {
    pub status: i32,
}

/// An event of the runtime's own, its fields as it gave them.
#[derive(Serialize)]
pub struct Runtime<'a> {
    pub from_uid: u32,
    pub event: &'a str,
    pub fields: Value,
}

/// Refusals counted and not written whole (see `throttle`).
#[derive(Serialize)]
pub struct Suppressed<'a> {
    pub of: &'a str,
    pub source: &'a str,
    pub count: u64,
    pub window_ms: u64,
    pub samples: Vec<Sample<'a>>,
    pub unsampled: u64,
}

/// One thing a count counted, and how often.
#[derive(Serialize)]
pub struct Sample<'a> {
    pub what: &'a str,
    pub count: u64,
}

#[derive(Serialize)]
pub struct RotatedAway {
    pub first: u64,
    pub last: u64,
}

#[derive(Serialize)]
pub struct AuditRecovered {
    pub after: String,
}

kind! {
    Boot<'a> => Boot,
    Network<'a> => Network,
    SettingsReload => SettingsReload,
    IdleStop => IdleStop,
    Ready<'a> => Ready,
    Wake<'a> => Wake,
    Pause => Pause,
    NextJob => NextJob,
    Hold => Hold,
    MainStart<'a> => MainStart,
    MainFailed<'a> => MainFailed,
    MainExit => MainExit,
    CommandStart<'a> => CommandStart,
    CommandEnd<'a> => CommandEnd,
    CommandFailed<'a> => CommandFailed,
    CommandRefused<'a> => CommandRefused,
    ConnectionRefused<'a> => ConnectionRefused,
    Connection<'a> => Connection,
    RequestRefused<'a> => RequestRefused,
    KeysHanded<'a> => KeysHanded,
    CredentialsHanded<'a> => CredentialsHanded,
    KeysFailed<'a> => KeysFailed,
    RunBegin<'a> => RunBegin,
    RunEnd<'a> => RunEnd,
    Setup => Setup,
    ShellStopped => ShellStopped,
    Signal<'a> => Signal,
    ShutdownRequested<'a> => ShutdownRequested,
    Stopped => Stopped,
    Shutdown => Shutdown,
    Runtime<'a> => Runtime,
    Suppressed<'a> => Suppressed,
    RotatedAway => RotatedAway,
    AuditRecovered => AuditRecovered,
}

/// Any fields under any kind, as given: for tests that make up a log
/// (warden's own lines are the structs above, never this).
#[doc(hidden)]
pub struct Raw(pub Event, pub Value);

impl Serialize for Raw {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.1.serialize(s)
    }
}

impl Payload for Raw {
    fn event(&self) -> Event {
        self.0
    }
}

#[cfg(test)]
#[path = "payload_tests.rs"]
mod tests;
