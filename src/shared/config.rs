//! The machine config (`/etc/warden/machine.json`): every field optional,
//! every default documented in `docs/config.md`.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const DEFAULT_PATH: &str = "/etc/warden/machine.json";

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MachineConfig {
    /// The user that runs the agent runtime and owns its secrets.
    pub runtime: UserSpec,
    /// The user that runs every command the agent asks for.
    pub shell: UserSpec,
    /// The API's unix socket.
    pub socket: PathBuf,
    /// A second API socket for the host (in a folder lent to it): no uid
    /// check there, the machine's key instead.
    pub host_socket: Option<PathBuf>,
    /// The machine's key, required on `host_socket` and on vsock.
    pub key_file: PathBuf,
    /// In a VM that warden boots as PID 1, the vsock port the API listens
    /// on for the host (the machine's key required); `null`: none. Never
    /// used outside a VM.
    pub vsock_port: Option<u32>,
    /// In a VM that warden boots as PID 1, the vsock port of the host's
    /// egress relay, through which the proxy reaches every upstream (the
    /// launcher sets it for a VM with a network); `null`: the proxy
    /// connects itself. Never used outside a VM.
    pub egress_vsock_port: Option<u32>,
    /// In a VM that warden boots as PID 1, the runtime's server ports the
    /// host publishes: each is taken on vsock port 100000 + port and
    /// carried to 127.0.0.1:port. Never used outside a VM.
    pub vm_ports: Vec<u16>,
    /// The runtime's server ports (the definition's `ports`): where
    /// warden's connect gate holds the runtime (`runtime_hosts` where
    /// nftables cannot), the only TCP ports it may listen on.
    pub runtime_ports: Vec<u16>,
    /// When the main process starts again after it ended: "no" (the
    /// machine ends with it), "on-failure" or "always".
    pub main_restart: crate::shared::main_restart::MainRestart,
    /// A loopback TCP address the API also listens on, for the owner (the
    /// machine's key required): the door a cluster offers, reached with
    /// `kubectl port-forward`. None: no such door.
    pub tcp_door: Option<std::net::SocketAddr>,
    /// Where the audit log is written; default `<runtime home>/data/audit`.
    pub audit_dir: Option<PathBuf>,
    /// The audit log's current file is set aside past this size...
    pub audit_max_bytes: u64,
    /// ...and at most this many files are kept (the oldest go).
    pub audit_max_files: usize,
    /// What follows when the audit log cannot be written (a full disk).
    pub audit_when_full: WhenFull,
    /// The confinement policy's folder (landlock.json, seccomp.json,
    /// limits.json, network.json); a missing file means the built-in default.
    pub policy_dir: PathBuf,
    /// The machine's main process, run as `runtime` (the command line's
    /// `-- ARGV` takes precedence).
    pub main: Vec<String>,
    /// How long processes get between SIGTERM and SIGKILL at shutdown.
    pub grace_period_ms: u64,
    /// How long a command's output may stay open after it exits.
    pub drain_ms: u64,
    /// PATH in a command's environment.
    pub path: String,
    /// LANG in a command's environment.
    pub lang: String,
    /// The folder behind shell's own /tmp (root's, made at boot): what
    /// commands write to /tmp lands here, apart from everyone else's /tmp.
    pub shell_tmp: PathBuf,
    /// The main process starts only once the host has handed the runtime
    /// its keys (`hand_keys`), so that it starts with them.
    pub main_waits_for_keys: bool,
    /// The runtime's keys in a file warden reads at every boot and leaves
    /// where it is (a cluster's Secret, mounted read-only): they become
    /// the runtime's `.env`. None: only the host hands them over.
    pub keys_from: Option<PathBuf>,
    /// The values of the credentials the proxy adds, read at boot from
    /// where they are (a cluster's Secret, mounted read-only) into
    /// warden's memory; never copied. None: only the host hands them over.
    pub credentials_from: Option<PathBuf>,
    /// Seconds with no request, no command and no hold after which warden
    /// stops the machine itself; None: never.
    pub idle_stop_s: Option<u64>,
    /// What makes the machine ready (see `ReadyWhen`); None: warden's
    /// answering is enough.
    pub ready: Option<ReadyWhen>,
    /// /sys/fs/cgroup is a writable cgroup v2 hierarchy of the machine's
    /// own (a private cgroup namespace): give each command a cgroup there.
    /// A VM's warden mounts its own and needs no saying.
    pub command_cgroups: bool,
    /// In a VM that warden boots as PID 1 only: the host folders lent to
    /// it, each a 9p share of QEMU's mounted at its `at`. Never used
    /// outside a VM (an engine mounts a container's lent folders).
    pub vm_lends: Vec<VmLend>,
    /// Variables added to the main process's environment: a VM's launcher
    /// sets the definition's `env` here (a container's engine sets them in
    /// warden's own environment, which the main process inherits).
    pub main_env: std::collections::BTreeMap<String, String>,
    /// The file this was read from (None: the defaults, no file), read
    /// again at a reload for the settings that may change.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

/// What makes a machine ready: the runtime saying so (`ready`, protocol
/// version 9), or a port of the machine accepting a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ReadyWhen {
    Runtime,
    Port(u16),
}

