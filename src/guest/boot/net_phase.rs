//! Phase 10 of the boot: the network. The firewall applied, the egress
//! proxy started (reaching out itself, or in a VM through the host's
//! relay), and the default host list worked out once the machine is ready.

use crate::guest::audit::payload::{self, Firewall, ProxyLine};
use crate::guest::net::proxy::{self, Proxy};
use crate::guest::supervisor::Supervisor;
use std::path::PathBuf;
use std::sync::Arc;

/// Why the egress proxy did not start.
#[derive(Debug, thiserror::Error)]
enum ProxyError {
    /// The machine's key, as loading it says.
    #[error(transparent)]
    Key(crate::shared::machine_key::KeyFileError),
    #[error("{}: {error}", file.display())]
    KeyFile {
        file: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error(transparent)]
    Start(#[from] proxy::StartError),
}

/// Who opened a connection to the proxy: the uid owning its client end,
/// the process holding it, and the command whose lifetime tag that
/// process carries (its id, and a digest of its argv, so no argument
/// reaches the line whole).
fn origin(sup: &Arc<Supervisor>) -> proxy::Origin {
    let weak = Arc::downgrade(sup);
    let tags = crate::guest::process::lifetime::TAGS;
    Arc::new(move |client, proxy_end| {
        let uid = crate::guest::net::origin::uid_of(client, proxy_end);
        // A socket warden's connect gate connected says itself whose it is.
        let made_for = weak
            .upgrade()
            .and_then(|sup| sup.network.gate()?.caller_of(client));
        let holder = match made_for {
            Some(tid) => Some(crate::guest::net::origin::holder_of_thread(
                tid as i32,
                tags.clone(),
            )),
            None => crate::guest::net::origin::holder(client, proxy_end, tags.clone()),
        };
        // The uid alone, when no process holds the socket any more.
        let Some(holder) = holder else {
            return uid.map(|uid| payload::Origin {
                uid: Some(uid),
                ..Default::default()
            });
        };
        let command = holder
            .tag
            .and_then(|tag| weak.upgrade()?.commands.digest_of_tag(tag));
        let (command, argv_sha256) = command.unzip();
        Some(payload::Origin {
            pid: Some(holder.pid),
            uid,
            command,
            argv_sha256,
        })
    })
}

/// How the proxy reaches upstreams: itself, or in a VM with a network
/// its host's relay, with the machine's key (root's alone to read).
fn upstream_way(sup: &Supervisor, in_vm: bool) -> Result<proxy::Through, ProxyError> {
    let Some(port) = sup.config.egress_vsock_port.filter(|_| in_vm) else {
        return Ok(proxy::Through::Direct);
    };
    let file = &sup.config.key_file;
    crate::shared::machine_key::Key::load(file).map_err(ProxyError::Key)?;
    let key = std::fs::read_to_string(file).map_err(|error| ProxyError::KeyFile {
        file: file.clone(),
        error,
    })?;
    Ok(proxy::Through::HostRelay {
        port,
        key: key.trim().to_string(),
    })
}

/// Applies the firewall, works out the default host list, and starts the
/// proxy on the listeners bound earlier (in a VM with a network, reaching
/// out through the host's relay).
pub(super) fn start(
    sup: &Arc<Supervisor>,
    runtime: &tokio::runtime::Runtime,
    listeners: Vec<std::net::TcpListener>,
    in_vm: bool,
) -> proxy::Defaults {
    let applied = sup.network.apply();
    let defaults: proxy::Defaults = Default::default();
    let weak = Arc::downgrade(sup);
    let record: proxy::Recorder = Arc::new(move |line| {
        if let Some(sup) = weak.upgrade() {
            // Anyone in the machine can ask the proxy for what it refuses,
            // as often as they like: refusals are a burst and a count, per
            // asker (a flood of one command's hides no other's), and the
            // runtime's always whole.
            match &line {
                ProxyLine::Egress(egress) if !egress.allowed => {
                    sup.audit.record_refusal_by("proxy", sup.runtime.uid, &line)
                }
                _ => sup.audit.record(&line),
            }
        }
    });
    let hooks = proxy::Hooks {
        record,
        origin: Some(origin(sup)),
        runtime: Some(proxy::Runtime {
            uid: sup.runtime.uid,
            client_uid: Arc::new(crate::guest::net::origin::uid_of),
        }),
        opener: sup.network.opener.as_ref().ok().cloned(),
    };
    let policy = &sup.network.policy;
    let dir = &sup.config.policy_dir;
    let started: Result<(Arc<Proxy>, _), ProxyError> =
        upstream_way(sup, in_vm).and_then(|through| {
            Ok(proxy::start(
                runtime,
                policy,
                dir,
                defaults.clone(),
                hooks,
                listeners,
                through,
            )?)
        });
    let proxy_error = match started {
        Ok((p, _serving)) => {
            sup.network.set_proxy(p);
            None
        }
        Err(e) => {
            crate::say!("the egress proxy did not start: {e}");
            Some(e.to_string())
        }
    };
    sup.audit.record(&payload::Network {
        firewall: match &applied {
            Some(Ok(_)) => Firewall::Word("applied"),
            Some(Err(e)) => Firewall::Failed {
                error: e.to_string(),
            },
            None => Firewall::Word("off"),
        },
        firewall_via: applied
            .and_then(Result::ok)
            .map(|()| crate::guest::net::firewall::VIA),
        firewall_policy: policy.firewall,
        proxy: &sup.network.listening,
        proxy_error,
        hosts_from: if policy.hosts.is_some() {
            "network.json"
        } else {
            "default"
        },
    });
    defaults
}

/// Works out the default host list, once the machine is ready: asking the
/// tools takes a second or two of CPU that the boot should not share. A
/// connection that needs the list before it is known waits for it.
pub(super) fn work_out_default_hosts(sup: &Arc<Supervisor>, defaults: proxy::Defaults) {
    if sup.network.policy.hosts.is_some() {
        return;
    }
    let path = sup.config.path.clone();
    let home = sup.shell.home.display().to_string();
    let shell = crate::guest::confine::spawn::Identity {
        uid: sup.shell.uid,
        gid: sup.shell.gid,
        groups: sup.shell.groups.clone(),
    };
    let (sup2, filled) = (sup.clone(), defaults.clone());
    let worked_out = std::thread::Builder::new()
        .name("default-hosts".into())
        .spawn(move || {
            let (hosts, sources) =
                crate::guest::net::default_hosts(&sup2.reaper, shell, &home, &path);
            sup2.audit.record(&payload::DefaultHosts {
                hosts: &hosts,
                registries_found: &sources,
            });
            let _ = filled.set(hosts);
        });
    if let Err(e) = worked_out {
        crate::say!("cannot work out the default host list ({e}): GitHub's hosts only");
        let _ = defaults.set(
            crate::guest::net::registries::GITHUB
                .map(String::from)
                .to_vec(),
        );
    }
}
