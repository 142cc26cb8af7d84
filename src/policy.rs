//! The confinement policy: `landlock.json`, `seccomp.json` and
//! `limits.json` in the policy folder (default `/etc/warden/policy`). A
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

/// Upper bounds for every command; None means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub timeout_ms: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub address_space_bytes: Option<u64>,
    pub processes: Option<u64>,
    pub output_bytes: Option<u64>,
    pub file_size_bytes: Option<u64>,
    pub open_files: Option<u64>,
}

impl Limits {
    /// Each limit is the lower of the two; a request can only ask for less.
    pub fn tightened_by(&self, asked: &Limits) -> Limits {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Limits {
            timeout_ms: min(self.timeout_ms, asked.timeout_ms),
            cpu_seconds: min(self.cpu_seconds, asked.cpu_seconds),
            address_space_bytes: min(self.address_space_bytes, asked.address_space_bytes),
            processes: min(self.processes, asked.processes),
            output_bytes: min(self.output_bytes, asked.output_bytes),
            file_size_bytes: min(self.file_size_bytes, asked.file_size_bytes),
            open_files: min(self.open_files, asked.open_files),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub landlock: LandlockPolicy,
    pub seccomp: SeccompPolicy,
    pub limits: Limits,
    /// SHA-256 of the three files' texts, for the boot audit line.
    pub digest: String,
}

const BUILT_IN: [(&str, &str); 3] = [
    ("landlock.json", include_str!("../policy/landlock.json")),
    ("seccomp.json", include_str!("../policy/seccomp.json")),
    ("limits.json", include_str!("../policy/limits.json")),
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
        let mut texts = Vec::new();
        for (name, built_in) in BUILT_IN {
            let path = dir.join(name);
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => built_in.to_string(),
                Err(source) => return Err(PolicyError::Read { path, source }),
            };
            texts.push((path, text));
        }
        Policy::parse(&texts[0], &texts[1], &texts[2])
    }

    /// The policy as shipped.
    pub fn built_in() -> Policy {
        let t = BUILT_IN.map(|(name, text)| (PathBuf::from(name), text.to_string()));
        Policy::parse(&t[0], &t[1], &t[2]).unwrap_or_else(unreachable_policy)
    }

    /// Pure parser: each (path, text) pair names its file in errors.
    pub fn parse(
        landlock: &(PathBuf, String),
        seccomp: &(PathBuf, String),
        limits: &(PathBuf, String),
    ) -> Result<Policy, PolicyError> {
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
        if let Some(bad) = seccomp_policy
            .extra_deny
            .iter()
            .find(|s| !crate::syscalls::is_known(s))
        {
            return Err(PolicyError::Invalid {
                path: seccomp.0.clone(),
                problem: format!("extra_deny: no x86_64 syscall named {bad:?}"),
            });
        }
        let limits_policy: Limits = parse_file(limits, BUILT_IN[2].1)?;
        let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
        for (_, text) in [landlock, seccomp, limits] {
            sha2::Digest::update(&mut hasher, text.as_bytes());
        }
        let digest = sha2::Digest::finalize(hasher)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Policy {
            landlock: landlock_policy,
            seccomp: seccomp_policy,
            limits: limits_policy,
            digest,
        })
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
    eprintln!("warden: the built-in policy does not parse ({e}); using the strictest");
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
        digest: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(l: &str, s: &str, m: &str) -> Result<Policy, PolicyError> {
        Policy::parse(
            &("landlock.json".into(), l.into()),
            &("seccomp.json".into(), s.into()),
            &("limits.json".into(), m.into()),
        )
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
        let [l, s, m] = BUILT_IN.map(|(_, t)| t);
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
        let [l, s, _] = BUILT_IN.map(|(_, t)| t);
        let p = files(l, s, r#"{"processes": 64}"#).unwrap();
        assert_eq!(p.limits.processes, Some(64));
        assert_eq!(p.limits.cpu_seconds, Policy::built_in().limits.cpu_seconds);
        let p = files(r#"{"require": "best-effort"}"#, "{}", "{}").unwrap();
        assert_eq!(p.landlock.require, Requirement::BestEffort);
        assert_eq!(p.landlock.read_exec, Policy::built_in().landlock.read_exec);
    }

    #[test]
    fn a_request_only_tightens_limits() {
        let policy = Limits {
            cpu_seconds: Some(10),
            processes: None,
            timeout_ms: Some(1000),
            ..Default::default()
        };
        let asked = Limits {
            cpu_seconds: Some(99),
            processes: Some(5),
            timeout_ms: Some(10),
            ..Default::default()
        };
        let got = policy.tightened_by(&asked);
        assert_eq!(
            (got.cpu_seconds, got.processes, got.timeout_ms),
            (Some(10), Some(5), Some(10))
        );
    }
}
