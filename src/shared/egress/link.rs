//! The link between a VM's egress proxy and its host's egress relay: the
//! only way out of a VM with a network. The VM has no network device; its
//! proxy decides as in a container, then asks the relay (over vsock, a
//! connection per upstream) to reach `host:port` for it. The relay, on the
//! host, decides again on its own (the machine's list, the address classes
//! the proxy refuses) before it connects, so that a guest whose kernel is
//! not warden's any more reaches no more than its list.
//!
//! One line each way, then the connection's bytes:
//!
//! ```text
//! guest: EGRESS <machine key> <host> <port>\n
//! host:  OK <address>\n                     (then the upstream's bytes)
//!        REFUSED <kind> <reason>\n          (then the end)
//! ```
//!
//! The key proves the asker is the VM's warden (only root reads it in the
//! guest), not the runtime or a command with a vsock socket of its own.
//! Everything here is pure.

use super::refusal::{Kind, Refused};
use std::net::SocketAddr;

/// The longest line either way, its newline included.
pub const MAX_LINE: usize = 1024;

/// What the guest asks the relay for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub key: String,
    pub host: String,
    pub port: u16,
}

/// Why the guest's line cannot be written, or is not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// "key" or "host": empty, or with a space or a control character.
    #[error("the {0} is not one printable word")]
    NotAWord(&'static str),
    #[error("the line is over {} bytes", MAX_LINE)]
    TooLong,
    #[error("not `EGRESS <key> <host> <port>`")]
    NotAnAsk,
    #[error("a key or host that is not one printable word")]
    PartNotAWord,
    #[error("{0:?} is not a port")]
    NotAPort(String),
}

/// The guest's line. Err when a part would not survive the trip (empty,
/// or with a space or a control character in it).
pub fn ask_line(ask: &Ask) -> Result<String, LinkError> {
    for (what, part) in [("key", &ask.key), ("host", &ask.host)] {
        if !is_word(part) {
            return Err(LinkError::NotAWord(what));
        }
    }
    let line = format!("EGRESS {} {} {}\n", ask.key, ask.host, ask.port);
    match line.len() <= MAX_LINE {
        true => Ok(line),
        false => Err(LinkError::TooLong),
    }
}

/// Reads the guest's line (without its newline).
pub fn parse_ask(line: &str) -> Result<Ask, LinkError> {
    let mut words = line.split(' ');
    let (Some("EGRESS"), Some(key), Some(host), Some(port), None) = (
        words.next(),
        words.next(),
        words.next(),
        words.next(),
        words.next(),
    ) else {
        return Err(LinkError::NotAnAsk);
    };
    if !is_word(key) || !is_word(host) {
        return Err(LinkError::PartNotAWord);
    }
    let port = match port.parse::<u16>() {
        Ok(p) if p != 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => return Err(LinkError::NotAPort(port.into())),
    };
    Ok(Ask {
        key: key.into(),
        host: host.into(),
        port,
    })
}

/// The relay's answer line.
pub fn answer_line(answer: &Result<SocketAddr, Refused>) -> String {
    match answer {
        Ok(to) => format!("OK {to}\n"),
        Err(r) => {
            // One line, whatever the reason says.
            let reason: String = r
                .reason
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(MAX_LINE - 64)
                .collect();
            format!("REFUSED {} {reason}\n", r.kind.as_str())
        }
    }
}

