//! The proxy's HTTP: reading a request head, parsing and checking it (the
//! target, the Host header, how a body is framed), and the answer a
//! refused client gets. Everything but the reading is pure.

use crate::guest::net::opened::http1::HOP_BY_HOP;
use crate::shared::egress::refusal::{Kind, Refused};
use crate::shared::egress::target::{self, Host, Target, TargetError};
use std::net::IpAddr;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The most a request head may hold (request line and headers).
const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// How long a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) struct Head {
    pub(super) bytes: Vec<u8>,
    /// Where the head ends (after the blank line); what follows is early
    /// payload the client sent without waiting.
    pub(super) len: usize,
}

impl Head {
    /// What the client sent after the head without waiting for an answer.
    pub(super) fn early(&self) -> &[u8] {
        &self.bytes[self.len..]
    }
}

/// The request head, if it comes whole within `HEAD_TIMEOUT`. None: the
/// client closed without sending anything.
pub(super) async fn read_head_in_time(client: &mut TcpStream) -> Result<Option<Head>, Refused> {
    match tokio::time::timeout(HEAD_TIMEOUT, read_head(client)).await {
        Ok(read) => read,
        Err(_) => Err(Refused::new(
            Kind::HeadTimeout,
            "no complete request head within 10 s",
        )),
    }
}

/// Reads up to the end of the request head. None: the client closed
/// without sending anything.
async fn read_head(client: &mut TcpStream) -> Result<Option<Head>, Refused> {
    let mut bytes = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|e| Refused::new(Kind::BadRequest, format!("reading the request: {e}")))?;
        if n == 0 {
            if bytes.is_empty() {
                return Ok(None);
            }
            return Err(Refused::new(
                Kind::BadRequest,
                "the request head was cut short",
            ));
        }
        // Only the new bytes (and the three before them) can complete the
        // blank line.
        let from = bytes.len().saturating_sub(3);
        bytes.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&bytes[from..], b"\r\n\r\n") {
            let len = from + end + 4;
            if len > MAX_HEAD {
                break;
            }
            return Ok(Some(Head { bytes, len }));
        }
        if bytes.len() > MAX_HEAD {
            break;
        }
    }
    Err(Refused::new(
        Kind::HeadTooLarge,
        "the request head is over 16 KiB",
    ))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A request the proxy understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub target: Target,
    /// None for CONNECT; for plain HTTP, what to send upstream.
    pub plain: Option<Plain>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plain {
    /// The request head for the origin server: origin-form target, the
    /// client's headers without hop-by-hop ones, `Connection: close`.
    pub head: Vec<u8>,
    pub body_len: u64,
    /// The origin-form target (path and query), for an opened host's rules.
    pub path: String,
}

/// Pure: parses and checks a request head. Malformed targets, a Host
/// header that disagrees with the request line, and bodies the proxy would
/// have to re-frame are refused.
pub fn parse_request(head: &[u8]) -> Result<Request, Refused> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    parsed(req.parse(head))?;
    let method = req.method.unwrap_or_default().to_string();
    let path = req.path.unwrap_or_default();
    let fields = scan_headers(req.headers)?;
    if method == "CONNECT" {
        let target = target::parse_authority(path).map_err(|e| bad_target(path, e))?;
        check_host_header(fields.host.as_deref(), &target, target.port)?;
        return Ok(Request {
            method,
            target,
            plain: None,
        });
    }
    plain_request(method, path, req.headers, &fields)
}

/// httparse's verdict on the head, as a refusal when it is not whole.
fn parsed(status: httparse::Result<usize>) -> Result<(), Refused> {
    match status {
        Ok(httparse::Status::Complete(_)) => Ok(()),
        Ok(httparse::Status::Partial) => {
            Err(Refused::new(Kind::BadRequest, "incomplete request head"))
        }
        Err(httparse::Error::TooManyHeaders) => {
            Err(Refused::new(Kind::HeadTooLarge, "over 64 header fields"))
        }
        Err(e) => Err(Refused::new(
            Kind::BadRequest,
            format!("malformed request: {e}"),
        )),
    }
}

fn bad_target(path: &str, e: TargetError) -> Refused {
    Refused::new(
        Kind::BadTarget,
        format!("bad target {}: {e}", printable(path)),
    )
}

/// What the proxy reads from the client's headers.
struct Fields {
    host: Option<String>,
    body_len: u64,
}

