//! `warden proxy`: the egress proxy alone, in the foreground, outside a
//! machine, with a policy folder's network.json; its audit lines go to an
//! audit log or to stdout.

use super::opened::OpenerError;
use super::{host_list, proxy, registries};
use crate::guest::audit::payload::{self, Payload};
use crate::shared::policy::{NetworkPolicy, PolicyError};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why `warden proxy` could not start.
#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    #[error("{0} is not a loopback address")]
    NotLoopback(SocketAddr),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("audit log in {}: {error}", dir.display())]
    Audit {
        dir: PathBuf,
        #[source]
        error: io::Error,
    },
    #[error(transparent)]
    Opener(#[from] OpenerError),
    #[error("{}: {error}", path.display())]
    File {
        path: PathBuf,
        #[source]
        error: io::Error,
    },
    /// The credentials' file, as the vault says.
    #[error("{}: {error}", path.display())]
    Credentials {
        path: PathBuf,
        #[source]
        error: crate::guest::accounts::runtime_keys::EnvTextError,
    },
    #[error(transparent)]
    Runtime(io::Error),
    #[error("{address}: {error}")]
    Bind {
        address: SocketAddr,
        #[source]
        error: io::Error,
    },
    #[error(transparent)]
    Start(#[from] proxy::StartError),
}

/// `warden proxy`: the egress proxy alone, in the foreground, with the
/// policy folder's network.json (its firewall fields do not apply here).
/// `opened`: where to write the authority's certificate, and the file of
/// credentials' values, to open hosts as a machine's warden does.
pub fn standalone(
    listen: &[std::net::SocketAddr],
    policy_dir: &std::path::Path,
    audit_dir: Option<&std::path::Path>,
    opened: Option<(&std::path::Path, Option<&std::path::Path>)>,
) -> i32 {
    let fail = |e: StandaloneError| {
        crate::say!("proxy: {e}");
        1
    };
    if let Some(a) = listen.iter().find(|a| !a.ip().is_loopback()) {
        return fail(StandaloneError::NotLoopback(*a));
    }
    let policy = match NetworkPolicy::load(policy_dir) {
        Ok(p) => p,
        Err(e) => return fail(e.into()),
    };
    let record = match standalone_recorder(audit_dir) {
        Ok(record) => record,
        Err(e) => return fail(e),
    };
    let opened = opened.map(|(ca, values)| standalone_opener(ca, values, policy_dir, policy.spend));
    let opener = match opened {
        None => None,
        Some(Ok(opener)) => Some(opener),
        Some(Err(e)) => return fail(e),
    };
    let defaults: proxy::Defaults = Default::default();
    if policy.hosts.is_none() {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let found = registries::from_configuration(std::path::Path::new("/"), &env);
        let _ = defaults.set(host_list(&found));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(StandaloneError::Runtime(e)),
    };
    let listeners = match runtime.block_on(bind_each(listen)) {
        Ok(listeners) => listeners,
        Err(e) => return fail(e),
    };
    let shown: Vec<String> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .map(|a| a.to_string())
        .collect();
    let serving = match proxy::start(
        &runtime,
        &policy,
        policy_dir,
        defaults,
        proxy::Hooks {
            record,
            origin: None,
            runtime: None,
            opener,
        },
        listeners,
        proxy::Through::Direct,
    ) {
        Ok((_, serving)) => serving,
        Err(e) => return fail(e.into()),
    };
    crate::say!("proxy listening on {}", shown.join(" "));
    let _ = runtime.block_on(serving);
    0
}

/// `warden proxy --opened-ca CA [--credentials FILE]`: an authority for
/// this run, its certificate written to `ca`, the credentials' values read
/// from `values` (kept in memory only, as a machine's warden keeps them).
fn standalone_opener(
    ca: &Path,
    values: Option<&Path>,
    policy_dir: &Path,
    spend: crate::shared::spend::Spend,
) -> Result<Arc<proxy::Opener>, StandaloneError> {
    let on = |path: &Path| {
        let path = path.to_path_buf();
        move |error| StandaloneError::File { path, error }
    };
    let prices = crate::shared::spend::prices::load(policy_dir);
    let opener = proxy::Opener::new("proxy", &spend, prices)?;
    if let Some(file) = values {
        let text = std::fs::read_to_string(file).map_err(on(file))?;
        opener
            .vault
            .hand(&text)
            .map_err(|error| StandaloneError::Credentials {
                path: file.to_path_buf(),
                error,
            })?;
    }
    std::fs::write(ca, opener.ca.pem()).map_err(on(ca))?;
    Ok(Arc::new(opener))
}

/// Where the standalone proxy's audit lines go: an audit log in `dir`,
/// else stdout, one JSON object a line.
fn standalone_recorder(dir: Option<&Path>) -> Result<proxy::Recorder, StandaloneError> {
    let Some(dir) = dir else {
        return Ok(Arc::new(|line| {
            let mut fields = payload::fields_of(&line);
            fields["kind"] = line.event().word().into();
            println!("{fields}");
        }));
    };
    match crate::guest::audit::Audit::open_with(dir, None, None, Default::default()) {
        Ok(audit) => Ok(Arc::new(move |line| audit.record(&line))),
        Err(error) => Err(StandaloneError::Audit {
            dir: dir.to_path_buf(),
            error,
        }),
    }
}

/// Binds each address given to `warden proxy`. Bound the way tokio binds
/// (its listen backlog, address reuse), then handed over as std listeners,
/// which is what the proxy starts on.
async fn bind_each(listen: &[SocketAddr]) -> Result<Vec<TcpListener>, StandaloneError> {
    let mut listeners = Vec::new();
    for &address in listen {
        let bound = tokio::net::TcpListener::bind(address).await;
        let listener = bound.and_then(|l| l.into_std());
        listeners.push(listener.map_err(|error| StandaloneError::Bind { address, error })?);
    }
    Ok(listeners)
}
