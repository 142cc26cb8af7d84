//! The machine definition: the JSON file from which `warden machine ...`
//! makes a container (see `docs/machine-definition.md` and
//! `machine/definition.schema.json`). The parser is pure: it takes the
//! file's path (to name it in errors and to resolve relative paths against
//! its folder) and its text, and never touches the filesystem. A broken
//! definition is refused with one line naming the file, the field and the
//! problem, for example `demo.json: lend[1].at: /etc/x shadows a system
//! path (/etc)`.
//!
//! Beside it in `definition/`: the fields that stand alone (`fields.rs`),
//! paths and lends (`paths.rs`), the opened hosts, readiness and sleep,
//! and the strict JSON reader (`strict.rs`).

mod fields;
mod opened;
mod paths;
mod ready;
mod sleep;
mod strict;

use super::agent::{self, KeepId, Port, Restart, Size};
use crate::shared::policy::{Limits, Requirement};
pub use opened::Opened;
#[cfg(test)]
use paths::LEND_FIELDS;
pub use ready::Ready;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
pub use sleep::{serve_fits, Idle, Sleep};
use std::collections::BTreeMap;
use std::io::Read;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use strict::Strict;

/// The largest definition file, in bytes.
pub const MAX_BYTES: usize = 1 << 20;

/// The most names `keys` may hold.
pub const MAX_KEYS: usize = 64;

/// resolv.conf holds at most three name servers.
pub const MAX_DNS: usize = 3;

/// The longest idle time a machine may be given before it stops itself:
/// a week.
pub const MAX_IDLE_MINUTES: f64 = 7.0 * 24.0 * 60.0;

/// The variables warden sets itself; any name ending in `_proxy` (in any
/// case) is warden's too.
const RESERVED_NAMES: [&str; 5] = ["PATH", "HOME", "USER", "LOGNAME", "LANG"];

/// The top-level fields, in the order they are checked.
const FIELDS: [&str; 35] = [
    "id",
    "image",
    "dockerfile",
    "lend",
    "env",
    "keys",
    "hosts",
    "runtime_hosts",
    "setup",
    "workspace",
    "limits",
    "network",
    "keep_id",
    "firewall",
    "dns",
    "allow_addresses",
    "credentials",
    "rules",
    "upstream_ca",
    "providers",
    "spend",
    "kind",
    "command",
    "restart",
    "ports",
    "requires",
    "idle_stop_minutes",
    "ready",
    "ready_port",
    "ready_timeout_s",
    "serve",
    "idle",
    "cpus",
    "memory",
    "pids",
];

/// Each limit's least value (as in `policy/limits.schema.json`).
const LIMIT_MINIMUMS: [(&str, u64); 7] = [
    ("timeout_ms", 1),
    ("cpu_seconds", 1),
    ("address_space_bytes", 1 << 20),
    ("processes", 1),
    ("output_bytes", 1),
    ("file_size_bytes", 1),
    ("open_files", 16),
];

