//! One request through an opened host, once both TLS sessions stand: the
//! client's request read and checked against the host's rules, sent on
//! with the credential its user is owed, and the answer carried back with
//! every form of the host's secrets masked. Generic over the two streams,
//! so it is tested with in-memory ones as well as over real TLS. The
//! bodies (sent as framed, gathered when metered, answers masked and cut
//! at a budget) are in `bodies.rs`.

use super::bodies::{
    answer_body, gather, lock, read, read_or_release, send_body, write, Stop, BUFFER,
};
use super::http1::{self, HeadError};
use super::scrub::Scrubber;
use crate::shared::egress::request_rules::{self, Rule};
use crate::shared::spend::meter::Meter;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// What warden knows of the host and the asker for this exchange.
pub struct Exchange<'a> {
    /// The name the tunnel was opened for.
    pub host: &'a str,
    /// The host's rules; None lets every request through.
    pub rules: Option<&'a [Rule]>,
    /// The credential this asker is owed here: its name (for the audit),
    /// its header and the header's value.
    pub credential: Option<Added<'a>>,
    /// Every secret of the host's credentials, whoever asks: none of them
    /// may come back in an answer.
    pub secrets: &'a [Vec<u8>],
    /// How long either side may stay silent.
    pub idle: Duration,
    /// A model provider's request: metered (priced, budgeted, counted).
    pub meter: Option<&'a Mutex<Meter>>,
    /// The client is the runtime on a provider's endpoint on the proxy's
    /// port, this its path prefix: its Host names warden and becomes the
    /// provider's, and the prefix is cut from its target.
    pub local: Option<&'a str>,
}

pub struct Added<'a> {
    pub name: &'a str,
    pub header: &'a str,
    pub value: String,
}

/// What happened, for the audit line.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    pub method: String,
    /// The path without its query (which may carry tokens of its own).
    pub path: String,
    pub status: Option<u16>,
    /// The credential's name, when one was added.
    pub credential: Option<String>,
    /// How many forms of a secret were masked in the answer.
    pub masked: u64,
    /// Why warden answered instead of the origin, if it did.
    pub refused: Option<String>,
    /// The host's rules refused the request (it never reached the origin).
    pub ruled_out: bool,
    /// A provider's request: the provider, its API, what it used and cost.
    pub metered: Option<(
        String,
        crate::shared::spend::usage::Api,
        crate::shared::spend::meter::Charged,
    )>,
    pub up: u64,
    pub down: u64,
}

/// Carries one request and its answer, then ends both streams.
pub async fn carry<C, U>(client: &mut C, upstream: &mut U, ex: &Exchange<'_>) -> Outcome
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut outcome = Outcome::default();
    if let Err(stop) = exchange(client, upstream, ex, &mut outcome).await {
        if outcome.status.is_none() {
            let (status, reason) = match &stop {
                Stop::Head(HeadError::Encoded(_) | HeadError::CompressedFrames(_)) => {
                    (502, "Bad Gateway")
                }
                Stop::Io {
                    side: "the origin", ..
                }
                | Stop::Cut("the origin") => (502, "Bad Gateway"),
                _ => (400, "Bad Request"),
            };
            answer(client, status, reason, &stop.to_string(), &mut outcome).await;
        }
        outcome.refused.get_or_insert_with(|| stop.to_string());
    }
    let _ = client.shutdown().await;
    let _ = upstream.shutdown().await;
    outcome
}

