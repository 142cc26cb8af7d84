//! The target of a proxy request (a CONNECT authority, an absolute-form
//! URI, a Host header), parsed strictly.
//!
//! This is a security boundary: lenient parsers (browsers', libraries')
//! read "0x7f.1", "user@host" or "host%2e" in ways an attacker can steer,
//! so anything short of one plain spelling is refused rather than guessed
//! at. Names come out lowercase without a trailing dot, so comparing them
//! with the host list is plain string comparison.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest DNS name, without the trailing dot.
const MAX_NAME: usize = 253;
/// Longest DNS label.
const MAX_LABEL: usize = 63;
/// The port of an absolute http:// URI that names none.
const HTTP_PORT: u16 = 80;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Why a target is refused. The messages are short, plain ASCII and never
/// quote the input: they go into an HTTP header and the audit log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("empty host")]
    EmptyHost,
    #[error("control character in target")]
    ControlChar,
    #[error("space in target")]
    Whitespace,
    #[error("non-ASCII character in target")]
    NonAscii,
    #[error("backslash in target")]
    Backslash,
    #[error("userinfo is not allowed")]
    Userinfo,
    #[error("zone ids are not allowed")]
    ZoneId,
    #[error("percent-encoding is not allowed in the host")]
    PercentEncoding,
    #[error("odd IP address encoding")]
    OddIpEncoding,
    #[error("IPv6 address without brackets")]
    UnbracketedIpv6,
    #[error("invalid IPv6 address")]
    InvalidIpv6,
    #[error("invalid host name")]
    InvalidName,
    #[error("name too long")]
    NameTooLong,
    #[error("missing port")]
    MissingPort,
    #[error("invalid port")]
    InvalidPort,
    #[error("not an absolute URI")]
    NotAbsolute,
    #[error("https needs CONNECT")]
    HttpsNeedsConnect,
    #[error("only http is accepted")]
    UnsupportedScheme,
    #[error("fragment is not allowed")]
    Fragment,
}

/// A CONNECT request's authority: "host:port" or "[v6]:port"; the port is required.
pub fn parse_authority(s: &str) -> Result<Target, TargetError> {
    let (host, port) = parse_host_port(s)?;
    let port = port.ok_or(TargetError::MissingPort)?;
    Ok(Target { host, port })
}

/// An absolute-form request target for plain HTTP: "http://host[:port]/path?query". Returns the target (port 80 by default) and the origin-form path to send upstream ("/" when empty). Only the http scheme (case-insensitive) is accepted; https:// in a plain request is refused (clients must use CONNECT); a fragment is refused.
pub fn parse_absolute_uri(s: &str) -> Result<(Target, String), TargetError> {
    // The path goes upstream in a request line we write: nothing in it
    // may end that line or split it.
    refuse_chars(s)?;
    if s.contains('#') {
        return Err(TargetError::Fragment);
    }
    let rest = strip_scheme(s)?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at_checked(end).unwrap_or((rest, ""));
    let (host, port) = parse_host_port(authority)?;
    let target = Target {
        host,
        port: port.unwrap_or(HTTP_PORT),
    };
    Ok((target, origin_form(path)))
}

/// A Host header value: "host" or "host:port" (default_port when absent). Used to check the header agrees with the request line.
pub fn parse_host_header(s: &str, default_port: u16) -> Result<Target, TargetError> {
    let (host, port) = parse_host_port(s)?;
    Ok(Target {
        host,
        port: port.unwrap_or(default_port),
    })
}

/// "host", "host:port", "[v6]" or "[v6]:port": the host, and the port
/// when one is written. The common ground of the three parsers above, and
/// of the host list's entries.
pub fn parse_host_port(s: &str) -> Result<(Host, Option<u16>), TargetError> {
    refuse_chars(s)?;
    refuse_authority_chars(s)?;
    let (host, port) = split_port(s)?;
    let port = port.map(parse_port).transpose()?;
    Ok((parse_host(host)?, port))
}

/// A kind of character refused in a target, and the error naming it.
type CharRule = (fn(char) -> bool, TargetError);

/// Characters refused anywhere in a target, most serious first so the
/// message names the worst thing found.
fn refuse_chars(s: &str) -> Result<(), TargetError> {
    let rules: [CharRule; 4] = [
        (char::is_control, TargetError::ControlChar),
        (char::is_whitespace, TargetError::Whitespace),
        (|c| !c.is_ascii(), TargetError::NonAscii),
        (|c| c == '\\', TargetError::Backslash),
    ];
    for (bad, error) in rules {
        if s.chars().any(bad) {
            return Err(error);
        }
    }
    Ok(())
}

