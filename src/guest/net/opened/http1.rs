//! HTTP/1.1 inside an opened host's TLS: a request head read and checked
//! (its target, its Host, how its body is framed), the head sent on (hop
//! headers dropped, the credential put in, `Connection: close`), a
//! response head read with how its body ends, and chunked bodies decoded.
//! Everything here is pure.
//!
//! One request per connection: the head sent on asks the origin to close
//! after its answer, and the client is told the same, so no second request
//! can ride behind the first one unread.

/// Headers that concern only the hop to the proxy, never sent on.
pub const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// The most a head may hold (start line and headers).
pub const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;

/// Headers of one hop only, never carried across warden: the proxy's, and
/// the body's framing, which warden sets itself.
fn hop_by_hop(lower: &str) -> bool {
    HOP_BY_HOP.contains(&lower) || lower == "transfer-encoding"
}

/// Why a head is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("malformed head: {0}")]
    Malformed(String),
    #[error("the head is over 64 KiB")]
    TooLarge,
    #[error("HTTP/1.1 only")]
    Version,
    #[error("the request's target must be a path (origin form)")]
    Target,
    #[error("Host {found:?} is not {expected:?}, the name the tunnel was opened for")]
    Host { found: String, expected: String },
    #[error("the body's framing is ambiguous (Content-Length twice, or with Transfer-Encoding, or an encoding other than chunked)")]
    Framing,
    #[error("only a WebSocket upgrade, by GET without a body, is carried through an opened host")]
    Upgrade,
    #[error("the origin compressed its WebSocket frames ({0}) although asked not to: warden cannot check them for the credential")]
    CompressedFrames(String),
    #[error("the answer is compressed ({0}): warden cannot check it for the credential")]
    Encoded(String),
}

/// How a body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    None,
    Length(u64),
    Chunked,
    /// Until the sender closes (answers only).
    Close,
}

/// A request as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    pub target: String,
    /// Every header, name as sent, value as bytes.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Body,
    /// A WebSocket upgrade is asked for.
    pub websocket: bool,
}

/// Where a head ends in `bytes`, if it is whole.
pub fn head_end(bytes: &[u8]) -> Option<usize> {
    memchr::memmem::find(bytes, b"\r\n\r\n").map(|at| at + 4)
}

/// Parses a whole request head for the tunnel opened to `host`.
pub fn parse_request(bytes: &[u8], host: &str) -> Result<RequestHead, HeadError> {
    parse(bytes, Some(host))
}

/// A request to a provider's endpoint on the proxy's port: its Host
/// (warden's address) becomes `host`, the provider's, as the origin must
/// see it, and `prefix` (the endpoint's path) is cut from its target.
pub fn parse_local_request(
    bytes: &[u8],
    host: &str,
    prefix: &str,
) -> Result<RequestHead, HeadError> {
    let mut head = parse(bytes, None)?;
    let rest = head.target.strip_prefix(prefix).ok_or(HeadError::Target)?;
    head.target = match rest.starts_with('/') {
        true => rest.to_string(),
        false => format!("/{rest}"),
    };
    head.headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("host"));
    head.headers
        .insert(0, ("Host".into(), host.as_bytes().to_vec()));
    Ok(head)
}

/// A request head; its Host checked against `host` when given.
fn parse(bytes: &[u8], host: Option<&str>) -> Result<RequestHead, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(HeadError::Malformed("cut short".into())),
        Err(e) => return Err(HeadError::Malformed(e.to_string())),
    }
    if request.version != Some(1) {
        return Err(HeadError::Version);
    }
    let target = request.path.unwrap_or_default();
    if !target.starts_with('/') {
        return Err(HeadError::Target);
    }
    let headers: Vec<(String, Vec<u8>)> = request
        .headers
        .iter()
        .map(|h| (h.name.to_string(), h.value.to_vec()))
        .collect();
    if let Some(host) = host {
        check_host(&headers, host)?;
    }
    let method = request.method.unwrap_or_default().to_string();
    let body = framing(&headers, Body::None)?;
    let websocket = match values(&headers, "upgrade").collect::<Vec<_>>().as_slice() {
        [] => false,
        [value]
            if value.eq_ignore_ascii_case(b"websocket")
                && method == "GET"
                && body == Body::None =>
        {
            true
        }
        _ => return Err(HeadError::Upgrade),
    };
    Ok(RequestHead {
        method,
        target: target.to_string(),
        body,
        headers,
        websocket,
    })
}

