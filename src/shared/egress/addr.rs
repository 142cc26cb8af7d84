//! The address classifier: which resolved addresses the egress proxy must
//! not connect to (loopback, private ranges, cloud metadata, addresses that
//! smuggle an IPv4 address inside IPv6, ...), and the CIDR blocks the owner
//! allows despite it.
//!
//! The proxy checks every address a name resolves to, after resolution, so
//! a listed name that points at 127.0.0.1 or the metadata service still
//! cannot be reached.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Loopback,
    Private,
    LinkLocal,
    Metadata,
    Cgnat,
    Multicast,
    Unspecified,
    Broadcast,
    Reserved,
    Documentation,
    Benchmarking,
    ProtocolAssignments,
    UniqueLocal,
    SiteLocal,
    Ipv4Mapped,
    Ipv4Compatible,
    Nat64,
    SixToFour,
    Teredo,
    Discard,
    ThisNetwork,
}

impl Refusal {
    /// Stable words: audit lines and HTTP headers carry them, and readers
    /// may match on them.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Loopback => "loopback",
            Refusal::Private => "private",
            Refusal::LinkLocal => "link-local",
            Refusal::Metadata => "cloud-metadata",
            Refusal::Cgnat => "cgnat",
            Refusal::Multicast => "multicast",
            Refusal::Unspecified => "unspecified",
            Refusal::Broadcast => "broadcast",
            Refusal::Reserved => "reserved",
            Refusal::Documentation => "documentation",
            Refusal::Benchmarking => "benchmarking",
            Refusal::ProtocolAssignments => "protocol-assignments",
            Refusal::UniqueLocal => "unique-local",
            Refusal::SiteLocal => "site-local",
            Refusal::Ipv4Mapped => "ipv4-in-ipv6-mapped",
            Refusal::Ipv4Compatible => "ipv4-in-ipv6-compatible",
            Refusal::Nat64 => "ipv4-in-ipv6-nat64",
            Refusal::SixToFour => "ipv4-in-ipv6-6to4",
            Refusal::Teredo => "ipv4-in-ipv6-teredo",
            Refusal::Discard => "discard",
            Refusal::ThisNetwork => "this-network",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// IPv4 blocks, most specific first: the first match wins, so a single
/// metadata address is named before the block around it.
const V4: &[(Ipv4Addr, u8, Refusal)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 32, Refusal::Unspecified),
    (Ipv4Addr::new(0, 0, 0, 0), 8, Refusal::ThisNetwork),
    (Ipv4Addr::new(10, 0, 0, 0), 8, Refusal::Private),
    // Alibaba Cloud's metadata service sits inside the CGNAT block.
    (Ipv4Addr::new(100, 100, 100, 200), 32, Refusal::Metadata),
    (Ipv4Addr::new(100, 64, 0, 0), 10, Refusal::Cgnat),
    (Ipv4Addr::new(127, 0, 0, 0), 8, Refusal::Loopback),
    // Azure's WireServer: a public-looking address that hands out VM
    // configuration from inside Azure.
    (Ipv4Addr::new(168, 63, 129, 16), 32, Refusal::Metadata),
    (Ipv4Addr::new(169, 254, 169, 254), 32, Refusal::Metadata),
    (Ipv4Addr::new(169, 254, 0, 0), 16, Refusal::LinkLocal),
    (Ipv4Addr::new(172, 16, 0, 0), 12, Refusal::Private),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        24,
        Refusal::ProtocolAssignments,
    ),
    (Ipv4Addr::new(192, 0, 2, 0), 24, Refusal::Documentation),
    // The deprecated 6to4 relay anycast block.
    (Ipv4Addr::new(192, 88, 99, 0), 24, Refusal::SixToFour),
    (Ipv4Addr::new(192, 168, 0, 0), 16, Refusal::Private),
    (Ipv4Addr::new(198, 18, 0, 0), 15, Refusal::Benchmarking),
    (Ipv4Addr::new(198, 51, 100, 0), 24, Refusal::Documentation),
    (Ipv4Addr::new(203, 0, 113, 0), 24, Refusal::Documentation),
    (Ipv4Addr::new(224, 0, 0, 0), 4, Refusal::Multicast),
    (Ipv4Addr::new(255, 255, 255, 255), 32, Refusal::Broadcast),
    (Ipv4Addr::new(240, 0, 0, 0), 4, Refusal::Reserved),
];