impl std::fmt::Display for ReadyWhen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadyWhen::Runtime => write!(f, "runtime"),
            ReadyWhen::Port(port) => write!(f, "port {port}"),
        }
    }
}

/// One folder lent to a VM: the 9p share `tag`, mounted at `at`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmLend {
    /// The share's mount tag (`lend0`, ...): `[a-z0-9]{1,31}`.
    pub tag: String,
    /// Where it is mounted: absolute, normalized, not `/`.
    pub at: PathBuf,
    /// Mounted read-only (QEMU's share is read-only too).
    pub read_only: bool,
}

/// Commands when the audit log cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Refuse to run commands while nothing they do can be recorded.
    Refuse,
    /// Run them anyway, and say so in every status.
    Run,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            runtime: UserSpec {
                name: "runtime".into(),
                uid: 2000,
                gid: 2000,
                home: "/home/runtime".into(),
            },
            shell: UserSpec {
                name: "shell".into(),
                uid: 2001,
                gid: 2001,
                home: "/home/shell".into(),
            },
            socket: "/run/warden/api.sock".into(),
            host_socket: None,
            key_file: "/etc/warden/key".into(),
            vsock_port: Some(crate::wire::vsock_ports::DEFAULT_PORT),
            egress_vsock_port: None,
            vm_ports: Vec::new(),
            runtime_ports: Vec::new(),
            main_restart: Default::default(),
            tcp_door: None,
            audit_dir: None,
            shell_tmp: PathBuf::from("/var/lib/warden/shell-tmp"),
            policy_dir: crate::shared::policy::DEFAULT_DIR.into(),
            audit_max_bytes: 16 << 20,
            audit_max_files: 8,
            audit_when_full: WhenFull::Refuse,
            main: Vec::new(),
            grace_period_ms: 10_000,
            drain_ms: 2_000,
            path: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            lang: "C.UTF-8".into(),
            main_waits_for_keys: false,
            keys_from: None,
            credentials_from: None,
            idle_stop_s: None,
            ready: None,
            command_cgroups: false,
            vm_lends: Vec::new(),
            main_env: Default::default(),
            file: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("config {path}: field `{field}`: {problem}")]
    Invalid {
        path: PathBuf,
        field: &'static str,
        problem: String,
    },
}