/// The Host header must be there once and name the tunnel's host (a port,
/// if written, is the tunnel's too: only the name is compared here, the
/// port was decided with the tunnel).
fn check_host(headers: &[(String, Vec<u8>)], host: &str) -> Result<(), HeadError> {
    let found: Vec<&[u8]> = values(headers, "host").collect();
    let [value] = found.as_slice() else {
        return Err(HeadError::Malformed("one Host header is needed".into()));
    };
    let text = String::from_utf8_lossy(value).to_ascii_lowercase();
    // Opened hosts are names, never addresses: a port is what follows the
    // last colon when it is all digits.
    let name = match text.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => text.as_str(),
    };
    match name.trim_end_matches('.') == host {
        true => Ok(()),
        false => Err(HeadError::Host {
            found: text.clone(),
            expected: host.to_string(),
        }),
    }
}

fn values<'a>(
    headers: &'a [(String, Vec<u8>)],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// How a message's body ends, from its headers; `otherwise` when they say
/// nothing (no body for a request, until close for an answer).
fn framing(headers: &[(String, Vec<u8>)], otherwise: Body) -> Result<Body, HeadError> {
    let lengths: Vec<&[u8]> = values(headers, "content-length").collect();
    let encodings: Vec<&[u8]> = values(headers, "transfer-encoding").collect();
    match (lengths.as_slice(), encodings.as_slice()) {
        ([], []) => Ok(otherwise),
        ([], [te]) if te.eq_ignore_ascii_case(b"chunked") => Ok(Body::Chunked),
        ([length], []) => std::str::from_utf8(length)
            .ok()
            .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|l| l.parse().ok())
            .map(Body::Length)
            .ok_or(HeadError::Framing),
        _ => Err(HeadError::Framing),
    }
}

/// The head sent to the origin: the request line, the client's headers
/// without hop-by-hop ones and without any header named `replace` (the
/// credential's: whatever placeholder the client sent), `added` if any,
/// then `Connection: close` (or, for a WebSocket upgrade, the upgrade's
/// own two headers). With `identity` (a host whose secrets could come
/// back) it asks for an answer without compression, so that the answer
/// can be checked: no compressed body, no compressed WebSocket frames.
pub fn request_upstream(
    head: &RequestHead,
    added: Option<(&str, &str)>,
    identity: bool,
) -> Vec<u8> {
    let mut out = format!("{} {} HTTP/1.1\r\n", head.method, head.target).into_bytes();
    let dropped = |name: &str| {
        let lower = name.to_ascii_lowercase();
        hop_by_hop(&lower)
            || added.is_some_and(|(header, _)| name.eq_ignore_ascii_case(header))
            || (identity && (lower == "accept-encoding" || lower == "sec-websocket-extensions"))
    };
    for (name, value) in head.headers.iter().filter(|(n, _)| !dropped(n)) {
        push_header(&mut out, name, value);
    }
    if head.body == Body::Chunked {
        push_header(&mut out, "Transfer-Encoding", b"chunked");
    }
    if let Some((header, value)) = added {
        push_header(&mut out, header, value.as_bytes());
    }
    if identity {
        push_header(&mut out, "Accept-Encoding", b"identity");
    }
    out.extend_from_slice(ending(head.websocket));
    out
}

/// The last headers of a head warden sends on: the end of the
/// connection after this one exchange, or a WebSocket upgrade.
fn ending(websocket: bool) -> &'static [u8] {
    match websocket {
        true => b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        false => b"Connection: close\r\n\r\n",
    }
}

/// The first value of the header `name`, if any.
pub fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// Removes every header `name` from a request; returns the first value.
pub fn take_header(head: &mut RequestHead, name: &str) -> Option<String> {
    let found = header(&head.headers, name).map(|v| String::from_utf8_lossy(v).into_owned());
    head.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    found
}

/// A request's body, read whole, sent on with its length.
pub fn set_length(head: &mut RequestHead, length: u64) {
    head.headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("content-length"));
    head.headers
        .push(("Content-Length".into(), length.to_string().into_bytes()));
    head.body = Body::Length(length);
}

