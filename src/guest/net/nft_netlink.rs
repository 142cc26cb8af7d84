//! warden's table applied without `nft`: the same batch `nft` would send
//! (see `firewall::rules`), written by warden itself and sent over a
//! NETLINK_NETFILTER socket: no `nft` runs, so an image needs none (e.g.
//! `python:3.12`) and the boot waits for no program.
//!
//! The messages are built by small pure functions, byte for byte what nft
//! 1.0.6 sends for the table (its `--debug=netlink` and `--debug=mnl`
//! output, in a throwaway network namespace), with one difference: every
//! message in the batch asks for an acknowledgement, so that the kernel's
//! errno is known message by message. Constants are from the kernel's
//! uapi headers `linux/netfilter/nf_tables.h`, `linux/netfilter/nfnetlink.h`
//! and `linux/netfilter.h`.
//!
//! `nft_readback` reads the table back over the same kind of socket;
//! `netlink` frames both.

use super::netlink::*;
use crate::guest::net::firewall::{Scope, CHAIN, TABLE};
use nix::errno::Errno;
use nix::sys::socket::{recvfrom, sendto, MsgFlags, NetlinkAddr};
use std::os::fd::AsRawFd;
use std::time::Instant;

// netfilter.h
pub(super) const NFPROTO_INET: u8 = 1;
pub(super) const NFPROTO_IPV4: u8 = 2;
pub(super) const NFPROTO_IPV6: u8 = 10;
pub(super) const NF_ACCEPT: u32 = 1;
pub(super) const NF_INET_LOCAL_OUT: u32 = 3;

// nf_tables.h: messages (enum nf_tables_msg_types)
pub(super) const NFT_MSG_NEWTABLE: u16 = 0;
pub(super) const NFT_MSG_DELTABLE: u16 = 2;
pub(super) const NFT_MSG_NEWCHAIN: u16 = 3;
pub(super) const NFT_MSG_NEWRULE: u16 = 6;
pub(super) const NFT_MSG_DELRULE: u16 = 8;

// nf_tables.h: attributes
pub(super) const NFTA_TABLE_NAME: u16 = 1;
pub(super) const NFTA_TABLE_FLAGS: u16 = 2;
pub(super) const NFTA_CHAIN_TABLE: u16 = 1;
pub(super) const NFTA_CHAIN_NAME: u16 = 3;
pub(super) const NFTA_CHAIN_HOOK: u16 = 4;
pub(super) const NFTA_CHAIN_POLICY: u16 = 5;
pub(super) const NFTA_CHAIN_TYPE: u16 = 7;
pub(super) const NFTA_HOOK_HOOKNUM: u16 = 1;
pub(super) const NFTA_HOOK_PRIORITY: u16 = 2;
pub(super) const NFTA_RULE_TABLE: u16 = 1;
pub(super) const NFTA_RULE_CHAIN: u16 = 2;
pub(super) const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub(super) const NFTA_LIST_ELEM: u16 = 1;
pub(super) const NFTA_EXPR_NAME: u16 = 1;
pub(super) const NFTA_EXPR_DATA: u16 = 2;
pub(super) const NFTA_META_DREG: u16 = 1;
pub(super) const NFTA_META_KEY: u16 = 2;
pub(super) const NFTA_CMP_SREG: u16 = 1;
pub(super) const NFTA_CMP_OP: u16 = 2;
pub(super) const NFTA_CMP_DATA: u16 = 3;
pub(super) const NFTA_DATA_VALUE: u16 = 1;
pub(super) const NFTA_DATA_VERDICT: u16 = 2;
pub(super) const NFTA_VERDICT_CODE: u16 = 1;
pub(super) const NFTA_PAYLOAD_DREG: u16 = 1;
pub(super) const NFTA_PAYLOAD_BASE: u16 = 2;
pub(super) const NFTA_PAYLOAD_OFFSET: u16 = 3;
pub(super) const NFTA_PAYLOAD_LEN: u16 = 4;
pub(super) const NFTA_IMMEDIATE_DREG: u16 = 1;
pub(super) const NFTA_IMMEDIATE_DATA: u16 = 2;
pub(super) const NFTA_REJECT_TYPE: u16 = 1;
pub(super) const NFTA_REJECT_ICMP_CODE: u16 = 2;