impl MachineConfig {
    /// Loads `path`; a missing file at the default path means all defaults,
    /// a missing file anywhere else is an error (the owner named it).
    pub fn load(path: &Path, explicit: bool) -> Result<MachineConfig, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                return Ok(MachineConfig::default())
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.into(),
                    source,
                })
            }
        };
        let config = MachineConfig::parse(&text).map_err(|e| match e {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: path.into(),
                source,
            },
            ConfigError::Invalid { field, problem, .. } => ConfigError::Invalid {
                path: path.into(),
                field,
                problem,
            },
            other => other,
        })?;
        Ok(MachineConfig {
            file: Some(path.into()),
            ..config
        })
    }

    /// Pure parser and validator of the config's text.
    pub fn parse(text: &str) -> Result<MachineConfig, ConfigError> {
        let config: MachineConfig =
            serde_json::from_str(text).map_err(|source| ConfigError::Parse {
                path: PathBuf::new(),
                source,
            })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the config group by group; the first problem found is the
    /// one reported, so the checks keep this order.
    fn validate(&self) -> Result<(), ConfigError> {
        self.validate_users()?;
        self.validate_channels()?;
        self.validate_paths()?;
        self.validate_processes()?;
        self.validate_vm_lends()
    }

    /// The runtime and shell users: valid, unprivileged, kept apart.
    fn validate_users(&self) -> Result<(), ConfigError> {
        for (field, user) in [("runtime", &self.runtime), ("shell", &self.shell)] {
            if !valid_user_name(&user.name) {
                return Err(invalid(
                    field,
                    "name must match [a-z_][a-z0-9_-]* (at most 32)",
                ));
            }
            if user.uid == 0 || user.gid == 0 {
                return Err(invalid(field, "uid and gid must not be 0"));
            }
            if !user.home.is_absolute() {
                return Err(invalid(field, "home must be an absolute path"));
            }
        }
        if self.runtime.name == self.shell.name
            || self.runtime.uid == self.shell.uid
            || self.runtime.gid == self.shell.gid
        {
            return Err(invalid(
                "shell",
                "must differ from runtime in name, uid and gid",
            ));
        }
        if self.shell.home.starts_with(&self.runtime.home)
            || self.runtime.home.starts_with(&self.shell.home)
        {
            return Err(invalid(
                "shell",
                "home must not be inside runtime's home, nor contain it",
            ));
        }
        Ok(())
    }

    /// The socket, the audit log's sizes, the vsock ports and the door.
    fn validate_channels(&self) -> Result<(), ConfigError> {
        if !self.socket.is_absolute() {
            return Err(invalid("socket", "must be an absolute path"));
        }
        if self.audit_max_bytes < 4096 || self.audit_max_files < 2 {
            return Err(invalid(
                "audit_max_bytes",
                "files of at least 4096 bytes, at least 2 of them",
            ));
        }
        if self.vsock_port == Some(u32::MAX) {
            return Err(invalid("vsock_port", "must be below 4294967295"));
        }
        if self.egress_vsock_port == Some(u32::MAX) {
            return Err(invalid("egress_vsock_port", "must be below 4294967295"));
        }
        if let Some(door) = self.tcp_door {
            if !door.ip().is_loopback() || door.port() == 0 {
                return Err(invalid(
                    "tcp_door",
                    &format!("{door}: must be a loopback address (127.0.0.0/8 or ::1) with a port other than 0; the door is reached from inside the machine's network only (`kubectl port-forward`), never from the network"),
                ));
            }
        }
        Ok(())
    }

    /// The folders and files warden reads or gives, and PATH.
    fn validate_paths(&self) -> Result<(), ConfigError> {
        if !self.policy_dir.is_absolute() {
            return Err(invalid("policy_dir", "must be an absolute path"));
        }
        if !self.shell_tmp.is_absolute() || self.shell_tmp.starts_with("/tmp") {
            return Err(invalid(
                "shell_tmp",
                "must be an absolute path outside /tmp",
            ));
        }
        if self.keys_from.as_ref().is_some_and(|k| !k.is_absolute()) {
            return Err(invalid("keys_from", "must be an absolute path"));
        }
        if self
            .credentials_from
            .as_ref()
            .is_some_and(|k| !k.is_absolute())
        {
            return Err(invalid("credentials_from", "must be an absolute path"));
        }
        if self.audit_dir.as_ref().is_some_and(|d| !d.is_absolute()) {
            return Err(invalid("audit_dir", "must be an absolute path"));
        }
        if self.path.is_empty() || self.path.contains('\0') {
            return Err(invalid("path", "must be a non-empty PATH value"));
        }
        Ok(())
    }

    /// How the machine is found ready and idle, and the main process's
    /// environment.
    fn validate_processes(&self) -> Result<(), ConfigError> {
        if self.ready == Some(ReadyWhen::Port(0)) {
            return Err(invalid("ready", "port 0 is no port"));
        }
        if self.idle_stop_s == Some(0) {
            return Err(invalid(
                "idle_stop_s",
                "must be at least 1 (or null: never)",
            ));
        }
        if self.lang.contains('\0') {
            return Err(invalid("lang", "must not contain NUL"));
        }
        for (name, value) in &self.main_env {
            if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
                return Err(invalid(
                    "main_env",
                    "names must be non-empty without '=' or NUL, values without NUL",
                ));
            }
        }
        Ok(())
    }

    /// A VM's lent folders: their tags and where they are mounted.
    fn validate_vm_lends(&self) -> Result<(), ConfigError> {
        for lend in &self.vm_lends {
            let tag = lend.tag.as_bytes();
            if tag.is_empty()
                || tag.len() > 31
                || !tag
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            {
                return Err(invalid("vm_lends", "a tag must match [a-z0-9]{1,31}"));
            }
            let normal = lend
                .at
                .components()
                .skip(1)
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !lend.at.is_absolute() || !normal || lend.at == Path::new("/") {
                return Err(invalid(
                    "vm_lends",
                    "at must be an absolute, normalized path other than /",
                ));
            }
        }
        Ok(())
    }

    pub fn audit_dir(&self) -> PathBuf {
        self.audit_dir
            .clone()
            .unwrap_or_else(|| self.runtime.home.join("data/audit"))
    }
}