async fn exchange<C, U>(
    client: &mut C,
    upstream: &mut U,
    ex: &Exchange<'_>,
    outcome: &mut Outcome,
) -> Result<(), Stop>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (head_bytes, early) = read_head(client, ex.idle, "the client").await?;
    let mut request = match ex.local {
        Some(prefix) => http1::parse_local_request(&head_bytes, ex.host, prefix)?,
        None => http1::parse_request(&head_bytes, ex.host)?,
    };
    outcome.method = request.method.clone();
    outcome.path = request.target.split('?').next().unwrap_or("").to_string();
    if let Some(why) = ex
        .rules
        .and_then(|rules| request_rules::refusal(rules, &request.method, &request.target))
    {
        outcome.refused = Some(why.clone());
        outcome.ruled_out = true;
        answer(client, 403, "Forbidden", &why, outcome).await;
        return Ok(());
    }
    let (metered, early) = match ex.meter {
        Some(meter) => {
            match meter_request(client, meter, &mut request, early, ex, outcome).await? {
                Some(body) => (Some(body), Vec::new()),
                None => return Ok(()),
            }
        }
        None => (None, early),
    };
    let added = ex.credential.as_ref().map(|a| (a.header, a.value.as_str()));
    // Secrets that could come back: the answer must be readable to be
    // checked, whether or not this request carries one.
    let sent = http1::request_upstream(&request, added, !ex.secrets.is_empty());
    outcome.credential = ex.credential.as_ref().map(|a| a.name.to_string());
    write(upstream, &sent, "the origin").await?;
    outcome.up += match metered {
        Some(body) => write(upstream, &body, "the origin")
            .await
            .map(|()| body.len() as u64)?,
        None => send_body(client, upstream, request.body, early, ex.idle).await?,
    };
    carry_answer(client, upstream, ex, &request, outcome).await
}

/// A metered request: its body gathered and put to the meter. The body
/// to send on, with its length set, or None when the meter refused it
/// and warden has answered the client.
async fn meter_request<C>(
    client: &mut C,
    meter: &Mutex<Meter>,
    request: &mut http1::RequestHead,
    early: Vec<u8>,
    ex: &Exchange<'_>,
    outcome: &mut Outcome,
) -> Result<Option<Vec<u8>>, Stop>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let body = gather(client, request.body, early, ex.idle).await?;
    let run = http1::take_header(request, "warden-run");
    let verdict = lock(meter).request(run.as_deref(), &body);
    if let Err(refused) = verdict {
        let reason = match refused.status {
            402 => "Payment Required",
            _ => "Bad Request",
        };
        let json = "application/json";
        answer_with(client, refused.status, reason, json, &refused.body, outcome).await;
        outcome.refused = Some(refused.message);
        return Ok(None);
    }
    http1::set_length(request, body.len() as u64);
    Ok(Some(body))
}

/// The origin's answer to `request`, checked and carried back to the
/// client with the host's secrets masked.
async fn carry_answer<C, U>(
    client: &mut C,
    upstream: &mut U,
    ex: &Exchange<'_>,
    request: &http1::RequestHead,
    outcome: &mut Outcome,
) -> Result<(), Stop>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (head_bytes, early) = read_head(upstream, ex.idle, "the origin").await?;
    let response = http1::parse_response(&head_bytes, &request.method)?;
    if let Some(meter) = ex.meter {
        lock(meter).answer_head(http1::header(&response.headers, "content-type"));
    }
    let upgraded = http1::upgraded(&response, request);
    if !ex.secrets.is_empty() {
        http1::require_identity(&response)?;
        if upgraded {
            http1::require_plain_frames(&response)?;
        }
    }
    let mut scrubber = Scrubber::new(ex.secrets.iter().map(Vec::as_slice));
    let head = http1::response_downstream(&response, upgraded, &mut |value| scrubber.whole(value));
    outcome.status = Some(response.status);
    write(client, &head, "the client").await?;
    let moved = match upgraded {
        true => frames(client, upstream, early, &mut scrubber, ex.idle, outcome).await,
        false => {
            let body = response.body;
            let sides = (upstream, client);
            answer_body(sides, body, early, &mut scrubber, ex.idle, ex.meter).await
        }
    };
    outcome.masked = scrubber.masked;
    outcome.down += moved?;
    Ok(())
}

/// When the origin cannot be reached: the client's request read (for the
/// audit line), answered by warden with 502 and `why`, and the stream
/// ended.
pub async fn without_origin<C>(client: &mut C, host: &str, why: &str, idle: Duration) -> Outcome
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let mut outcome = Outcome::default();
    if let Ok((head, _)) = read_head(client, idle, "the client").await {
        if let Ok(request) = http1::parse_request(&head, host) {
            outcome.method = request.method;
            outcome.path = request.target.split('?').next().unwrap_or("").to_string();
        }
    }
    answer(client, 502, "Bad Gateway", why, &mut outcome).await;
    outcome.refused = Some(why.to_string());
    let _ = client.shutdown().await;
    outcome
}