/// The Host header and the body's length; a body framed any other way
/// than by one Content-Length is refused (re-framing it is where request
/// smuggling lives).
fn scan_headers(headers: &[httparse::Header]) -> Result<Fields, Refused> {
    let bad = |reason: &str| Refused::new(Kind::BadRequest, reason);
    let mut host = None;
    let mut body_len = 0u64;
    let mut lengths = 0;
    for h in headers {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| bad(&format!("header {} is not UTF-8", printable(h.name))))?;
        if h.name.eq_ignore_ascii_case("host") {
            if host.is_some() {
                return Err(bad("more than one Host header"));
            }
            host = Some(value.trim().to_string());
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Refused::new(
                Kind::LengthRequired,
                "a request body without Content-Length is not carried; use HTTPS (CONNECT)",
            ));
        } else if h.name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            body_len = content_length(value).ok_or_else(|| bad("bad Content-Length"))?;
        }
    }
    if lengths > 1 {
        return Err(bad("more than one Content-Length"));
    }
    Ok(Fields { host, body_len })
}

/// A plain HTTP request: its absolute URI checked, and the head to send
/// upstream made.
fn plain_request(
    method: String,
    path: &str,
    headers: &[httparse::Header],
    fields: &Fields,
) -> Result<Request, Refused> {
    if path.starts_with('/') {
        return Err(Refused::new(
            Kind::BadRequest,
            "not a proxy request: the target must be an absolute http:// URI, or use CONNECT",
        ));
    }
    let (target, origin) = target::parse_absolute_uri(path).map_err(|e| bad_target(path, e))?;
    check_host_header(fields.host.as_deref(), &target, 80)?;
    let missing_host = fields.host.is_none().then_some(&target);
    let head = origin_head(&method, &origin, headers, missing_host);
    Ok(Request {
        method,
        target,
        plain: Some(Plain {
            head,
            body_len: fields.body_len,
            path: origin.to_string(),
        }),
    })
}

