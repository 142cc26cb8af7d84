//! The machine definition: the JSON file from which `warden machine ...`
//! makes a container (see `docs/machine-definition.md` and
//! `machine/definition.schema.json`). The parser is pure: it takes the
//! file's path (to name it in errors and to resolve relative paths against
//! its folder) and its text, and never touches the filesystem. A broken
//! definition is refused with one line naming the file, the field and the
//! problem, for example `demo.json: lend[1].at: /etc/x shadows a system
//! path (/etc)`.

mod opened;
mod ready;
mod sleep;

use super::agent::{self, KeepId, Port, Restart, Size};
use crate::shared::policy::{Limits, Requirement};
pub use opened::Opened;
pub use ready::Ready;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
pub use sleep::{Idle, Sleep};
use std::collections::BTreeMap;
use std::io::Read;
use std::net::IpAddr;
use std::ops::Bound;
use std::path::{Path, PathBuf};

/// The largest definition file, in bytes.
pub const MAX_BYTES: usize = 1 << 20;

/// The most names `keys` may hold.
pub const MAX_KEYS: usize = 64;

/// resolv.conf holds at most three name servers.
pub const MAX_DNS: usize = 3;

/// A lend may not land on or beneath these (only on `/` itself for `/`):
/// it would shadow the machine's own files. The users' homes under
/// `/home` are refused too (`agent::in_a_home`), but for the agent's
/// folder; the rest of `/home` is free, so a project can be lent at the
/// path it has on the host.
pub const SYSTEM_PATHS: [&str; 16] = [
    "/", "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys",
    "/dev", "/run", "/var", "/boot", "/root",
];

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