/// One machine, as its definition file describes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Definition {
    /// Names the container and its volumes: `[a-z0-9][a-z0-9-]{0,30}`.
    pub id: String,
    /// Where the machine's image comes from.
    pub source: Source,
    /// Host folders mounted into the machine.
    pub lend: Vec<Lend>,
    /// Variables set in the machine's environment.
    pub env: BTreeMap<String, String>,
    /// Names of secrets the launcher hands the runtime (values are never
    /// in the definition).
    pub keys: Vec<String>,
    /// The hosts the egress proxy may reach; None means warden's default
    /// list, a list replaces it whole.
    pub hosts: Option<Vec<String>>,
    /// The hosts the runtime may reach, through the proxy only; None: the
    /// runtime is not limited.
    pub runtime_hosts: Option<Vec<String>>,
    /// A script run once when the machine is made (absolute).
    pub setup: Option<PathBuf>,
    /// Where the agent's workspace lives.
    pub workspace: Workspace,
    /// Upper bounds for every command; a field left out is unlimited here.
    pub limits: Limits,
    /// The network the machine is on.
    pub network: Network,
    /// Rootless only: which user the owner's host uid is inside, so what
    /// that user writes in a lent folder belongs to the owner on the host.
    pub keep_id: KeepId,
    /// What follows when warden's firewall cannot hold (network.json's
    /// `firewall`): None leaves warden's default (required).
    pub firewall: Option<Requirement>,
    /// Name servers for the machine's resolv.conf (the proxy resolves with
    /// them); empty leaves the engine's choice.
    pub dns: Vec<IpAddr>,
    /// Address blocks the proxy may connect to although they are private
    /// (network.json's `allow_addresses`), as written.
    pub allow_addresses: Vec<String>,
    /// Hosts warden's proxy opens: credentials it adds (their values
    /// handed to warden alone), rules by method and path.
    pub opened: Opened,
    /// A container (the default) or a micro-VM.
    pub kind: Kind,
    /// The machine's main process, run as `runtime`; None runs the image's
    /// own (an image built for warden), or none (warden serves alone).
    pub command: Option<Vec<String>>,
    /// What the engine does when the main process ends.
    pub restart: Restart,
    /// The runtime's server ports, published on the host's 127.0.0.1.
    pub ports: Vec<Port>,
    /// Commands the image must hold (looked up on warden's PATH at `up`).
    pub requires: Vec<String>,
    /// Minutes with no request, no command and no hold after which warden
    /// stops the machine; None never.
    pub idle_stop_minutes: Option<f64>,
    /// The machine's CPUs, memory and processes (None: the defaults).
    pub size: Size,
    /// What `up` and `--start` wait for before they return.
    pub ready: Ready,
    /// How it sleeps and wakes.
    pub sleep: Sleep,
}

/// What the machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A container: it shares the host's kernel.
    #[default]
    Container,
    /// A micro-VM under QEMU, warden its PID 1: its own kernel.
    Vm,
}

/// The network a machine is on. Shell reaches it only through warden's
/// egress proxy, whichever it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Loopback only: nothing leaves the machine (the default).
    None,
    /// The engine's own private network (a bridge, or slirp4netns/pasta
    /// rootless).
    Private,
    /// The host's network. Refused rootful (warden's firewall would be the
    /// host's); rootless, warden cannot hold its firewall there and says so.
    Host,
    /// A network namespace made beforehand (e.g. `ip netns add`), by path.
    Namespace(PathBuf),
}

/// The machine's image: a reference to pull or use, or a Dockerfile to build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Image(String),
    /// Absolute; resolved against the definition's folder when written
    /// relative.
    Dockerfile(PathBuf),
}

/// A host folder mounted into the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lend {
    /// The folder on the host (absolute).
    pub host: PathBuf,
    /// Where it appears in the machine (absolute, normalized, shadowing
    /// no system path and no other lend).
    pub at: PathBuf,
    pub mode: LendMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LendMode {
    Read,
    Write,
}

/// Where the agent's workspace lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workspace {
    /// A podman volume of its own (`<prefix>-<id>-work`).
    Volume,
    /// A folder of the host (absolute).
    Folder(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: larger than {MAX_BYTES} bytes, the most a definition may hold")]
    TooLarge { path: PathBuf },
    /// Not JSON, a key given twice, or not an object.
    #[error("{path}: JSON: {problem}")]
    Syntax { path: PathBuf, problem: String },
    #[error("{path}: {field}: {problem}")]
    Invalid {
        path: PathBuf,
        field: String,
        problem: String,
    },
}

impl Definition {
    /// Pure: `path` names the file in errors; its folder resolves relative
    /// paths (so relative `dockerfile` and `setup` need an absolute `path`).
    pub fn parse(path: &Path, text: &str) -> Result<Definition, DefinitionError> {
        if text.len() > MAX_BYTES {
            return Err(DefinitionError::TooLarge { path: path.into() });
        }
        let syntax = |problem: String| DefinitionError::Syntax {
            path: path.into(),
            problem,
        };
        let Strict(value) = serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?;
        let Value::Object(object) = value else {
            return Err(syntax("must be an object".into()));
        };
        Parser { path }.definition(object)
    }

