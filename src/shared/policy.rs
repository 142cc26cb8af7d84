//! The confinement policy: `landlock.json`, `seccomp.json`, `limits.json`
//! and `network.json` in the policy folder (default `/etc/warden/policy`). A
//! missing file means the defaults, which are the files shipped in the
//! repository's `policy/` (built in); a broken file makes warden refuse to
//! start, naming the file, the field and the problem.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const DEFAULT_DIR: &str = "/etc/warden/policy";

/// What follows when the kernel cannot enforce a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Requirement {
    /// Refuse to run commands, saying why in every refusal.
    Required,
    /// Run them, and keep saying what is missing.
    BestEffort,
    /// Do not apply the layer at all (to measure its cost, or to debug);
    /// status and every boot say so.
    Off,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockPolicy {
    pub require: Requirement,
    pub read_exec: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub tcp_connect: Vec<u16>,
    pub tcp_bind: Vec<u16>,
    pub scopes: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeccompPolicy {
    pub require: Requirement,
    pub extra_deny: Vec<String>,
}

/// limits.json's type is the wire's: a request asks for limits of the
/// same shape.
pub use crate::wire::limits::Limits;

/// The network layer: the firewall's requirement, and what the egress
/// proxy may reach. `hosts`, `ports` and `allow_addresses` are re-read
/// while warden runs (see `guest::net::proxy`); the rest holds until restart.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicy {
    pub firewall: Requirement,
    pub proxy_port: u16,
    /// The hosts the proxy may reach; None means the default list (GitHub
    /// and the registries the machine's tools are configured to use). A
    /// list replaces the default whole.
    pub hosts: Option<Vec<String>>,
    /// The hosts the runtime (the main process) may reach, through the
    /// proxy only; None: the runtime is not limited.
    pub runtime_hosts: Option<Vec<String>>,
    /// The ports a listed host may be reached on (an entry "host:port"
    /// adds its own).
    pub ports: Vec<u16>,
    /// Addresses the proxy may connect to although they are private,
    /// loopback and the like.
    pub allow_addresses: Vec<crate::shared::egress::addr::Cidr>,
    pub max_tunnels: usize,
    pub idle_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Credentials the proxy adds for listed hosts (their keys' values are
    /// handed to warden alone, never written here).
    pub credentials: Vec<crate::shared::egress::credential::CredentialText>,
    /// Rules by method and path for listed hosts.
    pub rules: Vec<crate::shared::egress::opened_hosts::HostRulesText>,
    /// Certificates (PEM files) trusted upstream of an opened host beside
    /// the image's own store.
    pub upstream_ca: Vec<PathBuf>,
    /// Model providers: their hosts opened, their keys added for the
    /// runtime, their requests metered.
    pub providers: Vec<crate::shared::spend::Provider>,
    /// The budgets requests to providers count against.
    pub spend: crate::shared::spend::Spend,
}

impl NetworkPolicy {
    /// Loads `network.json` alone (to reload the host list while running).
    pub fn load(dir: &Path) -> Result<NetworkPolicy, PolicyError> {
        let file = read_or_built_in(dir, BUILT_IN[3])?;
        NetworkPolicy::parse(&file)
    }

    /// Pure parser, with the same merging and errors as the other files.
    pub fn parse(file: &(PathBuf, String)) -> Result<NetworkPolicy, PolicyError> {
        let policy: NetworkPolicy = parse_file(file, BUILT_IN[3].1)?;
        let invalid = |problem: String| PolicyError::Invalid {
            path: file.0.clone(),
            problem,
        };
        if policy.proxy_port == 0 {
            return Err(invalid("proxy_port: 0 is not a port".into()));
        }
        if policy.ports.contains(&0) {
            return Err(invalid("ports: 0 is not a port".into()));
        }
        if policy.max_tunnels == 0 {
            return Err(invalid("max_tunnels: at least 1".into()));
        }
        if policy.idle_timeout_ms == 0 || policy.connect_timeout_ms == 0 {
            return Err(invalid("timeouts: at least 1 ms".into()));
        }
        if let Some(hosts) = &policy.hosts {
            crate::shared::egress::hosts::HostList::parse(hosts, &policy.ports)
                .map_err(|e| invalid(format!("hosts: {e}")))?;
        }
        if let Some(hosts) = &policy.runtime_hosts {
            crate::shared::egress::hosts::HostList::parse(hosts, &policy.ports)
                .map_err(|e| invalid(format!("runtime_hosts: {e}")))?;
        }
        policy.opened().map_err(|e| invalid(e.to_string()))?;
        crate::shared::spend::check(&policy.providers, &policy.spend)
            .map_err(|e| invalid(e.to_string()))?;
        Ok(policy)
    }

    /// The hosts warden opens, and what applies to each.
    pub fn opened(
        &self,
    ) -> Result<
        crate::shared::egress::opened_hosts::OpenedHosts,
        crate::shared::egress::opened_hosts::OpenedError,
    > {
        let mut credentials = self.credentials.clone();
        credentials.extend(
            self.providers
                .iter()
                .map(crate::shared::spend::Provider::credential),
        );
        crate::shared::egress::opened_hosts::OpenedHosts::parse(&credentials, &self.rules)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub landlock: LandlockPolicy,
    pub seccomp: SeccompPolicy,
    pub limits: Limits,
    pub network: NetworkPolicy,
    /// SHA-256 of the four files' texts, for the boot audit line.
    pub digest: String,
}

/// The policy files, in the order `Policy::parse` takes them.
pub const FILES: [&str; 4] = [
    "landlock.json",
    "seccomp.json",
    "limits.json",
    "network.json",
];

const BUILT_IN: [(&str, &str); 4] = [
    ("landlock.json", include_str!("../../policy/landlock.json")),
    ("seccomp.json", include_str!("../../policy/seccomp.json")),
    ("limits.json", include_str!("../../policy/limits.json")),
    ("network.json", include_str!("../../policy/network.json")),
];

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("policy {path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
}

impl Policy {
    /// Loads the policy folder; each missing file is replaced by the built-in.
    pub fn load(dir: &Path) -> Result<Policy, PolicyError> {
        let [l, s, m, n] = BUILT_IN;
        Policy::parse(&[
            read_or_built_in(dir, l)?,
            read_or_built_in(dir, s)?,
            read_or_built_in(dir, m)?,
            read_or_built_in(dir, n)?,
        ])
    }

    /// The policy as shipped.
    pub fn built_in() -> Policy {
        let files = BUILT_IN.map(|(name, text)| (PathBuf::from(name), text.to_string()));
        Policy::parse(&files).unwrap_or_else(unreachable_policy)
    }

    /// Pure parser: each (path, text) pair names its file in errors; the
    /// files come in the order of `FILES`.
    pub fn parse(files: &[(PathBuf, String); 4]) -> Result<Policy, PolicyError> {
        let [landlock, seccomp, limits, network] = files;
        let landlock_policy: LandlockPolicy = parse_file(landlock, BUILT_IN[0].1)?;
        for path in landlock_policy
            .read_exec
            .iter()
            .chain(&landlock_policy.read_only)
            .chain(&landlock_policy.read_write)
        {
            if !path.is_absolute() {
                return Err(PolicyError::Invalid {
                    path: landlock.0.clone(),
                    problem: format!("path {} is not absolute", path.display()),
                });
            }
        }
        let seccomp_policy: SeccompPolicy = parse_file(seccomp, BUILT_IN[1].1)?;
        if let Some(bad) = seccomp_policy.extra_deny.iter().find(|s| !is_known(s)) {
            return Err(PolicyError::Invalid {
                path: seccomp.0.clone(),
                problem: format!("extra_deny: no x86_64 syscall named {bad:?}"),
            });
        }
        let limits_policy: Limits = parse_file(limits, BUILT_IN[2].1)?;
        let network_policy = NetworkPolicy::parse(network)?;
        let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
        for (_, text) in files {
            sha2::Digest::update(&mut hasher, text.as_bytes());
        }
        let digest = crate::shared::audit_chain::hex(&sha2::Digest::finalize(hasher));
        Ok(Policy {
            landlock: landlock_policy,
            seccomp: seccomp_policy,
            limits: limits_policy,
            network: network_policy,
            digest,
        })
    }
}

/// Whether `name` is an x86_64 syscall, asked of seccompiler's own table
/// through its JSON front end (which knows every one).
pub fn is_known(name: &str) -> bool {
    let json = serde_json::json!({"probe": {
        "mismatch_action": "allow",
        "filter_action": "log",
        "filter": [{"syscall": name}],
    }});
    seccompiler::compile_from_json(json.to_string().as_bytes(), seccompiler::TargetArch::x86_64)
        .is_ok()
}

/// limits.json alone, read again (a reload): the built-in one when the
/// folder has none, as at boot.
pub fn load_limits(dir: &Path) -> Result<Limits, PolicyError> {
    parse_file(&read_or_built_in(dir, BUILT_IN[2])?, BUILT_IN[2].1)
}

/// The file's text, or the built-in one when it does not exist.
fn read_or_built_in(
    dir: &Path,
    (name, built_in): (&str, &str),
) -> Result<(PathBuf, String), PolicyError> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((path, text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((path, built_in.to_string())),
        Err(source) => Err(PolicyError::Read { path, source }),
    }
}

/// Every field a file leaves out takes the shipped file's value.
fn parse_file<T: serde::de::DeserializeOwned>(
    (path, text): &(PathBuf, String),
    built_in: &str,
) -> Result<T, PolicyError> {
    let invalid = |problem: String| PolicyError::Invalid {
        path: path.clone(),
        problem,
    };
    let given: serde_json::Value =
        serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let serde_json::Value::Object(given) = given else {
        return Err(invalid("must be a JSON object".into()));
    };
    let mut merged: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(built_in).map_err(|e| invalid(format!("built-in: {e}")))?;
    merged.extend(given);
    serde_json::from_value(serde_json::Value::Object(merged)).map_err(|e| invalid(e.to_string()))
}

/// The built-in files are checked by a unit test; this cannot happen in a
/// tested build, and PID 1 must not panic, so fall back to the strictest.
fn unreachable_policy(e: PolicyError) -> Policy {
    crate::say!("the built-in policy does not parse ({e}); using the strictest");
    Policy {
        landlock: LandlockPolicy {
            require: Requirement::Required,
            read_exec: vec![
                "/usr".into(),
                "/bin".into(),
                "/lib".into(),
                "/lib64".into(),
                "/etc".into(),
            ],
            read_only: Vec::new(),
            read_write: vec!["/dev/null".into()],
            tcp_connect: Vec::new(),
            tcp_bind: Vec::new(),
            scopes: true,
        },
        seccomp: SeccompPolicy {
            require: Requirement::Required,
            extra_deny: Vec::new(),
        },
        limits: Limits::default(),
        network: NetworkPolicy {
            firewall: Requirement::Required,
            proxy_port: 3128,
            hosts: Some(Vec::new()),
            runtime_hosts: None,
            ports: vec![443],
            allow_addresses: Vec::new(),
            max_tunnels: 64,
            idle_timeout_ms: 60_000,
            connect_timeout_ms: 10_000,
            credentials: Vec::new(),
            rules: Vec::new(),
            upstream_ca: Vec::new(),
            providers: Vec::new(),
            spend: Default::default(),
        },
        digest: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(l: &str, s: &str, m: &str) -> Result<Policy, PolicyError> {
        with_network(l, s, m, BUILT_IN[3].1)
    }

    fn with_network(l: &str, s: &str, m: &str, n: &str) -> Result<Policy, PolicyError> {
        Policy::parse(&[
            ("landlock.json".into(), l.into()),
            ("seccomp.json".into(), s.into()),
            ("limits.json".into(), m.into()),
            ("network.json".into(), n.into()),
        ])
    }

    #[test]
    fn the_shipped_files_parse() {
        let p = Policy::built_in();
        assert_eq!(p.landlock.require, Requirement::Required);
        assert!(p.landlock.read_exec.contains(&PathBuf::from("/usr")));
        assert_eq!(p.limits.processes, Some(512));
        assert_eq!(p.digest.len(), 64);
    }

    #[test]
    fn broken_files_name_the_file_and_field() {
        let [l, s, m, _] = BUILT_IN.map(|(_, t)| t);
        let cases = [
            (files("{", s, m), "landlock.json", "EOF"),
            (
                files(&l.replace("\"required\"", "\"maybe\""), s, m),
                "landlock.json",
                "unknown variant `maybe`",
            ),
            (
                files(&l.replace("\"/opt\"", "\"opt\""), s, m),
                "landlock.json",
                "not absolute",
            ),
            (
                files(
                    &l.replace("\"tcp_bind\": []", "\"tcp_bind\": [70000]"),
                    s,
                    m,
                ),
                "landlock.json",
                "70000",
            ),
            (
                files(
                    l,
                    r#"{"require":"required","extra_deny":["nosuchcall"]}"#,
                    m,
                ),
                "seccomp.json",
                "nosuchcall",
            ),
            (files(l, "[]", m), "seccomp.json", "must be a JSON object"),
            (
                files(l, s, &m.replace("\"processes\"", "\"procs\"")),
                "limits.json",
                "unknown field `procs`",
            ),
            (
                files(l, s, &m.replace("512", "-1")),
                "limits.json",
                "invalid value",
            ),
        ];
        for (got, file, want) in cases {
            let e = got.expect_err(want).to_string();
            assert!(e.contains(file) && e.contains(want), "{e}");
        }
    }

    #[test]
    fn a_field_left_out_takes_the_shipped_value() {
        let [l, s, _, _] = BUILT_IN.map(|(_, t)| t);
        let p = files(l, s, r#"{"processes": 64}"#).unwrap();
        assert_eq!(p.limits.processes, Some(64));
        assert_eq!(p.limits.cpu_seconds, Policy::built_in().limits.cpu_seconds);
        let p = files(r#"{"require": "best-effort"}"#, "{}", "{}").unwrap();
        assert_eq!(p.landlock.require, Requirement::BestEffort);
        assert_eq!(p.landlock.read_exec, Policy::built_in().landlock.read_exec);
    }

    #[test]
    fn network_table() {
        let [l, s, m, _] = BUILT_IN.map(|(_, t)| t);
        let p = Policy::built_in().network;
        assert_eq!(p.firewall, Requirement::Required);
        assert_eq!(
            (p.proxy_port, p.hosts.clone(), p.ports.clone()),
            (3128, None, vec![80, 443])
        );
        let cases = [
            (
                r#"{"firewall": "sometimes"}"#,
                Some("unknown variant `sometimes`"),
            ),
            (r#"{"proxy_port": 0}"#, Some("proxy_port")),
            (r#"{"proxy_port": 70000}"#, Some("70000")),
            (r#"{"hosts": ["example.com", "*.example.org:8443"]}"#, None),
            (r#"{"hosts": ["exa mple.com"]}"#, Some("hosts: ")),
            (r#"{"hosts": "example.com"}"#, Some("invalid type")),
            (r#"{"runtime_hosts": ["api.example.com:8443"]}"#, None),
            (
                r#"{"runtime_hosts": ["exa mple.com"]}"#,
                Some("runtime_hosts: "),
            ),
            (r#"{"allow_addresses": ["10.0.0.0/8", "fd00::/8"]}"#, None),
            (
                r#"{"allow_addresses": ["10.0.0.1/8"]}"#,
                Some("host bits set"),
            ),
            (r#"{"allow_addresses": ["nonsense"]}"#, Some("nonsense")),
            (r#"{"max_tunnels": 0}"#, Some("max_tunnels")),
            (r#"{"idle_timeout_ms": 0}"#, Some("timeouts")),
            (r#"{"proxy": 1}"#, Some("unknown field `proxy`")),
        ];
        for (text, want) in cases {
            match (with_network(l, s, m, text), want) {
                (Ok(_), None) => {}
                (Err(e), Some(w)) => {
                    let e = e.to_string();
                    assert!(e.contains("network.json") && e.contains(w), "{text}: {e}");
                }
                (got, want) => panic!("{text}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn every_shipped_file_has_its_schema_and_the_same_fields() {
        let schemas = [
            include_str!("../../policy/landlock.schema.json"),
            include_str!("../../policy/seccomp.schema.json"),
            include_str!("../../policy/limits.schema.json"),
            include_str!("../../policy/network.schema.json"),
        ];
        for ((name, text), schema) in BUILT_IN.iter().zip(schemas) {
            let file: serde_json::Value = serde_json::from_str(text).unwrap();
            let schema: serde_json::Value = serde_json::from_str(schema).unwrap();
            let keys = |v: &serde_json::Value| {
                let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
                k.sort();
                k
            };
            assert_eq!(keys(&file), keys(&schema["properties"]), "{name}");
        }
    }

    #[test]
    fn names_resolve() {
        for (name, known) in [
            ("ptrace", true),
            ("kcmp", true),
            ("chown", true),
            ("nosuchcall", false),
            ("", false),
        ] {
            assert_eq!(is_known(name), known, "{name}");
        }
    }
}