/// IPv6 blocks, most specific first, as for `V4`. Anything left outside
/// 2000::/3 is refused as reserved afterwards (see `refused_v6`).
const V6: &[(Ipv6Addr, u8, Refusal)] = &[
    (Ipv6Addr::UNSPECIFIED, 128, Refusal::Unspecified),
    (Ipv6Addr::LOCALHOST, 128, Refusal::Loopback),
    // Whatever the embedded address: the kernel would reach it over IPv4,
    // around the IPv4 rules.
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0),
        96,
        Refusal::Ipv4Mapped,
    ),
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0),
        96,
        Refusal::Ipv4Compatible,
    ),
    (
        Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0),
        96,
        Refusal::Nat64,
    ),
    (
        Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
        48,
        Refusal::Nat64,
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
        64,
        Refusal::Discard,
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        32,
        Refusal::Teredo,
    ),
    (
        Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0),
        48,
        Refusal::Benchmarking,
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        Refusal::ProtocolAssignments,
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        Refusal::Documentation,
    ),
    (
        Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0),
        16,
        Refusal::SixToFour,
    ),
    (
        Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        Refusal::Documentation,
    ),
    // AWS's IPv6 instance metadata service sits inside unique-local space.
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
        128,
        Refusal::Metadata,
    ),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        Refusal::UniqueLocal,
    ),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        Refusal::LinkLocal,
    ),
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        Refusal::SiteLocal,
    ),
    (
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
        8,
        Refusal::Multicast,
    ),
];

/// Global unicast: the only IPv6 space allocated for public addresses.
const GLOBAL_UNICAST: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);

/// Why the proxy must not connect to `ip`, or None when it is an ordinary public address.
pub fn refused(ip: IpAddr) -> Option<Refusal> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<Refusal> {
    V4.iter()
        .find(|(net, len, _)| in_v4(ip, *net, *len))
        .map(|(_, _, why)| *why)
}

fn refused_v6(ip: Ipv6Addr) -> Option<Refusal> {
    let listed = V6
        .iter()
        .find(|(net, len, _)| in_v6(ip, *net, *len))
        .map(|(_, _, why)| *why);
    // Unallocated space is refused too: nothing public lives there, and a
    // future special-purpose block is more likely to land there than not.
    let (global, len) = GLOBAL_UNICAST;
    listed.or_else(|| (!in_v6(ip, global, len)).then_some(Refusal::Reserved))
}

/// The mask of a `len`-bit IPv4 prefix; `len` above 32 counts as 32.
fn mask_v4(len: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(len.min(32)))
        .unwrap_or(0)
}

/// The mask of a `len`-bit IPv6 prefix; `len` above 128 counts as 128.
fn mask_v6(len: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(len.min(128)))
        .unwrap_or(0)
}

fn in_v4(ip: Ipv4Addr, net: Ipv4Addr, len: u8) -> bool {
    ip.to_bits() & mask_v4(len) == net.to_bits() & mask_v4(len)
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, len: u8) -> bool {
    ip.to_bits() & mask_v6(len) == net.to_bits() & mask_v6(len)
}

/// A block of addresses: a network address (host bits clear) and a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the block. An IPv4 block never holds an IPv6
    /// address, not even an IPv4-mapped one: the owner allowed a family.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => in_v4(ip, net, self.prefix),
            (IpAddr::V6(net), IpAddr::V6(ip)) => in_v6(ip, net, self.prefix),
            _ => false,
        }
    }

    /// Whether the block is one address (/32 or /128).
    fn is_single(&self) -> bool {
        self.prefix == max_prefix(self.network)
    }
}

fn max_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// Whether any bit past the prefix is set.
fn has_host_bits(ip: IpAddr, prefix: u8) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.to_bits() & !mask_v4(prefix) != 0,
        IpAddr::V6(v6) => v6.to_bits() & !mask_v6(prefix) != 0,
    }
}

/// The network of `ip` under `prefix`, for the hint in an error.
fn network_of(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from_bits(v4.to_bits() & mask_v4(prefix))),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & mask_v6(prefix))),
    }
}

