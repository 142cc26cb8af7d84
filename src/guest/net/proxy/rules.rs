//! What the proxy may reach: the host list and the allowed address
//! ranges, as of the last good read of network.json (read again whenever
//! the file changes), or warden's default list once it is worked out.

use super::Recorder;
use crate::guest::audit::payload::{PolicyReload, PolicyReloadFailed, ProxyLine};
use crate::shared::egress::addr::Cidr;
use crate::shared::egress::hosts::{HostList, HostsError};
use crate::shared::egress::opened_hosts::{OpenedError, OpenedHosts};
use crate::shared::policy::{NetworkPolicy, PolicyError};

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why the network policy gives no rules: it does not read, or a list in
/// it does not parse.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// An entry of `hosts` or `runtime_hosts`, as the host list says.
    #[error("{0}")]
    Hosts(#[source] HostsError),
    #[error(transparent)]
    Opened(#[from] OpenedError),
}

/// What the proxy may reach, as of the last good read of the policy.
#[derive(Debug)]
pub struct Rules {
    pub hosts: HostList,
    /// The runtime's own list, when it has one (`runtime_hosts`).
    pub runtime: Option<HostList>,
    pub allow: Vec<Cidr>,
    /// "network.json" or "default": where the host list came from.
    pub from: &'static str,
    /// The hosts warden opens (credentials, rules by method and path).
    pub opened: OpenedHosts,
    /// Certificates trusted for opened hosts' origins beside the image's.
    pub upstream_ca: Vec<PathBuf>,
    /// Model providers, whose hosts' requests are metered.
    pub providers: Vec<crate::shared::spend::Provider>,
}

impl Rules {
    /// None while the policy names no list and the default one is still
    /// being worked out (asking the machine's tools takes a second or two).
    pub fn new(
        policy: &NetworkPolicy,
        default_hosts: Option<&[String]>,
    ) -> Result<Option<Rules>, RulesError> {
        let (list, from) = match (&policy.hosts, default_hosts) {
            (Some(list), _) => (list.as_slice(), "network.json"),
            (None, Some(defaults)) => (defaults, "default"),
            (None, None) => return Ok(None),
        };
        let runtime = policy
            .runtime_hosts
            .as_ref()
            .map(|list| HostList::parse(list, &policy.ports))
            .transpose()
            .map_err(RulesError::Hosts)?;
        Ok(Some(Rules {
            hosts: HostList::parse(list, &policy.ports).map_err(RulesError::Hosts)?,
            runtime,
            allow: policy.allow_addresses.clone(),
            from,
            opened: policy.opened()?,
            upstream_ca: policy.upstream_ca.clone(),
            providers: policy.providers.clone(),
        }))
    }
}

/// The default host list, filled in once by whoever works it out.
pub type Defaults = Arc<std::sync::OnceLock<Vec<String>>>;

/// The proxy's settings that hold until restart.
pub struct Settings {
    pub policy_dir: PathBuf,
    pub max_tunnels: usize,
    pub idle: Duration,
    pub connect_timeout: Duration,
    pub through: super::Through,
}

impl Settings {
    pub fn from_policy(policy: &NetworkPolicy, policy_dir: &Path) -> Settings {
        Settings {
            policy_dir: policy_dir.to_path_buf(),
            max_tunnels: policy.max_tunnels,
            idle: Duration::from_millis(policy.idle_timeout_ms),
            connect_timeout: Duration::from_millis(policy.connect_timeout_ms),
            through: super::Through::Direct,
        }
    }
}

/// What identifies a version of network.json: a change to any of these
/// means the file must be read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

fn file_key(path: &Path) -> Option<FileKey> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileKey {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

struct Loaded {
    key: Option<FileKey>,
    /// The last network policy that parsed.
    policy: NetworkPolicy,
    rules: Option<Arc<Rules>>,
}

/// Where the rules come from: network.json in the policy folder, and the
/// default list for a policy that names none. Each reload is an audit
/// line.
pub(super) struct Source {
    policy_dir: PathBuf,
    default_hosts: Defaults,
    loaded: Mutex<Loaded>,
    record: Recorder,
}

impl Source {
    /// `policy` is the network policy read at boot.
    pub(super) fn new(
        policy_dir: &Path,
        policy: &NetworkPolicy,
        default_hosts: Defaults,
        record: Recorder,
    ) -> Result<Source, RulesError> {
        let rules = Rules::new(policy, default_hosts.get().map(Vec::as_slice))?;
        let key = file_key(&policy_dir.join("network.json"));
        Ok(Source {
            policy_dir: policy_dir.to_path_buf(),
            default_hosts,
            loaded: Mutex::new(Loaded {
                key,
                policy: policy.clone(),
                rules: rules.map(Arc::new),
            }),
            record,
        })
    }

    fn path(&self) -> PathBuf {
        self.policy_dir.join("network.json")
    }

    /// The rules for the next connection: network.json is read again when
    /// it changed. A file that no longer parses keeps the last good rules,
    /// and says why once per version of the file. None while the default
    /// list is not known yet.
    pub(super) fn current(&self) -> Option<Arc<Rules>> {
        let key = file_key(&self.path());
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if key != loaded.key {
            loaded.key = key;
            if let Err(e) = self.load(&mut loaded) {
                crate::say!("network policy not reloaded, the last good one holds: {e}");
            }
        }
        if loaded.rules.is_none() {
            let defaults = self.default_hosts.get().map(Vec::as_slice);
            if let Ok(Some(rules)) = Rules::new(&loaded.policy, defaults) {
                loaded.rules = Some(Arc::new(rules));
            }
        }
        loaded.rules.clone()
    }

    /// The rules, waiting (at most 15 s, at boot) for the default list.
    pub(super) async fn wait(&self) -> Option<Arc<Rules>> {
        for _ in 0..750 {
            if let Some(rules) = self.current() {
                return Some(rules);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Reads network.json now (the API's `reload`); the answer says what
    /// holds.
    pub(super) fn reload(&self) -> Result<Option<Arc<Rules>>, RulesError> {
        {
            let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
            loaded.key = file_key(&self.path());
            self.load(&mut loaded)?;
        }
        Ok(self.current())
    }

    fn load(&self, loaded: &mut Loaded) -> Result<(), RulesError> {
        let parsed = NetworkPolicy::load(&self.policy_dir)
            .map_err(RulesError::from)
            .and_then(|policy| {
                let rules = Rules::new(&policy, self.default_hosts.get().map(Vec::as_slice))?;
                Ok((policy, rules))
            });
        match parsed {
            Ok((policy, rules)) => {
                (self.record)(ProxyLine::PolicyReload(
                    self.reloaded(&policy, rules.as_ref()),
                ));
                loaded.policy = policy;
                loaded.rules = rules.map(Arc::new);
                Ok(())
            }
            Err(e) => {
                (self.record)(ProxyLine::PolicyReloadFailed(PolicyReloadFailed {
                    file: self.path(),
                    error: e.to_string(),
                    kept: "the last good network policy",
                }));
                Err(e)
            }
        }
    }

    /// The `policy_reload` line: what holds from now on.
    fn reloaded(&self, policy: &NetworkPolicy, rules: Option<&Rules>) -> PolicyReload {
        PolicyReload {
            file: self.path(),
            hosts_from: if policy.hosts.is_some() {
                "network.json"
            } else {
                "default"
            },
            hosts: rules.map(|r| r.hosts.entries()),
            allow_addresses: policy
                .allow_addresses
                .iter()
                .map(|c| c.to_string())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::egress::decide::{decide_on, Allowed};
    use crate::shared::egress::refusal::Refused;
    use crate::shared::egress::target::Target;

    /// The proxy's decision on the machine's list: by name only.
    fn decide<'a>(rules: &'a Rules, target: &'a Target) -> Result<Allowed<'a>, Refused> {
        decide_on(&rules.hosts, "the host list", target)
    }
    use crate::shared::egress::refusal::Kind;
    use crate::shared::egress::target;

    fn rules(entries: &[&str], allow: &[&str]) -> Rules {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        Rules {
            hosts: HostList::parse(&entries, &[80, 443]).unwrap(),
            runtime: None,
            allow: allow.iter().map(|c| c.parse().unwrap()).collect(),
            from: "network.json",
            opened: Default::default(),
            upstream_ca: Vec::new(),
            providers: Vec::new(),
        }
    }

    /// (authority, Ok: the name and the host list's entry that lets it /
    /// Err: the refusal)
    type Case = (
        &'static str,
        Result<(&'static str, &'static str), (Kind, u16, &'static str)>,
    );

    const DECIDE_CASES: &[Case] = &[
        ("allowed.test:443", Ok(("allowed.test", "allowed.test"))),
        ("allowed.test:80", Ok(("allowed.test", "allowed.test"))),
        (
            "www.allowed.test:443",
            Ok(("www.allowed.test", "*.allowed.test")),
        ),
        (
            "api.example.test:8443",
            Ok(("api.example.test", "api.example.test:8443")),
        ),
        (
            "allowed.test:22",
            Err((
                Kind::NotListed,
                403,
                "allowed.test:22 is not on the host list",
            )),
        ),
        (
            "api.example.test:443",
            Err((
                Kind::NotListed,
                403,
                "api.example.test:443 is not on the host list",
            )),
        ),
        (
            "denied.test:443",
            Err((
                Kind::NotListed,
                403,
                "denied.test:443 is not on the host list",
            )),
        ),
        (
            "notallowed.test:443",
            Err((
                Kind::NotListed,
                403,
                "notallowed.test:443 is not on the host list",
            )),
        ),
        (
            "203.0.113.7:443",
            Err((
                Kind::IpTarget,
                403,
                "an IP address as the target: the proxy reaches hosts by name",
            )),
        ),
        (
            "[2001:db8::1]:443",
            Err((
                Kind::IpTarget,
                403,
                "an IP address as the target: the proxy reaches hosts by name",
            )),
        ),
    ];

    #[test]
    fn decide_table() {
        let rules = rules(
            &["allowed.test", "*.allowed.test", "api.example.test:8443"],
            &[],
        );
        for (authority, want) in DECIDE_CASES {
            let t = target::parse_authority(authority).unwrap();
            match (decide(&rules, &t), want) {
                (Ok(got), Ok((name, entry))) => {
                    assert_eq!((got.name, got.entry), (*name, *entry), "{authority}")
                }
                (Err(r), Err((kind, status, reason))) => {
                    assert_eq!(
                        (r.kind, r.status(), r.reason.as_str()),
                        (*kind, *status, *reason),
                        "{authority}"
                    )
                }
                (got, want) => panic!("{authority}: {got:?}, wanted {want:?}"),
            }
        }
    }
}
