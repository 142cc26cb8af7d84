//! The machine's authority made trusted by its tools: the system bundle
//! (the image's own certificates, then the machine's) written to warden's
//! own folder and mounted read-only over the image's bundle, so tools that
//! read the system store trust it with no flag; and the variables that
//! point the tools that keep a store of their own at the same file.
//!
//! The mount is warden's own (the machine's mount namespace): the image's
//! file is never changed. Where no bundle exists, or nothing can be
//! mounted, status says so.

use super::tls::SYSTEM_BUNDLES;
use super::OpenerError;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The variables, in the environments warden builds, that name the
/// machine's bundle: OpenSSL and Python's ssl, Node, requests, pip, git,
/// cargo and curl.
pub const ENV_NAMES: [&str; 7] = [
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "CURL_CA_BUNDLE",
];

/// The bundle's name in warden's own folder (the mount's source).
const OWN_NAME: &str = "trust.pem";

/// The line before the machine's authority in the bundle.
const MARK: &str = "# warden: this machine's own authority, for the hosts its proxy opens\n";

/// Pure: the image's certificates (without a machine's authority an
/// earlier boot added), then the machine's authority.
pub fn bundle(system: &str, ca_pem: &str) -> String {
    let mut text = system.split(MARK).next().unwrap_or("").to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(MARK);
    text.push_str(ca_pem);
    text
}

/// Where the bundle is written when it cannot be mounted over the system
/// bundle (no CAP_SYS_ADMIN: a pod under the baseline policy): a file of
/// the image's own `/etc`, which every user reads, named by the variables.
pub const BESIDE: &str = "/etc/ssl/warden-machine-bundle.pem";

/// Why the machine's authority is not published.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// Until the boot publishes it.
    #[error("not published yet")]
    NotPublished,
    /// There is no authority to publish.
    #[error(transparent)]
    NoAuthority(#[from] OpenerError),
    #[error("no system bundle to add the machine's authority to (looked for {})", SYSTEM_BUNDLES.join(", "))]
    NoSystemBundle,
    #[error("{}: {error}", path.display())]
    File {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("mounting the machine's bundle over {}: {error}", target.display())]
    Mount {
        target: PathBuf,
        #[source]
        error: nix::Error,
    },
}

/// `error` on `path`.
fn file(path: &Path) -> impl Fn(std::io::Error) -> TrustError + '_ {
    move |error| TrustError::File {
        path: path.to_path_buf(),
        error,
    }
}

/// How the bundle is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The file the variables name.
    pub bundle: PathBuf,
    /// Why it is not over the system bundle, when it is beside it.
    pub beside_because: Option<String>,
}

/// Publishes `ca_pem`: the combined bundle written in `own_dir` (root's,
/// mode 0644) and mounted read-only over the first system bundle found;
/// where nothing can be mounted, written beside it (`BESIDE`), which only
/// the tools that read the variables then trust.
pub fn publish(ca_pem: &str, own_dir: &Path) -> Result<Published, TrustError> {
    let target = SYSTEM_BUNDLES
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .ok_or(TrustError::NoSystemBundle)?;
    let system = std::fs::read_to_string(target).map_err(file(target))?;
    let own = own_dir.join(OWN_NAME);
    std::fs::create_dir_all(own_dir).map_err(file(own_dir))?;
    std::fs::write(&own, bundle(&system, ca_pem)).map_err(file(&own))?;
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o644)).map_err(file(&own))?;
    match mount_over(&own, target) {
        Ok(()) => Ok(Published {
            bundle: target.to_path_buf(),
            beside_because: None,
        }),
        Err(why) => {
            write_beside(&own, Path::new(BESIDE))?;
            Ok(Published {
                bundle: PathBuf::from(BESIDE),
                beside_because: Some(why.to_string()),
            })
        }
    }
}

/// The bundle copied to `to` (root's, 0644), replacing what is there.
fn write_beside(own: &Path, to: &Path) -> Result<(), TrustError> {
    let text = std::fs::read(own).map_err(file(own))?;
    let temporary = to.with_extension("pem.new");
    std::fs::write(&temporary, text).map_err(file(to))?;
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o644))
        .map_err(file(to))?;
    std::fs::rename(&temporary, to).map_err(file(to))
}

/// Binds `source` over `target`, then makes the bind read-only.
fn mount_over(source: &Path, target: &Path) -> Result<(), TrustError> {
    use nix::mount::{mount, MsFlags};
    let fail = |error: nix::Error| TrustError::Mount {
        target: target.to_path_buf(),
        error,
    };
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(fail)?;
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .map_err(fail)
}

/// The variables that point tools at `bundle`.
pub fn env(bundle: &Path) -> Vec<(String, String)> {
    let path = bundle.display().to_string();
    ENV_NAMES
        .iter()
        .map(|name| (name.to_string(), path.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_keeps_the_image_s_certificates_and_adds_the_machine_s() {
        let ca = "-----BEGIN CERTIFICATE-----\nM\n-----END CERTIFICATE-----\n";
        let cases = [
            ("A\n", "A\n# warden"),
            ("A", "A\n# warden"),
            ("", "# warden"),
            (
                "A\n# warden: this machine's own authority, for the hosts its proxy opens\nOLD",
                "A\n# warden",
            ),
        ];
        for (system, starts) in cases {
            let text = bundle(system, ca);
            assert!(text.starts_with(starts), "{text:?}");
            assert!(text.ends_with(ca));
            assert!(!text.contains("OLD"), "an earlier authority is dropped");
        }
        let vars = env(Path::new("/etc/ssl/certs/ca-certificates.crt"));
        assert_eq!(vars.len(), ENV_NAMES.len());
        assert!(vars
            .iter()
            .all(|(_, v)| v == "/etc/ssl/certs/ca-certificates.crt"));
    }
}
