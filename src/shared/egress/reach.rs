//! Reaching an upstream, as the guest's proxy and a VM's relay on the
//! host both do: their own resolver (no NSS in a static binary: hickory
//! reads /etc/resolv.conf and /etc/hosts), a name resolved once, and a
//! connection to the first checked address that answers.

use super::refusal::{Kind, Refused};
use hickory_resolver::config::{LookupIpStrategy, ResolveHosts};
use hickory_resolver::TokioResolver;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;

pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no resolver could be built.
#[derive(Debug, thiserror::Error)]
pub enum ResolverError {
    #[error("resolver: {0}")]
    Build(#[source] hickory_resolver::net::NetError),
}

/// A resolver for IPv4 and IPv6 with the machine's /etc/hosts first,
/// asking `servers` when there are some (a VM's relay on the host asks the
/// machine's `dns`), else /etc/resolv.conf's.
pub fn resolver_with(servers: &[IpAddr]) -> Result<TokioResolver, ResolverError> {
    let asking = |servers: Vec<_>| {
        TokioResolver::builder_with_config(
            hickory_resolver::config::ResolverConfig::from_name_servers(servers),
            hickory_resolver::net::runtime::TokioRuntimeProvider::default(),
        )
    };
    let mut builder = match servers {
        // A machine without a nameserver (a container with no network)
        // still gets its proxy: every name then fails to resolve, with
        // that reason, instead of every command being refused.
        [] => TokioResolver::builder_tokio().unwrap_or_else(|e| {
            crate::say!("proxy: no nameserver from /etc/resolv.conf ({e}); names will not resolve");
            asking(Vec::new())
        }),
        _ => asking(
            servers
                .iter()
                .map(|&ip| hickory_resolver::config::NameServerConfig::udp_and_tcp(ip))
                .collect(),
        ),
    };
    let opts = builder.options_mut();
    opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    opts.use_hosts_file = ResolveHosts::Always;
    builder.build().map_err(ResolverError::Build)
}

/// Every address `name` has, within `RESOLVE_TIMEOUT`.
pub async fn resolve(resolver: &TokioResolver, name: &str) -> Result<Vec<IpAddr>, Refused> {
    match tokio::time::timeout(RESOLVE_TIMEOUT, resolver.lookup_ip(name)).await {
        Ok(Ok(found)) => Ok(found.iter().collect()),
        Ok(Err(e)) => Err(Refused::new(
            Kind::ResolveFailed,
            format!("cannot resolve {name}: {e}"),
        )),
        Err(_) => Err(Refused::new(
            Kind::ResolveTimeout,
            format!("resolving {name} took over 10 s"),
        )),
    }
}

/// Connects to the first of `addresses` (all checked already) that
/// answers within `timeout`; else the last failure is the reason.
pub async fn connect(
    addresses: &[SocketAddr],
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), Refused> {
    let mut last_error = String::from("no address to connect to");
    for &to in addresses {
        match tokio::time::timeout(timeout, TcpStream::connect(to)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, to));
            }
            Ok(Err(e)) => last_error = format!("connect to {to}: {e}"),
            Err(_) => last_error = format!("connect to {to}: timed out"),
        }
    }
    Err(Refused::new(Kind::ConnectFailed, last_error))
}
