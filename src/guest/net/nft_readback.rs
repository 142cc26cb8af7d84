//! warden's table read back from the kernel over netlink and compared
//! with what `nft_netlink::batch` sent: the table is awake (not dormant),
//! its one chain is hooked as applied, and its rules are, in order, the
//! rules warden wrote and nothing else.
//!
//! Three dumps (tables, chains, rules of the inet family), each answered
//! by the kernel in one or more messages and ended by NLMSG_DONE. Parsing
//! is pure (`attributes`, `expr_of`, `rule_of`, `chain_of`), so a
//! kernel's answer can be tested byte for byte. An expression, or an
//! attribute of one, that warden did not write is a difference, never
//! ignored; what the kernel adds of its own (handles, positions, use
//! counts) is not about what the rules do and is skipped.

use super::netlink::{self, NetlinkError};
use super::nft_netlink::{self as nl, Expr};
use crate::guest::net::firewall::{Scope, CHAIN, TABLE};
use nix::errno::Errno;
use nix::sys::socket::{recvfrom, sendto, MsgFlags, NetlinkAddr};
use std::os::fd::{AsRawFd, OwnedFd};

// nf_tables.h: the dumps asked for, and what they answer
const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_GETRULE: u16 = 7;
const NFT_TABLE_F_DORMANT: u32 = 0x1;

