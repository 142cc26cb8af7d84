//! Which process opened a connection to the proxy: the client's socket
//! asked of the kernel by its two ends (sock_diag over netlink, one exact
//! lookup, whatever the number of sockets), the process of that socket's
//! uid holding it by its descriptors, and the lifetime tag among that
//! process's groups, which names the command (`lifetime.rs`). Best effort:
//! a process that already closed the socket, or one that is not a
//! command's, is not found, and the line says so by having no `command`.

use super::netlink::{NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_REQUEST};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// A process found holding a connection, and its lifetime tag if it has
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub pid: i32,
    pub tag: Option<u32>,
}

/// The holder of the TCP socket whose local end is `local` and remote end
/// `remote`, as the kernel says now.
pub fn holder(local: SocketAddr, remote: SocketAddr, tags: std::ops::Range<u32>) -> Option<Holder> {
    let (uid, inode) = ask_kernel(&diag_request(local, remote))?;
    let pid = owner_of(inode, uid)?;
    Some(holder_of_thread(pid, tags))
}

/// The uid owning the TCP socket whose local end is `local` and remote end
/// `remote` (the creator's, as this process's user namespace counts it).
/// None for a socket no process holds any more (no inode): the kernel says
/// uid 0 for what a closed one leaves behind, which would name root.
pub fn uid_of(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    ask_kernel(&diag_request(local, remote))
        .filter(|(_, inode)| *inode != 0)
        .map(|(uid, _)| uid)
}