/// Characters refused in an authority (they are fine in a path).
fn refuse_authority_chars(s: &str) -> Result<(), TargetError> {
    if s.contains('@') {
        return Err(TargetError::Userinfo);
    }
    match (s.contains('%'), s.starts_with('[')) {
        (true, true) => Err(TargetError::ZoneId),
        (true, false) => Err(TargetError::PercentEncoding),
        _ => Ok(()),
    }
}

/// Splits off the port text. A bracketed host keeps its brackets, so
/// `parse_host` knows it was bracketed.
fn split_port(s: &str) -> Result<(&str, Option<&str>), TargetError> {
    if s.starts_with('[') {
        let (inside, after) = s.split_once(']').ok_or(TargetError::InvalidIpv6)?;
        return match after {
            "" => Ok((inside, None)),
            _ => Ok((
                inside,
                Some(after.strip_prefix(':').ok_or(TargetError::InvalidIpv6)?),
            )),
        };
    }
    match s.split_once(':') {
        None => Ok((s, None)),
        Some((host, port)) if !port.contains(':') => Ok((host, Some(port))),
        Some(_) => Err(many_colons(s)),
    }
}

/// An unbracketed host with several colons: an IPv6 address (with or
/// without a port after it), or garbage.
fn many_colons(s: &str) -> TargetError {
    let v6 = |t: &str| t.parse::<Ipv6Addr>().is_ok();
    if v6(s) || s.rsplit_once(':').is_some_and(|(host, _)| v6(host)) {
        TargetError::UnbracketedIpv6
    } else {
        TargetError::InvalidPort
    }
}

/// A port: 1..=65535 in plain decimal. "0", "0443" and "+443" are refused:
/// a second spelling of a port is a second chance to disagree.
fn parse_port(s: &str) -> Result<u16, TargetError> {
    if s.is_empty() {
        return Err(TargetError::MissingPort);
    }
    let plain = s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit()) && !s.starts_with('0');
    match s.parse::<u16>() {
        Ok(port) if plain => Ok(port),
        _ => Err(TargetError::InvalidPort),
    }
}

/// The host without its port: "[v6]" (split_port left the opening
/// bracket on), a canonical dotted quad, or a name.
fn parse_host(h: &str) -> Result<Host, TargetError> {
    if h.is_empty() {
        return Err(TargetError::EmptyHost);
    }
    match h.strip_prefix('[') {
        Some(inside) => parse_ipv6(inside),
        None => parse_name_or_ipv4(h),
    }
}

fn parse_ipv6(inside: &str) -> Result<Host, TargetError> {
    inside
        .parse::<Ipv6Addr>()
        .map(|ip| Host::Ip(IpAddr::V6(ip)))
        .map_err(|_| TargetError::InvalidIpv6)
}

fn parse_name_or_ipv4(h: &str) -> Result<Host, TargetError> {
    let name = h.strip_suffix('.').unwrap_or(h);
    if name.len() > MAX_NAME {
        return Err(TargetError::NameTooLong);
    }
    if looks_numeric(name) {
        // A trailing dot is a name's spelling; on an address it is one
        // more way to write it.
        let canonical = (name.len() == h.len())
            .then(|| canonical_ipv4(name))
            .flatten();
        return canonical
            .map(|ip| Host::Ip(IpAddr::V4(ip)))
            .ok_or(TargetError::OddIpEncoding);
    }
    if !valid_name(name) {
        return Err(TargetError::InvalidName);
    }
    Ok(Host::Name(name.to_ascii_lowercase()))
}

/// Whether a host is an attempt at an IPv4 literal: resolvers and URL
/// parsers read "2130706433", "127.1" and "0x7f.1" as 127.0.0.1.
fn looks_numeric(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or("");
    let all_digits = !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit());
    let hex = |label: &str| label.starts_with("0x") || label.starts_with("0X");
    all_digits || name.split('.').any(hex)
}

/// Four decimal parts, each 0..=255, no leading zeros (which some parsers
/// read as octal).
fn canonical_ipv4(s: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = s.split('.');
    for octet in &mut octets {
        *octet = canonical_octet(parts.next()?)?;
    }
    match parts.next() {
        None => Some(Ipv4Addr::from(octets)),
        Some(_) => None,
    }
}

fn canonical_octet(part: &str) -> Option<u8> {
    let plain = (1..=3).contains(&part.len())
        && part.bytes().all(|b| b.is_ascii_digit())
        && (part == "0" || !part.starts_with('0'));
    plain.then(|| part.parse().ok()).flatten()
}

