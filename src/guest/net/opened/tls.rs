//! The two TLS sessions of an opened host: the client's, ended by warden
//! with a certificate for the name the tunnel was opened for, and warden's
//! own to the origin, verified against the machine's trust store (never
//! against the machine's own authority, which only warden can sign with).

use super::ca::{CaError, MachineCa};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

/// Where images keep their trust store, first found first.
pub const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("no certificate to trust upstream: none of {0} could be read")]
    NoRoots(String),
    #[error("{0}")]
    Ca(#[from] CaError),
    #[error("the client's TLS: {0}")]
    Client(std::io::Error),
    #[error("the client asked for {sni:?} in a tunnel opened for {host:?}")]
    Sni { sni: String, host: String },
    #[error("{host:?} is not a name TLS can verify")]
    Name { host: String },
    #[error("the origin's TLS ({host}): {error}")]
    Origin { host: String, error: std::io::Error },
}

/// How warden reaches origins over TLS.
pub struct Upstreams {
    connector: TlsConnector,
    /// Where the trusted certificates came from, for status.
    pub from: Vec<PathBuf>,
}

impl Upstreams {
    /// Trusts the first system bundle found and every `extra` file (an
    /// owner's `upstream_ca`), leaving out the machine's own authority.
    pub fn new(extra: &[PathBuf], own: &MachineCa) -> Result<Upstreams, TlsError> {
        let system = SYSTEM_BUNDLES.iter().map(Path::new).find(|p| p.exists());
        let files: Vec<PathBuf> = system
            .map(Path::to_path_buf)
            .into_iter()
            .chain(extra.iter().cloned())
            .collect();
        let mut roots = RootCertStore::empty();
        let mut from = Vec::new();
        for file in &files {
            let Ok(certs) = CertificateDer::pem_file_iter(file) else {
                continue;
            };
            let before = roots.len();
            for cert in certs.flatten().filter(|c| c.as_ref() != own.der()) {
                let _ = roots.add(cert);
            }
            if roots.len() > before {
                from.push(file.clone());
            }
        }
        if roots.is_empty() {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            let tried = match names.is_empty() {
                true => SYSTEM_BUNDLES.join(", "),
                false => names.join(", "),
            };
            return Err(TlsError::NoRoots(tried));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::NoRoots(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Upstreams {
            connector: TlsConnector::from(Arc::new(config)),
            from,
        })
    }

    /// warden's own TLS to the origin of `host`, verified for that name.
    pub async fn connect<S>(&self, stream: S, host: &str) -> Result<client::TlsStream<S>, TlsError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let name = ServerName::try_from(host.to_string()).map_err(|_| TlsError::Name {
            host: host.to_string(),
        })?;
        self.connector
            .connect(name, stream)
            .await
            .map_err(|error| TlsError::Origin {
                host: host.to_string(),
                error,
            })
    }
}

/// Ends the client's TLS with a certificate for `host`. A client naming
/// another host (SNI) than the tunnel's is refused: what it reaches is
/// decided by the tunnel's name alone.
pub async fn accept<S>(
    ca: &MachineCa,
    stream: S,
    host: &str,
) -> Result<server::TlsStream<S>, TlsError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = TlsAcceptor::from(ca.server_for(host)?);
    let tls = acceptor.accept(stream).await.map_err(TlsError::Client)?;
    if let Some(sni) = tls.get_ref().1.server_name() {
        if !sni.trim_end_matches('.').eq_ignore_ascii_case(host) {
            return Err(TlsError::Sni {
                sni: sni.to_string(),
                host: host.to_string(),
            });
        }
    }
    Ok(tls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::net::opened::exchange::{self, Added, Exchange};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    const HOST: &str = "api.example.test";
    const SECRET: &str = "s3cr3t-t0ken-value";

    /// An origin over real TLS on loopback that answers each request with
    /// the request's head as its body (an echo, the worst case).
    async fn echo_origin(ca: Arc<MachineCa>) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let acceptor = TlsAcceptor::from(ca.server_for(HOST).unwrap());
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", head.len());
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.write_all(&head).await;
                let _ = tls.shutdown().await;
            }
        });
        at
    }

    /// warden's side of one tunnel: TLS ended, the exchange, TLS to the
    /// origin.
    async fn warden(
        ca: Arc<MachineCa>,
        upstreams: Arc<Upstreams>,
        origin: std::net::SocketAddr,
    ) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(mut client) = accept(&ca, tcp, HOST).await else {
                    continue;
                };
                let up = TcpStream::connect(origin).await.unwrap();
                let mut up = upstreams.connect(up, HOST).await.unwrap();
                let secrets = vec![SECRET.as_bytes().to_vec()];
                let ex = Exchange {
                    host: HOST,
                    rules: None,
                    credential: Some(Added {
                        name: "API_TOKEN",
                        header: "Authorization",
                        value: format!("Bearer {SECRET}"),
                    }),
                    secrets: &secrets,
                    idle: Duration::from_secs(5),
                    meter: None,
                    local: None,
                };
                exchange::carry(&mut client, &mut up, &ex).await;
            }
        });
        at
    }

    fn client_trusting(ca: &MachineCa) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(ca.der().to_vec())).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }

    #[tokio::test]
    async fn a_request_over_real_tls_gets_the_credential_and_never_sees_it() {
        let origin_ca = Arc::new(MachineCa::new("origin").unwrap());
        let machine_ca = Arc::new(MachineCa::new("machine").unwrap());
        let dir = tempfile::tempdir().unwrap();
        let origin_pem = dir.path().join("origin.pem");
        std::fs::write(&origin_pem, origin_ca.pem()).unwrap();
        let upstreams = Arc::new(Upstreams::new(&[origin_pem], &machine_ca).unwrap());
        assert!(upstreams.from.iter().any(|f| f.ends_with("origin.pem")));
        let origin = echo_origin(origin_ca).await;
        let proxy = warden(machine_ca.clone(), upstreams, origin).await;

        let tcp = TcpStream::connect(proxy).await.unwrap();
        let name = ServerName::try_from(HOST).unwrap();
        let mut tls = client_trusting(&machine_ca)
            .connect(name, tcp)
            .await
            .unwrap();
        let request = format!(
            "GET /me HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer placeholder\r\n\r\n"
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let _ = tls.read_to_end(&mut got).await;
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        // The origin saw the credential (its echo says so, masked)...
        assert!(
            got.contains(&format!(
                "Authorization: Bearer {}",
                "*".repeat(SECRET.len())
            )),
            "{got}"
        );
        // ...and the client never did.
        assert!(!got.contains(SECRET), "{got}");
        assert!(!got.contains("placeholder"), "{got}");
    }

    #[tokio::test]
    async fn a_client_asking_another_name_is_refused() {
        let machine_ca = Arc::new(MachineCa::new("machine").unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let ca = machine_ca.clone();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            accept(&ca, tcp, HOST).await.map(|_| ())
        });
        let tcp = TcpStream::connect(at).await.unwrap();
        let name = ServerName::try_from("other.example.test").unwrap();
        let client = client_trusting(&machine_ca).connect(name, tcp).await;
        assert!(client.is_err(), "the certificate is for {HOST} alone");
        assert!(server.await.unwrap().is_err());
    }

    #[test]
    fn the_machine_authority_is_never_trusted_upstream() {
        let machine_ca = MachineCa::new("machine").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("own.pem");
        std::fs::write(&own, machine_ca.pem()).unwrap();
        let upstreams = Upstreams::new(std::slice::from_ref(&own), &machine_ca).unwrap();
        assert!(!upstreams.from.contains(&own), "{:?}", upstreams.from);
    }
}