/// A process (or thread) known to hold the connection, with its tag.
pub fn holder_of_thread(pid: i32, tags: std::ops::Range<u32>) -> Holder {
    // As bytes: a name that is not UTF-8 must not hide the command.
    let status = crate::guest::process::proc_status::read(pid).unwrap_or_default();
    Holder {
        pid,
        tag: tag_of(&status, tags),
    }
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// inet_diag_req_v2: family, protocol, ext, pad, states, then the socket's
/// id (ports, addresses, interface, cookie).
const REQUEST: usize = 56;
/// Where the uid and the inode sit in an inet_diag_msg.
const UID_AT: usize = 64;
const INODE_AT: usize = 68;

/// Pure: the netlink request for the one TCP socket with these two ends.
pub fn diag_request(local: SocketAddr, remote: SocketAddr) -> Vec<u8> {
    let (family, src, dst) = match (local.ip(), remote.ip()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (libc::AF_INET, words(&a.octets()), words(&b.octets())),
        (a, b) => (
            libc::AF_INET6,
            words(&v6(a).octets()),
            words(&v6(b).octets()),
        ),
    };
    let mut m = Vec::with_capacity(NLMSG_HDRLEN + REQUEST);
    m.extend(((NLMSG_HDRLEN + REQUEST) as u32).to_ne_bytes());
    m.extend(SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend(NLM_F_REQUEST.to_ne_bytes());
    m.extend(1u32.to_ne_bytes()); // sequence
    m.extend(0u32.to_ne_bytes()); // port: the kernel fills it in
    m.extend([family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend(u32::MAX.to_ne_bytes()); // every state
    m.extend(local.port().to_be_bytes());
    m.extend(remote.port().to_be_bytes());
    m.extend(src);
    m.extend(dst);
    m.extend(0u32.to_ne_bytes()); // any interface
    m.extend(u32::MAX.to_ne_bytes()); // no cookie
    m.extend(u32::MAX.to_ne_bytes());
    m
}

/// Pure: the socket's (uid, inode) from the kernel's answer; None for an
/// error (no such socket) or anything else.
pub fn diag_answer(bytes: &[u8]) -> Option<(u32, u64)> {
    let word = |at: usize| Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let kind = u16::from_ne_bytes(bytes.get(4..6)?.try_into().ok()?);
    if kind == NLMSG_ERROR || kind != SOCK_DIAG_BY_FAMILY {
        return None;
    }
    Some((
        word(NLMSG_HDRLEN + UID_AT)?,
        word(NLMSG_HDRLEN + INODE_AT)? as u64,
    ))
}

/// An address as four 32-bit words, in the byte order it travels in.
fn words(octets: &[u8]) -> Vec<u8> {
    let mut out = octets.to_vec();
    out.resize(16, 0);
    out
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Sends one sock_diag request and reads its answer.
fn ask_kernel(request: &[u8]) -> Option<(u32, u64)> {
    use nix::sys::socket::{
        recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
        SockType,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )
    .ok()?;
    sendto(
        fd.as_raw_fd(),
        request,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .ok()?;
    let mut buf = [0u8; 1024];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).ok()?;
    diag_answer(&buf[..n])
}

/// Pure: the first group of a `/proc/PID/status` file's bytes inside
/// `tags`.
pub fn tag_of(status: &[u8], tags: std::ops::Range<u32>) -> Option<u32> {
    crate::guest::process::proc_status::parse(status)
        .groups?
        .into_iter()
        .find(|g| tags.contains(g))
}

/// The process of `uid` holding the socket `inode` (the first found): only
/// that uid's processes have their descriptors read.
fn owner_of(inode: u64, uid: u32) -> Option<i32> {
    let wanted = format!("socket:[{inode}]");
    crate::guest::process::shell_procs::pids_of(uid)
        .into_iter()
        .find(|pid| {
            let Ok(fds) = std::fs::read_dir(Path::new("/proc").join(pid.to_string()).join("fd"))
            else {
                return false;
            };
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str())
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_both_ends() {
        let client: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        let proxy: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        let m = diag_request(client, proxy);
        assert_eq!(m.len(), NLMSG_HDRLEN + REQUEST);
        assert_eq!(
            u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize,
            m.len()
        );
        assert_eq!(m[16], libc::AF_INET as u8);
        assert_eq!(m[17], libc::IPPROTO_TCP as u8);
        assert_eq!(&m[24..26], &54321u16.to_be_bytes());
        assert_eq!(&m[26..28], &3128u16.to_be_bytes());
        assert_eq!(&m[28..32], &[127, 0, 0, 1]);
        assert_eq!(&m[44..48], &[127, 0, 0, 1]);
        let v6 = diag_request("[::1]:5000".parse().unwrap(), "[::1]:3128".parse().unwrap());
        assert_eq!(v6[16], libc::AF_INET6 as u8);
        assert_eq!(v6[28 + 15], 1);
    }

    #[test]
    fn answers_table() {
        let answer = |kind: u16, uid: u32, inode: u32| {
            let mut b = vec![0u8; NLMSG_HDRLEN + 72];
            b[4..6].copy_from_slice(&kind.to_ne_bytes());
            b[NLMSG_HDRLEN + UID_AT..NLMSG_HDRLEN + UID_AT + 4].copy_from_slice(&uid.to_ne_bytes());
            b[NLMSG_HDRLEN + INODE_AT..NLMSG_HDRLEN + INODE_AT + 4]
                .copy_from_slice(&inode.to_ne_bytes());
            b
        };
        let cases = [
            (answer(SOCK_DIAG_BY_FAMILY, 2001, 4242), Some((2001, 4242))),
            (answer(NLMSG_ERROR, 0, 0), None),
            (answer(3, 0, 0), None),
            (vec![0u8; 10], None),
        ];
        for (bytes, want) in cases {
            assert_eq!(diag_answer(&bytes), want);
        }
    }

    #[test]
    fn tags_table() {
        let cases: [(&[u8], _); 6] = [
            (b"Groups:\t2001 60007 \n", Some(60007)),
            (b"Groups:\t2001\n", None),
            (b"Groups:\t64000 2001\n", None),
            (b"Name:\tx\n", None),
            (b"Groups:\t60000 60001\n", Some(60000)),
            (b"Name:\t\xff\nGroups:\t2001 60007\n", Some(60007)),
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