// nf_tables.h: values
pub(super) const NFT_REG_VERDICT: u32 = 0;
pub(super) const NFT_REG_1: u32 = 1;
pub(super) const NFT_CMP_EQ: u32 = 0;
pub(super) const NFT_META_SKUID: u32 = 10;
pub(super) const NFT_META_NFPROTO: u32 = 15;
pub(super) const NFT_META_L4PROTO: u32 = 16;
pub(super) const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
pub(super) const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
pub(super) const NFT_REJECT_TCP_RST: u32 = 1;
pub(super) const NFT_REJECT_ICMPX_UNREACH: u32 = 2;
pub(super) const NFT_REJECT_ICMPX_ADMIN_PROHIBITED: u8 = 3;
pub(super) const IPPROTO_TCP: u8 = 6;

/// One expression of a rule, as nft generates them for warden's rules.
/// Every load goes to register 1, as nft's do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `meta load KEY => reg 1`
    Meta(u32),
    /// `cmp eq reg 1 DATA`
    Equals(Vec<u8>),
    /// `payload load LEN @ BASE header + OFFSET => reg 1`
    Payload { base: u32, offset: u32, len: u32 },
    /// `immediate reg 0 accept`
    Accept,
    /// `reject type KIND code CODE`
    Reject { kind: u32, code: u8 },
}

/// The chain's rules, as `firewall::rules` states them, in the
/// expressions nft makes of them: `ip daddr` and `ip6 daddr` bring a
/// `meta nfproto` check (the table is inet), and `tcp dport` a `meta
/// l4proto tcp` one. Values are in the byte order the kernel compares:
/// the uid in the host's, addresses and the port in the network's.
pub fn rules(scope: Scope) -> Vec<Vec<Expr>> {
    scope
        .owners()
        .into_iter()
        .flat_map(|uid| rules_of(uid, scope.proxy_port))
        .collect()
}

fn rules_of(uid: u32, proxy_port: u16) -> Vec<Vec<Expr>> {
    let owner = || {
        vec![
            Expr::Meta(NFT_META_SKUID),
            Expr::Equals(uid.to_ne_bytes().to_vec()),
        ]
    };
    let tcp = || {
        vec![
            Expr::Meta(NFT_META_L4PROTO),
            Expr::Equals(vec![IPPROTO_TCP]),
        ]
    };
    let proxy = |nfproto: u8, offset: u32, address: &[u8]| {
        let mut rule = owner();
        rule.extend([
            Expr::Meta(NFT_META_NFPROTO),
            Expr::Equals(vec![nfproto]),
            Expr::Payload {
                base: NFT_PAYLOAD_NETWORK_HEADER,
                offset,
                len: address.len() as u32,
            },
            Expr::Equals(address.to_vec()),
        ]);
        rule.extend(tcp());
        rule.extend([
            Expr::Payload {
                base: NFT_PAYLOAD_TRANSPORT_HEADER,
                offset: 2,
                len: 2,
            },
            Expr::Equals(proxy_port.to_be_bytes().to_vec()),
            Expr::Accept,
        ]);
        rule
    };
    let mut tcp_reset = owner();
    tcp_reset.extend(tcp());
    tcp_reset.push(Expr::Reject {
        kind: NFT_REJECT_TCP_RST,
        code: 0,
    });
    let mut prohibited = owner();
    prohibited.push(Expr::Reject {
        kind: NFT_REJECT_ICMPX_UNREACH,
        code: NFT_REJECT_ICMPX_ADMIN_PROHIBITED,
    });
    vec![
        // The IPv4 header's destination is at 16, IPv6's at 24.
        proxy(NFPROTO_IPV4, 16, &std::net::Ipv4Addr::LOCALHOST.octets()),
        proxy(NFPROTO_IPV6, 24, &std::net::Ipv6Addr::LOCALHOST.octets()),
        tcp_reset,
        prohibited,
    ]
}

