//! Which process opened a connection to the proxy, read from the kernel's
//! tables: the client's socket in `/proc/net/tcp` (or `tcp6`) by its two
//! addresses, the process holding that socket by its descriptors, and the
//! lifetime tag among that process's groups, which names the command
//! (`lifetime.rs`). Best effort: a process that already closed the socket,
//! or one that is not a command's, is not found, and the line says so by
//! having no `command`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// A process found holding a connection, and its lifetime tag if it has
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub pid: i32,
    pub tag: Option<u32>,
}

/// The holder of the TCP socket whose local end is `local` and remote end
/// `remote`, as the kernel's tables say now.
pub fn holder(local: SocketAddr, remote: SocketAddr, tags: std::ops::Range<u32>) -> Option<Holder> {
    let table = match local {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let inode = socket_inode(&std::fs::read_to_string(table).ok()?, local, remote)?;
    let pid = owner_of(inode)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    Some(Holder {
        pid,
        tag: tag_of(&status, tags),
    })
}

/// Pure: the inode of the socket with these two ends in a `/proc/net/tcp`
/// or `tcp6` table.
pub fn socket_inode(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    table.lines().skip(1).find_map(|row| {
        let fields: Vec<&str> = row.split_whitespace().collect();
        let (l, r, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
        (parse_end(l)? == local && parse_end(r)? == remote)
            .then(|| inode.parse().ok())
            .flatten()
    })
}

/// Pure: one end as the kernel prints it, `ADDR:PORT` in hex, the address
/// in 32-bit words of host (little-endian) order.
pub fn parse_end(text: &str) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let ip = match (addr.len(), bytes.as_slice()) {
        (8, b) => IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
        (32, b) => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => return None,
    };
    // An IPv4 peer on an IPv6 listener shows as ::ffff:a.b.c.d.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    Some(SocketAddr::new(ip, port))
}

/// Pure: the first group of a `/proc/PID/status` text inside `tags`.
pub fn tag_of(status: &str, tags: std::ops::Range<u32>) -> Option<u32> {
    let groups = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    groups
        .split_whitespace()
        .filter_map(|g| g.parse().ok())
        .find(|g| tags.contains(g))
}

/// The process holding the socket `inode` (the first found).
fn owner_of(inode: u64) -> Option<i32> {
    let wanted = format!("socket:[{inode}]");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let fds =
                std::fs::read_dir(Path::new("/proc").join(pid.to_string()).join("fd")).ok()?;
            fds.flatten()
                .any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str())
                })
                .then_some(pid)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_table() {
        let cases = [
            ("0100007F:0C38", Some("127.0.0.1:3128")),
            ("0100007F:D431", Some("127.0.0.1:54321")),
            ("00000000000000000000000001000000:0C38", Some("[::1]:3128")),
            (
                "0000000000000000FFFF00000100007F:0C38",
                Some("127.0.0.1:3128"),
            ),
            ("0100007F", None),
            ("0100007:0C38", None),
            ("XYZ0007F:0C38", None),
            ("0100007F:FFFFF", None),
        ];
        for (text, want) in cases {
            let want = want.map(|w| w.parse::<SocketAddr>().unwrap());
            assert_eq!(parse_end(text), want, "{text}");
        }
    }

    #[test]
    fn the_socket_is_found_by_both_ends() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:0C38 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0 100 0 0 10 0\n\
   1: 0100007F:D431 0100007F:0C38 01 00000000:00000000 00:00000000 00000000  2001        0 2222 1 0 20 4 30 10 -1\n\
   2: 0100007F:0C38 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3333 1 0 20 4 30 10 -1\n";
        let client: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        let proxy: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        assert_eq!(socket_inode(table, client, proxy), Some(2222));
        assert_eq!(socket_inode(table, proxy, client), Some(3333));
        let other: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(socket_inode(table, other, proxy), None);
        assert_eq!(socket_inode("", client, proxy), None);
    }

    #[test]
    fn tags_table() {
        let cases = [
            ("Groups:\t2001 60007 \n", Some(60007)),
            ("Groups:\t2001\n", None),
            ("Groups:\t64000 2001\n", None),
            ("Name:\tx\n", None),
            ("Groups:\t60000 60001\n", Some(60000)),
        ];
        for (status, want) in cases {
            assert_eq!(tag_of(status, 60_000..64_000), want, "{status:?}");
        }
    }

    #[test]
    fn this_test_finds_its_own_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let found = holder(
            client.local_addr().unwrap(),
            client.peer_addr().unwrap(),
            60_000..64_000,
        );
        assert_eq!(found.map(|h| h.pid), Some(std::process::id() as i32));
    }
}
