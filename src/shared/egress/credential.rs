//! A credential the proxy adds to requests for a host: which host, which
//! header, its value made from a key warden holds, and whose requests get
//! it. The owner writes these in the machine's definition; the key's value
//! reaches warden alone, over the host's door.

use crate::shared::egress::hosts::{HostList, HostsError};
use serde::{Deserialize, Serialize};

/// Whose requests get a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Holder {
    Shell,
    Runtime,
}

/// One entry of the definition's `credentials`, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialText {
    pub host: String,
    pub key: String,
    #[serde(default = "authorization")]
    pub header: String,
    #[serde(default = "bearer")]
    pub value: String,
    #[serde(default = "both", rename = "for")]
    pub holders: Vec<Holder>,
}

impl Holder {
    /// Its word in the definition and in status.
    pub fn word(self) -> &'static str {
        match self {
            Holder::Shell => "shell",
            Holder::Runtime => "runtime",
        }
    }
}

fn authorization() -> String {
    "Authorization".to_string()
}

fn bearer() -> String {
    "Bearer {key}".to_string()
}

fn both() -> Vec<Holder> {
    vec![Holder::Shell, Holder::Runtime]
}

/// Why a credential entry cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("host {host:?}: {reason}")]
    Host {
        host: String,
        #[source]
        reason: HostsError,
    },
    #[error("key {0:?} is not a key name (letters, digits and `_`, not starting with a digit)")]
    Key(String),
    #[error("header {0:?} is not an HTTP header name, or is one warden sets itself")]
    Header(String),
    #[error("value {0:?} must hold `{{key}}` exactly once, and no line break")]
    Value(String),
    #[error("`for` is empty: leave it out for both users")]
    NoHolder,
}

/// A checked credential (its key's value is not in it: warden holds that
/// apart, and fills it in per request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub host: String,
    hosts: HostList,
    pub key: String,
    pub header: String,
    value: String,
    pub holders: Vec<Holder>,
}

impl Credential {
    pub fn parse(text: &CredentialText) -> Result<Credential, CredentialError> {
        let hosts =
            HostList::parse(std::slice::from_ref(&text.host), &[443]).map_err(|reason| {
                CredentialError::Host {
                    host: text.host.clone(),
                    reason,
                }
            })?;
        if !is_key_name(&text.key) {
            return Err(CredentialError::Key(text.key.clone()));
        }
        if !is_header_name(&text.header) {
            return Err(CredentialError::Header(text.header.clone()));
        }
        let placeholders = text.value.matches("{key}").count();
        if placeholders != 1 || text.value.contains(['\r', '\n']) {
            return Err(CredentialError::Value(text.value.clone()));
        }
        if text.holders.is_empty() {
            return Err(CredentialError::NoHolder);
        }
        Ok(Credential {
            host: text.host.clone(),
            hosts,
            key: text.key.clone(),
            header: text.header.clone(),
            value: text.value.clone(),
            holders: text.holders.clone(),
        })
    }

    /// Whether this credential is for `name` on `port` (whoever asks).
    pub fn applies_to_host(&self, name: &str, port: u16) -> bool {
        self.hosts.allowing(name, port).is_some()
    }

    /// Whether a request of `holder` to `name` gets this credential.
    pub fn applies(&self, name: &str, port: u16, holder: Holder) -> bool {
        self.holders.contains(&holder) && self.applies_to_host(name, port)
    }

    /// The header's value with the key's value in it.
    pub fn header_value(&self, secret: &str) -> String {
        self.value.replacen("{key}", secret, 1)
    }
}

fn is_key_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A token (RFC 9110), and not one of the headers that frame a request or
/// say where it goes: those stay warden's and the client's.
fn is_header_name(name: &str) -> bool {
    const FRAMING: [&str; 7] = [
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
    ];
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    !name.is_empty()
        && name.bytes().all(token)
        && !FRAMING.contains(&name.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(
        host: &str,
        key: &str,
        header: &str,
        value: &str,
        holders: &[Holder],
    ) -> CredentialText {
        CredentialText {
            host: host.into(),
            key: key.into(),
            header: header.into(),
            value: value.into(),
            holders: holders.to_vec(),
        }
    }

    #[test]
    fn the_definition_form_reads_with_its_defaults() {
        let parsed: CredentialText =
            serde_json::from_str(r#"{"host": "api.github.com", "key": "GITHUB_TOKEN"}"#).unwrap();
        let c = Credential::parse(&parsed).unwrap();
        assert_eq!(c.header, "Authorization");
        assert_eq!(c.header_value("t0k"), "Bearer t0k");
        assert_eq!(c.holders, vec![Holder::Shell, Holder::Runtime]);
        let only: CredentialText = serde_json::from_str(
            r#"{"host": "*.example.com", "key": "K", "header": "X-Api-Key", "value": "{key}", "for": ["runtime"]}"#,
        )
        .unwrap();
        let c = Credential::parse(&only).unwrap();
        assert!(c.applies("a.example.com", 443, Holder::Runtime));
        assert!(!c.applies("a.example.com", 443, Holder::Shell));
        assert!(!c.applies("example.com", 443, Holder::Runtime));
        assert!(!c.applies("a.example.com", 8443, Holder::Runtime));
        assert!(serde_json::from_str::<CredentialText>(
            r#"{"host": "x", "key": "K", "secret": "v"}"#
        )
        .is_err());
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        use CredentialError as E;
        let both = [Holder::Shell, Holder::Runtime];
        let cases = [
            (
                text("x.com", "1K", "A", "{key}", &both),
                E::Key("1K".into()),
            ),
            (
                text("x.com", "K-1", "A", "{key}", &both),
                E::Key("K-1".into()),
            ),
            (
                text("x.com", "K", "Host", "{key}", &both),
                E::Header("Host".into()),
            ),
            (
                text("x.com", "K", "A B", "{key}", &both),
                E::Header("A B".into()),
            ),
            (
                text("x.com", "K", "A", "Bearer", &both),
                E::Value("Bearer".into()),
            ),
            (
                text("x.com", "K", "A", "{key}{key}", &both),
                E::Value("{key}{key}".into()),
            ),
            (
                text("x.com", "K", "A", "{key}\r\nX: y", &both),
                E::Value("{key}\r\nX: y".into()),
            ),
            (text("x.com", "K", "A", "{key}", &[]), E::NoHolder),
        ];
        for (entry, want) in cases {
            assert_eq!(Credential::parse(&entry).unwrap_err(), want);
        }
        assert!(matches!(
            Credential::parse(&text("10.0.0.1", "K", "A", "{key}", &both)),
            Err(E::Host { .. })
        ));
    }
}