/// Why warden's table, read back, is not what was applied, or could not be
/// read back. `what` names the part of a message an error is about (`meta`,
/// `a rule`, `the verdict`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadbackError {
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error("cannot ask for the dump: {0}")]
    Ask(#[source] Errno),
    #[error("the kernel did not finish the dump")]
    Unfinished,
    #[error("reading the dump: {0}")]
    Read(#[source] Errno),
    #[error("the dump ended with {0}")]
    DumpEnded(#[source] Errno),
    #[error("the dump: {0}")]
    DumpRefused(#[source] Errno),
    #[error("a malformed attribute ({len} bytes of {left})")]
    Malformed { len: usize, left: usize },
    #[error("a {0}-byte number where 4 were expected")]
    NotANumber(usize),
    #[error("{what}: no attribute {kind}")]
    Missing { what: &'static str, kind: u16 },
    #[error("{what}: attribute {kind} more than once")]
    Repeated { what: &'static str, kind: u16 },
    #[error("{what} has attribute {kind}, which warden did not write")]
    NotWritten { what: &'static str, kind: u16 },
    #[error("{what} uses register {register}, not 1")]
    Register { what: &'static str, register: u32 },
    #[error("cmp with operator {0}, not eq")]
    Operator(u32),
    #[error("immediate loads register {0}, not the verdict")]
    NotTheVerdict(u32),
    #[error("verdict {0}, not accept")]
    Verdict(u32),
    #[error("reject: a {0}-byte code")]
    RejectCode(usize),
    #[error("an expression warden did not write: {0}")]
    Expression(String),
    #[error("a rule's expressions hold attribute {0}")]
    NotAnExpression(u16),
    #[error("table inet {TABLE} is dormant: its chain filters nothing")]
    Dormant,
    #[error("table inet {TABLE} is not there")]
    NoTable,
    #[error("table inet {TABLE} has no chain")]
    NoChain,
    /// The chain found (its hook, type or policy not what was applied).
    #[error("chain {found:?} is not hooked as applied ({applied:?})", applied = chain_applied())]
    NotHooked { found: Box<ChainFound> },
    #[error("table inet {TABLE} has {0} chains, not 1")]
    Chains(usize),
    #[error("{found} rules found, {applied} applied")]
    RuleCount { found: usize, applied: usize },
    #[error("rule {number} differs from what was applied: {found:?} in chain {chain}")]
    RuleDiffers {
        number: usize,
        found: Vec<Expr>,
        chain: String,
    },
}

/// One attribute: its type (flags masked off) and its payload.
pub type Attribute<'a> = (u16, &'a [u8]);

/// The attributes packed in `bytes`, in order. Err: one is malformed.
pub fn attributes(mut bytes: &[u8]) -> Result<Vec<Attribute<'_>>, ReadbackError> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = u16::from_ne_bytes([bytes[0], bytes[1]]) as usize;
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & netlink::NLA_TYPE_MASK;
        if len < 4 || len > bytes.len() {
            return Err(ReadbackError::Malformed {
                len,
                left: bytes.len(),
            });
        }
        out.push((kind, &bytes[4..len]));
        bytes = &bytes[netlink::align(len).min(bytes.len())..];
    }
    Ok(out)
}

fn be32(payload: &[u8]) -> Result<u32, ReadbackError> {
    <[u8; 4]>::try_from(payload)
        .map(u32::from_be_bytes)
        .map_err(|_| ReadbackError::NotANumber(payload.len()))
}

fn text(payload: &[u8]) -> String {
    let bytes = payload.strip_suffix(&[0]).unwrap_or(payload);
    String::from_utf8_lossy(bytes).into_owned()
}

/// The one attribute of type `kind` in `attrs`.
fn one<'a>(
    attrs: &[Attribute<'a>],
    kind: u16,
    what: &'static str,
) -> Result<&'a [u8], ReadbackError> {
    match attrs.iter().filter(|(k, _)| *k == kind).collect::<Vec<_>>()[..] {
        [(_, payload)] => Ok(payload),
        [] => Err(ReadbackError::Missing { what, kind }),
        _ => Err(ReadbackError::Repeated { what, kind }),
    }
}

/// Err when `attrs` has a type outside `known`: something warden did not
/// write, which may change what the expression does.
fn only(attrs: &[Attribute<'_>], known: &[u16], what: &'static str) -> Result<(), ReadbackError> {
    match attrs.iter().find(|(k, _)| !known.contains(k)) {
        Some(&(kind, _)) => Err(ReadbackError::NotWritten { what, kind }),
        None => Ok(()),
    }
}

/// A register that must be register 1 (every load and compare of
/// warden's goes through it).
fn register_1(attrs: &[Attribute<'_>], kind: u16, what: &'static str) -> Result<(), ReadbackError> {
    match be32(one(attrs, kind, what)?)? {
        nl::NFT_REG_1 => Ok(()),
        register => Err(ReadbackError::Register { what, register }),
    }
}

/// One expression, from its name and its data's attributes.
pub fn expr_of(name: &str, data: &[Attribute<'_>]) -> Result<Expr, ReadbackError> {
    match name {
        "meta" => {
            only(data, &[nl::NFTA_META_KEY, nl::NFTA_META_DREG], "meta")?;
            register_1(data, nl::NFTA_META_DREG, "meta")?;
            Ok(Expr::Meta(be32(one(data, nl::NFTA_META_KEY, "meta")?)?))
        }
        "cmp" => {
            let known = [nl::NFTA_CMP_SREG, nl::NFTA_CMP_OP, nl::NFTA_CMP_DATA];
            only(data, &known, "cmp")?;
            register_1(data, nl::NFTA_CMP_SREG, "cmp")?;
            match be32(one(data, nl::NFTA_CMP_OP, "cmp")?)? {
                nl::NFT_CMP_EQ => {}
                op => return Err(ReadbackError::Operator(op)),
            }
            let value = attributes(one(data, nl::NFTA_CMP_DATA, "cmp")?)?;
            only(&value, &[nl::NFTA_DATA_VALUE], "cmp's data")?;
            Ok(Expr::Equals(
                one(&value, nl::NFTA_DATA_VALUE, "cmp's data")?.to_vec(),
            ))
        }
        "payload" => {
            let known = [
                nl::NFTA_PAYLOAD_DREG,
                nl::NFTA_PAYLOAD_BASE,
                nl::NFTA_PAYLOAD_OFFSET,
                nl::NFTA_PAYLOAD_LEN,
            ];
            only(data, &known, "payload")?;
            register_1(data, nl::NFTA_PAYLOAD_DREG, "payload")?;
            let number = |kind| be32(one(data, kind, "payload")?);
            Ok(Expr::Payload {
                base: number(nl::NFTA_PAYLOAD_BASE)?,
                offset: number(nl::NFTA_PAYLOAD_OFFSET)?,
                len: number(nl::NFTA_PAYLOAD_LEN)?,
            })
        }
        "immediate" => {
            only(
                data,
                &[nl::NFTA_IMMEDIATE_DREG, nl::NFTA_IMMEDIATE_DATA],
                "immediate",
            )?;
            match be32(one(data, nl::NFTA_IMMEDIATE_DREG, "immediate")?)? {
                nl::NFT_REG_VERDICT => {}
                r => return Err(ReadbackError::NotTheVerdict(r)),
            }
            let value = attributes(one(data, nl::NFTA_IMMEDIATE_DATA, "immediate")?)?;
            only(&value, &[nl::NFTA_DATA_VERDICT], "immediate's data")?;
            let verdict = attributes(one(&value, nl::NFTA_DATA_VERDICT, "immediate's data")?)?;
            only(&verdict, &[nl::NFTA_VERDICT_CODE], "the verdict")?;
            match be32(one(&verdict, nl::NFTA_VERDICT_CODE, "the verdict")?)? {
                nl::NF_ACCEPT => Ok(Expr::Accept),
                code => Err(ReadbackError::Verdict(code)),
            }
        }
        "reject" => {
            let known = [nl::NFTA_REJECT_TYPE, nl::NFTA_REJECT_ICMP_CODE];
            only(data, &known, "reject")?;
            // The kernel says no code for a TCP reset (warden sends 0).
            let code = match one(data, nl::NFTA_REJECT_ICMP_CODE, "reject") {
                Ok([code]) => *code,
                Ok(other) => return Err(ReadbackError::RejectCode(other.len())),
                Err(_) => 0,
            };
            Ok(Expr::Reject {
                kind: be32(one(data, nl::NFTA_REJECT_TYPE, "reject")?)?,
                code,
            })
        }
        other => Err(ReadbackError::Expression(other.to_string())),
    }
}

/// One rule of a dump: the chain it is in and its expressions; None when
/// it is in another table than warden's.
pub fn rule_of(attrs: &[Attribute<'_>]) -> Result<Option<(String, Vec<Expr>)>, ReadbackError> {
    if text(one(attrs, nl::NFTA_RULE_TABLE, "a rule")?) != TABLE {
        return Ok(None);
    }
    let chain = text(one(attrs, nl::NFTA_RULE_CHAIN, "a rule")?);
    let mut exprs = Vec::new();
    for (kind, element) in attributes(one(attrs, nl::NFTA_RULE_EXPRESSIONS, "a rule")?)? {
        if kind != nl::NFTA_LIST_ELEM {
            return Err(ReadbackError::NotAnExpression(kind));
        }
        let element = attributes(element)?;
        let name = text(one(&element, nl::NFTA_EXPR_NAME, "an expression")?);
        // An expression with no data has no attribute 2.
        let data = match one(&element, nl::NFTA_EXPR_DATA, "an expression") {
            Ok(bytes) => attributes(bytes)?,
            Err(_) => Vec::new(),
        };
        exprs.push(expr_of(&name, &data)?);
    }
    Ok(Some((chain, exprs)))
}

/// A chain as the kernel has it: name, type, hook number, priority and
/// policy (None where it has no hook: a regular chain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainFound {
    pub name: String,
    pub kind: Option<String>,
    pub hook: Option<(u32, i32)>,
    pub policy: Option<u32>,
}

/// One chain of a dump; None when it is in another table.
pub fn chain_of(attrs: &[Attribute<'_>]) -> Result<Option<ChainFound>, ReadbackError> {
    if text(one(attrs, nl::NFTA_CHAIN_TABLE, "a chain")?) != TABLE {
        return Ok(None);
    }
    let optional = |kind| one(attrs, kind, "a chain").ok();
    let hook = match optional(nl::NFTA_CHAIN_HOOK) {
        Some(bytes) => {
            let hook = attributes(bytes)?;
            let number = |kind| be32(one(&hook, kind, "a chain's hook")?);
            Some((
                number(nl::NFTA_HOOK_HOOKNUM)?,
                number(nl::NFTA_HOOK_PRIORITY)? as i32,
            ))
        }
        None => None,
    };
    Ok(Some(ChainFound {
        name: text(one(attrs, nl::NFTA_CHAIN_NAME, "a chain")?),
        kind: optional(nl::NFTA_CHAIN_TYPE).map(text),
        hook,
        policy: optional(nl::NFTA_CHAIN_POLICY).map(be32).transpose()?,
    }))
}

/// The chain as `nft_netlink::batch` makes it.
fn chain_applied() -> ChainFound {
    ChainFound {
        name: CHAIN.into(),
        kind: Some("filter".into()),
        hook: Some((nl::NF_INET_LOCAL_OUT, 0)),
        policy: Some(nl::NF_ACCEPT),
    }
}

/// Whether warden's table, among the tables dumped, is there and awake.
pub fn table_awake(tables: &[Vec<Attribute<'_>>]) -> Result<(), ReadbackError> {
    for attrs in tables {
        if text(one(attrs, nl::NFTA_TABLE_NAME, "a table")?) != TABLE {
            continue;
        }
        let flags = match one(attrs, nl::NFTA_TABLE_FLAGS, "a table") {
            Ok(bytes) => be32(bytes)?,
            Err(_) => 0,
        };
        return match flags & NFT_TABLE_F_DORMANT {
            0 => Ok(()),
            _ => Err(ReadbackError::Dormant),
        };
    }
    Err(ReadbackError::NoTable)
}

/// Compares what the three dumps found with what warden applied for
/// `scope`.
pub fn compare(
    scope: Scope,
    chains: &[ChainFound],
    rules: &[(String, Vec<Expr>)],
) -> Result<(), ReadbackError> {
    let want = chain_applied();
    match chains {
        [c] if *c == want => {}
        [] => return Err(ReadbackError::NoChain),
        [c] => {
            return Err(ReadbackError::NotHooked {
                found: Box::new(c.clone()),
            })
        }
        more => return Err(ReadbackError::Chains(more.len())),
    }
    let expected = nl::rules(scope);
    if rules.len() != expected.len() {
        return Err(ReadbackError::RuleCount {
            found: rules.len(),
            applied: expected.len(),
        });
    }
    for (i, ((chain, found), want)) in rules.iter().zip(&expected).enumerate() {
        if chain != CHAIN || found != want {
            return Err(ReadbackError::RuleDiffers {
                number: i + 1,
                found: found.clone(),
                chain: chain.clone(),
            });
        }
    }
    Ok(())
}

/// One dump of the inet family's objects of `kind`: the attributes of
/// each message the kernel answered with, until NLMSG_DONE.
fn dump(fd: &OwnedFd, kind: u16, seq: u32) -> Result<Vec<Vec<u8>>, ReadbackError> {
    let request = netlink::message(
        (netlink::NFNL_SUBSYS_NFTABLES << 8) | kind,
        netlink::NLM_F_REQUEST | netlink::NLM_F_DUMP,
        seq,
        nl::NFPROTO_INET,
        0,
        &[],
    );
    let kernel = NetlinkAddr::new(0, 0);
    sendto(fd.as_raw_fd(), &request, &kernel, MsgFlags::empty()).map_err(ReadbackError::Ask)?;
    let mut found = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match recvfrom::<NetlinkAddr>(fd.as_raw_fd(), &mut buf) {
            Ok((n, Some(from))) if from.pid() == 0 => n,
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => return Err(ReadbackError::Unfinished),
            Err(e) => return Err(ReadbackError::Read(e)),
        };
        for (kind, got_seq, body) in netlink::messages(&buf[..n])? {
            if got_seq != seq {
                continue;
            }
            match kind {
                // A dump that failed part way says so in its end.
                netlink::NLMSG_DONE => match netlink::error_of(body).unwrap_or(0) {
                    0 => return Ok(found),
                    errno => return Err(ReadbackError::DumpEnded(Errno::from_raw(errno))),
                },
                netlink::NLMSG_ERROR => {
                    let errno = netlink::error_of(body)?;
                    return Err(ReadbackError::DumpRefused(Errno::from_raw(errno)));
                }
                // The nfgenmsg (4 bytes), then the attributes.
                _ => found.push(body.get(4..).unwrap_or_default().to_vec()),
            }
        }
    }
}

/// Reads warden's table back from the kernel of the calling thread's
/// network namespace and compares it with what was applied for `scope`.
pub fn read_back(scope: Scope) -> Result<(), ReadbackError> {
    let fd = netlink::open()?;
    let tables = dump(&fd, NFT_MSG_GETTABLE, 1)?;
    let tables: Vec<Vec<Attribute>> = tables
        .iter()
        .map(|t| attributes(t))
        .collect::<Result<_, _>>()?;
    table_awake(&tables)?;
    let mut chains = Vec::new();
    for body in dump(&fd, NFT_MSG_GETCHAIN, 2)? {
        chains.extend(chain_of(&attributes(&body)?)?);
    }
    let mut rules = Vec::new();
    for body in dump(&fd, NFT_MSG_GETRULE, 3)? {
        rules.extend(rule_of(&attributes(&body)?)?);
    }
    compare(scope, &chains, &rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::net::netlink::{attr, be32 as be32_attr, nest, string};

    const SCOPE: Scope = Scope {
        shell_uid: 2001,
        network_uid: 2001,
        runtime_network_uid: Some(2002),
        proxy_port: 3128,
    };

    /// A list element (as `nft_netlink::expression` writes it and the
    /// kernel dumps it) parsed back.
    fn parsed(element: &[u8]) -> Result<Expr, ReadbackError> {
        let outer = attributes(element)?;
        let inner = attributes(outer[0].1)?;
        let name = text(one(&inner, nl::NFTA_EXPR_NAME, "test")?);
        let data = attributes(one(&inner, nl::NFTA_EXPR_DATA, "test")?)?;
        expr_of(&name, &data)
    }

    fn element(name: &str, data: &[Vec<u8>]) -> Vec<u8> {
        nest(
            nl::NFTA_LIST_ELEM,
            &[
                string(nl::NFTA_EXPR_NAME, name),
                nest(nl::NFTA_EXPR_DATA, data),
            ],
        )
    }

    #[test]
    fn every_expression_warden_writes_reads_back_as_itself() {
        let rules = nl::rules(SCOPE);
        assert_eq!(rules.len(), 8);
        for expr in rules.iter().flatten() {
            assert_eq!(parsed(&nl::expression(expr)).as_ref(), Ok(expr));
        }
    }

    #[test]
    fn expressions_table() {
        let reg1 = be32_attr(nl::NFTA_META_DREG, nl::NFT_REG_1);
        let key = be32_attr(nl::NFTA_META_KEY, nl::NFT_META_SKUID);
        let cmp = |op: u32| {
            vec![
                be32_attr(nl::NFTA_CMP_SREG, nl::NFT_REG_1),
                be32_attr(nl::NFTA_CMP_OP, op),
                nest(nl::NFTA_CMP_DATA, &[attr(nl::NFTA_DATA_VALUE, &[6])]),
            ]
        };
        let verdict = |code: u32| {
            vec![
                be32_attr(nl::NFTA_IMMEDIATE_DREG, nl::NFT_REG_VERDICT),
                nest(
                    nl::NFTA_IMMEDIATE_DATA,
                    &[nest(
                        nl::NFTA_DATA_VERDICT,
                        &[be32_attr(nl::NFTA_VERDICT_CODE, code)],
                    )],
                ),
            ]
        };
        // (name, data, Ok: the expression / Err: what the error says)
        type Case = (&'static str, Vec<Vec<u8>>, Result<Expr, &'static str>);
        let cases: Vec<Case> = vec![
            ("meta", vec![key.clone(), reg1.clone()], Ok(Expr::Meta(10))),
            // A meta that sets the key from a register (SREG, 3) is not
            // the load warden wrote.
            (
                "meta",
                vec![key.clone(), be32_attr(3, 1)],
                Err("meta has attribute 3"),
            ),
            (
                "meta",
                vec![key.clone(), be32_attr(nl::NFTA_META_DREG, 2)],
                Err("register 2, not 1"),
            ),
            ("meta", vec![reg1.clone()], Err("meta: no attribute 2")),
            (
                "meta",
                vec![key.clone(), key.clone(), reg1.clone()],
                Err("more than once"),
            ),
            ("cmp", cmp(nl::NFT_CMP_EQ), Ok(Expr::Equals(vec![6]))),
            ("cmp", cmp(1), Err("operator 1, not eq")),
            ("immediate", verdict(nl::NF_ACCEPT), Ok(Expr::Accept)),
            ("immediate", verdict(0), Err("verdict 0, not accept")),
            // The kernel dumps a TCP reset without a code.
            (
                "reject",
                vec![be32_attr(nl::NFTA_REJECT_TYPE, 1)],
                Ok(Expr::Reject { kind: 1, code: 0 }),
            ),
            (
                "reject",
                vec![
                    be32_attr(nl::NFTA_REJECT_TYPE, 2),
                    attr(nl::NFTA_REJECT_ICMP_CODE, &[3, 0]),
                ],
                Err("a 2-byte code"),
            ),
            (
                "counter",
                vec![],
                Err("an expression warden did not write: counter"),
            ),
        ];
        for (name, data, want) in cases {
            let got = parsed(&element(name, &data));
            match (&got, &want) {
                (Ok(g), Ok(w)) if g == w => {}
                (Err(g), Err(w)) if g.to_string().contains(w) => {}
                _ => panic!("{name} {data:?}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn malformed_answers_are_errors() {
        // (bytes, what the error says)
        let cases: [(&[u8], &str); 3] = [
            (&[8, 0, 1, 0, 0, 0], "a malformed attribute (8 bytes of 6)"),
            (&[2, 0, 1, 0], "a malformed attribute (2 bytes of 4)"),
            (&[0, 0, 1, 0], "a malformed attribute (0 bytes of 4)"),
        ];
        for (bytes, said) in cases {
            let got = attributes(bytes);
            assert!(
                matches!(&got, Err(e) if e.to_string().contains(said)),
                "{bytes:?}: {got:?}"
            );
        }
        let short = netlink::messages(&[40, 0, 0, 0, 3, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            short.map_err(|e| e.to_string()),
            Err("a malformed answer (40 bytes of 16)".into())
        );
        assert!(be32(&[1, 2]).is_err());
    }

    #[test]
    fn compare_table() {
        let chain = chain_applied();
        let rules: Vec<(String, Vec<Expr>)> = nl::rules(SCOPE)
            .into_iter()
            .map(|r| (CHAIN.to_string(), r))
            .collect();
        assert_eq!(compare(SCOPE, std::slice::from_ref(&chain), &rules), Ok(()));
        let mut swapped = rules.clone();
        swapped.swap(0, 1);
        let mut elsewhere = rules.clone();
        elsewhere[7].0 = "input".into();
        let mut dropping = chain.clone();
        dropping.policy = Some(0);
        // (chains, rules, what the error says)
        type Case = (Vec<ChainFound>, Vec<(String, Vec<Expr>)>, &'static str);
        let cases: Vec<Case> = vec![
            (vec![], rules.clone(), "has no chain"),
            (
                vec![chain.clone(), chain.clone()],
                rules.clone(),
                "2 chains, not 1",
            ),
            (vec![dropping], rules.clone(), "is not hooked as applied"),
            (
                vec![chain.clone()],
                rules[..7].to_vec(),
                "7 rules found, 8 applied",
            ),
            (vec![chain.clone()], swapped, "rule 1 differs"),
            (vec![chain.clone()], elsewhere, "rule 8 differs"),
        ];
        for (chains, found, said) in cases {
            let got = compare(SCOPE, &chains, &found);
            assert!(
                matches!(&got, Err(e) if e.to_string().contains(said)),
                "{said}: {got:?}"
            );
        }
    }
}