/// Whether `name` (no trailing dot) is a valid host name: labels of
/// 1..=63 ASCII letters, digits, '-' and '_', not starting or ending with
/// '-', at most 253 characters in all.
pub fn valid_name(name: &str) -> bool {
    name.len() <= MAX_NAME && name.split('.').all(valid_label)
}

fn valid_label(label: &str) -> bool {
    let chars_ok = label
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (1..=MAX_LABEL).contains(&label.len())
        && chars_ok
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// The rest of an absolute URI after "http://".
fn strip_scheme(s: &str) -> Result<&str, TargetError> {
    let (scheme, rest) = s.split_once("://").ok_or(TargetError::NotAbsolute)?;
    if !valid_scheme(scheme) {
        Err(TargetError::NotAbsolute)
    } else if scheme.eq_ignore_ascii_case("http") {
        Ok(rest)
    } else if scheme.eq_ignore_ascii_case("https") {
        Err(TargetError::HttpsNeedsConnect)
    } else {
        Err(TargetError::UnsupportedScheme)
    }
}

/// RFC 3986: a letter, then letters, digits, '+', '-' and '.'.
fn valid_scheme(scheme: &str) -> bool {
    let mut bytes = scheme.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
}

/// The path and query as sent upstream: "" becomes "/", "?q" becomes "/?q".
fn origin_form(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TargetError::*;

    fn name(n: &str) -> Host {
        Host::Name(n.to_string())
    }

    fn ip(a: &str) -> Host {
        Host::Ip(a.parse().unwrap())
    }

    fn target(host: Host, port: u16) -> Target {
        Target { host, port }
    }

    /// Authorities refused for what they hold, with why.
    const REFUSED_AUTHORITIES: &[(&str, Result<Target, TargetError>)] = &[
        // Refused characters.
        ("", Err(EmptyHost)),
        (":443", Err(EmptyHost)),
        ("example.com:443\r\nX: y", Err(ControlChar)),
        ("example.com\0:443", Err(ControlChar)),
        ("example.com\n:443", Err(ControlChar)),
        ("example.com\t:443", Err(ControlChar)),
        ("example.com\u{7f}:443", Err(ControlChar)),
        ("example.com\u{85}:443", Err(ControlChar)),
        ("example.com :443", Err(Whitespace)),
        ("example.com:443\u{2028}", Err(Whitespace)),
        ("bücher.example:443", Err(NonAscii)),
        ("example\u{ff0e}com:443", Err(NonAscii)),
        ("user@example.com:443", Err(Userinfo)),
        ("user:pass@example.com:443", Err(Userinfo)),
        ("[fe80::1%eth0]:443", Err(ZoneId)),
        ("[fe80::1%25eth0]:443", Err(ZoneId)),
        ("exa%6dple.com:443", Err(PercentEncoding)),
        ("example.com\\.evil.test:443", Err(Backslash)),
        // Refused names.
        ("example..com:443", Err(InvalidName)),
        (".example.com:443", Err(InvalidName)),
        (".:443", Err(InvalidName)),
        ("example.com..:443", Err(InvalidName)),
        ("-example.com:443", Err(InvalidName)),
        ("example-.com:443", Err(InvalidName)),
        ("exa*mple.com:443", Err(InvalidName)),
        ("example.com/:443", Err(InvalidName)),
        // Attempted IPv4 literals.
        ("2130706433:443", Err(OddIpEncoding)),
        ("0x7f.1:443", Err(OddIpEncoding)),
        ("0x7f000001:443", Err(OddIpEncoding)),
        ("0X7F.0.0.1:443", Err(OddIpEncoding)),
        ("127.1:443", Err(OddIpEncoding)),
        ("017.0.0.1:443", Err(OddIpEncoding)),
        ("127.0.0.01:443", Err(OddIpEncoding)),
        ("127.000.0.1:443", Err(OddIpEncoding)),
        ("1.2.3.4.5:443", Err(OddIpEncoding)),
        ("256.0.0.1:443", Err(OddIpEncoding)),
        ("127.0.0.1.:443", Err(OddIpEncoding)),
        ("1.2.3.-4:443", Err(InvalidName)),
        ("a.0x10.example.com:443", Err(OddIpEncoding)),
        ("example.123:443", Err(OddIpEncoding)),
        // IPv6.
        ("::1", Err(UnbracketedIpv6)),
        ("::1:443", Err(UnbracketedIpv6)),
        ("2001:db8::1:443", Err(UnbracketedIpv6)),
        ("[::1]", Err(MissingPort)),
        ("[::1]443", Err(InvalidIpv6)),
        ("[::1:443", Err(InvalidIpv6)),
        ("[]:443", Err(InvalidIpv6)),
        ("[127.0.0.1]:443", Err(InvalidIpv6)),
        ("[v1.fe]:443", Err(InvalidIpv6)),
        ("[example.com]:443", Err(InvalidIpv6)),
        // Ports.
        ("example.com", Err(MissingPort)),
        ("example.com:", Err(MissingPort)),
        ("example.com:99999", Err(InvalidPort)),
        ("example.com:65536", Err(InvalidPort)),
        ("example.com:0", Err(InvalidPort)),
        ("example.com:0443", Err(InvalidPort)),
        ("example.com:+443", Err(InvalidPort)),
        ("example.com:-1", Err(InvalidPort)),
        ("example.com:44a", Err(InvalidPort)),
        ("example.com:000000000443", Err(InvalidPort)),
        ("example.com:443:443", Err(InvalidPort)),
        ("[::1]:0", Err(InvalidPort)),
    ];

    #[test]
    fn authority_table() {
        let long_label = "a".repeat(64);
        let label63 = "a".repeat(63);
        let name253 = [&*label63, &*label63, &*label63, &"b".repeat(61)].join(".");
        let name254 = format!("{name253}c");
        let ok_253 = format!("{name253}:443");
        let too_long = format!("{name254}:443");
        let long_label_host = format!("{long_label}.example.com:443");
        let label63_host = format!("{label63}.example.com:443");
        let cases: Vec<(&str, Result<Target, TargetError>)> = vec![
            ("example.com:443", Ok(target(name("example.com"), 443))),
            ("EXAMPLE.com.:443", Ok(target(name("example.com"), 443))),
            (
                "a-b_c.example.org:8080",
                Ok(target(name("a-b_c.example.org"), 8080)),
            ),
            (
                "xn--bcher-kva.example:443",
                Ok(target(name("xn--bcher-kva.example"), 443)),
            ),
            ("localhost:1", Ok(target(name("localhost"), 1))),
            ("1.example.com:443", Ok(target(name("1.example.com"), 443))),
            (
                "127.0.0.1.example.com:443",
                Ok(target(name("127.0.0.1.example.com"), 443)),
            ),
            ("example.com:65535", Ok(target(name("example.com"), 65535))),
            (ok_253.as_str(), Ok(target(name(&name253), 443))),
            (
                label63_host.as_str(),
                Ok(target(name(&format!("{label63}.example.com")), 443)),
            ),
            ("127.0.0.1:443", Ok(target(ip("127.0.0.1"), 443))),
            ("0.0.0.0:80", Ok(target(ip("0.0.0.0"), 80))),
            ("255.255.255.255:80", Ok(target(ip("255.255.255.255"), 80))),
            ("[::1]:443", Ok(target(ip("::1"), 443))),
            ("[2001:DB8::1]:443", Ok(target(ip("2001:db8::1"), 443))),
            (
                "[::ffff:127.0.0.1]:443",
                Ok(target(ip("::ffff:127.0.0.1"), 443)),
            ),
            // A label too long, and a name.
            (long_label_host.as_str(), Err(InvalidName)),
            (too_long.as_str(), Err(NameTooLong)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_authority(input), want, "{input:?}");
        }
    }

    #[test]
    fn refused_authorities_table() {
        for (input, want) in REFUSED_AUTHORITIES {
            assert_eq!(parse_authority(input), *want, "{input:?}");
        }
    }

    #[test]
    fn absolute_uri_table() {
        let ok = |host, port, path: &str| Ok((target(host, port), path.to_string()));
        for (input, want) in [
            (
                "http://example.com/a?b",
                ok(name("example.com"), 80, "/a?b"),
            ),
            (
                "HTTP://Example.COM:8080",
                ok(name("example.com"), 8080, "/"),
            ),
            ("http://example.com", ok(name("example.com"), 80, "/")),
            (
                "http://example.com?q=1",
                ok(name("example.com"), 80, "/?q=1"),
            ),
            ("http://example.com./x", ok(name("example.com"), 80, "/x")),
            ("http://[::1]/", ok(ip("::1"), 80, "/")),
            (
                "http://[2001:db8::1]:8080/p",
                ok(ip("2001:db8::1"), 8080, "/p"),
            ),
            ("http://192.0.2.1/x", ok(ip("192.0.2.1"), 80, "/x")),
            (
                "http://example.com/@scope%2fpkg",
                ok(name("example.com"), 80, "/@scope%2fpkg"),
            ),
            (
                "http://example.com/?u=a@b",
                ok(name("example.com"), 80, "/?u=a@b"),
            ),
            ("http://example.com//x", ok(name("example.com"), 80, "//x")),
            (
                "http://example.com/a:b",
                ok(name("example.com"), 80, "/a:b"),
            ),
            ("http://a@b.example/", Err(Userinfo)),
            ("http://user:pw@example.com/", Err(Userinfo)),
            ("http://example.com#frag", Err(Fragment)),
            ("http://example.com/a#frag", Err(Fragment)),
            ("https://example.com/", Err(HttpsNeedsConnect)),
            ("HTTPS://example.com/", Err(HttpsNeedsConnect)),
            ("ftp://example.com/", Err(UnsupportedScheme)),
            ("ws://example.com/", Err(UnsupportedScheme)),
            ("/a/b", Err(NotAbsolute)),
            ("/a?u=http://example.com", Err(NotAbsolute)),
            ("http:example.com", Err(NotAbsolute)),
            ("http:/example.com", Err(NotAbsolute)),
            ("example.com:80", Err(NotAbsolute)),
            ("http://", Err(EmptyHost)),
            ("http:///path", Err(EmptyHost)),
            ("http://:80/", Err(EmptyHost)),
            ("http://example.com/a b", Err(Whitespace)),
            ("http://example.com/a\r\nHost: evil.test", Err(ControlChar)),
            ("http://example.com/\u{e9}", Err(NonAscii)),
            ("http://evil.test\\@example.com/", Err(Backslash)),
            ("http://example.com/a\\b", Err(Backslash)),
            ("http://0x7f.1/", Err(OddIpEncoding)),
            ("http://2130706433/", Err(OddIpEncoding)),
            ("http://[fe80::1%25eth0]/", Err(ZoneId)),
            ("http://exa%6dple.com/", Err(PercentEncoding)),
            ("http://example.com:/", Err(MissingPort)),
            ("http://example.com:0/", Err(InvalidPort)),
            ("http://::1/", Err(UnbracketedIpv6)),
        ] {
            assert_eq!(parse_absolute_uri(input), want, "{input:?}");
        }
    }

    #[test]
    fn host_header_table() {
        for (input, default, want) in [
            ("example.com", 80, Ok(target(name("example.com"), 80))),
            ("Example.COM", 443, Ok(target(name("example.com"), 443))),
            (
                "example.com:8080",
                80,
                Ok(target(name("example.com"), 8080)),
            ),
            ("example.com.", 80, Ok(target(name("example.com"), 80))),
            ("[::1]", 80, Ok(target(ip("::1"), 80))),
            ("[::1]:8080", 80, Ok(target(ip("::1"), 8080))),
            ("192.0.2.1", 80, Ok(target(ip("192.0.2.1"), 80))),
            ("", 80, Err(EmptyHost)),
            ("example.com:", 80, Err(MissingPort)),
            ("example.com:0", 80, Err(InvalidPort)),
            ("user@example.com", 80, Err(Userinfo)),
            ("example.com\r\n", 80, Err(ControlChar)),
            (" example.com", 80, Err(Whitespace)),
            ("127.1", 80, Err(OddIpEncoding)),
            ("::1", 80, Err(UnbracketedIpv6)),
            ("example.com/", 80, Err(InvalidName)),
        ] {
            assert_eq!(parse_host_header(input, default), want, "{input:?}");
        }
    }

    #[test]
    fn display_table() {
        for (input, shown) in [
            ("example.com:443", "example.com:443"),
            ("EXAMPLE.com.:8443", "example.com:8443"),
            ("1.2.3.4:80", "1.2.3.4:80"),
            ("[::1]:443", "[::1]:443"),
            ("[2001:0db8:0:0:0:0:0:1]:443", "[2001:db8::1]:443"),
        ] {
            assert_eq!(
                parse_authority(input).unwrap().to_string(),
                shown,
                "{input:?}"
            );
        }
    }

    #[test]
    fn displayed_targets_parse_back_the_same() {
        for input in [
            "example.com:443",
            "10.0.0.1:8080",
            "[fe80::1]:443",
            "[::ffff:1.2.3.4]:1",
        ] {
            let parsed = parse_authority(input).unwrap();
            assert_eq!(
                parse_authority(&parsed.to_string()),
                Ok(parsed),
                "{input:?}"
            );
        }
    }

    #[test]
    fn hostile_inputs_never_panic() {
        let pieces = [
            "[", "]", ":", ".", "%", "@", "0x", "\u{e9}", "9", "-", "/", "?", "#", "::", "http://",
        ];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let s = format!("{a}{b}{c}");
                    let _ = parse_authority(&s);
                    let _ = parse_absolute_uri(&s);
                    let _ = parse_host_header(&s, 80);
                }
            }
        }
    }
}