/// Whether an answer accepts the WebSocket upgrade asked for.
pub fn upgraded(head: &ResponseHead, request: &RequestHead) -> bool {
    request.websocket
        && head.status == 101
        && values(&head.headers, "upgrade").any(|v| v.eq_ignore_ascii_case(b"websocket"))
}

/// Refuses an upgraded answer whose frames are compressed (an extension
/// the origin took though it was not offered).
pub fn require_plain_frames(head: &ResponseHead) -> Result<(), HeadError> {
    match values(&head.headers, "sec-websocket-extensions").next() {
        Some(v) => Err(HeadError::CompressedFrames(
            String::from_utf8_lossy(v).into_owned(),
        )),
        None => Ok(()),
    }
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// An origin's answer head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Body,
}

/// Parses a whole response head to a request of `method`.
pub fn parse_response(bytes: &[u8], method: &str) -> Result<ResponseHead, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(HeadError::Malformed("cut short".into())),
        Err(e) => return Err(HeadError::Malformed(e.to_string())),
    }
    let status = response.code.unwrap_or(0);
    let headers: Vec<(String, Vec<u8>)> = response
        .headers
        .iter()
        .map(|h| (h.name.to_string(), h.value.to_vec()))
        .collect();
    let bodiless =
        method == "HEAD" || (100..200).contains(&status) || status == 204 || status == 304;
    let body = match bodiless {
        true => Body::None,
        false => framing(&headers, Body::Close)?,
    };
    Ok(ResponseHead {
        status,
        reason: response.reason.unwrap_or_default().to_string(),
        headers,
        body,
    })
}

/// Refuses an answer whose body is encoded (compressed): its bytes could
/// hold the credential in a form the masking cannot see.
pub fn require_identity(head: &ResponseHead) -> Result<(), HeadError> {
    match values(&head.headers, "content-encoding")
        .map(|v| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
        .find(|v| !v.is_empty() && v != "identity")
    {
        Some(encoding) => Err(HeadError::Encoded(encoding)),
        None => Ok(()),
    }
}

/// The head the client gets: the origin's status and headers (values
/// passed through `mask`), without hop-by-hop ones and without
/// `Content-Length` when the body is sent until close (a chunked answer is
/// sent decoded), then `Connection: close`.
pub fn response_downstream(
    head: &ResponseHead,
    websocket: bool,
    mask: &mut dyn FnMut(&mut [u8]),
) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", head.status, head.reason).into_bytes();
    for (name, value) in &head.headers {
        if hop_by_hop(&name.to_ascii_lowercase()) {
            continue;
        }
        let mut value = value.clone();
        mask(&mut value);
        push_header(&mut out, name, &value);
    }
    out.extend_from_slice(ending(websocket));
    out
}

/// Why a chunked body is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed chunked body: {0}")]
pub struct ChunkError(&'static str);

/// A chunked body read as it comes: `feed` takes the next bytes and gives
/// back the payload in them, and the count of bytes that belonged to the
/// body (the rest, once `done`, is not the body's).
#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
    line: Vec<u8>,
    pub done: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailer,
}

/// The longest chunk-size line (with extensions) or trailer line taken.
const MAX_LINE: usize = 4096;

impl Chunked {
    /// Decodes what it can of `input`: (payload, bytes of `input` used).
    pub fn feed(&mut self, input: &[u8]) -> Result<(Vec<u8>, usize), ChunkError> {
        let mut payload = Vec::new();
        let mut at = 0;
        while at < input.len() && !self.done {
            match self.state {
                ChunkState::Data(left) => {
                    let take = (left as usize).min(input.len() - at);
                    payload.extend_from_slice(&input[at..at + take]);
                    at += take;
                    let left = left - take as u64;
                    self.state = match left {
                        0 => ChunkState::DataEnd,
                        _ => ChunkState::Data(left),
                    };
                }
                _ => {
                    let Some(line) = self.take_line(input, &mut at)? else {
                        break;
                    };
                    self.on_line(&line)?;
                }
            }
        }
        Ok((payload, at))
    }