/// warden's own answer (a refusal), closing the exchange.
async fn answer<C: AsyncWrite + Unpin>(
    client: &mut C,
    status: u16,
    reason: &str,
    why: &str,
    outcome: &mut Outcome,
) {
    let body = format!("warden: {why}\n");
    answer_with(client, status, reason, "text/plain", &body, outcome).await;
}

/// warden's own answer, of any type.
async fn answer_with<C: AsyncWrite + Unpin>(
    client: &mut C,
    status: u16,
    reason: &str,
    content_type: &str,
    body: &str,
    outcome: &mut Outcome,
) {
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = client.write_all(head.as_bytes()).await;
    let _ = client.write_all(body.as_bytes()).await;
    outcome.status = Some(status);
}

/// Reads up to a whole head: (the head, what came after it).
async fn read_head<R: AsyncRead + Unpin>(
    from: &mut R,
    idle: Duration,
    side: &'static str,
) -> Result<(Vec<u8>, Vec<u8>), Stop> {
    let mut bytes = Vec::with_capacity(2048);
    let mut chunk = [0u8; 8192];
    loop {
        let n = read(from, &mut chunk, idle, side).await?;
        if n == 0 {
            return Err(match (bytes.is_empty(), side) {
                (true, "the client") => Stop::Quiet,
                _ => Stop::Cut(side),
            });
        }
        let from_at = bytes.len().saturating_sub(3);
        bytes.extend_from_slice(&chunk[..n]);
        if let Some(end) = http1::head_end(&bytes[from_at..]).map(|e| from_at + e) {
            if end > http1::MAX_HEAD {
                return Err(HeadError::TooLarge.into());
            }
            let rest = bytes.split_off(end);
            return Ok((bytes, rest));
        }
        if bytes.len() > http1::MAX_HEAD {
            return Err(HeadError::TooLarge.into());
        }
    }
}

