//! The values of the credentials warden's proxy adds: handed over by the
//! owner through the host's door (`hand_credentials`), or read at boot
//! from a cluster's Secret, and kept in warden's memory only. Never
//! written to a file, an environment, an audit line or a diagnostic; gone
//! when the machine stops. The owner hands them again at each start.
//!
//! Beside the values, how many requests got each credential, for status.

use crate::guest::accounts::runtime_keys::EnvTextError;
use std::collections::BTreeMap;
use std::sync::{Mutex, RwLock};

/// One value, whose `Debug` never shows it.
#[derive(Clone)]
struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

#[derive(Debug, Default)]
pub struct Vault {
    values: RwLock<BTreeMap<String, Secret>>,
    /// Requests that got a credential, by its name (`KEY for host`).
    added: Mutex<BTreeMap<String, u64>>,
}

impl Vault {
    /// Takes the values of a `.env` text (every earlier value is dropped:
    /// what the owner hands is the whole set). Returns their names.
    pub fn hand(&self, text: &str) -> Result<Vec<String>, EnvTextError> {
        let names = crate::guest::accounts::runtime_keys::names(text)?;
        let values: BTreeMap<String, Secret> = crate::shared::redact::env_pairs(text)
            .map(|(k, v)| (k.to_string(), Secret(unquoted(v).as_bytes().to_vec())))
            .filter(|(_, v)| !v.0.is_empty())
            .collect();
        *self.values.write().unwrap_or_else(|e| e.into_inner()) = values;
        Ok(names)
    }

    /// The value of `key`, if it was handed over.
    pub fn value(&self, key: &str) -> Option<Vec<u8>> {
        let values = self.values.read().unwrap_or_else(|e| e.into_inner());
        values.get(key).map(|s| s.0.clone())
    }

    /// The values of `keys` that were handed over.
    pub fn values_of<'a>(&self, keys: impl IntoIterator<Item = &'a str>) -> Vec<Vec<u8>> {
        keys.into_iter().filter_map(|k| self.value(k)).collect()
    }

    /// Every value, as text (for the audit log's redactor).
    pub fn all_text(&self) -> Vec<String> {
        let values = self.values.read().unwrap_or_else(|e| e.into_inner());
        values
            .values()
            .map(|s| String::from_utf8_lossy(&s.0).into_owned())
            .collect()
    }

    /// The names of the values held.
    pub fn names(&self) -> Vec<String> {
        let values = self.values.read().unwrap_or_else(|e| e.into_inner());
        values.keys().cloned().collect()
    }

    /// Counts one request that got the credential `name`.
    pub fn added(&self, name: &str) {
        let mut added = self.added.lock().unwrap_or_else(|e| e.into_inner());
        *added.entry(name.to_string()).or_default() += 1;
    }

    /// Requests that got each credential, by name.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.added.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A `.env` value without the quotes around it, if any.
fn unquoted(v: &str) -> &str {
    let v = v.trim();
    ['"', '\'']
        .iter()
        .find_map(|q| v.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
        .unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handed_set_replaces_the_last_and_never_shows_its_values() {
        let vault = Vault::default();
        let names = vault
            .hand("# owner's\nGITHUB_TOKEN=\"ghp_abc123\"\nexport NPM='n1'\nEMPTY=\n")
            .unwrap();
        assert_eq!(names, ["GITHUB_TOKEN", "NPM", "EMPTY"]);
        assert_eq!(vault.value("GITHUB_TOKEN").unwrap(), b"ghp_abc123");
        assert_eq!(vault.value("NPM").unwrap(), b"n1");
        assert_eq!(
            vault.value("EMPTY"),
            None,
            "an empty value is no credential"
        );
        assert!(!format!("{vault:?}").contains("ghp_abc123"));
        vault.hand("NPM=n2\n").unwrap();
        assert_eq!(vault.value("GITHUB_TOKEN"), None);
        assert_eq!(
            vault.values_of(["NPM", "GITHUB_TOKEN"]),
            vec![b"n2".to_vec()]
        );
        assert!(vault.hand("not a line\n").is_err());
        assert_eq!(vault.names(), ["NPM"], "a refused text changes nothing");
    }

    #[test]
    fn requests_are_counted_by_credential() {
        let vault = Vault::default();
        vault.added("K for a.test");
        vault.added("K for a.test");
        vault.added("L for b.test");
        let counts = vault.counts();
        assert_eq!(counts["K for a.test"], 2);
        assert_eq!(counts["L for b.test"], 1);
    }
}