/// One expression as a list element: its name and its data.
pub fn expression(expr: &Expr) -> Vec<u8> {
    let (name, data) = match expr {
        Expr::Meta(key) => (
            "meta",
            vec![be32(NFTA_META_KEY, *key), be32(NFTA_META_DREG, NFT_REG_1)],
        ),
        Expr::Equals(value) => (
            "cmp",
            vec![
                be32(NFTA_CMP_SREG, NFT_REG_1),
                be32(NFTA_CMP_OP, NFT_CMP_EQ),
                nest(NFTA_CMP_DATA, &[attr(NFTA_DATA_VALUE, value)]),
            ],
        ),
        Expr::Payload { base, offset, len } => (
            "payload",
            vec![
                be32(NFTA_PAYLOAD_DREG, NFT_REG_1),
                be32(NFTA_PAYLOAD_BASE, *base),
                be32(NFTA_PAYLOAD_OFFSET, *offset),
                be32(NFTA_PAYLOAD_LEN, *len),
            ],
        ),
        Expr::Accept => (
            "immediate",
            vec![
                be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT),
                nest(
                    NFTA_IMMEDIATE_DATA,
                    &[nest(
                        NFTA_DATA_VERDICT,
                        &[be32(NFTA_VERDICT_CODE, NF_ACCEPT)],
                    )],
                ),
            ],
        ),
        Expr::Reject { kind, code } => (
            "reject",
            vec![
                be32(NFTA_REJECT_TYPE, *kind),
                attr(NFTA_REJECT_ICMP_CODE, &[*code]),
            ],
        ),
    };
    nest(
        NFTA_LIST_ELEM,
        &[string(NFTA_EXPR_NAME, name), nest(NFTA_EXPR_DATA, &data)],
    )
}

/// One message of a batch, with what an error about it is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub what: String,
    pub seq: u32,
    /// The kernel acknowledges it (every message but the batch's
    /// delimiters, which kernels before 6.10 never acknowledge).
    pub acked: bool,
    pub bytes: Vec<u8>,
}

/// A batch: the begin delimiter, `contents` (what, type, flags, attributes;
/// each acknowledged), the end delimiter. Numbered from 0, as nft does.
fn batch_of(contents: Vec<(String, u16, u16, Vec<Vec<u8>>)>) -> Vec<Message> {
    let delimiter = |kind: u16, seq: u32, what: &str| Message {
        what: what.into(),
        seq,
        acked: false,
        bytes: message(
            kind,
            NLM_F_REQUEST,
            seq,
            AF_UNSPEC,
            NFNL_SUBSYS_NFTABLES,
            &[],
        ),
    };
    let mut out = vec![delimiter(NFNL_MSG_BATCH_BEGIN, 0, "the batch")];
    for (what, kind, flags, attrs) in contents {
        let seq = out.len() as u32;
        out.push(Message {
            what,
            seq,
            acked: true,
            bytes: message(
                (NFNL_SUBSYS_NFTABLES << 8) | kind,
                NLM_F_REQUEST | NLM_F_ACK | flags,
                seq,
                NFPROTO_INET,
                0,
                &attrs,
            ),
        });
    }
    let end = out.len() as u32;
    out.push(delimiter(NFNL_MSG_BATCH_END, end, "the batch's end"));
    out
}

/// The batch that makes warden's table what it must be, as
/// `firewall::batch` does with nft: add the table (a no-op when it is
/// there), flush its rules, add the chain (a no-op when it is there as
/// it should be), add the rules.
pub fn batch(scope: Scope) -> Vec<Message> {
    let table = format!("table inet {TABLE}");
    let mut contents = vec![
        (
            format!("add {table}"),
            NFT_MSG_NEWTABLE,
            0,
            vec![string(NFTA_TABLE_NAME, TABLE), be32(NFTA_TABLE_FLAGS, 0)],
        ),
        (
            format!("flush {table}"),
            NFT_MSG_DELRULE,
            0,
            vec![string(NFTA_RULE_TABLE, TABLE)],
        ),
        (
            format!("add chain inet {TABLE} {CHAIN} (type filter hook output priority 0; policy accept)"),
            NFT_MSG_NEWCHAIN,
            NLM_F_CREATE,
            vec![
                string(NFTA_CHAIN_TABLE, TABLE),
                string(NFTA_CHAIN_NAME, CHAIN),
                string(NFTA_CHAIN_TYPE, "filter"),
                be32(NFTA_CHAIN_POLICY, NF_ACCEPT),
                nest(
                    NFTA_CHAIN_HOOK,
                    &[
                        be32(NFTA_HOOK_HOOKNUM, NF_INET_LOCAL_OUT),
                        be32(NFTA_HOOK_PRIORITY, 0),
                    ],
                ),
            ],
        ),
    ];
    let rules = rules(scope);
    let count = rules.len();
    for (i, exprs) in rules.iter().enumerate() {
        let list: Vec<Vec<u8>> = exprs.iter().map(expression).collect();
        contents.push((
            format!("add rule {} of {count}", i + 1),
            NFT_MSG_NEWRULE,
            NLM_F_CREATE | NLM_F_APPEND,
            vec![
                string(NFTA_RULE_TABLE, TABLE),
                string(NFTA_RULE_CHAIN, CHAIN),
                nest(NFTA_RULE_EXPRESSIONS, &list),
            ],
        ));
    }
    batch_of(contents)
}

