//! What the gate does with one connect(2), decided from warden's own copy
//! of its address (never from the command's memory, which another of its
//! threads may change meanwhile).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not an IP address: the kernel goes on with the call as made.
    /// Whatever the command's memory says by then, Landlock refuses every
    /// TCP connect a command makes itself, so at most a unix (or routing
    /// netlink) socket gets connected, which is no way out.
    Continue,
    /// The proxy: warden takes the command's socket and connects it to
    /// this address itself.
    Proxy(SocketAddr),
    /// Refused: the errno the command gets, and why.
    Refuse {
        errno: i32,
        address: Option<SocketAddr>,
        reason: &'static str,
    },
}

/// Where the probe knocks to prove Landlock refuses a command's own TCP
/// connects (which the gate relies on): let through to the kernel, which
/// must refuse it. Letting any call through is safe only because of that
/// refusal, so the probe proves it on every status.
pub const LANDLOCK_WITNESS: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1));

/// Bytes of a sockaddr_in, and the shortest sockaddr_in6 the kernel takes.
const IN_LEN: usize = 16;
const IN6_LEN: usize = 24;

/// `addr` is the copy of the call's address (as long as the call said,
/// at most a sockaddr_storage); `proxy_port` the proxy's port on loopback.
pub fn decide(addr: &[u8], proxy_port: u16) -> Decision {
    let Some(family) = addr.get(..2).map(|b| u16::from_ne_bytes([b[0], b[1]])) else {
        return Decision::Continue;
    };
    let target = match i32::from(family) {
        libc::AF_INET => v4(addr),
        libc::AF_INET6 => v6(addr),
        _ => return Decision::Continue,
    };
    let Some(target) = target else {
        return Decision::Refuse {
            errno: libc::EINVAL,
            address: None,
            reason: "an IP address shorter than its family's",
        };
    };
    if is_proxy(target, proxy_port) {
        return Decision::Proxy(target);
    }
    if target == LANDLOCK_WITNESS {
        return Decision::Continue;
    }
    Decision::Refuse {
        errno: libc::EACCES,
        address: Some(target),
        reason: "not the proxy: shell reaches the network only through warden's proxy",
    }
}

fn port(addr: &[u8]) -> u16 {
    u16::from_be_bytes([addr[2], addr[3]])
}

fn v4(addr: &[u8]) -> Option<SocketAddr> {
    let a = addr.get(..IN_LEN)?;
    let ip = Ipv4Addr::new(a[4], a[5], a[6], a[7]);
    Some(SocketAddr::V4(SocketAddrV4::new(ip, port(a))))
}

fn v6(addr: &[u8]) -> Option<SocketAddr> {
    let a = addr.get(..IN6_LEN)?;
    let octets: [u8; 16] = a[8..24].try_into().ok()?;
    let flow = u32::from_ne_bytes(a[4..8].try_into().ok()?);
    let scope = addr
        .get(24..28)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_ne_bytes);
    let ip = Ipv6Addr::from(octets);
    Some(SocketAddr::V6(SocketAddrV6::new(ip, port(a), flow, scope)))
}