    /// The next whole line (without its CRLF), or None if it is not whole
    /// yet (what there is is kept).
    fn take_line(&mut self, input: &[u8], at: &mut usize) -> Result<Option<Vec<u8>>, ChunkError> {
        let rest = &input[*at..];
        match memchr::memchr(b'\n', rest) {
            Some(nl) => {
                self.line.extend_from_slice(&rest[..nl]);
                *at += nl + 1;
                let mut line = std::mem::take(&mut self.line);
                if line.len() > MAX_LINE {
                    return Err(ChunkError("a line over 4 KiB"));
                }
                if line.pop() != Some(b'\r') {
                    return Err(ChunkError("a line must end with CRLF"));
                }
                Ok(Some(line))
            }
            None => {
                self.line.extend_from_slice(rest);
                *at = input.len();
                match self.line.len() > MAX_LINE {
                    true => Err(ChunkError("a line over 4 KiB")),
                    false => Ok(None),
                }
            }
        }
    }

    fn on_line(&mut self, line: &[u8]) -> Result<(), ChunkError> {
        self.state = match self.state {
            ChunkState::Size => match chunk_size(line)? {
                0 => ChunkState::Trailer,
                n => ChunkState::Data(n),
            },
            ChunkState::DataEnd if line.is_empty() => ChunkState::Size,
            ChunkState::DataEnd => return Err(ChunkError("a chunk's data must end with CRLF")),
            ChunkState::Trailer if line.is_empty() => {
                self.done = true;
                ChunkState::Trailer
            }
            ChunkState::Trailer => ChunkState::Trailer,
            ChunkState::Data(_) => return Err(ChunkError("a line was read inside a chunk")),
        };
        Ok(())
    }
}