/// The batch that deletes warden's table, chain and rules with it.
pub fn delete_batch() -> Vec<Message> {
    batch_of(vec![(
        format!("delete table inet {TABLE}"),
        NFT_MSG_DELTABLE,
        0,
        vec![string(NFTA_TABLE_NAME, TABLE)],
    )])
}

/// Why the kernel did not take a batch whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error("cannot send the batch: {0}")]
    Send(#[source] Errno),
    #[error("sent {sent} bytes of the batch's {len}")]
    ShortSend { sent: usize, len: usize },
    /// The messages the kernel did not answer before the deadline.
    #[error("no answer from the kernel for: {}", .0.join(", "))]
    Unanswered(Vec<String>),
    #[error("reading the kernel's answer: {0}")]
    Read(#[source] Errno),
    /// Every message the kernel refused, in the batch's order.
    #[error("{}", refusals(.0))]
    Refused(Vec<Refusal>),
}

/// One message the kernel refused, and its errno.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {errno}")]
pub struct Refusal {
    pub what: String,
    #[source]
    pub errno: Errno,
}

fn refusals(each: &[Refusal]) -> String {
    let said: Vec<String> = each.iter().map(Refusal::to_string).collect();
    said.join("; ")
}

/// The kernel's answer to one message: 0 (done) or an errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub seq: u32,
    pub errno: i32,
}

/// The acknowledgements and errors in what the kernel sent (other
/// messages are skipped). Err: the datagram is malformed.
pub fn replies(datagram: &[u8]) -> Result<Vec<Reply>, NetlinkError> {
    let mut out = Vec::new();
    for (kind, seq, body) in messages(datagram)? {
        if kind == NLMSG_ERROR {
            out.push(Reply {
                seq,
                errno: error_of(body)?,
            });
        }
    }
    Ok(out)
}

/// What the replies so far say of the batch: None while an acknowledged
/// message has no answer yet; else Ok, or every error, each naming its
/// message.
pub fn outcome(batch: &[Message], replies: &[Reply]) -> Option<Result<(), BatchError>> {
    let answer = |m: &Message| replies.iter().find(|r| r.seq == m.seq);
    let errors: Vec<Refusal> = batch
        .iter()
        .filter_map(|m| match answer(m) {
            Some(r) if r.errno != 0 => Some(Refusal {
                what: m.what.clone(),
                errno: Errno::from_raw(r.errno),
            }),
            _ => None,
        })
        .collect();
    // An error about the batch as a whole (no CAP_NET_ADMIN, no nf_tables
    // in the kernel, a failed commit) comes alone or first: do not wait.
    let whole = batch.first().and_then(answer).is_some_and(|r| r.errno != 0);
    let waiting = batch.iter().any(|m| m.acked && answer(m).is_none());
    match (errors.is_empty(), whole, waiting) {
        (_, true, _) | (false, _, false) => Some(Err(BatchError::Refused(errors))),
        (_, false, true) => None,
        (true, false, false) => Some(Ok(())),
    }
}

/// Sends `batch` in one datagram and waits for the kernel's answers.
fn talk(batch: &[Message]) -> Result<(), BatchError> {
    let fd = open()?;
    let bytes = batch
        .iter()
        .flat_map(|m| m.bytes.iter().copied())
        .collect::<Vec<u8>>();
    let kernel = NetlinkAddr::new(0, 0);
    let sent =
        sendto(fd.as_raw_fd(), &bytes, &kernel, MsgFlags::empty()).map_err(BatchError::Send)?;
    if sent != bytes.len() {
        return Err(BatchError::ShortSend {
            sent,
            len: bytes.len(),
        });
    }
    let until = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        if let Some(done) = outcome(batch, &got) {
            return done;
        }
        let unanswered = || {
            let names: Vec<String> = batch
                .iter()
                .filter(|m| m.acked && !got.iter().any(|r: &Reply| r.seq == m.seq))
                .map(|m| m.what.clone())
                .collect();
            BatchError::Unanswered(names)
        };
        if Instant::now() > until {
            return Err(unanswered());
        }
        match recvfrom::<NetlinkAddr>(fd.as_raw_fd(), &mut buf) {
            // Only the kernel (port 0) answers for itself.
            Ok((n, Some(from))) if from.pid() == 0 => got.extend(replies(&buf[..n])?),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => return Err(unanswered()),
            Err(e) => return Err(BatchError::Read(e)),
        }
    }
}