    /// Reads and parses the file (at most `MAX_BYTES` of it are read); a
    /// relative `path` is made absolute against the current folder first.
    pub fn load(path: &Path) -> Result<Definition, DefinitionError> {
        let read = |source| DefinitionError::Read {
            path: path.into(),
            source,
        };
        let absolute = std::path::absolute(path).map_err(read)?;
        let file = std::fs::File::open(&absolute).map_err(read)?;
        let mut bytes = Vec::new();
        file.take(MAX_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        // The size first: a cut at the limit may split a character.
        if bytes.len() > MAX_BYTES {
            return Err(DefinitionError::TooLarge { path: absolute });
        }
        let text = String::from_utf8(bytes)
            .map_err(|e| read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        Definition::parse(&absolute, &text)
    }

    /// The container's name: `<prefix>-<id>`.
    pub fn container(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.id)
    }

    /// `idle_stop_minutes` in whole seconds (one at least).
    pub fn idle_stop_s(&self) -> Option<u64> {
        self.idle_stop_minutes
            .map(|m| (m * 60.0).round().max(1.0) as u64)
    }

    /// The volume of the runtime's data: `<prefix>-<id>-data`.
    pub fn data_volume(&self, prefix: &str) -> String {
        format!("{prefix}-{}-data", self.id)
    }

    /// The workspace's volume (when `workspace` is "volume"):
    /// `<prefix>-<id>-work`.
    pub fn work_volume(&self, prefix: &str) -> String {
        format!("{prefix}-{}-work", self.id)
    }
}

/// The agent's fields, checked.
struct AgentFields {
    command: Option<Vec<String>>,
    restart: Restart,
    ports: Vec<Port>,
    requires: Vec<String>,
    idle_stop_minutes: Option<f64>,
    size: Size,
}

/// Checks one definition's fields, naming the file in every error.
struct Parser<'a> {
    path: &'a Path,
}

