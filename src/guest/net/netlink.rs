//! netlink's framing as nfnetlink uses it (netlink(7), the kernel's
//! `linux/netfilter/nfnetlink.h`): attributes and messages written by small
//! pure functions, the kernel's messages read back, and the socket. Both
//! `nft_netlink` (the table sent) and `nft_readback` (the table read) speak
//! through it.

use nix::errno::Errno;
use nix::sys::socket::{
    setsockopt, socket, sockopt, AddressFamily, SockFlag, SockProtocol, SockType,
};
use nix::sys::time::{TimeVal, TimeValLike};
use std::os::fd::OwnedFd;
use std::time::Duration;

/// How long the kernel may take to answer a batch or a dump (it answers at
/// once; this only bounds a surprise).
pub(super) const DEADLINE: Duration = Duration::from_secs(5);

// netlink(7)
pub(super) const NLMSG_HDRLEN: usize = 16;
pub(super) const NLMSG_ERROR: u16 = 2;
pub(super) const NLMSG_DONE: u16 = 3;
pub(super) const NLM_F_REQUEST: u16 = 0x1;
pub(super) const NLM_F_ACK: u16 = 0x4;
pub(super) const NLM_F_CREATE: u16 = 0x400;
pub(super) const NLM_F_APPEND: u16 = 0x800;
pub(super) const NLM_F_DUMP: u16 = 0x300;
pub(super) const NLA_HDRLEN: usize = 4;
pub(super) const NLA_F_NESTED: u16 = 0x8000;
/// An attribute's type without its nested and byte-order flags.
pub(super) const NLA_TYPE_MASK: u16 = 0x3fff;

// nfnetlink.h
pub(super) const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub(super) const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
pub(super) const NFNL_MSG_BATCH_END: u16 = 0x11;
pub(super) const AF_UNSPEC: u8 = 0;

/// Why the netlink socket could not be had, or what the kernel sent over
/// it could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NetlinkError {
    #[error("cannot open a netfilter netlink socket: {0}")]
    Socket(#[source] Errno),
    #[error("netlink socket: {0}")]
    Deadline(#[source] Errno),
    #[error("a malformed answer ({len} bytes of {left})")]
    Malformed { len: usize, left: usize },
    #[error("a truncated error message")]
    TruncatedError,
}

/// `len` rounded up to netlink's 4-byte alignment.
pub fn align(len: usize) -> usize {
    (len + 3) & !3
}

/// One attribute: its length (header and payload, unpadded), its type,
/// the payload, then zeroes up to the next 4-byte boundary.
pub fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
    let len = NLA_HDRLEN + payload.len();
    let mut out = Vec::with_capacity(align(len));
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(align(len), 0);
    out
}

/// An attribute holding others (each already padded), marked nested.
pub fn nest(kind: u16, inner: &[Vec<u8>]) -> Vec<u8> {
    attr(kind | NLA_F_NESTED, &inner.concat())
}

/// A NUL-terminated string attribute.
pub fn string(kind: u16, text: &str) -> Vec<u8> {
    let mut payload = text.as_bytes().to_vec();
    payload.push(0);
    attr(kind, &payload)
}

/// A 32-bit attribute in network byte order, as nf_tables takes them.
pub fn be32(kind: u16, value: u32) -> Vec<u8> {
    attr(kind, &value.to_be_bytes())
}

/// One netlink message of the netfilter family: the netlink header, the
/// nfgenmsg (family, version 0, resource id in network byte order), then
/// the attributes.
pub fn message(
    kind: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: &[Vec<u8>],
) -> Vec<u8> {
    let body = attrs.concat();
    let len = NLMSG_HDRLEN + 4 + body.len();
    let mut out = Vec::with_capacity(align(len));
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.push(family);
    out.push(0);
    out.extend_from_slice(&res_id.to_be_bytes());
    out.extend_from_slice(&body);
    out.resize(align(len), 0);
    out
}

