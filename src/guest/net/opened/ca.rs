//! The machine's own certificate authority, for the hosts warden opens.
//!
//! Made at boot and held in warden's memory only: its private key is never
//! written anywhere and dies with the machine. Its certificate (public) is
//! what the machine's tools are told to trust. Each opened host gets a
//! certificate for its name, signed by it, made once and kept; all of them
//! share one key pair (a fresh key per host would cost a key generation on
//! each first connection and protect nothing more: the key never leaves
//! warden either way).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::ServerConfig;
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use time::{Duration, OffsetDateTime};

/// How long the authority and its certificates are valid from boot: a
/// machine lives days, not years, and a day before boot allows for a
/// client whose clock lags.
const VALID_FOR: Duration = Duration::days(397);
const VALID_BEFORE: Duration = Duration::days(1);

/// Why a certificate could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CaError {
    #[error("making the machine's certificate authority: {0}")]
    Authority(rcgen::Error),
    #[error("making a certificate for {host}: {error}")]
    Leaf { host: String, error: rcgen::Error },
    #[error("loading the certificate for {host} into TLS: {error}")]
    Tls { host: String, error: rustls::Error },
}

pub struct MachineCa {
    issuer: Issuer<'static, KeyPair>,
    der: CertificateDer<'static>,
    pem: String,
    leaf_key: KeyPair,
    /// One server configuration per opened host name, made on first use.
    servers: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl MachineCa {
    /// A new authority, named after the machine.
    pub fn new(machine: &str) -> Result<MachineCa, CaError> {
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let name = format!("warden machine {machine}");
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        (params.not_before, params.not_after) = validity();
        let key = KeyPair::generate().map_err(CaError::Authority)?;
        let cert = params.self_signed(&key).map_err(CaError::Authority)?;
        let leaf_key = KeyPair::generate().map_err(CaError::Authority)?;
        Ok(MachineCa {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
            leaf_key,
            servers: Mutex::new(HashMap::new()),
        })
    }

    /// The authority's certificate, PEM: what the machine's tools trust.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The authority's certificate, DER.
    pub fn der(&self) -> &[u8] {
        self.der.as_ref()
    }

    /// The SHA-256 of the authority's certificate, as `AB:CD:...`.
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(&self.der);
        let hex: Vec<String> = digest.iter().map(|b| format!("{b:02X}")).collect();
        hex.join(":")
    }

    /// The TLS server side for `host` (a name, never an address), with a
    /// certificate for exactly that name; made once, then kept.
    pub fn server_for(&self, host: &str) -> Result<Arc<ServerConfig>, CaError> {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = servers.get(host) {
            return Ok(found.clone());
        }
        let made = Arc::new(self.make_server(host)?);
        servers.insert(host.to_string(), made.clone());
        Ok(made)
    }

    fn make_server(&self, host: &str) -> Result<ServerConfig, CaError> {
        let leaf_error = |error| CaError::Leaf {
            host: host.to_string(),
            error,
        };
        let mut params = CertificateParams::new(vec![host.to_string()]).map_err(leaf_error)?;
        params.distinguished_name.push(DnType::CommonName, host);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        (params.not_before, params.not_after) = validity();
        let cert = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(leaf_error)?;
        let tls_error = |error| CaError::Tls {
            host: host.to_string(),
            error,
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(tls_error)?;
        let certified = CertifiedKey::new(vec![cert.der().clone(), self.der.clone()], signing);
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls_error)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
        // HTTP/1.1 alone: a client offering h2 falls back to it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

fn validity() -> (OffsetDateTime, OffsetDateTime) {
    let now = OffsetDateTime::now_utc();
    (now - VALID_BEFORE, now + VALID_FOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_certificate_is_made_once_and_chains_to_the_authority() {
        let ca = MachineCa::new("test").unwrap();
        assert!(ca.pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(ca.fingerprint().len(), 32 * 3 - 1);
        let first = ca.server_for("api.example.com").unwrap();
        let again = ca.server_for("api.example.com").unwrap();
        assert!(Arc::ptr_eq(&first, &again), "kept, not made again");
        let other = ca.server_for("git.example.com").unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(first.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn two_machines_have_two_authorities() {
        let a = MachineCa::new("a").unwrap();
        let b = MachineCa::new("b").unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
    }
}