fn chunk_size(line: &[u8]) -> Result<u64, ChunkError> {
    let digits = line.split(|&b| b == b';').next().unwrap_or(&[]);
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(ChunkError("a chunk size must be 1 to 15 hex digits"));
    }
    let text = std::str::from_utf8(digits).map_err(|_| ChunkError("size"))?;
    u64::from_str_radix(text, 16).map_err(|_| ChunkError("size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked_and_framed() {
        let h = "api.example.com";
        let ok = |text: &str| parse_request(text.as_bytes(), h);
        let r = ok("GET /a?b=c HTTP/1.1\r\nHost: api.example.com\r\n\r\n").unwrap();
        assert_eq!(
            (r.method.as_str(), r.target.as_str(), r.body),
            ("GET", "/a?b=c", Body::None)
        );
        let r = ok("POST /x HTTP/1.1\r\nHost: API.example.com:443\r\nContent-Length: 5\r\n\r\n")
            .unwrap();
        assert_eq!(r.body, Body::Length(5));
        let r =
            ok("POST /x HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap();
        assert_eq!(r.body, Body::Chunked);
        let cases = [
            ("GET / HTTP/1.0\r\nHost: api.example.com\r\n\r\n", HeadError::Version),
            ("GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", HeadError::Target),
            ("GET / HTTP/1.1\r\nHost: other.example.com\r\n\r\n", HeadError::Host { found: "other.example.com".into(), expected: h.into() }),
            ("GET / HTTP/1.1\r\nHost: api.example.com.evil\r\n\r\n", HeadError::Host { found: "api.example.com.evil".into(), expected: h.into() }),
            ("POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", HeadError::Framing),
            ("POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", HeadError::Framing),
            ("POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", HeadError::Framing),
            ("POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: +1\r\n\r\n", HeadError::Framing),
            ("GET / HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: h2c\r\n\r\n", HeadError::Upgrade),
            ("POST / HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: websocket\r\nContent-Length: 1\r\n\r\n", HeadError::Upgrade),
        ];
        for (text, want) in cases {
            assert_eq!(ok(text).unwrap_err(), want, "{text:?}");
        }
        assert!(matches!(
            ok("GET / HTTP/1.1\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        assert!(matches!(
            ok("GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: api.example.com\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
    }

    #[test]
    fn the_head_sent_on_carries_the_credential_and_nothing_of_the_hop() {
        let text = "POST /r HTTP/1.1\r\nHost: api.example.com\r\nauthorization: Bearer placeholder\r\nProxy-Authorization: x\r\nConnection: keep-alive\r\nAccept-Encoding: gzip\r\nTransfer-Encoding: chunked\r\nX-Other: 1\r\n\r\n";
        let r = parse_request(text.as_bytes(), "api.example.com").unwrap();
        let sent = String::from_utf8(request_upstream(
            &r,
            Some(("Authorization", "Bearer s3cret")),
            true,
        ))
        .unwrap();
        assert_eq!(
            sent,
            "POST /r HTTP/1.1\r\nHost: api.example.com\r\nX-Other: 1\r\nTransfer-Encoding: chunked\r\nAuthorization: Bearer s3cret\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
        );
        let plain = String::from_utf8(request_upstream(&r, None, false)).unwrap();
        assert!(plain.contains("authorization: Bearer placeholder\r\n"));
        assert!(plain.contains("Accept-Encoding: gzip\r\n"));
    }

    #[test]
    fn answers_say_how_their_body_ends() {
        let cases = [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
                "GET",
                Body::Length(3),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                "GET",
                Body::Chunked,
            ),
            ("HTTP/1.1 200 OK\r\n\r\n", "GET", Body::Close),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
                "HEAD",
                Body::None,
            ),
            ("HTTP/1.1 204 No Content\r\n\r\n", "GET", Body::None),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                "GET",
                Body::None,
            ),
        ];
        for (text, method, want) in cases {
            assert_eq!(
                parse_response(text.as_bytes(), method).unwrap().body,
                want,
                "{text:?}"
            );
        }
        let gz =
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n", "GET").unwrap();
        assert_eq!(
            require_identity(&gz),
            Err(HeadError::Encoded("gzip".into()))
        );
        let id = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\n\r\n",
            "GET",
        )
        .unwrap();
        assert_eq!(require_identity(&id), Ok(()));
    }

    #[test]
    fn the_answer_head_is_masked_and_closes() {
        let r = parse_response(
            b"HTTP/1.1 302 Found\r\nLocation: https://x/?t=SECRET\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n",
            "GET",
        )
        .unwrap();
        let mut mask = |v: &mut [u8]| {
            if let Some(at) = memchr::memmem::find(v, b"SECRET") {
                v[at..at + 6].fill(b'*');
            }
        };
        let out = String::from_utf8(response_downstream(&r, false, &mut mask)).unwrap();
        assert_eq!(
            out,
            "HTTP/1.1 302 Found\r\nLocation: https://x/?t=******\r\nConnection: close\r\n\r\n"
        );
    }

    fn decode_in_pieces(body: &[u8], cut: usize) -> Result<(Vec<u8>, usize), ChunkError> {
        let mut c = Chunked::default();
        let (mut payload, mut used) = (Vec::new(), 0);
        for piece in body.chunks(cut) {
            let (p, n) = c.feed(piece)?;
            payload.extend(p);
            used += n;
            if c.done {
                break;
            }
        }
        assert!(c.done, "the body's end was seen");
        Ok((payload, used))
    }

    #[test]
    fn chunked_bodies_decode_wherever_they_are_cut() {
        let body = b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT REQUEST";
        let body_len = body.len() - "NEXT REQUEST".len();
        for cut in 1..=body.len() {
            let (payload, used) = decode_in_pieces(body, cut).unwrap();
            assert_eq!(payload, b"helloabcdefghijklmnopqrstuvwxyz", "cut {cut}");
            // The body ends exactly at its last CRLF: what follows it is
            // never taken as the body's.
            assert_eq!(used, body_len, "cut {cut}");
        }
    }

    #[test]
    fn malformed_chunked_bodies_are_refused() {
        let cases: [&[u8]; 5] = [
            b"zz\r\n",
            b"5\r\nhelloX\r\n",
            b"5\nhello\r\n",
            b"1234567890abcdef0\r\n",
            b"-1\r\n",
        ];
        let long = [b"1;".as_slice(), &[b'x'; 5000], b"\r\n"].concat();
        let mut whole = Chunked::default();
        assert!(whole.feed(&long).is_err(), "a long line whole");
        let mut cut = Chunked::default();
        assert!(cut.feed(&long[..4500]).is_err(), "a long line cut");
        for body in cases {
            let mut c = Chunked::default();
            assert!(c.feed(body).is_err(), "{:?}", String::from_utf8_lossy(body));
        }
    }
}