/// A problem with `field` of the config (its path is set by the caller).
fn invalid(field: &'static str, problem: &str) -> ConfigError {
    ConfigError::Invalid {
        path: PathBuf::new(),
        field,
        problem: problem.to_string(),
    }
}

fn valid_user_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    first_ok
        && name.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_object_gives_defaults() {
        assert_eq!(
            MachineConfig::parse("{}").unwrap(),
            MachineConfig::default()
        );
    }

    #[test]
    fn partial_user_spec_is_an_error_naming_the_field() {
        let err = MachineConfig::parse(r#"{"runtime":{"name":"r"}}"#).unwrap_err();
        assert!(err.to_string().contains("missing field"), "{err}");
    }

    /// (machine.json, None for accepted or what the refusal says)
    const VALIDATION_CASES: &[(&str, Option<&str>)] = &[
        (r#"{"grace_period_ms": 5}"#, None),
        (r#"{"ready": "runtime"}"#, None),
        (r#"{"ready": {"port": 3000}}"#, None),
        (r#"{"ready": {"port": 0}}"#, Some("port 0 is no port")),
        (r#"{"ready": "soon"}"#, Some("unknown variant `soon`")),
        (r#"{"main": ["/bin/agent", "--serve"]}"#, None),
        (r#"{"unknown": 1}"#, Some("unknown field")),
        (r#"{"grace_period_ms": -1}"#, Some("invalid value")),
        (
            r#"{"shell":{"name":"runtime","uid":3,"gid":3,"home":"/home/s"}}"#,
            Some("`shell`"),
        ),
        (
            r#"{"shell":{"name":"s","uid":0,"gid":3,"home":"/home/s"}}"#,
            Some("must not be 0"),
        ),
        (
            r#"{"shell":{"name":"Bad","uid":5,"gid":5,"home":"/home/s"}}"#,
            Some("name must match"),
        ),
        (
            r#"{"shell":{"name":"s","uid":5,"gid":5,"home":"/home/runtime/s"}}"#,
            Some("inside runtime's home"),
        ),
        (
            r#"{"runtime":{"name":"r","uid":5,"gid":5,"home":"rel"}}"#,
            Some("absolute"),
        ),
        (r#"{"socket":"api.sock"}"#, Some("`socket`")),
        (r#"{"audit_dir":"audit"}"#, Some("`audit_dir`")),
        (r#"{"keys_from":"keys.env"}"#, Some("`keys_from`")),
        (r#"{"keys_from":"/run/secrets/keys/runtime.env"}"#, None),
        (r#"{"path":""}"#, Some("`path`")),
        (r#"{"vsock_port": null}"#, None),
        (r#"{"vsock_port": 5000}"#, None),
        (r#"{"vsock_port": 4294967295}"#, Some("`vsock_port`")),
        (r#"{"egress_vsock_port": 1025}"#, None),
        (r#"{"main_restart": "on-failure"}"#, None),
        (
            r#"{"main_restart": "sometimes"}"#,
            Some("unknown variant `sometimes`"),
        ),
        (
            r#"{"egress_vsock_port": 4294967295}"#,
            Some("`egress_vsock_port`"),
        ),
        (r#"{"tcp_door": "127.0.0.1:7000"}"#, None),
        (r#"{"tcp_door": "127.0.0.5:7000"}"#, None),
        (r#"{"tcp_door": "[::1]:7000"}"#, None),
        (r#"{"tcp_door": null}"#, None),
        (
            r#"{"tcp_door": "0.0.0.0:7000"}"#,
            Some("must be a loopback"),
        ),
        (r#"{"tcp_door": "[::]:7000"}"#, Some("must be a loopback")),
        (
            r#"{"tcp_door": "10.0.0.1:7000"}"#,
            Some("must be a loopback"),
        ),
        (r#"{"tcp_door": "127.0.0.1:0"}"#, Some("other than 0")),
        (r#"{"tcp_door": "localhost:7000"}"#, Some("invalid")),
        (r#"{"tcp_door": "127.0.0.1"}"#, Some("invalid")),
        (
            r#"{"vm_lends": [{"tag": "lend0", "at": "/lent/src", "read_only": true}]}"#,
            None,
        ),
        (
            r#"{"vm_lends": [{"tag": "Lend 0", "at": "/lent/src", "read_only": true}]}"#,
            Some("a tag must match"),
        ),
        (
            r#"{"vm_lends": [{"tag": "lend0", "at": "/lent/../etc", "read_only": false}]}"#,
            Some("normalized"),
        ),
        (
            r#"{"vm_lends": [{"tag": "lend0", "at": "/", "read_only": false}]}"#,
            Some("normalized"),
        ),
        (
            r#"{"vm_lends": [{"tag": "lend0", "at": "/x"}]}"#,
            Some("missing field `read_only`"),
        ),
        (r#"{"main_env": {"GREETING": "hello"}}"#, None),
        (r#"{"main_env": {"A=B": "x"}}"#, Some("`main_env`")),
        ("{", Some("EOF")),
    ];

    #[test]
    fn validation_table() {
        for (text, want) in VALIDATION_CASES {
            match (MachineConfig::parse(text), want) {
                (Ok(_), None) => {}
                (Err(e), Some(w)) => assert!(e.to_string().contains(w), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, wanted error {want:?}"),
            }
        }
    }

    #[test]
    fn missing_default_file_means_defaults_but_missing_named_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join("machine.json");
        assert_eq!(
            MachineConfig::load(&absent, false).unwrap(),
            MachineConfig::default()
        );
        let err = MachineConfig::load(&absent, true).unwrap_err();
        assert!(err.to_string().contains("machine.json"), "{err}");
    }
}
