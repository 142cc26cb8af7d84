//! The list's decision and the addresses' check, pure: whether a name
//! and port are on a host list (`decide_on`), and which of the addresses
//! its name resolved to may be connected to (`pick`). The guest's proxy
//! and a VM's relay on the host ask these and nothing else.

use super::addr::{self, Cidr};
use super::hosts::HostList;
use super::refusal::{Kind, Refused};
use super::target::{Host, Target};
use std::net::{IpAddr, SocketAddr};

/// A target the list allows: the name to resolve, and the entry (as the
/// owner wrote it) that allows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed<'a> {
    pub name: &'a str,
    pub entry: &'a str,
}

/// Pure: the same on one list, named `list` in the refusal.
pub fn decide_on<'a>(
    hosts: &'a HostList,
    list: &str,
    target: &'a Target,
) -> Result<Allowed<'a>, Refused> {
    let name = match &target.host {
        Host::Ip(_) => {
            return Err(Refused::new(
                Kind::IpTarget,
                "an IP address as the target: the proxy reaches hosts by name",
            ))
        }
        Host::Name(name) => name.as_str(),
    };
    match hosts.allowing(name, target.port) {
        Some(entry) => Ok(Allowed { name, entry }),
        None => Err(Refused::new(
            Kind::NotListed,
            format!("{name}:{} is not on {list}", target.port),
        )),
    }
}

/// Pure: the addresses `name` resolved to that may be connected to on
/// `port`, in the resolver's order (the proxy tries them in turn), or why
/// there is none. An address of a refused class passes only when `allow`
/// lists it; when none passes, the reason names the last one refused.
pub fn pick(
    name: &str,
    resolved: &[IpAddr],
    port: u16,
    allow: &[Cidr],
) -> Result<Vec<SocketAddr>, Refused> {
    let mut passed = Vec::new();
    let mut last_refusal = None;
    for &ip in resolved {
        match addr::check(ip, allow) {
            Ok(()) => passed.push(SocketAddr::new(ip, port)),
            Err(class) => {
                last_refusal = Some(format!("{name} resolves to {ip}, a {class} address"))
            }
        }
    }
    match (passed.is_empty(), last_refusal) {
        (false, _) => Ok(passed),
        (true, Some(reason)) => Err(Refused::new(Kind::RefusedAddress, reason)),
        (true, None) => Err(Refused::new(
            Kind::NoAddress,
            format!("{name} has no address"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: &[&str] = &[];

    /// (resolved, allowed blocks, the addresses picked or the refusal)
    type Case = (
        &'static [&'static str],
        &'static [&'static str],
        Result<&'static [&'static str], (Kind, &'static str)>,
    );

    const PICK_CASES: &[Case] = &[
        (&["93.184.216.34"], NONE, Ok(&["93.184.216.34:443"])),
        (
            &["2606:2800:220:1::1"],
            NONE,
            Ok(&["[2606:2800:220:1::1]:443"]),
        ),
        // Only the addresses that pass, in the resolver's order.
        (
            &["127.0.0.1", "93.184.216.34", "10.0.0.1", "93.184.216.35"],
            NONE,
            Ok(&["93.184.216.34:443", "93.184.216.35:443"]),
        ),
        (
            &["127.0.0.1"],
            NONE,
            Err((
                Kind::RefusedAddress,
                "h.test resolves to 127.0.0.1, a loopback address",
            )),
        ),
        (
            &["192.168.77.7"],
            NONE,
            Err((
                Kind::RefusedAddress,
                "h.test resolves to 192.168.77.7, a private address",
            )),
        ),
        // The reason names the last address refused.
        (
            &["127.0.0.1", "169.254.169.254"],
            NONE,
            Err((
                Kind::RefusedAddress,
                "h.test resolves to 169.254.169.254, a cloud-metadata address",
            )),
        ),
        (
            &["::ffff:127.0.0.1"],
            NONE,
            Err((
                Kind::RefusedAddress,
                "h.test resolves to ::ffff:127.0.0.1, a ipv4-in-ipv6-mapped address",
            )),
        ),
        (
            &["fd00::1"],
            NONE,
            Err((
                Kind::RefusedAddress,
                "h.test resolves to fd00::1, a unique-local address",
            )),
        ),
        // What the policy allows passes.
        (
            &["192.168.77.7"],
            &["192.168.77.0/24"],
            Ok(&["192.168.77.7:443"]),
        ),
        // A metadata address only by a block that is that one address.
        (
            &["169.254.169.254"],
            &["169.254.0.0/16"],
            Err((
                Kind::RefusedAddress,
                "h.test resolves to 169.254.169.254, a cloud-metadata address",
            )),
        ),
        (
            &["169.254.169.254"],
            &["169.254.169.254/32"],
            Ok(&["169.254.169.254:443"]),
        ),
        (&[], NONE, Err((Kind::NoAddress, "h.test has no address"))),
    ];

    #[test]
    fn pick_table() {
        for (resolved, allow, want) in PICK_CASES {
            let ips: Vec<IpAddr> = resolved.iter().map(|ip| ip.parse().unwrap()).collect();
            let allow: Vec<Cidr> = allow.iter().map(|c| c.parse().unwrap()).collect();
            match (pick("h.test", &ips, 443, &allow), want) {
                (Ok(got), Ok(addrs)) => {
                    let got: Vec<String> = got.iter().map(|a| a.to_string()).collect();
                    assert_eq!(got, *addrs, "{resolved:?}")
                }
                (Err(r), Err((kind, reason))) => {
                    assert_eq!(
                        (r.kind, r.reason.as_str()),
                        (*kind, *reason),
                        "{resolved:?}"
                    )
                }
                (got, want) => panic!("{resolved:?}: {got:?}, wanted {want:?}"),
            }
        }
    }
}