/// The proxy listens on 127.0.0.1 and ::1 (an IPv6 socket may name the
/// former as ::ffff:127.0.0.1).
fn is_proxy(target: SocketAddr, proxy_port: u16) -> bool {
    let loopback = match target.ip() {
        IpAddr::V4(ip) => ip == Ipv4Addr::LOCALHOST,
        IpAddr::V6(ip) => {
            ip == Ipv6Addr::LOCALHOST || ip.to_ipv4_mapped() == Some(Ipv4Addr::LOCALHOST)
        }
    };
    loopback && target.port() == proxy_port && proxy_port != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sin(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut b = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        b.extend(port.to_be_bytes());
        b.extend(ip);
        b.extend([0u8; 8]);
        b
    }

    fn sin6(ip: Ipv6Addr, port: u16, len: usize) -> Vec<u8> {
        let mut b = (libc::AF_INET6 as u16).to_ne_bytes().to_vec();
        b.extend(port.to_be_bytes());
        b.extend(0u32.to_ne_bytes());
        b.extend(ip.octets());
        b.extend(0u32.to_ne_bytes());
        b.truncate(len);
        b
    }

    fn unix(path: &str) -> Vec<u8> {
        let mut b = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        b.extend(path.as_bytes());
        b.push(0);
        b
    }

    fn proxy(s: &str) -> Decision {
        Decision::Proxy(s.parse().unwrap())
    }

    fn refused(s: &str) -> Decision {
        Decision::Refuse {
            errno: libc::EACCES,
            address: Some(s.parse().unwrap()),
            reason: "not the proxy: shell reaches the network only through warden's proxy",
        }
    }

    type Case = (&'static str, Vec<u8>, Decision);

    /// Well-formed IP addresses: the proxy's, Landlock's witness, and
    /// everything else, refused.
    fn ip_cases() -> Vec<Case> {
        let mapped: Ipv6Addr = "::ffff:127.0.0.1".parse().unwrap();
        vec![
            (
                "proxy v4",
                sin([127, 0, 0, 1], 3128),
                proxy("127.0.0.1:3128"),
            ),
            (
                "proxy v6",
                sin6(Ipv6Addr::LOCALHOST, 3128, 28),
                proxy("[::1]:3128"),
            ),
            (
                "proxy v6, short form",
                sin6(Ipv6Addr::LOCALHOST, 3128, 24),
                proxy("[::1]:3128"),
            ),
            (
                "proxy v4-mapped",
                sin6(mapped, 3128, 28),
                proxy("[::ffff:127.0.0.1]:3128"),
            ),
            (
                "another loopback port",
                sin([127, 0, 0, 1], 3000),
                refused("127.0.0.1:3000"),
            ),
            (
                "Landlock's witness",
                sin([127, 0, 0, 1], 1),
                Decision::Continue,
            ),
            (
                "port 1 elsewhere",
                sin([127, 0, 0, 2], 1),
                refused("127.0.0.2:1"),
            ),
            (
                "another loopback address",
                sin([127, 0, 0, 2], 3128),
                refused("127.0.0.2:3128"),
            ),
            (
                "anyone's proxy port",
                sin([192, 0, 2, 7], 3128),
                refused("192.0.2.7:3128"),
            ),
            (
                "v6 elsewhere",
                sin6("2001:db8::1".parse().unwrap(), 443, 28),
                refused("[2001:db8::1]:443"),
            ),
        ]
    }

    /// Short IP addresses, refused, and other families, left to the
    /// kernel.
    fn malformed_and_other_cases() -> Vec<Case> {
        let short = Decision::Refuse {
            errno: libc::EINVAL,
            address: None,
            reason: "an IP address shorter than its family's",
        };
        vec![
            (
                "v4 too short",
                sin([127, 0, 0, 1], 3128)[..8].to_vec(),
                short.clone(),
            ),
            ("v6 too short", sin6(Ipv6Addr::LOCALHOST, 3128, 20), short),
            ("unix", unix("/run/x.sock"), Decision::Continue),
            ("unspec (disconnect)", vec![0, 0], Decision::Continue),
            (
                "netlink",
                (libc::AF_NETLINK as u16).to_ne_bytes().to_vec(),
                Decision::Continue,
            ),
            ("empty", vec![], Decision::Continue),
            ("one byte", vec![2], Decision::Continue),
        ]
    }

    #[test]
    fn decisions() {
        let cases = ip_cases().into_iter().chain(malformed_and_other_cases());
        for (name, addr, want) in cases {
            assert_eq!(decide(&addr, 3128), want, "{name}");
        }
    }

    #[test]
    fn port_zero_is_never_the_proxy() {
        assert!(matches!(
            decide(&sin([127, 0, 0, 1], 0), 0),
            Decision::Refuse { .. }
        ));
    }
}