/// A prefix length: decimal digits only, so "+8", " 8" and "0x8" are errors.
fn parse_prefix(text: &str, max: u8) -> Result<u8, String> {
    let digits = !text.is_empty() && text.len() <= 3 && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<u8>() {
        Ok(prefix) if digits && prefix <= max => Ok(prefix),
        Ok(_) if digits => Err(format!("prefix /{text} is longer than {max} bits")),
        _ => Err(format!("invalid prefix length {text:?}")),
    }
}

impl FromStr for Cidr {
    type Err = String;

    /// "10.0.0.0/8", "fd00::/8", or a bare address for that one address.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s, None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|_| format!("invalid address {addr:?} in {s:?}"))?;
        let max = max_prefix(network);
        let prefix = prefix.map_or(Ok(max), |p| parse_prefix(p, max))?;
        if has_host_bits(network, prefix) {
            let hint = network_of(network, prefix);
            return Err(format!(
                "{s} has host bits set (did you mean {hint}/{prefix}?)"
            ));
        }
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Written as text, so a policy read back in parses the same.
impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The decision for one resolved address: Ok if public or inside one of `allowed`, else the refusal.
///
/// A metadata address is allowed only by a block that is that one address:
/// allowing 169.254.0.0/16 or 100.64.0.0/10 for some local service must not
/// hand out the cloud's credentials by accident.
pub fn check(ip: IpAddr, allowed: &[Cidr]) -> Result<(), Refusal> {
    let Some(refusal) = refused(ip) else {
        return Ok(());
    };
    let permits = |c: &Cidr| c.contains(ip) && (refusal != Refusal::Metadata || c.is_single());
    if allowed.iter().any(permits) {
        Ok(())
    } else {
        Err(refusal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    /// Addresses and their class: None for the public ones.
    const V4_CLASSES: &[(&str, Option<Refusal>)] = {
        use Refusal::*;
        &[
            // IPv4
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(ThisNetwork)),
            ("0.255.255.255", Some(ThisNetwork)),
            ("10.0.0.1", Some(Private)),
            ("10.255.255.255", Some(Private)),
            ("100.64.0.1", Some(Cgnat)),
            ("100.127.255.255", Some(Cgnat)),
            ("100.100.100.200", Some(Metadata)),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("169.254.169.254", Some(Metadata)),
            ("169.254.169.253", Some(LinkLocal)),
            ("169.254.0.1", Some(LinkLocal)),
            ("168.63.129.16", Some(Metadata)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.15.255.255", None),
            ("172.32.0.0", None),
            ("192.0.0.1", Some(ProtocolAssignments)),
            ("192.0.0.170", Some(ProtocolAssignments)),
            ("192.0.2.1", Some(Documentation)),
            ("192.88.99.1", Some(SixToFour)),
            ("192.168.1.1", Some(Private)),
            ("198.18.0.1", Some(Benchmarking)),
            ("198.19.255.255", Some(Benchmarking)),
            ("198.20.0.0", None),
            ("198.51.100.7", Some(Documentation)),
            ("203.0.113.9", Some(Documentation)),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("240.0.0.1", Some(Reserved)),
            ("254.255.255.255", Some(Reserved)),
            ("255.255.255.254", Some(Reserved)),
            ("255.255.255.255", Some(Broadcast)),
            ("93.184.215.14", None),
            ("1.1.1.1", None),
            ("8.8.8.8", None),
            ("223.255.255.255", None),
        ]
    };

    const V6_CLASSES: &[(&str, Option<Refusal>)] = {
        use Refusal::*;
        &[
            // IPv6
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("::ffff:127.0.0.1", Some(Ipv4Mapped)),
            ("::ffff:93.184.215.14", Some(Ipv4Mapped)),
            ("::ffff:0.0.0.0", Some(Ipv4Mapped)),
            ("::127.0.0.1", Some(Ipv4Compatible)),
            ("::8.8.8.8", Some(Ipv4Compatible)),
            ("::2", Some(Ipv4Compatible)),
            ("::ffff:0:1.2.3.4", Some(Reserved)),
            ("1::", Some(Reserved)),
            ("64:ff9b::7f00:1", Some(Nat64)),
            ("64:ff9b::8.8.8.8", Some(Nat64)),
            ("64:ff9b:1::1", Some(Nat64)),
            ("64:ff9b:1:ffff::1", Some(Nat64)),
            ("64:ff9b:2::1", Some(Reserved)),
            ("100::1", Some(Discard)),
            ("100::ffff:ffff:ffff:ffff", Some(Discard)),
            ("100:0:0:1::1", Some(Reserved)),
            ("2001::1", Some(Teredo)),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some(Teredo)),
            ("2001:1::1", Some(ProtocolAssignments)),
            ("2001:2::1", Some(Benchmarking)),
            ("2001:10::1", Some(ProtocolAssignments)),
            ("2001:1ff:ffff::1", Some(ProtocolAssignments)),
            ("2001:200::1", None),
            ("2001:db8::1", Some(Documentation)),
            ("2001:db8:ffff::1", Some(Documentation)),
            ("3fff::1", Some(Documentation)),
            ("2002:7f00:1::1", Some(SixToFour)),
            ("2002::", Some(SixToFour)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("fd00:ec2::254", Some(Metadata)),
            ("fd00:ec2::253", Some(UniqueLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("febf:ffff::1", Some(LinkLocal)),
            ("fec0::1", Some(SiteLocal)),
            ("feff::1", Some(SiteLocal)),
            ("ff02::1", Some(Multicast)),
            ("ff0e::1", Some(Multicast)),
            ("4000::1", Some(Reserved)),
            ("5f00::1", Some(Reserved)),
            ("2606:4700::1111", None),
            ("2a00:1450::1", None),
            ("2620:fe::fe", None),
            ("3ffe:ffff::1", None),
        ]
    };

    #[test]
    fn classifier_table() {
        for &(addr, want) in V4_CLASSES.iter().chain(V6_CLASSES) {
            assert_eq!(refused(ip(addr)), want, "{addr}");
        }
    }

    #[test]
    fn words_are_stable() {
        use Refusal::*;
        for (refusal, word) in [
            (Loopback, "loopback"),
            (Private, "private"),
            (LinkLocal, "link-local"),
            (Metadata, "cloud-metadata"),
            (Cgnat, "cgnat"),
            (Multicast, "multicast"),
            (Unspecified, "unspecified"),
            (Broadcast, "broadcast"),
            (Reserved, "reserved"),
            (Documentation, "documentation"),
            (Benchmarking, "benchmarking"),
            (ProtocolAssignments, "protocol-assignments"),
            (UniqueLocal, "unique-local"),
            (SiteLocal, "site-local"),
            (Ipv4Mapped, "ipv4-in-ipv6-mapped"),
            (Ipv4Compatible, "ipv4-in-ipv6-compatible"),
            (Nat64, "ipv4-in-ipv6-nat64"),
            (SixToFour, "ipv4-in-ipv6-6to4"),
            (Teredo, "ipv4-in-ipv6-teredo"),
            (Discard, "discard"),
            (ThisNetwork, "this-network"),
        ] {
            assert_eq!(refusal.as_str(), word);
            assert_eq!(refusal.to_string(), word);
        }
    }

    #[test]
    fn cidr_parse_table() {
        for (text, want) in [
            ("10.0.0.0/8", Ok("10.0.0.0/8")),
            ("fd00::/8", Ok("fd00::/8")),
            ("0.0.0.0/0", Ok("0.0.0.0/0")),
            ("::/0", Ok("::/0")),
            ("192.168.1.7", Ok("192.168.1.7/32")),
            ("fd00:ec2::254", Ok("fd00:ec2::254/128")),
            ("FD00::/8", Ok("fd00::/8")),
            ("10.0.0.0/32", Ok("10.0.0.0/32")),
            ("2001:db8::/128", Ok("2001:db8::/128")),
            ("10.0.0.1/8", Err("host bits")),
            ("fd00::1/8", Err("host bits")),
            ("10.0.0.0/33", Err("longer than 32")),
            ("fd00::/129", Err("longer than 128")),
            ("10.0.0.0/", Err("invalid prefix")),
            ("10.0.0.0/+8", Err("invalid prefix")),
            ("10.0.0.0/ 8", Err("invalid prefix")),
            ("10.0.0.0/8/8", Err("invalid prefix")),
            ("10.0.0.0/1000", Err("invalid prefix")),
            ("10.0.0/8", Err("invalid address")),
            ("010.0.0.0/8", Err("invalid address")),
            ("example.com/8", Err("invalid address")),
            ("fe80::1%eth0", Err("invalid address")),
            ("[::1]", Err("invalid address")),
            (" 10.0.0.0/8", Err("invalid address")),
            ("", Err("invalid address")),
            ("/8", Err("invalid address")),
        ] {
            let got = text.parse::<Cidr>().map(|c| c.to_string());
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{text:?}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{text:?}: {got}"),
                (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn host_bits_error_names_the_network() {
        let err = "10.0.0.1/8".parse::<Cidr>().unwrap_err();
        assert_eq!(
            err,
            "10.0.0.1/8 has host bits set (did you mean 10.0.0.0/8?)"
        );
    }

    #[test]
    fn cidr_contains_table() {
        for (cidr, addr, want) in [
            ("10.0.0.0/8", "10.1.2.3", true),
            ("10.0.0.0/8", "11.0.0.0", false),
            ("10.0.0.0/8", "::ffff:10.1.2.3", false),
            ("0.0.0.0/0", "8.8.8.8", true),
            ("0.0.0.0/0", "::1", false),
            ("::/0", "2606:4700::1111", true),
            ("::/0", "127.0.0.1", false),
            ("fd00::/8", "fd00:ec2::254", true),
            ("fd00::/8", "fc00::1", false),
            ("192.168.1.7", "192.168.1.7", true),
            ("192.168.1.7", "192.168.1.8", false),
            ("100.64.0.0/10", "100.127.0.1", true),
            ("100.64.0.0/10", "100.128.0.1", false),
        ] {
            let c: Cidr = cidr.parse().unwrap();
            assert_eq!(c.contains(ip(addr)), want, "{cidr} {addr}");
        }
    }

    #[test]
    fn check_table() {
        use Refusal::*;
        for (addr, allowed, want) in [
            ("93.184.215.14", &[][..], Ok(())),
            ("2606:4700::1111", &[], Ok(())),
            ("127.0.0.1", &[], Err(Loopback)),
            ("10.1.2.3", &["10.0.0.0/8"], Ok(())),
            ("10.1.2.3", &["192.168.0.0/16"], Err(Private)),
            ("::ffff:10.1.2.3", &["10.0.0.0/8"], Err(Ipv4Mapped)),
            ("fd12::1", &["fd00::/8"], Ok(())),
            ("169.254.169.254", &[], Err(Metadata)),
            ("169.254.169.254", &["169.254.0.0/16"], Err(Metadata)),
            ("169.254.169.254", &["169.254.169.254/32"], Ok(())),
            ("169.254.169.254", &["169.254.169.254"], Ok(())),
            ("169.254.10.1", &["169.254.0.0/16"], Ok(())),
            ("100.100.100.200", &["100.64.0.0/10"], Err(Metadata)),
            ("100.100.100.100", &["100.64.0.0/10"], Ok(())),
            ("fd00:ec2::254", &["fd00::/8"], Err(Metadata)),
            ("fd00:ec2::254", &["fd00:ec2::254"], Ok(())),
            ("127.0.0.1", &["0.0.0.0/0"], Ok(())),
            ("::1", &["0.0.0.0/0"], Err(Loopback)),
        ] {
            assert_eq!(check(ip(addr), &cidrs(allowed)), want, "{addr} {allowed:?}");
        }
    }

    #[test]
    fn policy_json_holds_cidrs() {
        let list: Vec<Cidr> =
            serde_json::from_str(r#"["10.0.0.0/8", "fd00::/8", "192.0.2.1"]"#).unwrap();
        assert_eq!(list, cidrs(&["10.0.0.0/8", "fd00::/8", "192.0.2.1/32"]));
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            r#"["10.0.0.0/8","fd00::/8","192.0.2.1/32"]"#
        );
        let err = serde_json::from_str::<Vec<Cidr>>(r#"["10.0.0.1/8"]"#).unwrap_err();
        assert!(err.to_string().contains("host bits"), "{err}");
        assert!(serde_json::from_str::<Vec<Cidr>>("[8]").is_err());
    }
}