/// Applies warden's table (see `batch`) in the calling thread's network
/// namespace. Err names each message the kernel refused, with its errno.
pub fn apply(scope: Scope) -> Result<(), BatchError> {
    talk(&batch(scope))
}

/// Deletes warden's table, if it is there (Err says ENOENT if not).
pub fn delete_table() -> Result<(), BatchError> {
    talk(&delete_batch())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCOPE: Scope = Scope {
        shell_uid: 2001,
        network_uid: 2001,
        runtime_network_uid: None,
        proxy_port: 3128,
    };

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    /// What nft 1.0.6 sent to the kernel (strace -e write) for
    ///   add table inet warden; flush table inet warden
    ///   add chain inet warden output { type filter hook output priority 0; policy accept; }
    ///   add rule inet warden output meta skuid 2001 ip daddr 127.0.0.1 tcp dport 3128 accept
    ///   ... ip6 daddr ::1 ...; meta skuid 2001 meta l4proto tcp reject with tcp reset
    ///   meta skuid 2001 reject with icmpx admin-prohibited
    /// on x86_64 (little-endian), one message a line.
    const NFT_1_0_6: [&str; 9] = [
        "140000001000010000000000000000000000000a",
        "28000000000a01000100000000000000010000000b00010077617264656e00000800020000000000",
        "20000000080a01000200000000000000010000000b00010077617264656e0000",
        "54000000030a01040300000000000000010000000b00010077617264656e00000b0003006f757470757400000b000700
         66696c746572000008000500000000011400048008000100000000030800020000000000",
        "10020000060a010c0400000000000000010000000b00010077617264656e00000b0002006f75747075740000e4010480
         24000180090001006d6574610000000014000280080002000000000a08000100000000012c00018008000100636d7000
         20000280080001000000000108000200000000000c00038008000100d107000024000180090001006d65746100000000
         14000280080002000000000f08000100000000012c00018008000100636d700020000280080001000000000108000200
         000000000c0003800500010002000000340001800c0001007061796c6f61640024000280080001000000000108000200
         00000001080003000000001008000400000000042c00018008000100636d700020000280080001000000000108000200
         000000000c000380080001007f00000124000180090001006d6574610000000014000280080002000000001008000100
         000000012c00018008000100636d700020000280080001000000000108000200000000000c0003800500010006000000
         340001800c0001007061796c6f6164002400028008000100000000010800020000000002080003000000000208000400
         000000022c00018008000100636d700020000280080001000000000108000200000000000c000380060001000c380000
         300001800e000100696d6d6564696174650000001c0002800800010000000000100002800c0002800800010000000001",
        "1c020000060a010c0500000000000000010000000b00010077617264656e00000b0002006f75747075740000f0010480
         24000180090001006d6574610000000014000280080002000000000a08000100000000012c00018008000100636d7000
         20000280080001000000000108000200000000000c00038008000100d107000024000180090001006d65746100000000
         14000280080002000000000f08000100000000012c00018008000100636d700020000280080001000000000108000200
         000000000c000380050001000a000000340001800c0001007061796c6f61640024000280080001000000000108000200
         00000001080003000000001808000400000000103800018008000100636d70002c000280080001000000000108000200
         0000000018000380140001000000000000000000000000000000000124000180090001006d6574610000000014000280
         080002000000001008000100000000012c00018008000100636d70002000028008000100000000010800020000000000
         0c0003800500010006000000340001800c0001007061796c6f6164002400028008000100000000010800020000000002
         080003000000000208000400000000022c00018008000100636d70002000028008000100000000010800020000000000
         0c000380060001000c380000300001800e000100696d6d6564696174650000001c000280080001000000000010000280
         0c0002800800010000000001",
        "f4000000060a010c0600000000000000010000000b00010077617264656e00000b0002006f75747075740000c8000480
         24000180090001006d6574610000000014000280080002000000000a08000100000000012c00018008000100636d7000
         20000280080001000000000108000200000000000c00038008000100d107000024000180090001006d65746100000000
         14000280080002000000001008000100000000012c00018008000100636d700020000280080001000000000108000200
         000000000c0003800500010006000000240001800b00010072656a656374000014000280080001000000000105000200
         00000000",
        "a4000000060a010c0700000000000000010000000b00010077617264656e00000b0002006f7574707574000078000480
         24000180090001006d6574610000000014000280080002000000000a08000100000000012c00018008000100636d7000
         20000280080001000000000108000200000000000c00038008000100d1070000240001800b00010072656a6563740000
         1400028008000100000000020500020003000000",
        "140000001100010008000000000000000000000a",
    ];

    #[test]
    #[cfg(target_endian = "little")]
    fn the_batch_is_the_bytes_nft_sends_but_for_the_acks() {
        let ours = batch(SCOPE);
        assert_eq!(ours.len(), NFT_1_0_6.len());
        for (i, (m, want)) in ours.iter().zip(NFT_1_0_6).enumerate() {
            let mut bytes = m.bytes.clone();
            // The flags (bytes 6 and 7): nft asks for no acknowledgement.
            let flags = u16::from_ne_bytes([bytes[6], bytes[7]]);
            assert_eq!(flags & NLM_F_ACK != 0, m.acked, "message {i}");
            bytes[6..8].copy_from_slice(&(flags & !NLM_F_ACK).to_ne_bytes());
            assert_eq!(bytes, hex(want), "message {i}: {}", m.what);
        }
    }

    #[test]
    fn the_rules_are_nfts_expressions() {
        let uid = 2001u32.to_ne_bytes().to_vec();
        let owner = [Expr::Meta(NFT_META_SKUID), Expr::Equals(uid)];
        let tcp = [Expr::Meta(NFT_META_L4PROTO), Expr::Equals(vec![6])];
        let port = [
            Expr::Payload {
                base: NFT_PAYLOAD_TRANSPORT_HEADER,
                offset: 2,
                len: 2,
            },
            Expr::Equals(vec![0x0c, 0x38]),
            Expr::Accept,
        ];
        let v4 = [
            Expr::Meta(NFT_META_NFPROTO),
            Expr::Equals(vec![2]),
            Expr::Payload {
                base: NFT_PAYLOAD_NETWORK_HEADER,
                offset: 16,
                len: 4,
            },
            Expr::Equals(vec![127, 0, 0, 1]),
        ];
        let mut loopback6 = vec![0; 16];
        loopback6[15] = 1;
        let v6 = [
            Expr::Meta(NFT_META_NFPROTO),
            Expr::Equals(vec![10]),
            Expr::Payload {
                base: NFT_PAYLOAD_NETWORK_HEADER,
                offset: 24,
                len: 16,
            },
            Expr::Equals(loopback6),
        ];
        let want: Vec<Vec<Expr>> = vec![
            [&owner[..], &v4, &tcp, &port].concat(),
            [&owner[..], &v6, &tcp, &port].concat(),
            [
                &owner[..],
                &tcp,
                &[Expr::Reject {
                    kind: NFT_REJECT_TCP_RST,
                    code: 0,
                }],
            ]
            .concat(),
            [
                &owner[..],
                &[Expr::Reject {
                    kind: NFT_REJECT_ICMPX_UNREACH,
                    code: 3,
                }],
            ]
            .concat(),
        ];
        assert_eq!(rules(SCOPE), want);
        // Another uid and port change only their comparisons.
        let other = rules(Scope {
            shell_uid: 1,
            network_uid: 100_000,
            runtime_network_uid: None,
            proxy_port: 8080,
        });
        assert_eq!(other[0][1], Expr::Equals(100_000u32.to_ne_bytes().to_vec()));
        assert_eq!(other[1][9], Expr::Equals(vec![0x1f, 0x90]));
    }

    #[test]
    fn an_expression_is_named_and_nested() {
        let e = expression(&Expr::Reject {
            kind: NFT_REJECT_ICMPX_UNREACH,
            code: 3,
        });
        let want = nest(
            NFTA_LIST_ELEM,
            &[
                string(NFTA_EXPR_NAME, "reject"),
                nest(NFTA_EXPR_DATA, &[be32(1, 2), attr(2, &[3])]),
            ],
        );
        assert_eq!(e, want);
        assert_eq!(e.len(), 36);
    }

    #[test]
    fn the_batch_is_delimited_and_numbered() {
        let b = batch(SCOPE);
        let whats: Vec<&str> = b.iter().map(|m| m.what.as_str()).collect();
        assert_eq!(whats[0], "the batch");
        assert_eq!(whats[1], "add table inet warden");
        assert_eq!(whats[2], "flush table inet warden");
        assert!(whats[3].starts_with("add chain inet warden output"));
        assert_eq!(
            whats[4..8],
            [
                "add rule 1 of 4",
                "add rule 2 of 4",
                "add rule 3 of 4",
                "add rule 4 of 4"
            ]
        );
        for (i, m) in b.iter().enumerate() {
            assert_eq!(m.seq, i as u32);
            assert_eq!(m.acked, i != 0 && i != b.len() - 1);
            assert_eq!(m.bytes.len() % 4, 0);
        }
        let d = delete_batch();
        assert_eq!(d.len(), 3);
        assert_eq!(d[1].what, "delete table inet warden");
        assert_eq!(u16::from_ne_bytes([d[1].bytes[4], d[1].bytes[5]]), 0x0a02);
    }

    /// An NLMSG_ERROR the kernel would send for `seq`.
    fn error(seq: u32, errno: i32) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&0x100u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&77u32.to_ne_bytes());
        m.extend_from_slice(&(-errno).to_ne_bytes());
        m.extend_from_slice(&[0; 16]);
        m
    }

    #[test]
    fn replies_are_read_from_the_kernels_messages() {
        let mut two = error(3, 0);
        two.extend(error(4, libc::ENOENT));
        assert_eq!(
            replies(&two),
            Ok(vec![
                Reply { seq: 3, errno: 0 },
                Reply {
                    seq: 4,
                    errno: libc::ENOENT
                }
            ])
        );
        // Anything but an error message is skipped.
        let other = message(0x0a00, 0, 9, NFPROTO_INET, 0, &[string(1, "warden")]);
        assert_eq!(replies(&other), Ok(vec![]));
        let mut short = error(3, 0);
        short[0] = 200;
        assert!(replies(&short)
            .unwrap_err()
            .to_string()
            .contains("malformed"));
        assert_eq!(replies(&[]), Ok(vec![]));
    }

    #[test]
    fn outcome_table() {
        let b = batch(SCOPE);
        let ok = |seq| Reply { seq, errno: 0 };
        let all_ok: Vec<Reply> = (1..8).map(ok).collect();
        let mut rule3 = all_ok.clone();
        rule3[5].errno = libc::EOPNOTSUPP;
        // (case, replies so far, what they say: None while waiting)
        type Case = (&'static str, Vec<Reply>, Option<Result<(), &'static str>>);
        let cases: Vec<Case> = vec![
            ("nothing yet", vec![], None),
            ("some acknowledged", all_ok[..3].to_vec(), None),
            ("all acknowledged", all_ok.clone(), Some(Ok(()))),
            (
                "a rule refused",
                rule3,
                Some(Err("add rule 3 of 4: EOPNOTSUPP: Operation not supported")),
            ),
            (
                "the batch refused whole",
                vec![Reply {
                    seq: 0,
                    errno: libc::EPERM,
                }],
                Some(Err("the batch: EPERM: Operation not permitted")),
            ),
            (
                "an error pending the rest",
                vec![Reply {
                    seq: 2,
                    errno: libc::ENOENT,
                }],
                None,
            ),
            (
                "a failed commit, after every acknowledgement",
                [
                    vec![Reply {
                        seq: 0,
                        errno: libc::ENOMEM,
                    }],
                    all_ok.clone(),
                ]
                .concat(),
                Some(Err("the batch: ENOMEM")),
            ),
        ];
        for (name, got, want) in cases {
            match (outcome(&b, &got), want) {
                (None, None) | (Some(Ok(())), Some(Ok(()))) => {}
                (Some(Err(e)), Some(Err(w))) => {
                    assert!(e.to_string().starts_with(w), "{name}: {e}")
                }
                (g, w) => panic!("{name}: {g:?} but wanted {w:?}"),
            }
        }
    }
}