const LEND_FIELDS: [&str; 3] = ["host", "at", "mode"];

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
        let id: String = self
            .take(&mut object, "id", "id")?
            .ok_or_else(|| self.invalid("id", "missing; every definition needs one"))?;
        if !valid_id(&id) {
            return Err(self.invalid(
                "id",
                format!(
                    "{id:?} must match [a-z0-9][a-z0-9-]{{0,30}} (it names containers and volumes)"
                ),
            ));
        }
        let image: Option<String> = self.take(&mut object, "image", "image")?.flatten();
        let dockerfile: Option<String> = self
            .take(&mut object, "dockerfile", "dockerfile")?
            .flatten();
        let source = match (image, dockerfile) {
            (Some(_), Some(_)) => {
                return Err(self.invalid("image and dockerfile", "give one of them, not both"))
            }
            (None, None) => return Err(self.invalid("image", "missing; give image or dockerfile")),
            (Some(image), None) => Source::Image(self.image(image)?),
            (None, Some(file)) => Source::Dockerfile(self.resolve("dockerfile", &file)?),
        };
        let lends: Vec<Value> = self.take(&mut object, "lend", "lend")?.unwrap_or_default();
        let lend = self.lends(lends)?;
        let env: BTreeMap<String, String> =
            self.take(&mut object, "env", "env")?.unwrap_or_default();
        for (name, value) in &env {
            self.name("env", name)?;
            if value.contains('\0') {
                return Err(self.invalid(format!("env.{name}"), "the value holds a NUL byte"));
            }
        }
        let keys: Vec<String> = self.take(&mut object, "keys", "keys")?.unwrap_or_default();
        if keys.len() > MAX_KEYS {
            return Err(self.invalid("keys", format!("{} names, at most {MAX_KEYS}", keys.len())));
        }
        for (i, key) in keys.iter().enumerate() {
            let field = format!("keys[{i}]");
            self.name(&field, key)?;
            if let Some(j) = keys[..i].iter().position(|k| k == key) {
                return Err(self.invalid(field, format!("{key} is also keys[{j}]")));
            }
            if env.contains_key(key) {
                return Err(self.invalid(field, format!("{key} is also set in env")));
            }
        }
        let hosts: Option<Vec<String>> = self.take(&mut object, "hosts", "hosts")?.flatten();
        if let Some(hosts) = &hosts {
            crate::shared::egress::hosts::HostList::parse(hosts, &[80, 443])
                .map_err(|e| self.invalid("hosts", e))?;
        }
        let runtime_hosts: Option<Vec<String>> = self
            .take(&mut object, "runtime_hosts", "runtime_hosts")?
            .flatten();
        if let Some(hosts) = &runtime_hosts {
            crate::shared::egress::hosts::HostList::parse(hosts, &[80, 443])
                .map_err(|e| self.invalid("runtime_hosts", e))?;
        }
        let setup: Option<String> = self.take(&mut object, "setup", "setup")?.flatten();
        let setup = setup.map(|s| self.resolve("setup", &s)).transpose()?;
        let workspace: Option<String> = self.take(&mut object, "workspace", "workspace")?;
        let workspace = match workspace.as_deref() {
            None | Some("volume") => Workspace::Volume,
            Some(folder) if folder.starts_with('/') => {
                Workspace::Folder(self.mount_path("workspace", folder)?)
            }
            Some(other) => {
                return Err(self.invalid(
                    "workspace",
                    format!("{other:?} is neither \"volume\" nor an absolute folder"),
                ))
            }
        };
        let limits: Limits = self
            .take(&mut object, "limits", "limits")?
            .unwrap_or_default();
        self.limits(&limits)?;
        let network: Option<String> = self.take(&mut object, "network", "network")?;
        let network = match network.as_deref() {
            None | Some("none") => Network::None,
            Some("private") => Network::Private,
            Some("host") => Network::Host,
            Some(path) if path.starts_with('/') => {
                Network::Namespace(self.mount_path("network", path)?)
            }
            Some(other) => {
                return Err(self.invalid(
                    "network",
                    format!("{other:?} is none of \"none\", \"private\", \"host\" or the absolute path of a network namespace"),
                ))
            }
        };
        let keep_id: Value = self
            .take(&mut object, "keep_id", "keep_id")?
            .unwrap_or(Value::Null);
        let keep_id = KeepId::parse(&keep_id).map_err(|e| self.invalid("keep_id", e))?;
        let firewall: Option<Requirement> = self.take(&mut object, "firewall", "firewall")?;
        if firewall == Some(Requirement::Off) {
            return Err(self.invalid(
                "firewall",
                "\"off\" is for measuring warden, not for a machine: required or best-effort",
            ));
        }
        let dns: Vec<IpAddr> = self.take(&mut object, "dns", "dns")?.unwrap_or_default();
        if dns.len() > MAX_DNS {
            return Err(self.invalid("dns", format!("{} servers, at most {MAX_DNS}", dns.len())));
        }
        let kind: Kind = self.take(&mut object, "kind", "kind")?.unwrap_or_default();
        let allow_addresses: Vec<String> = self
            .take(&mut object, "allow_addresses", "allow_addresses")?
            .unwrap_or_default();
        for (i, block) in allow_addresses.iter().enumerate() {
            block
                .parse::<crate::shared::egress::addr::Cidr>()
                .map_err(|e| self.invalid(format!("allow_addresses[{i}]"), e.to_string()))?;
        }
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
        let routines_written = lend
            .iter()
            .any(|l| l.at == Path::new(agent::ROUTINES) && l.mode == LendMode::Write);
        if routines_written && keep_id == KeepId::Shell {
            return Err(self.invalid(
                "keep_id",
                "\"shell\" would make the owner's routines lent for writing shell's: use \"runtime\", or lend them to read",
            ));
        }
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
        Ok(AgentFields {
            command,
            restart,
            ports,
            requires,
            idle_stop_minutes,
            size: Size { cpus, memory, pids },
        })
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

    /// A file of the host: absolute as written, or relative to the
    /// definition's folder. `.` and doubled slashes are dropped; `..` is
    /// kept (the parser does not know the host's links).
    fn resolve(&self, field: &str, written: &str) -> Result<PathBuf, DefinitionError> {
        if written.is_empty() {
            return Err(self.invalid(field, "empty path"));
        }
        if written.chars().any(|c| c.is_control()) {
            return Err(self.invalid(field, format!("{written:?} holds a control character")));
        }
        let written = Path::new(written);
        let joined = if written.is_absolute() {
            written.to_path_buf()
        } else {
            match self.path.parent() {
                Some(folder) if folder.is_absolute() => folder.join(written),
                _ => {
                    return Err(self.invalid(
                        field,
                        format!(
                            "{} is relative, and the definition's own path {} is not absolute to resolve it against",
                            written.display(),
                            self.path.display()
                        ),
                    ))
                }
            }
        };
        Ok(joined.components().collect())
    }

    /// A path that becomes one side of a podman mount: absolute, and free
    /// of what would split or garble mount options.
    fn mount_path(&self, field: &str, written: &str) -> Result<PathBuf, DefinitionError> {
        if !written.starts_with('/') {
            return Err(self.invalid(field, format!("{written:?} is not an absolute path")));
        }
        if written.chars().any(|c| c.is_control()) {
            return Err(self.invalid(field, format!("{written:?} holds a control character")));
        }
        if written.contains([':', ',']) {
            return Err(self.invalid(
                field,
                format!("{written:?} holds ':' or ',', which separate podman's mount options"),
            ));
        }
        Ok(PathBuf::from(written))
    }

    fn lends(&self, lends: Vec<Value>) -> Result<Vec<Lend>, DefinitionError> {
        let mut out: Vec<Lend> = Vec::with_capacity(lends.len());
        let mut seen: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for (i, lend) in lends.into_iter().enumerate() {
            let field = format!("lend[{i}]");
            let Value::Object(mut object) = lend else {
                return Err(self.invalid(field, "must be an object with host, at and mode"));
            };
            self.known_only(&object, &LEND_FIELDS, &format!("{field}."))?;
            let mut required = |key: &str| -> Result<String, DefinitionError> {
                let name = format!("{field}.{key}");
                self.take(&mut object, key, &name)?
                    .ok_or_else(|| self.invalid(name, "missing"))
            };
            let host = required("host")?;
            let at = required("at")?;
            let mode_field = format!("{field}.mode");
            let mode: LendMode = self
                .take(&mut object, "mode", &mode_field)?
                .ok_or_else(|| self.invalid(&mode_field, "missing; \"read\" or \"write\""))?;
            let host = self.mount_path(&format!("{field}.host"), &host)?;
            let at_field = format!("{field}.at");
            let text = at.as_str();
            let at = self.mount_path(&at_field, text)?;
            if text != "/"
                && text[1..]
                    .split('/')
                    .any(|part| part.is_empty() || part == "." || part == "..")
            {
                return Err(self.invalid(
                    at_field,
                    format!("{text} is not normalized (no '.', '..', '//' or trailing '/')"),
                ));
            }
            if let Some(system) = shadowed(&at) {
                return Err(
                    self.invalid(at_field, format!("{text} shadows a system path ({system})"))
                );
            }
            if let Some(home) = agent::in_a_home(&at) {
                return Err(self.invalid(
                    at_field,
                    format!(
                        "{text} overlaps a user's home ({home}); only {} may be lent there",
                        agent::ROUTINES
                    ),
                ));
            }
            // No two earlier ones nest, so at most one is `at` or above
            // it; those below it come right after it in path order.
            let above = at.ancestors().find_map(|a| seen.get_key_value(a));
            let below = || {
                seen.range::<Path, _>((Bound::Excluded(at.as_path()), Bound::Unbounded))
                    .next()
                    .filter(|(other, _)| other.starts_with(&at))
            };
            if let Some((other, j)) = above.or_else(below) {
                let problem = if *other == at {
                    format!("{text} is also lend[{j}].at")
                } else if at.starts_with(other) {
                    format!("{text} is under lend[{j}].at {}", other.display())
                } else {
                    format!("{text} holds lend[{j}].at {}", other.display())
                };
                return Err(self.invalid(at_field, problem));
            }
            seen.insert(at.clone(), i);
            out.push(Lend { host, at, mode });
        }
        Ok(out)
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

/// The system path `at` would shadow, if any.
fn shadowed(at: &Path) -> Option<&'static str> {
    SYSTEM_PATHS.into_iter().find(|system| match *system {
        "/" => at == Path::new("/"),
        system => at.starts_with(system),
    })
}

/// A JSON value in which no object gives a key twice (serde_json keeps
/// the last silently, and other readers of the file might keep the first).
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Strict, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("the key {key:?} is given twice")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
#[path = "definition_tests.rs"]
mod tests;
