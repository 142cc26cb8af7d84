//! Which hosts are opened, and what applies to a request to one: the
//! machine's credentials and its rules by method and path, as the policy
//! names them (`credentials`, `rules`). A host that neither names stays a
//! tunnel warden never reads.

use super::credential::{Credential, CredentialError, CredentialText, Holder};
use super::request_rules::{Rule, RuleError, RuleText};
use crate::shared::egress::hosts::{HostList, HostsError};
use serde::{Deserialize, Serialize};

/// One entry of `rules`, as written: a host and what it allows.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HostRulesText {
    pub host: String,
    pub allow: Vec<RuleText>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenedError {
    #[error("credentials[{index}]: {error}")]
    Credential {
        index: usize,
        error: CredentialError,
    },
    #[error("rules[{index}]: host {host:?}: {reason}")]
    Host {
        index: usize,
        host: String,
        #[source]
        reason: HostsError,
    },
    #[error("rules[{index}].allow[{rule}]: {error}")]
    Rule {
        index: usize,
        rule: usize,
        error: RuleError,
    },
    #[error("rules[{index}].allow is empty: a host that allows nothing belongs off the host list")]
    NoRules { index: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct HostRules {
    hosts: HostList,
    allow: Vec<Rule>,
}

/// The opened hosts of a policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpenedHosts {
    credentials: Vec<Credential>,
    rules: Vec<HostRules>,
}

/// What applies to one tunnel: the first rules entry naming its host, the
/// credential owed to its asker, and every credential of the host (whose
/// secrets must not come back, whoever asks).
#[derive(Debug, Clone)]
pub struct Opening<'a> {
    pub rules: Option<&'a [Rule]>,
    pub credential: Option<&'a Credential>,
    pub host_credentials: Vec<&'a Credential>,
}

impl OpenedHosts {
    pub fn parse(
        credentials: &[CredentialText],
        rules: &[HostRulesText],
    ) -> Result<OpenedHosts, OpenedError> {
        let credentials = credentials
            .iter()
            .enumerate()
            .map(|(index, text)| {
                Credential::parse(text).map_err(|error| OpenedError::Credential { index, error })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rules = rules
            .iter()
            .enumerate()
            .map(|(index, text)| host_rules(index, text))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(OpenedHosts { credentials, rules })
    }

    pub fn is_empty(&self) -> bool {
        self.credentials.is_empty() && self.rules.is_empty()
    }

    /// The keys whose values warden must hold.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.credentials.iter().map(|c| c.key.as_str()).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// What applies to a tunnel to `name` on `port` asked by `holder`;
    /// None: the host is not opened.
    /// The rules for `name` on `port`, if it has any.
    pub fn rules_for(&self, name: &str, port: u16) -> Option<&[Rule]> {
        self.rules
            .iter()
            .find(|r| r.hosts.allowing(name, port).is_some())
            .map(|r| r.allow.as_slice())
    }

    /// The hosts opened, as written (credentials' and rules' alike).
    pub fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self.credentials.iter().map(|c| c.host.clone()).collect();
        hosts.extend(self.rules.iter().flat_map(|r| r.hosts.entries()));
        hosts.sort();
        hosts.dedup();
        hosts
    }

    /// The credentials, in the order written.
    pub fn credentials(&self) -> &[Credential] {
        &self.credentials
    }

    pub fn opening(&self, name: &str, port: u16, holder: Holder) -> Option<Opening<'_>> {
        let rules = self.rules_for(name, port);
        let host_credentials: Vec<&Credential> = self
            .credentials
            .iter()
            .filter(|c| c.applies_to_host(name, port))
            .collect();
        if rules.is_none() && host_credentials.is_empty() {
            return None;
        }
        let credential = self
            .credentials
            .iter()
            .find(|c| c.applies(name, port, holder));
        Some(Opening {
            rules,
            credential,
            host_credentials,
        })
    }
}

fn host_rules(index: usize, text: &HostRulesText) -> Result<HostRules, OpenedError> {
    let hosts = HostList::parse(std::slice::from_ref(&text.host), &[443]).map_err(|reason| {
        OpenedError::Host {
            index,
            host: text.host.clone(),
            reason,
        }
    })?;
    if text.allow.is_empty() {
        return Err(OpenedError::NoRules { index });
    }
    let allow = text
        .allow
        .iter()
        .enumerate()
        .map(|(rule, r)| Rule::parse(r).map_err(|error| OpenedError::Rule { index, rule, error }))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(HostRules { hosts, allow })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(json: &str) -> Result<OpenedHosts, OpenedError> {
        #[derive(Deserialize)]
        struct Policy {
            #[serde(default)]
            credentials: Vec<CredentialText>,
            #[serde(default)]
            rules: Vec<HostRulesText>,
        }
        let p: Policy = serde_json::from_str(json).unwrap();
        OpenedHosts::parse(&p.credentials, &p.rules)
    }

    const GITHUB: &str = r#"{
        "credentials": [
            {"host": "api.github.com", "key": "GITHUB_TOKEN", "for": ["shell"]},
            {"host": "github.com", "key": "GITHUB_TOKEN", "header": "Authorization", "value": "Basic {key}"}
        ],
        "rules": [
            {"host": "github.com", "allow": [{"method": ["GET", "HEAD"]}, {"method": ["POST"], "path": "/*/*.git/git-upload-pack"}]}
        ]
    }"#;

    #[test]
    fn what_applies_to_a_tunnel_depends_on_its_host_and_asker() {
        let o = opened(GITHUB).unwrap();
        assert_eq!(o.keys(), vec!["GITHUB_TOKEN"]);
        // api.github.com: a credential for shell, no rules.
        let api = o.opening("api.github.com", 443, Holder::Shell).unwrap();
        assert!(api.rules.is_none());
        assert_eq!(
            api.credential.map(|c| c.host.as_str()),
            Some("api.github.com")
        );
        let api_runtime = o.opening("api.github.com", 443, Holder::Runtime).unwrap();
        assert!(api_runtime.credential.is_none(), "for shell alone");
        assert_eq!(
            api_runtime.host_credentials.len(),
            1,
            "its secret is still kept from coming back"
        );
        // github.com: rules for everyone, the credential for both.
        let git = o.opening("github.com", 443, Holder::Runtime).unwrap();
        assert_eq!(git.rules.map(<[Rule]>::len), Some(2));
        assert_eq!(git.credential.map(|c| c.host.as_str()), Some("github.com"));
        // Any other host, or another port, is a tunnel.
        assert!(o.opening("example.com", 443, Holder::Shell).is_none());
        assert!(o.opening("github.com", 8443, Holder::Shell).is_none());
    }

    #[test]
    fn a_bad_entry_is_named_by_its_place() {
        let cases = [
            (
                r#"{"credentials": [{"host": "x.com", "key": "1"}]}"#,
                "credentials[0]: key \"1\"",
            ),
            (
                r#"{"rules": [{"host": "x.com", "allow": []}]}"#,
                "rules[0].allow is empty",
            ),
            (
                r#"{"rules": [{"host": "x.com", "allow": [{"path": "x"}]}]}"#,
                "rules[0].allow[0]: path pattern \"x\"",
            ),
            (
                r#"{"rules": [{"host": "*.com", "allow": [{}]}]}"#,
                "rules[0]: host \"*.com\"",
            ),
        ];
        for (json, want) in cases {
            let error = opened(json).unwrap_err().to_string();
            assert!(error.starts_with(want), "{error}");
        }
    }
}
