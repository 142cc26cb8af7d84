//! `warden connect HOST PORT`: one TCP connection through the egress proxy,
//! carried on stdin and stdout. It is what ssh's `ProxyCommand` wants, so
//! git over ssh reaches a listed `host:22` through the proxy, which decides
//! as for any other connection, and nothing else.

use crate::error::CliError;
use std::io::{Read, Write};
use std::net::TcpStream;

/// Where the proxy listens when the environment does not say.
pub const DEFAULT_PROXY: &str = "127.0.0.1:3128";
/// The longest proxy answer head read.
const MAX_HEAD: usize = 16 * 1024;

/// Pure: the proxy's `host:port` from the variables a command's tools are
/// given (`https_proxy` and its kin, as `http://127.0.0.1:3128`).
pub fn proxy_from(var: impl Fn(&str) -> Option<String>) -> String {
    ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .find_map(|name| var(name).filter(|v| !v.is_empty()))
        .map(|url| {
            let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
            rest.trim_end_matches('/').to_string()
        })
        .unwrap_or_else(|| DEFAULT_PROXY.to_string())
}

/// Pure: the CONNECT request for `host:port`, or why the host cannot be
/// asked for (only names and addresses: nothing that could end the line).
pub fn request(host: &str, port: u16) -> Result<String, CliError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
    if host.is_empty() || !host.chars().all(plain) {
        return Err(CliError::NotAHost(host.to_string()));
    }
    let target = match host.contains(':') && !host.starts_with('[') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    };
    Ok(format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
    ))
}

/// Pure: whether the proxy's answer head lets the tunnel open; the error
/// is its status and the proxy's reason.
pub fn answer(head: &[u8]) -> Result<(), CliError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(CliError::NotHttp),
    }
    let status = response.code.unwrap_or(0);
    if status == 200 {
        return Ok(());
    }
    let reason = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("warden-reason"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned());
    Err(CliError::ProxyRefused { status, reason })
}

/// Opens the tunnel and carries stdin to it and it to stdout until both
/// ends are done; the error says why it could not open.
pub fn run(host: &str, port: u16, proxy: &str) -> Result<(), CliError> {
    let at_proxy = |source| CliError::Proxy {
        proxy: proxy.to_string(),
        source,
    };
    let mut upstream = TcpStream::connect(proxy).map_err(at_proxy)?;
    upstream
        .write_all(request(host, port)?.as_bytes())
        .map_err(at_proxy)?;
    let (head, early) = read_head(&mut upstream)?;
    answer(&head)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&early).map_err(CliError::Io)?;
    let mut to_upstream = upstream.try_clone().map_err(CliError::Io)?;
    let sending = std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_upstream);
        let _ = to_upstream.shutdown(std::net::Shutdown::Write);
    });
    let mut buf = [0u8; 64 * 1024];
    loop {
        match upstream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if stdout
                    .write_all(&buf[..n])
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    // The far end is done: what is still being sent has nowhere to go.
    drop(sending);
    Ok(())
}

/// The answer's head, and whatever came after it in the same reads.
fn read_head(upstream: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), CliError> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let early = got.split_off(end + 4);
            return Ok((got, early));
        }
        if got.len() > MAX_HEAD {
            return Err(CliError::HeadTooLong);
        }
        match upstream.read(&mut buf) {
            Ok(0) => return Err(CliError::ProxyClosed),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(CliError::ProxyRead(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_from_table() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], DEFAULT_PROXY),
            (
                &[("https_proxy", "http://127.0.0.1:3128")],
                "127.0.0.1:3128",
            ),
            (&[("HTTPS_PROXY", "http://[::1]:8080/")], "[::1]:8080"),
            (&[("ALL_PROXY", "127.0.0.1:9")], "127.0.0.1:9"),
            (&[("https_proxy", ""), ("all_proxy", "http://p:1")], "p:1"),
        ];
        for (vars, want) in cases {
            let got = proxy_from(|name| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            });
            assert_eq!(got, *want, "{vars:?}");
        }
    }

    #[test]
    fn request_table() {
        let github = "CONNECT github.com:22 HTTP/1.1\r\nHost: github.com:22\r\n\r\n";
        let v6 = "CONNECT [::1]:22 HTTP/1.1\r\nHost: [::1]:22\r\n\r\n";
        let cases = [
            ("github.com", Some(github)),
            ("::1", Some(v6)),
            ("[::1]", Some(v6)),
            ("a.b\r\nX: y", None),
            ("a b", None),
            ("", None),
        ];
        for (host, want) in cases {
            assert_eq!(request(host, 22).ok().as_deref(), want, "{host:?}");
        }
    }

    #[test]
    fn answer_table() {
        let cases = [
            (&b"HTTP/1.1 200 Connection established\r\n\r\n"[..], Ok(())),
            (
                &b"HTTP/1.1 403 Forbidden\r\nWarden-Reason: not on the list\r\n\r\n"[..],
                Err("refused by the proxy (403): not on the list".to_string()),
            ),
            (
                &b"HTTP/1.1 502 Bad Gateway\r\n\r\n"[..],
                Err("refused by the proxy (502)".to_string()),
            ),
            (
                &b"SSH-2.0-x\r\n\r\n"[..],
                Err("the proxy's answer is not HTTP".to_string()),
            ),
        ];
        for (head, want) in cases {
            assert_eq!(
                answer(head).map_err(|e| e.to_string()),
                want,
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