/// Reads the relay's answer (without its newline). A refusal keeps its
/// kind; a line the guest cannot read is a failed connection.
pub fn parse_answer(line: &str) -> Result<SocketAddr, Refused> {
    let garbled = || {
        Refused::new(
            Kind::ConnectFailed,
            format!(
                "the host's relay answered {:?}",
                crate::shared::printable::escape_controls(
                    &line.chars().take(64).collect::<String>()
                )
            ),
        )
    };
    if let Some(to) = line.strip_prefix("OK ") {
        return to.parse().map_err(|_| garbled());
    }
    let Some(rest) = line.strip_prefix("REFUSED ") else {
        return Err(garbled());
    };
    let (word, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    let kind = Kind::from_word(word).ok_or_else(garbled)?;
    Err(Refused::new(kind, format!("the host's relay: {reason}")))
}

fn is_word(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(key: &str, host: &str, port: u16) -> Ask {
        Ask {
            key: key.into(),
            host: host.into(),
            port,
        }
    }

    #[test]
    fn ask_line_table() {
        let cases: [(Ask, Result<&str, &str>); 5] = [
            (
                ask("k3y", "allowed.test", 443),
                Ok("EGRESS k3y allowed.test 443\n"),
            ),
            (ask("k3y", "a b", 443), Err("host")),
            (ask("k3y", "", 443), Err("host")),
            (ask("k 3", "x.test", 1), Err("key")),
            (ask("k3y", &"a".repeat(MAX_LINE), 1), Err("over")),
        ];
        for (given, want) in cases {
            let got = ask_line(&given);
            match (&got, want) {
                (Ok(line), Ok(w)) => assert_eq!(line, w),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{given:?}: {e}"),
                _ => panic!("{given:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn parse_ask_table() {
        let cases: [(&str, Result<Ask, &str>); 10] = [
            (
                "EGRESS k3y allowed.test 443",
                Ok(ask("k3y", "allowed.test", 443)),
            ),
            ("EGRESS k3y allowed.test 0", Err("not a port")),
            ("EGRESS k3y allowed.test +443", Err("not a port")),
            ("EGRESS k3y allowed.test 65536", Err("not a port")),
            ("EGRESS k3y allowed.test", Err("EGRESS <key>")),
            ("EGRESS k3y allowed.test 443 more", Err("EGRESS <key>")),
            ("EGRESS  allowed.test 443", Err("printable word")),
            ("CONNECT allowed.test:443 HTTP/1.1", Err("EGRESS <key>")),
            ("EGRESS k3y allowed\u{7f}.test 443", Err("printable word")),
            ("", Err("EGRESS <key>")),
        ];
        for (line, want) in cases {
            match (parse_ask(line), want) {
                (Ok(got), Ok(w)) => assert_eq!(got, w, "{line:?}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{line:?}: {e}"),
                (got, _) => panic!("{line:?}: {got:?}"),
            }
        }
        // What the guest writes, the host reads back the same.
        let a = ask("k3y", "git.allowed.test", 22);
        let line = ask_line(&a).unwrap();
        assert_eq!(parse_ask(line.trim_end_matches('\n')), Ok(a));
    }

    #[test]
    fn answers_round_trip_and_garbage_is_a_failed_connection() {
        let to: SocketAddr = "10.200.1.1:443".parse().unwrap();
        let v6: SocketAddr = "[fd20::1]:443".parse().unwrap();
        let refused = Refused::new(Kind::NotListed, "x.test:443 is not\non the list");
        type Case = (
            Result<SocketAddr, Refused>,
            Result<SocketAddr, (Kind, &'static str)>,
        );
        let cases: [Case; 3] = [
            (Ok(to), Ok(to)),
            (Ok(v6), Ok(v6)),
            (
                Err(refused),
                Err((
                    Kind::NotListed,
                    "the host's relay: x.test:443 is not on the list",
                )),
            ),
        ];
        for (answer, want) in cases {
            let line = answer_line(&answer);
            assert!(
                line.ends_with('\n') && line.matches('\n').count() == 1,
                "{line:?}"
            );
            let got = parse_answer(line.trim_end_matches('\n'));
            match (got, want) {
                (Ok(a), Ok(w)) => assert_eq!(a, w),
                (Err(r), Err((kind, reason))) => {
                    assert_eq!((r.kind, r.reason.as_str()), (kind, reason))
                }
                (got, want) => panic!("{line:?}: {got:?} for {want:?}"),
            }
        }
        for garbage in [
            "",
            "OK",
            "OK nowhere",
            "REFUSED",
            "REFUSED no_such_kind why",
            "HTTP/1.1 200",
        ] {
            let r = parse_answer(garbage).unwrap_err();
            assert_eq!(r.kind, Kind::ConnectFailed, "{garbage:?}");
            assert!(
                r.reason.contains("the host's relay answered"),
                "{garbage:?}: {}",
                r.reason
            );
        }
    }
}
