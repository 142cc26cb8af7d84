//! The list of hosts the egress proxy may reach: exact names
//! ("example.com"), every name under a domain ("*.example.com"), each on
//! the list's default ports or on one port written after it
//! ("example.com:8443").
//!
//! Entries are validated with the same rules as request targets
//! (`target.rs`), so an entry that could never match a parsed target is
//! an error rather than a silent no-op.

use crate::shared::egress::target::{self, Host, TargetError};

/// Why a host list is refused: its default ports, or the first bad entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostsError {
    #[error("default port 0 is not a port")]
    DefaultPortZero,
    #[error("host entry {written:?}: {error}")]
    Entry {
        written: String,
        #[source]
        error: EntryError,
    },
}

/// Why one entry of a host list is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("'*' is allowed only as a whole first label, as in *.example.com")]
    Wildcard,
    /// An address in the list (or an IPv6 one without brackets).
    #[error("the list holds names; allow addresses in allow_addresses")]
    IpLiteral,
    #[error("wildcard over a top-level domain")]
    TopLevelDomain,
    #[error(transparent)]
    Target(TargetError),
}

/// Which names an entry covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// That one name.
    Exact(String),
    /// Every name strictly under this domain, at any depth.
    Under(String),
}

impl Pattern {
    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Exact(exact) => name == exact,
            // The label boundary matters: "badexample.com" is not under
            // "example.com", and neither is "example.com" itself.
            Pattern::Under(domain) => name
                .strip_suffix(domain.as_str())
                .and_then(|rest| rest.strip_suffix('.'))
                .is_some_and(|sub| !sub.is_empty()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// As the owner wrote it: audit lines and status show this.
    written: String,
    pattern: Pattern,
    /// None: the list's default ports.
    port: Option<u16>,
}

impl Entry {
    fn allows(&self, name: &str, port: u16, default_ports: &[u16]) -> bool {
        let port_ok = match self.port {
            Some(own) => own == port,
            None => default_ports.contains(&port),
        };
        port_ok && self.pattern.matches(name)
    }
}

/// The hosts the proxy may reach, and on which ports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostList {
    entries: Vec<Entry>,
    default_ports: Vec<u16>,
}

impl HostList {
    /// Parses every entry; the first bad one is an error naming it and why (a bad entry must make the whole list refused, so the caller can keep the last good list).
    pub fn parse(entries: &[String], default_ports: &[u16]) -> Result<HostList, HostsError> {
        if default_ports.contains(&0) {
            return Err(HostsError::DefaultPortZero);
        }
        let entries = entries
            .iter()
            .map(|e| {
                parse_entry(e).map_err(|error| HostsError::Entry {
                    written: e.clone(),
                    error,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(HostList {
            entries,
            default_ports: default_ports.to_vec(),
        })
    }

    /// The entry (as written) that allows `name` on `port`, or None. `name` is already normalized (lowercase, no trailing dot) by target.rs.
    ///
    /// A name that is not normalized matches nothing: the list fails closed.
    pub fn allowing(&self, name: &str, port: u16) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.allows(name, port, &self.default_ports))
            .map(|e| e.written.as_str())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries as written, for status.
    pub fn entries(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.written.clone()).collect()
    }
}

/// One entry: "[*.]name[:port]".
fn parse_entry(written: &str) -> Result<Entry, EntryError> {
    let (wildcard, rest) = match written.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, written),
    };
    if rest.contains('*') {
        return Err(EntryError::Wildcard);
    }
    let (host, port) = target::parse_host_port(rest).map_err(entry_error)?;
    let Host::Name(name) = host else {
        return Err(EntryError::IpLiteral);
    };
    let pattern = if wildcard {
        under(name)?
    } else {
        Pattern::Exact(name)
    };
    Ok(Entry {
        written: written.to_string(),
        pattern,
        port,
    })
}

/// The pattern of "*.name"; a single label would be a whole top-level
/// domain, which no one means to allow.
fn under(name: String) -> Result<Pattern, EntryError> {
    if name.contains('.') {
        Ok(Pattern::Under(name))
    } else {
        Err(EntryError::TopLevelDomain)
    }
}