/// An accepted WebSocket upgrade: frames both ways until either side
/// ends, the origin's masked like any answer (the client's go on as sent:
/// the credential was added to the upgrade's request, never to a frame).
async fn frames<C, U>(
    client: &mut C,
    upstream: &mut U,
    early: Vec<u8>,
    scrubber: &mut Scrubber,
    idle: Duration,
    outcome: &mut Outcome,
) -> Result<u64, Stop>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut up_read, mut up_write) = tokio::io::split(upstream);
    let up = async {
        let mut buf = vec![0u8; BUFFER];
        let mut sent = 0u64;
        loop {
            let n = read(&mut client_read, &mut buf, idle, "the client").await?;
            if n == 0 {
                let _ = up_write.shutdown().await;
                return Ok::<u64, Stop>(sent);
            }
            write(&mut up_write, &buf[..n], "the origin").await?;
            sent += n as u64;
        }
    };
    let down = async {
        let first = scrubber.push(&early);
        write(&mut client_write, &first, "the client").await?;
        let mut moved = first.len() as u64;
        let mut buf = vec![0u8; BUFFER];
        loop {
            let n = read_or_release(
                &mut up_read,
                &mut client_write,
                &mut buf,
                scrubber,
                idle,
                &mut moved,
            )
            .await?;
            if n == 0 {
                break;
            }
            let out = scrubber.push(&buf[..n]);
            write(&mut client_write, &out, "the client").await?;
            moved += out.len() as u64;
        }
        let rest = scrubber.finish();
        write(&mut client_write, &rest, "the client").await?;
        let _ = client_write.shutdown().await;
        Ok::<u64, Stop>(moved + rest.len() as u64)
    };
    let (sent, moved) = tokio::join!(up, down);
    outcome.up += sent.unwrap_or(0);
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::egress::request_rules::RuleText;
    use tokio::io::{duplex, AsyncReadExt};

    const SECRET: &str = "tok_0123456789abcdef";

    /// Runs one exchange between a scripted client and a scripted origin:
    /// (what the client got, what the origin got, the outcome).
    async fn run(
        request: &str,
        origin_answer: &'static str,
        ex: Exchange<'_>,
    ) -> (String, String, Outcome) {
        let (mut client, mut warden_client) = duplex(1 << 20);
        let (mut warden_up, mut origin) = duplex(1 << 20);
        client.write_all(request.as_bytes()).await.unwrap();
        let origin_task = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // The origin answers once it has the head (and any short body).
            loop {
                let n = origin.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
                if n == 0 || got.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(20), origin.read(&mut buf)).await
            {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            // warden may have gone without asking anything (a refusal).
            let _ = origin.write_all(origin_answer.as_bytes()).await;
            let _ = origin.shutdown().await;
            String::from_utf8_lossy(&got).to_string()
        });
        let outcome = carry(&mut warden_client, &mut warden_up, &ex).await;
        drop(warden_client);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        drop(warden_up);
        let origin_got = origin_task.await.unwrap();
        (
            String::from_utf8_lossy(&got).to_string(),
            origin_got,
            outcome,
        )
    }

    fn exchange<'a>(rules: Option<&'a [Rule]>, secrets: &'a [Vec<u8>], add: bool) -> Exchange<'a> {
        Exchange {
            host: "api.example.com",
            rules,
            credential: add.then(|| Added {
                name: "API_TOKEN",
                header: "Authorization",
                value: format!("Bearer {SECRET}"),
            }),
            secrets,
            idle: Duration::from_secs(5),
            meter: None,
            local: None,
        }
    }

    #[tokio::test]
    async fn the_credential_goes_up_and_its_echo_comes_back_masked() {
        let secrets = vec![SECRET.as_bytes().to_vec()];
        let echo: &'static str = Box::leak(
            format!(
                "HTTP/1.1 200 OK\r\nX-Echo: Bearer {SECRET}\r\nTransfer-Encoding: chunked\r\n\r\n7\r\nBearer \r\n14\r\n{SECRET}\r\n0\r\n\r\n"
            )
            .into_boxed_str(),
        );
        let (got, origin_got, outcome) = run(
            "GET /user?x=1 HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer placeholder\r\n\r\n",
            echo,
            exchange(None, &secrets, true),
        )
        .await;
        assert!(
            origin_got.contains(&format!("Authorization: Bearer {SECRET}\r\n")),
            "{origin_got}"
        );
        assert!(!origin_got.contains("placeholder"));
        assert!(origin_got.contains("Accept-Encoding: identity\r\n"));
        assert!(!got.contains(SECRET), "the secret came back: {got}");
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(
            got.ends_with(&format!("\r\n\r\nBearer {}", "*".repeat(SECRET.len()))),
            "{got}"
        );
        assert_eq!(outcome.status, Some(200));
        assert_eq!(outcome.path, "/user");
        assert_eq!(outcome.credential.as_deref(), Some("API_TOKEN"));
        assert_eq!(outcome.masked, 2);
    }

    #[tokio::test]
    async fn a_websocket_upgrade_carries_frames_with_the_secret_masked() {
        let secrets = vec![SECRET.as_bytes().to_vec()];
        let upgraded: &'static str = Box::leak(
            format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\u{81}\u{14}{SECRET}"
            )
            .into_boxed_str(),
        );
        let ask = "GET /ws HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: a2V5\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n";
        let mut ex = exchange(None, &secrets, true);
        ex.idle = Duration::from_millis(500);
        let (got, origin_got, outcome) = run(ask, upgraded, ex).await;
        assert!(
            origin_got.contains("Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
            "{origin_got}"
        );
        assert!(
            origin_got.contains(&format!("Authorization: Bearer {SECRET}")),
            "{origin_got}"
        );
        assert!(
            !origin_got.contains("Sec-WebSocket-Extensions"),
            "compression was offered: {origin_got}"
        );
        assert!(
            got.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{got}"
        );
        assert!(
            got.contains("Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
            "{got}"
        );
        assert!(!got.contains(SECRET), "{got}");
        assert!(got.ends_with(&"*".repeat(SECRET.len())), "{got}");
        assert_eq!(outcome.status, Some(101));
        assert_eq!(outcome.masked, 1);
        // An origin that compresses its frames anyway: not carried.
        let compressed = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n";
        let (got, _, _) = run(ask, compressed, exchange(None, &secrets, true)).await;
        assert!(got.starts_with("HTTP/1.1 502"), "{got}");
    }

    /// A streamed answer (events, one by one) reaches the client as it
    /// comes: what is held back to catch a cut secret goes on once the
    /// origin is quiet, not with its next piece.
    #[tokio::test]
    async fn a_streamed_answer_is_not_held_for_its_next_piece() {
        let secrets = vec![SECRET.as_bytes().to_vec()];
        let (mut client, mut warden_client) = duplex(1 << 16);
        let (mut warden_up, mut origin) = duplex(1 << 16);
        client
            .write_all(b"GET /events HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
            .await
            .unwrap();
        let warden = tokio::spawn(async move {
            let ex = exchange(None, &secrets, true);
            carry(&mut warden_client, &mut warden_up, &ex).await
        });
        let mut buf = [0u8; 4096];
        let _ = origin.read(&mut buf).await.unwrap();
        origin
            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\ndata: 1\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while !got.ends_with(b"data: 1\n") && tokio::time::Instant::now() < deadline {
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(100), client.read(&mut buf)).await
            {
                got.extend_from_slice(&buf[..n]);
            }
        }
        assert!(
            got.ends_with(b"data: 1\n"),
            "{}",
            String::from_utf8_lossy(&got)
        );
        origin.write_all(b"0\r\n\r\n").await.unwrap();
        let outcome = warden.await.unwrap();
        assert_eq!(outcome.status, Some(200));
    }

    #[tokio::test]
    async fn a_request_the_rules_refuse_never_reaches_the_origin() {
        let rules = [
            Rule::parse(&RuleText {
                method: Some(vec!["GET".into(), "HEAD".into()]),
                path: None,
            })
            .unwrap(),
            Rule::parse(&RuleText {
                method: Some(vec!["POST".into()]),
                path: Some("/*/*.git/git-upload-pack".into()),
            })
            .unwrap(),
        ];
        let (got, origin_got, outcome) = run(
            "POST /o/r.git/git-receive-pack HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 4\r\n\r\nPACK",
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            exchange(Some(&rules), &[], false),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{got}");
        assert!(
            got.contains("git-receive-pack is not allowed by the host's rules"),
            "{got}"
        );
        assert_eq!(origin_got, "", "the origin saw nothing");
        assert_eq!(outcome.status, Some(403));
        let (got, origin_got, _) = run(
            "POST /o/r.git/git-upload-pack HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 4\r\n\r\nPACK",
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            exchange(Some(&rules), &[], false),
        )
        .await;
        assert!(got.ends_with("\r\n\r\nok"), "{got}");
        assert!(origin_got.ends_with("\r\n\r\nPACK"), "{origin_got}");
    }

    #[tokio::test]
    async fn nothing_after_the_body_reaches_the_origin() {
        let smuggled = "POST /a HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nPOST /b/git-receive-pack HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
        let (_, origin_got, outcome) = run(
            smuggled,
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            exchange(None, &[], false),
        )
        .await;
        assert!(
            origin_got.ends_with("3\r\nabc\r\n0\r\n\r\n"),
            "{origin_got}"
        );
        assert!(!origin_got.contains("/b/"), "{origin_got}");
        assert_eq!(outcome.up, "3\r\nabc\r\n0\r\n\r\n".len() as u64);
    }

    #[tokio::test]
    async fn a_compressed_answer_to_a_host_with_secrets_is_not_carried() {
        let secrets = vec![SECRET.as_bytes().to_vec()];
        let (got, _, outcome) = run(
            "GET / HTTP/1.1\r\nHost: api.example.com\r\nAccept-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nxyz",
            exchange(None, &secrets, false),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{got}");
        assert_eq!(outcome.credential, None);
    }

    #[tokio::test]
    async fn a_host_header_for_another_name_is_refused() {
        let (got, origin_got, _) = run(
            "GET / HTTP/1.1\r\nHost: evil.example.net\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            exchange(None, &[], true),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{got}");
        assert!(
            got.contains("is not \\\"api.example.com\\\"")
                || got.contains("is not \"api.example.com\""),
            "{got}"
        );
        assert_eq!(origin_got, "");
    }
}