/// One netlink message: its type, sequence number, and body (what
/// follows the 16-byte header).
pub type Received<'a> = (u16, u32, &'a [u8]);

/// The messages in a datagram. Err: one is malformed.
pub fn messages(mut datagram: &[u8]) -> Result<Vec<Received<'_>>, NetlinkError> {
    let mut out = Vec::new();
    while datagram.len() >= NLMSG_HDRLEN {
        let word = |at: usize| {
            u32::from_ne_bytes([
                datagram[at],
                datagram[at + 1],
                datagram[at + 2],
                datagram[at + 3],
            ])
        };
        let len = word(0) as usize;
        if len < NLMSG_HDRLEN || len > datagram.len() {
            return Err(NetlinkError::Malformed {
                len,
                left: datagram.len(),
            });
        }
        let kind = u16::from_ne_bytes([datagram[4], datagram[5]]);
        out.push((kind, word(8), &datagram[NLMSG_HDRLEN..len]));
        datagram = &datagram[align(len).min(datagram.len())..];
    }
    Ok(out)
}

/// The errno an NLMSG_ERROR's body carries (0: an acknowledgement).
pub fn error_of(body: &[u8]) -> Result<i32, NetlinkError> {
    let error = body.get(..4).ok_or(NetlinkError::TruncatedError)?;
    Ok(i32::from_ne_bytes([error[0], error[1], error[2], error[3]]).saturating_neg())
}

/// A NETLINK_NETFILTER socket whose reads give up after `DEADLINE`.
pub(super) fn open() -> Result<OwnedFd, NetlinkError> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )
    .map_err(NetlinkError::Socket)?;
    setsockopt(
        &fd,
        sockopt::ReceiveTimeout,
        &TimeVal::milliseconds(DEADLINE.as_millis() as i64),
    )
    .map_err(NetlinkError::Deadline)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::net::nft_netlink::NFPROTO_INET;

    #[test]
    fn attributes_are_padded_to_four_bytes() {
        // (attribute, its bytes): the length field counts no padding.
        let cases: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (attr(1, &[]), vec![4, 0, 1, 0]),
            (attr(2, &[9]), vec![5, 0, 2, 0, 9, 0, 0, 0]),
            (attr(2, &[9, 8, 7, 6]), vec![8, 0, 2, 0, 9, 8, 7, 6]),
            (
                string(1, "meta"),
                vec![9, 0, 1, 0, b'm', b'e', b't', b'a', 0, 0, 0, 0],
            ),
            (be32(5, 1), vec![8, 0, 5, 0, 0, 0, 0, 1]),
            (
                nest(4, &[attr(2, &[9]), be32(1, 3)]),
                vec![
                    20, 0, 4, 0x80, 5, 0, 2, 0, 9, 0, 0, 0, 8, 0, 1, 0, 0, 0, 0, 3,
                ],
            ),
        ];
        for (got, want) in cases {
            let mut want = want;
            // The two 16-bit header fields are in the host's byte order.
            for field in [0, 2] {
                let v = u16::from_le_bytes([want[field], want[field + 1]]);
                want[field..field + 2].copy_from_slice(&v.to_ne_bytes());
            }
            assert_eq!(got, want);
            assert_eq!(got.len() % 4, 0);
        }
    }

    #[test]
    fn a_message_counts_its_header_and_attributes() {
        let m = message(0x0a06, 0x0c05, 7, NFPROTO_INET, 0, &[string(1, "warden")]);
        assert_eq!(m.len(), 16 + 4 + 12);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 32);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 0x0a06);
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]), 0x0c05);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 7);
        // nfgenmsg: family, version 0, resource id in network byte order.
        let begin = message(NFNL_MSG_BATCH_BEGIN, 1, 0, 0, NFNL_SUBSYS_NFTABLES, &[]);
        assert_eq!(&begin[16..20], &[0, 0, 0, 10]);
    }
}