/// The head for the origin server: origin-form, without hop-by-hop
/// headers, with a Host header written from the target when the client
/// sent none.
fn origin_head(
    method: &str,
    origin: &str,
    headers: &[httparse::Header],
    missing_host: Option<&Target>,
) -> Vec<u8> {
    let mut out = format!("{method} {origin} HTTP/1.1\r\n").into_bytes();
    for h in headers {
        let name = h.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&name.as_str()) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(target) = missing_host {
        out.extend_from_slice(format!("Host: {}\r\n", host_value(target)).as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

fn host_value(t: &Target) -> String {
    match (&t.host, t.port) {
        (Host::Name(n), 80) => n.clone(),
        (Host::Ip(IpAddr::V6(ip)), 80) => format!("[{ip}]"),
        (Host::Ip(ip), 80) => ip.to_string(),
        _ => t.to_string(),
    }
}

/// Pure: a Content-Length value, digits only (no sign, no inner space).
fn content_length(value: &str) -> Option<u64> {
    let v = value.trim_matches([' ', '\t']);
    match !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        true => v.parse().ok(),
        false => None,
    }
}

/// A Host header, when there is one, must name the target of the request
/// line: else the origin might serve another host than the one checked.
fn check_host_header(header: Option<&str>, t: &Target, default_port: u16) -> Result<(), Refused> {
    let Some(value) = header else { return Ok(()) };
    let said = target::parse_host_header(value, default_port).map_err(|e| {
        Refused::new(
            Kind::BadRequest,
            format!("bad Host header {}: {e}", printable(value)),
        )
    })?;
    if said != *t {
        return Err(Refused::new(
            Kind::BadRequest,
            format!(
                "the Host header ({}) disagrees with the request line ({t})",
                said
            ),
        ));
    }
    Ok(())
}

/// The client's text, cut and made printable for a reason.
fn printable(s: &str) -> String {
    let cut: String = s.chars().take(200).collect();
    cut.escape_debug().to_string()
}

/// Pure: the whole answer to a refused client, reason in the body and in
/// a `Warden-Reason` header.
pub(super) fn refusal_response(r: &Refused) -> String {
    let body = format!("warden: refused: {}\n", r.reason);
    // The reason goes in a header too, made safe for one: a reason
    // quotes the client's own words, which must not end the header.
    let header: String = r
        .reason
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    format!(
        "HTTP/1.1 {} {}\r\nWarden-Reason: {header}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        r.status(),
        reason_phrase(r.status()),
        body.len()
    )
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> Result<Request, Refused> {
        parse_request(text.as_bytes())
    }

    #[test]
    fn requests_table() {
        type Case<'a> = (&'a str, Result<&'a str, (u16, Kind, &'a str)>);
        let cases: &[Case] = &[
            ("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", Ok("example.com:443")),
            ("CONNECT example.com:443 HTTP/1.1\r\n\r\n", Ok("example.com:443")),
            ("CONNECT EXAMPLE.com.:443 HTTP/1.1\r\n\r\n", Ok("example.com:443")),
            ("CONNECT example.com:443 HTTP/1.1\r\nHost: other.example:443\r\n\r\n", Err((400, Kind::BadRequest, "disagrees"))),
            // A Host without a port agrees with CONNECT's (as clients send it).
            ("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", Ok("example.com:443")),
            ("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:80\r\n\r\n", Err((400, Kind::BadRequest, "disagrees"))),
            ("CONNECT example.com HTTP/1.1\r\n\r\n", Err((400, Kind::BadTarget, "bad target"))),
            ("CONNECT 2130706433:443 HTTP/1.1\r\n\r\n", Err((400, Kind::BadTarget, "bad target"))),
            ("CONNECT user@example.com:443 HTTP/1.1\r\n\r\n", Err((400, Kind::BadTarget, "bad target"))),
            ("CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", Err((400, Kind::BadTarget, "bad target"))),
            ("GET http://example.com/a?b HTTP/1.1\r\nHost: example.com\r\n\r\n", Ok("example.com:80")),
            ("GET http://example.com:8080/ HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", Ok("example.com:8080")),
            ("GET http://example.com/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", Err((400, Kind::BadRequest, "disagrees"))),
            ("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nHost: example.com\r\n\r\n", Err((400, Kind::BadRequest, "more than one Host"))),
            ("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", Err((400, Kind::BadRequest, "not a proxy request"))),
            ("GET https://example.com/ HTTP/1.1\r\n\r\n", Err((400, Kind::BadTarget, "bad target"))),
            ("POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", Err((411, Kind::LengthRequired, "Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", Err((400, Kind::BadRequest, "more than one Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", Err((400, Kind::BadRequest, "bad Content-Length"))),
            // Only digits: a sign or a space inside is read otherwise by
            // other servers (request smuggling).
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n", Err((400, Kind::BadRequest, "bad Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", Err((400, Kind::BadRequest, "bad Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", Err((400, Kind::BadRequest, "bad Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: \r\n\r\n", Err((400, Kind::BadRequest, "bad Content-Length"))),
            ("POST http://example.com/ HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", Err((400, Kind::BadRequest, "bad Content-Length"))),
            ("GET http://exa\0mple.com/ HTTP/1.1\r\n\r\n", Err((400, Kind::BadRequest, ""))),
            ("GARBAGE\r\n\r\n", Err((400, Kind::BadRequest, "malformed"))),
        ];
        for (text, want) in cases {
            match (req(text), want) {
                (Ok(r), Ok(t)) => assert_eq!(r.target.to_string(), *t, "{text:?}"),
                (Err(r), Err((status, kind, reason))) => {
                    assert_eq!(r.status(), *status, "{text:?}: {r:?}");
                    assert_eq!(r.kind, *kind, "{text:?}: {r:?}");
                    assert!(r.reason.contains(reason), "{text:?}: {r:?}");
                }
                (got, want) => panic!("{text:?}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn plain_requests_go_upstream_in_origin_form() {
        let r = req("GET http://example.com/a?b HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nAccept: */*\r\nContent-Length: 3\r\n\r\n").unwrap();
        let plain = r.plain.unwrap();
        let head = String::from_utf8(plain.head).unwrap();
        assert_eq!(
            head,
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(plain.body_len, 3);
        // No Host header: one is written from the target.
        let r = req("GET http://example.com:8080/ HTTP/1.0\r\n\r\n").unwrap();
        let head = String::from_utf8(r.plain.unwrap().head).unwrap();
        assert!(head.contains("Host: example.com:8080\r\n"), "{head}");
    }

    #[test]
    fn refusal_answers_table() {
        // The reason quotes the client: whatever it holds, the header
        // stays one line and the status line matches the kind.
        let cases = [
            (
                Kind::NotListed,
                "a.test:22 is not on the host list",
                "HTTP/1.1 403 Forbidden\r\n",
                "Warden-Reason: a.test:22 is not on the host list\r\n",
            ),
            (
                Kind::BadTarget,
                "bad target x\r\nSet-Cookie: y",
                "HTTP/1.1 400 Bad Request\r\n",
                "Warden-Reason: bad target x??Set-Cookie: y\r\n",
            ),
            (
                Kind::HeadTooLarge,
                "over 64 header fields",
                "HTTP/1.1 431 Request Header Fields Too Large\r\n",
                "Warden-Reason: over 64 header fields\r\n",
            ),
            (
                Kind::ResolveTimeout,
                "résolution",
                "HTTP/1.1 504 Gateway Timeout\r\n",
                "Warden-Reason: r?solution\r\n",
            ),
        ];
        for (kind, reason, status_line, header) in cases {
            let answer = refusal_response(&Refused::new(kind, reason));
            assert!(answer.starts_with(status_line), "{answer:?}");
            assert!(answer.contains(header), "{answer:?}");
            let body = format!("warden: refused: {reason}\n");
            let length = format!("Content-Length: {}\r\n", body.len());
            assert!(
                answer.ends_with(&format!("Connection: close\r\n\r\n{body}")),
                "{answer:?}"
            );
            assert!(answer.contains(&length), "{answer:?}");
        }
    }
}