impl Parser<'_> {
    fn invalid(&self, field: impl Into<String>, problem: impl Into<String>) -> DefinitionError {
        DefinitionError::Invalid {
            path: self.path.into(),
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// Removes `key` from `object` and converts it; None when absent.
    fn take<T: DeserializeOwned>(
        &self,
        object: &mut Map<String, Value>,
        key: &str,
        field: &str,
    ) -> Result<Option<T>, DefinitionError> {
        object
            .remove(key)
            .map(|v| serde_json::from_value(v).map_err(|e| self.invalid(field, e.to_string())))
            .transpose()
    }

    /// Refuses any key of `object` not in `known`; `prefix` names the object.
    fn known_only(
        &self,
        object: &Map<String, Value>,
        known: &[&str],
        prefix: &str,
    ) -> Result<(), DefinitionError> {
        match object.keys().find(|k| !known.contains(&k.as_str())) {
            Some(unknown) => Err(self.invalid(
                format!("{prefix}{unknown:?}"),
                format!("unknown field; the fields are {}", known.join(", ")),
            )),
            None => Ok(()),
        }
    }

    fn definition(&self, mut object: Map<String, Value>) -> Result<Definition, DefinitionError> {
        self.known_only(&object, &FIELDS, "")?;
        // In the order of the fields' errors: the first one wrong is said.
        let id = self.id(&mut object)?;
        let source = self.source(&mut object)?;
        let lends: Vec<Value> = self.take(&mut object, "lend", "lend")?.unwrap_or_default();
        let lend = self.lends(lends)?;
        let (env, keys) = self.env_and_keys(&mut object)?;
        let hosts = self.host_list(&mut object, "hosts")?;
        let runtime_hosts = self.host_list(&mut object, "runtime_hosts")?;
        let setup: Option<String> = self.take(&mut object, "setup", "setup")?.flatten();
        let setup = setup.map(|s| self.resolve("setup", &s)).transpose()?;
        let workspace = self.workspace(&mut object)?;
        let limits: Limits = self
            .take(&mut object, "limits", "limits")?
            .unwrap_or_default();
        self.limits(&limits)?;
        let network = self.network(&mut object)?;
        let keep_id: Value = self
            .take(&mut object, "keep_id", "keep_id")?
            .unwrap_or(Value::Null);
        let keep_id = KeepId::parse(&keep_id).map_err(|e| self.invalid("keep_id", e))?;
        let firewall = self.firewall(&mut object)?;
        let dns: Vec<IpAddr> = self.take(&mut object, "dns", "dns")?.unwrap_or_default();
        if dns.len() > MAX_DNS {
            return Err(self.invalid("dns", format!("{} servers, at most {MAX_DNS}", dns.len())));
        }
        let kind: Kind = self.take(&mut object, "kind", "kind")?.unwrap_or_default();
        let allow_addresses = self.allow_addresses(&mut object)?;
        let opened = self.opened(&mut object)?;
        let ready = self.ready(&mut object)?;
        let agent = self.agent(&mut object, &network, &lend, keep_id, kind)?;
        let sleep = self.sleep(
            &mut object,
            !agent.ports.is_empty(),
            agent.idle_stop_minutes,
            kind,
        )?;
        Ok(Definition {
            command: agent.command,
            restart: agent.restart,
            ports: agent.ports,
            requires: agent.requires,
            idle_stop_minutes: agent.idle_stop_minutes,
            size: agent.size,
            id,
            source,
            lend,
            env,
            keys,
            hosts,
            runtime_hosts,
            setup,
            workspace,
            limits,
            network,
            keep_id,
            firewall,
            dns,
            allow_addresses,
            opened,
            kind,
            ready,
            sleep,
        })
    }

    /// The fields of the agent that lives in the machine (`agent.rs`), and
    /// how they bear on the network, the lends and keep-id.
    fn agent(
        &self,
        object: &mut Map<String, Value>,
        network: &Network,
        lend: &[Lend],
        keep_id: KeepId,
        kind: Kind,
    ) -> Result<AgentFields, DefinitionError> {
        let pair = |(field, problem): (String, String)| self.invalid(field, problem);
        let command: Option<Vec<String>> = self.take(object, "command", "command")?.flatten();
        if let Some(argv) = &command {
            agent::command(argv).map_err(|e| self.invalid("command", e))?;
        }
        let restart: Restart = self.take(object, "restart", "restart")?.unwrap_or_default();
        let ports: Vec<Value> = self.take(object, "ports", "ports")?.unwrap_or_default();
        let ports = agent::ports(ports).map_err(pair)?;
        // A VM publishes over its vsock, whatever its network.
        if !ports.is_empty() && *network != Network::Private && kind == Kind::Container {
            return Err(self.invalid(
                "ports",
                "published from the engine's private network: needs \"network\": \"private\" (or \"kind\": \"vm\")",
            ));
        }
        let requires: Vec<String> = self
            .take(object, "requires", "requires")?
            .unwrap_or_default();
        agent::requires(&requires).map_err(pair)?;
        let idle_stop_minutes = self.idle_stop(object, restart)?;
        let routines_written = lend
            .iter()
            .any(|l| l.at == Path::new(agent::ROUTINES) && l.mode == LendMode::Write);
        if routines_written && keep_id == KeepId::Shell {
            return Err(self.invalid(
                "keep_id",
                "\"shell\" would make the owner's routines lent for writing shell's: use \"runtime\", or lend them to read",
            ));
        }
        let size = self.size(object)?;
        Ok(AgentFields {
            command,
            restart,
            ports,
            requires,
            idle_stop_minutes,
            size,
        })
    }

    /// The agent's `idle_stop_minutes`: within its bounds, and not with a
    /// restart that would undo the stop.
    fn idle_stop(
        &self,
        object: &mut Map<String, Value>,
        restart: Restart,
    ) -> Result<Option<f64>, DefinitionError> {
        let idle_stop_minutes: Option<f64> = self
            .take(object, "idle_stop_minutes", "idle_stop_minutes")?
            .flatten();
        match idle_stop_minutes {
            // A second at least (0.1 is six seconds), a week at most.
            Some(m) if !(1.0 / 60.0..=MAX_IDLE_MINUTES).contains(&m) => {
                return Err(self.invalid(
                    "idle_stop_minutes",
                    format!(
                        "{m} is not between one second (0.017) and a week ({MAX_IDLE_MINUTES})"
                    ),
                ))
            }
            Some(_) if restart == Restart::Always => {
                return Err(self.invalid(
                    "idle_stop_minutes",
                    "with \"restart\": \"always\" the engine would start the machine again at once",
                ))
            }
            _ => {}
        }
        Ok(idle_stop_minutes)
    }

    /// The agent's size: `cpus`, `memory` and `pids`, each within bounds.
    fn size(&self, object: &mut Map<String, Value>) -> Result<Size, DefinitionError> {
        let cpus: Option<f64> = self.take(object, "cpus", "cpus")?.flatten();
        if let Some(c) = cpus.filter(|c| !(0.01..=1024.0).contains(c)) {
            return Err(self.invalid("cpus", format!("{c} is not between 0.01 and 1024")));
        }
        let memory: Option<Value> = self.take(object, "memory", "memory")?.flatten();
        let memory = match memory {
            None => None,
            Some(Value::String(text)) => {
                Some(agent::memory(&text).map_err(|e| self.invalid("memory", e))?)
            }
            Some(Value::Number(n)) => {
                Some(agent::memory(&n.to_string()).map_err(|e| self.invalid("memory", e))?)
            }
            Some(other) => {
                return Err(
                    self.invalid("memory", format!("{other} is not a size such as \"512m\""))
                )
            }
        };
        let pids: Option<u64> = self.take(object, "pids", "pids")?.flatten();
        if let Some(p) = pids.filter(|p| *p < 16) {
            return Err(self.invalid("pids", format!("{p} is less than the least, 16")));
        }
        Ok(Size { cpus, memory, pids })
    }

    fn image(&self, image: String) -> Result<String, DefinitionError> {
        let problem = if image.is_empty() {
            "empty"
        } else if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            "holds whitespace or a control character"
        } else if image.starts_with('-') {
            "must not begin with '-'"
        } else {
            return Ok(image);
        };
        Err(self.invalid("image", format!("{image:?}: {problem}")))
    }

    /// A variable's name, in `env` or `keys`.
    fn name(&self, field: &str, name: &str) -> Result<(), DefinitionError> {
        let mut chars = name.chars();
        let valid = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(self.invalid(
                field,
                format!("{name:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"),
            ));
        }
        if RESERVED_NAMES.contains(&name) || name.to_ascii_lowercase().ends_with("_proxy") {
            return Err(self.invalid(field, format!("{name} is set by warden itself")));
        }
        Ok(())
    }

    fn limits(&self, limits: &Limits) -> Result<(), DefinitionError> {
        let given = [
            limits.timeout_ms,
            limits.cpu_seconds,
            limits.address_space_bytes,
            limits.processes,
            limits.output_bytes,
            limits.file_size_bytes,
            limits.open_files,
        ];
        for ((name, least), value) in LIMIT_MINIMUMS.iter().zip(given) {
            if let Some(value) = value.filter(|v| v < least) {
                return Err(self.invalid(
                    format!("limits.{name}"),
                    format!("{value} is less than the least, {least}"),
                ));
            }
        }
        Ok(())
    }
}

/// `[a-z0-9][a-z0-9-]{0,30}`: only such ids reach podman or the state root.
pub fn valid_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (1..=31).contains(&bytes.len())
        && allowed(&bytes[0])
        && bytes.iter().all(|b| allowed(b) || *b == b'-')
}

#[cfg(test)]
#[path = "definition_tests.rs"]
mod tests;