fn entry_error(error: TargetError) -> EntryError {
    match error {
        TargetError::UnbracketedIpv6 => EntryError::IpLiteral,
        other => EntryError::Target(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: &[u16] = &[80, 443];

    fn list(entries: &[&str]) -> HostList {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        HostList::parse(&entries, DEFAULTS).unwrap()
    }

    #[test]
    fn matching_table() {
        let entries = [
            "example.com",
            "*.example.org",
            "Mirror.Example.NET.",
            "api.example.test:8443",
            "*.svc.example.test:9000",
        ];
        let hosts = list(&entries);
        for (name, port, want) in [
            ("example.com", 443, Some("example.com")),
            ("example.com", 80, Some("example.com")),
            ("example.com", 8080, None),
            ("www.example.com", 443, None),
            ("badexample.com", 443, None),
            ("example.com.evil.test", 443, None),
            ("example.co", 443, None),
            ("a.example.org", 443, Some("*.example.org")),
            ("a.b.example.org", 80, Some("*.example.org")),
            ("deep.a.b.c.example.org", 443, Some("*.example.org")),
            ("example.org", 443, None),
            ("badexample.org", 443, None),
            ("a.example.org.evil.test", 443, None),
            (".example.org", 443, None),
            ("a.example.org", 22, None),
            ("mirror.example.net", 443, Some("Mirror.Example.NET.")),
            ("api.example.test", 8443, Some("api.example.test:8443")),
            ("api.example.test", 443, None),
            ("x.svc.example.test", 9000, Some("*.svc.example.test:9000")),
            ("x.svc.example.test", 443, None),
            ("svc.example.test", 9000, None),
            ("EXAMPLE.COM", 443, None),
            ("example.com.", 443, None),
            ("", 443, None),
        ] {
            assert_eq!(hosts.allowing(name, port), want, "{name}:{port}");
        }
    }

    #[test]
    fn first_matching_entry_is_named() {
        let hosts = list(&["*.example.com", "a.example.com", "a.example.com:8443"]);
        assert_eq!(hosts.allowing("a.example.com", 443), Some("*.example.com"));
        assert_eq!(
            hosts.allowing("a.example.com", 8443),
            Some("a.example.com:8443")
        );
    }

    #[test]
    fn entry_errors_table() {
        for (entry, why) in [
            ("", "empty host"),
            ("*", "only as a whole first label"),
            ("*example.com", "only as a whole first label"),
            ("a.*.com", "only as a whole first label"),
            ("*.*.example.com", "only as a whole first label"),
            ("example.*", "only as a whole first label"),
            ("*.com", "wildcard over a top-level domain"),
            ("*.com.", "wildcard over a top-level domain"),
            ("*.", "empty host"),
            ("127.0.0.1", "allow_addresses"),
            ("10.0.0.1:443", "allow_addresses"),
            ("*.1.2.3.4", "allow_addresses"),
            ("[::1]", "allow_addresses"),
            ("[::1]:443", "allow_addresses"),
            ("::1", "allow_addresses"),
            ("0x7f.1", "odd IP address encoding"),
            ("2130706433", "odd IP address encoding"),
            ("example..com", "invalid host name"),
            ("-example.com", "invalid host name"),
            ("exa mple.com", "space"),
            (" example.com", "space"),
            ("example.com\n", "control character"),
            ("bücher.example", "non-ASCII"),
            ("user@example.com", "userinfo"),
            ("example.com:0", "invalid port"),
            ("example.com:65536", "invalid port"),
            ("example.com:", "missing port"),
            ("http://example.com", "invalid port"),
            ("example.com/", "invalid host name"),
        ] {
            let err = HostList::parse(&[entry.to_string()], DEFAULTS)
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{entry:?}: {err}");
            assert!(err.contains(&format!("{entry:?}")), "{entry:?}: {err}");
        }
    }

    #[test]
    fn first_bad_entry_refuses_the_whole_list() {
        let entries: Vec<String> = ["example.com", "*.com", "127.1"].map(String::from).to_vec();
        let err = HostList::parse(&entries, DEFAULTS).unwrap_err();
        assert_eq!(
            err.to_string(),
            "host entry \"*.com\": wildcard over a top-level domain"
        );
    }

    #[test]
    fn default_port_zero_is_refused() {
        assert!(HostList::parse(&[], &[0]).is_err());
    }

    #[test]
    fn entries_are_kept_as_written() {
        let written = ["Example.COM.", "*.example.org:8443", "example.com"];
        let hosts = list(&written);
        assert_eq!(hosts.entries(), written);
        assert_eq!(hosts.len(), 3);
        assert!(!hosts.is_empty());
        assert!(list(&[]).is_empty());
        assert!(HostList::default().is_empty());
    }

    #[test]
    fn no_default_ports_means_only_written_ports() {
        let entries = ["example.com".to_string(), "example.org:443".to_string()];
        let hosts = HostList::parse(&entries, &[]).unwrap();
        assert_eq!(hosts.allowing("example.com", 443), None);
        assert_eq!(hosts.allowing("example.org", 443), Some("example.org:443"));
    }
}
