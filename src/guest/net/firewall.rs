//! The firewall: one nftables table of warden's own, `inet warden`, whose
//! output chain lets sockets owned by `shell` reach the egress proxy on
//! loopback and nothing else. Other users' traffic and other tables are
//! never touched.
//!
//! warden sends the table to the kernel itself, as one atomic batch over a
//! netfilter netlink socket (`nft_netlink`), reads it back the same way and
//! compares (`nft_readback`), and proves it by a probe running as `shell`
//! (see `Verdict`): no `nft` runs, so an image need not have one and the
//! boot waits for no program. The same rules are stated here with the
//! `nftables` crate, as the JSON batch `nft -j -f` takes, and `compare`
//! checks an `nft -j list` of the table against them: the tests read
//! warden's table back with the host's own `nft`, a reader independent of
//! warden's.

use nftables::batch::Batch;
use nftables::expr::{Expression, Meta, MetaKey, NamedExpression, Payload, PayloadField};
use nftables::schema::{Chain, FlushObject, NfCmd, NfListObject, Nftables, Rule, Table};
use nftables::stmt::{Match, Operator, Reject, RejectType, Statement};
use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook, RejectCode};
use std::borrow::Cow;
use std::fmt::Display;

pub const TABLE: &str = "warden";
pub const CHAIN: &str = "output";

/// What the rules are about: whose sockets, and the one port they may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    pub shell_uid: u32,
    /// shell's uid as the network namespace counts it (see `userns`):
    /// the number the rules name.
    pub network_uid: u32,
    /// The runtime's, counted so, when its traffic is limited too
    /// (`runtime_hosts`): the same rules name it after shell's.
    pub runtime_network_uid: Option<u32>,
    pub proxy_port: u16,
}

fn table() -> Table<'static> {
    Table {
        family: NfFamily::INet,
        name: TABLE.into(),
        handle: None,
    }
}

fn chain() -> Chain<'static> {
    Chain {
        family: NfFamily::INet,
        table: TABLE.into(),
        name: CHAIN.into(),
        _type: Some(NfChainType::Filter),
        hook: Some(NfHook::Output),
        prio: Some(0),
        policy: Some(NfChainPolicy::Accept),
        ..Chain::default()
    }
}

fn equals(left: Expression<'static>, right: Expression<'static>) -> Statement<'static> {
    Statement::Match(Match {
        left,
        right,
        op: Operator::EQ,
    })
}

fn meta(key: MetaKey) -> Expression<'static> {
    Expression::Named(NamedExpression::Meta(Meta { key }))
}

fn field(protocol: &'static str, name: &'static str) -> Expression<'static> {
    Expression::Named(NamedExpression::Payload(Payload::PayloadField(
        PayloadField {
            protocol: protocol.into(),
            field: name.into(),
        },
    )))
}

/// The chain's rules, in order: the proxy on 127.0.0.1 and ::1 is
/// accepted; any other TCP from `shell` gets a reset, and everything else
/// (UDP, ICMP, other protocols) an ICMP "administratively prohibited", so
/// tools fail at once instead of waiting for a timeout.
pub fn rules(scope: Scope) -> Vec<Vec<Statement<'static>>> {
    scope
        .owners()
        .into_iter()
        .flat_map(|uid| rules_of(uid, scope.proxy_port))
        .collect()
}

impl Scope {
    /// Whose sockets the rules hold: shell's, and the runtime's when limited.
    pub fn owners(&self) -> Vec<u32> {
        std::iter::once(self.network_uid)
            .chain(self.runtime_network_uid)
            .collect()
    }
}

fn rules_of(uid: u32, proxy_port: u16) -> Vec<Vec<Statement<'static>>> {
    let owner = || equals(meta(MetaKey::Skuid), Expression::Number(uid));
    let proxy = |protocol: &'static str, address: &'static str| {
        vec![
            owner(),
            equals(field(protocol, "daddr"), Expression::String(address.into())),
            equals(
                field("tcp", "dport"),
                Expression::Number(u32::from(proxy_port)),
            ),
            Statement::Accept(None),
        ]
    };
    vec![
        proxy("ip", "127.0.0.1"),
        proxy("ip6", "::1"),
        vec![
            owner(),
            equals(meta(MetaKey::L4proto), Expression::String("tcp".into())),
            Statement::Reject(Some(Reject::new(Some(RejectType::TCPReset), None))),
        ],
        vec![
            owner(),
            Statement::Reject(Some(Reject::new(
                Some(RejectType::ICMPX),
                Some(RejectCode::AdminProhibited),
            ))),
        ],
    ]
}

/// One atomic batch that makes warden's table what it must be: adding the
/// table and chain is a no-op when they exist, and the flush empties them
/// first, so applying twice leaves exactly one copy of each rule. (Flushing
/// rather than deleting the table keeps the hook registered: deleting it
/// made the kernel wait for a grace period at every boot.)
pub fn batch(scope: Scope) -> Nftables<'static> {
    let mut batch = Batch::new();
    batch.add(NfListObject::Table(table()));
    batch.add_cmd(NfCmd::Flush(FlushObject::Table(table())));
    batch.add(NfListObject::Chain(chain()));
    for expr in rules(scope) {
        batch.add(NfListObject::Rule(Rule {
            family: NfFamily::INet,
            table: TABLE.into(),
            chain: CHAIN.into(),
            expr: Cow::Owned(expr),
            handle: None,
            index: None,
            comment: None,
        }));
    }
    batch.to_nftables()
}

/// How an `nft -j list` of warden's table differs from what was applied,
/// or why it could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ListingError {
    #[error("cannot read nft's listing: {0}")]
    Unreadable(#[source] serde_json::Error),
    #[error("table inet {TABLE} has no chain")]
    NoChain,
    #[error("chain {name} is not hooked as applied (type {kind:?}, hook {hook:?}, priority {prio:?}, policy {policy:?})")]
    NotHooked {
        name: String,
        kind: Option<NfChainType>,
        hook: Option<NfHook>,
        prio: Option<i32>,
        policy: Option<NfChainPolicy>,
    },
    #[error("table inet {TABLE} has {0} chains, not 1")]
    Chains(usize),
    #[error("{found} rules found, {applied} applied")]
    RuleCount { found: usize, applied: usize },
    #[error("rule {0} differs from what was applied")]
    RuleDiffers(usize),
}

/// Compares `nft -j list table inet warden` with what warden applied: the
/// one chain, hooked as it should be, holding exactly the rules in order.
pub fn compare(listing: &str, scope: Scope) -> Result<(), ListingError> {
    let listed: Nftables = serde_json::from_str(listing).map_err(ListingError::Unreadable)?;
    let mut chains = Vec::new();
    let mut found = Vec::new();
    for object in listed.objects.iter() {
        match object {
            nftables::schema::NfObject::ListObject(NfListObject::Chain(c)) => chains.push(c),
            nftables::schema::NfObject::ListObject(NfListObject::Rule(r)) => found.push(r),
            _ => {}
        }
    }
    let want = chain();
    match chains.as_slice() {
        [c] if c.name == want.name
            && c._type == want._type
            && c.hook == want.hook
            && c.prio == want.prio
            && c.policy == want.policy => {}
        [] => return Err(ListingError::NoChain),
        [c] => {
            return Err(ListingError::NotHooked {
                name: c.name.to_string(),
                kind: c._type,
                hook: c.hook,
                prio: c.prio,
                policy: c.policy,
            })
        }
        more => return Err(ListingError::Chains(more.len())),
    }
    let expected = rules(scope);
    if found.len() != expected.len() {
        return Err(ListingError::RuleCount {
            found: found.len(),
            applied: expected.len(),
        });
    }
    for (i, (rule, want)) in found.iter().zip(&expected).enumerate() {
        if rule.chain != CHAIN || rule.expr.as_ref() != want.as_slice() {
            return Err(ListingError::RuleDiffers(i + 1));
        }
    }
    Ok(())
}

/// What the probe, running as `shell` without Landlock (so that only the
/// firewall stands in its way), found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Findings {
    /// A TCP connect to a loopback port that is not the proxy failed
    /// (IPv4; and IPv6 when `v6` is set).
    pub tcp_refused: bool,
    /// It failed at once (a reset or an ICMP error, not a timeout).
    pub refused_fast: bool,
    /// A UDP datagram to a loopback port did not arrive.
    pub udp_blocked: bool,
    /// ... because shell could not make a UDP socket at all (seccomp).
    pub udp_refused_at_socket: bool,
    /// The proxy answered a TCP connect.
    pub proxy_reached: bool,
    /// The IPv6 loopback exists, and was tested too.
    pub v6: bool,
}

/// How warden applies its table (the boot line's `firewall_via`): by
/// itself, over a netfilter netlink socket (`nft_netlink`).
pub const VIA: &str = "netlink";
const APPLIED: &str = "applied over netlink";

/// The firewall as warden last found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Holds(String),
    DidNotHold(String),
}

/// Says in plain words what a permission error from the kernel means: the
/// network namespace belongs to someone else (rootless podman with the
/// host's network), or warden lacks CAP_NET_ADMIN.
fn why_refused(error: &str) -> &'static str {
    match error.contains("Operation not permitted") {
        true => " (this machine may not change the firewall of the network it is on: it shares a network it does not own, as under rootless podman with --network host, or it lacks CAP_NET_ADMIN)",
        false => "",
    }
}

/// Judges the layer from the three pieces of evidence: applying, reading
/// back, and the probe (`readback` is not looked at when applying failed).
pub fn judge(
    scope: Scope,
    applied: &Result<(), impl Display>,
    readback: &Result<(), impl Display>,
    probe: &Result<Findings, impl Display>,
) -> Verdict {
    let Scope {
        shell_uid,
        network_uid,
        runtime_network_uid: _,
        proxy_port,
    } = scope;
    let counted = match network_uid == shell_uid {
        true => String::new(),
        false => format!(" ({network_uid} to this network, whose namespace belongs to the parent user namespace)"),
    };
    if let Err(e) = applied {
        let e = e.to_string();
        return Verdict::DidNotHold(format!("cannot apply the rules: {e}{}", why_refused(&e)));
    }
    let findings = match probe {
        Ok(f) => f,
        Err(e) => {
            return Verdict::DidNotHold(format!(
                "the network probe failed: {e} (table inet {TABLE} {APPLIED})"
            ))
        }
    };
    let mut problems = Vec::new();
    // How the table was applied, and read back: said whatever the verdict.
    let how = match readback {
        Ok(()) => format!("{APPLIED}, read back and compared"),
        Err(e) => {
            problems.push(format!("table inet {TABLE} read back: {e}"));
            APPLIED.to_string()
        }
    };
    problems.extend(problems_in(findings, proxy_port, "shell"));
    if problems.is_empty() {
        let (udp, v6) = said(findings);
        Verdict::Holds(format!(
            "table inet {TABLE}, {how}: sockets of uid {shell_uid}{counted} reach only the proxy on 127.0.0.1{v6}:{proxy_port}; a probe as shell was refused at once over TCP, {udp}, and it reached the proxy"
        ))
    } else {
        Verdict::DidNotHold(format!(
            "{} (table inet {TABLE} {how})",
            problems.join("; ")
        ))
    }
}

/// What the probe's findings show does not hold.
pub fn problems_in(findings: &Findings, proxy_port: u16, who: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !findings.tcp_refused {
        problems.push(format!(
            "{who} connected over TCP to a loopback port that is not the proxy"
        ));
    } else if !findings.refused_fast {
        problems.push(format!("a TCP connect from {who} was not refused at once"));
    }
    if !findings.udp_blocked {
        problems.push(format!("a UDP datagram from {who} arrived"));
    }
    if !findings.proxy_reached {
        problems.push(format!("{who} cannot reach the proxy on port {proxy_port}"));
    }
    problems
}

/// How the probe's UDP datagram fared, and which loopbacks it tried.
fn said(findings: &Findings) -> (&'static str, &'static str) {
    let udp = match findings.udp_refused_at_socket {
        true => "could make no UDP socket (seccomp refuses them to shell)",
        false => "its UDP datagram did not arrive",
    };
    let v6 = match findings.v6 {
        true => " and [::1]",
        false => " (no IPv6 loopback here)",
    };
    (udp, v6)
}

/// The verdict where warden's connect gate stands in for the table
/// (`why_not` says why the table could not hold): the probe ran as a
/// command, under the gate.
pub fn judge_gate(
    proxy_port: u16,
    why_not: &str,
    probe: &Result<Findings, impl Display>,
) -> Verdict {
    let findings = match probe {
        Ok(f) => f,
        Err(e) => return Verdict::DidNotHold(format!("the connect gate's probe failed: {e}")),
    };
    let problems = problems_in(findings, proxy_port, "shell");
    if !problems.is_empty() {
        return Verdict::DidNotHold(format!(
            "the connect gate did not hold: {}",
            problems.join("; ")
        ));
    }
    let (udp, v6) = said(findings);
    Verdict::Holds(format!(
        "held by warden's connect gate, without nftables ({why_not}): every TCP connect of a command is decided by warden, which connects to the proxy on 127.0.0.1{v6}:{proxy_port} for it and refuses the rest; Landlock refuses commands any TCP connect of their own; a probe as shell was refused at once over TCP, {udp}, and it reached the proxy"
    ))
}

/// What still limits `shell` when the firewall does not hold, and what no
/// longer does: said with every report of a firewall that did not hold.
pub fn without_firewall(proxy_port: u16, landlock_tcp: bool, seccomp_sockets: bool) -> String {
    let tcp = if landlock_tcp {
        format!(
            "Landlock lets shell open TCP connections only to port {proxy_port} (of any address)"
        )
    } else {
        "nothing limits shell's TCP connections (Landlock's TCP rules are not enforced here)"
            .to_string()
    };
    let open_tcp = match landlock_tcp {
        true => format!("TCP to port {proxy_port} of any address (anyone's proxy on that port)"),
        false => "TCP to any address and port".to_string(),
    };
    match seccomp_sockets {
        true => format!(
            "still holding: {tcp}; seccomp lets shell make only unix and TCP sockets (no UDP, so no DNS of its own; no ICMP, raw or packet sockets). Not limited: {open_tcp}"
        ),
        false => format!(
            "still holding: {tcp}. Not limited, seccomp being off: UDP (DNS to any resolver included), ICMP echo, raw and packet sockets"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::net::netlink::NetlinkError;
    use crate::guest::net::nft_netlink::{BatchError, Refusal};
    use crate::guest::net::nft_readback::ReadbackError;
    use crate::guest::net::{FirewallError, ProbeError};
    use nix::errno::Errno;

    const SCOPE: Scope = Scope {
        shell_uid: 2001,
        network_uid: 2001,
        runtime_network_uid: None,
        proxy_port: 3128,
    };

    /// What nft 1.0.6 prints for the table after applying `batch(SCOPE)`.
    fn listing() -> serde_json::Value {
        let owner = serde_json::json!({"match": {"op": "==", "left": {"meta": {"key": "skuid"}}, "right": 2001}});
        let proxy = |proto: &str, addr: &str, handle: u32| {
            serde_json::json!({"rule": {"family": "inet", "table": "warden", "chain": "output", "handle": handle, "expr": [
                owner,
                {"match": {"op": "==", "left": {"payload": {"protocol": proto, "field": "daddr"}}, "right": addr}},
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 3128}},
                {"accept": null}]}})
        };
        serde_json::json!({"nftables": [
            {"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
            {"table": {"family": "inet", "name": "warden", "handle": 1}},
            {"chain": {"family": "inet", "table": "warden", "name": "output", "handle": 1, "type": "filter", "hook": "output", "prio": 0, "policy": "accept"}},
            proxy("ip", "127.0.0.1", 2),
            proxy("ip6", "::1", 3),
            {"rule": {"family": "inet", "table": "warden", "chain": "output", "handle": 4, "expr": [
                owner, {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}, {"reject": {"type": "tcp reset"}}]}},
            {"rule": {"family": "inet", "table": "warden", "chain": "output", "handle": 5, "expr": [
                owner, {"reject": {"type": "icmpx", "expr": "admin-prohibited"}}]}}
        ]})
    }

    fn edited(edit: impl FnOnce(&mut Vec<serde_json::Value>)) -> String {
        let mut l = listing();
        edit(l["nftables"].as_array_mut().unwrap());
        l.to_string()
    }

    #[test]
    fn the_listing_compares_with_what_was_applied() {
        type Edit = Box<dyn FnOnce(&mut Vec<serde_json::Value>)>;
        let cases: Vec<(&str, Edit, Option<&str>)> = vec![
            ("as applied", Box::new(|_| {}), None),
            (
                "a rule removed",
                Box::new(|o| {
                    o.remove(6);
                }),
                Some("3 rules found, 4 applied"),
            ),
            (
                "an accept-all rule put first",
                Box::new(|o| {
                    o.insert(3, serde_json::json!({"rule": {"family": "inet", "table": "warden", "chain": "output", "handle": 9, "expr": [{"accept": null}]}}));
                    o.remove(7);
                }),
                Some("rule 1 differs"),
            ),
            (
                "another uid",
                Box::new(|o| {
                    o[6]["rule"]["expr"][0]["match"]["right"] = 2002.into();
                }),
                Some("rule 4 differs"),
            ),
            (
                "another port",
                Box::new(|o| {
                    o[3]["rule"]["expr"][2]["match"]["right"] = 3129.into();
                }),
                Some("rule 1 differs"),
            ),
            (
                "the chain unhooked to input",
                Box::new(|o| {
                    o[2]["chain"]["hook"] = "input".into();
                }),
                Some("not hooked as applied"),
            ),
            (
                "the chain's policy",
                Box::new(|o| {
                    o[2]["chain"]["policy"] = "drop".into();
                }),
                Some("not hooked as applied"),
            ),
            (
                "no chain",
                Box::new(|o| {
                    o.truncate(2);
                }),
                Some("has no chain"),
            ),
        ];
        for (name, edit, want) in cases {
            let got = compare(&edited(edit), SCOPE);
            match want {
                None => assert_eq!(got.map_err(|e| e.to_string()), Ok(()), "{name}"),
                Some(w) => {
                    let e = got.expect_err(name);
                    assert!(e.to_string().contains(w), "{name}: {e}");
                }
            }
        }
        assert!(compare("not json", SCOPE)
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
    }

    #[test]
    fn the_batch_replaces_the_table_whole() {
        let text = serde_json::to_value(batch(SCOPE)).unwrap();
        let cmds: Vec<String> = text["nftables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_object().unwrap().keys().next().unwrap().clone())
            .collect();
        assert_eq!(cmds, ["add", "flush", "add", "add", "add", "add", "add"]);
        assert_eq!(text["nftables"][1]["flush"]["table"]["name"], "warden");
        // Only uid 2001's traffic is ever matched.
        for rule in &text["nftables"].as_array().unwrap()[3..] {
            assert_eq!(rule["add"]["rule"]["expr"][0]["match"]["right"], 2001);
        }
    }

    const GOOD: Findings = Findings {
        tcp_refused: true,
        refused_fast: true,
        udp_blocked: true,
        udp_refused_at_socket: false,
        proxy_reached: true,
        v6: true,
    };

    /// (applied, read back, probe, Ok: holds / Err: does not; with what
    /// the detail must say)
    type Case = (
        Result<(), FirewallError>,
        Result<(), ReadbackError>,
        Result<Findings, ProbeError>,
        Result<&'static [&'static str], &'static [&'static str]>,
    );

    /// Rules applied and read back over netlink.
    fn applied() -> (Result<(), FirewallError>, Result<(), ReadbackError>) {
        (Ok(()), Ok(()))
    }

    /// The probe's knock refused by the kernel (its fork: EAGAIN).
    fn probe_failed() -> Result<Findings, ProbeError> {
        Err(ProbeError::Knock(std::io::Error::from_raw_os_error(
            libc::EAGAIN,
        )))
    }

    /// Rules applied and read back: what the verdict says of it.
    fn applied_cases() -> Vec<Case> {
        let (netlink, read) = applied();
        vec![
            (
                netlink.clone(),
                read.clone(),
                Ok(GOOD),
                Ok(&["[::1]", "applied over netlink, read back and compared"]),
            ),
            (
                netlink.clone(),
                read.clone(),
                Ok(Findings {
                    tcp_refused: false,
                    ..GOOD
                }),
                Err(&[
                    "connected over TCP",
                    "applied over netlink",
                    "read back and compared",
                ]),
            ),
            (
                netlink.clone(),
                read.clone(),
                Ok(Findings {
                    udp_blocked: false,
                    ..GOOD
                }),
                Err(&["UDP datagram", "applied over netlink"]),
            ),
            // Under seccomp shell makes no UDP socket: said as such.
            (
                netlink.clone(),
                read.clone(),
                Ok(Findings {
                    udp_refused_at_socket: true,
                    ..GOOD
                }),
                Ok(&["could make no UDP socket (seccomp refuses them to shell)"]),
            ),
            (
                netlink.clone(),
                read.clone(),
                probe_failed(),
                Err(&["probe failed", "applied over netlink"]),
            ),
        ]
    }

    /// Rules not applied, or read back different: no verdict holds.
    fn refused_cases() -> Vec<Case> {
        let (netlink, read) = applied();
        // The batch refused whole: "over netlink: the batch: EPERM: ...".
        let eperm = || {
            Err(FirewallError::Netlink(BatchError::Refused(vec![Refusal {
                what: "the batch".into(),
                errno: Errno::EPERM,
            }])))
        };
        vec![
            // Not applied: the readback is not looked at.
            (
                eperm(),
                Err(ReadbackError::Unfinished),
                Ok(GOOD),
                Err(&[
                    "cannot apply the rules: over netlink",
                    "shares a network it does not own",
                ]),
            ),
            (
                Err(FirewallError::Netlink(BatchError::Netlink(
                    NetlinkError::Socket(Errno::EAFNOSUPPORT),
                ))),
                read.clone(),
                Ok(GOOD),
                Err(&["cannot apply the rules: over netlink: cannot open"]),
            ),
            (
                eperm(),
                read.clone(),
                Ok(GOOD),
                Err(&["shares a network it does not own"]),
            ),
            (
                netlink.clone(),
                Err(ReadbackError::RuleDiffers {
                    number: 1,
                    found: Vec::new(),
                    chain: "output".into(),
                }),
                Ok(GOOD),
                Err(&["read back: rule 1 differs", "applied over netlink"]),
            ),
        ]
    }

    /// What the probe found, with the rules applied.
    fn probe_cases() -> Vec<Case> {
        let (netlink, read) = applied();
        vec![
            (
                netlink.clone(),
                read.clone(),
                Ok(Findings {
                    tcp_refused: false,
                    ..GOOD
                }),
                Err(&["connected over TCP"]),
            ),
            (
                netlink.clone(),
                read.clone(),
                Ok(Findings {
                    refused_fast: false,
                    ..GOOD
                }),
                Err(&["not refused at once"]),
            ),
            (
                netlink.clone(),
                read.clone(),
                Ok(Findings {
                    udp_blocked: false,
                    ..GOOD
                }),
                Err(&["UDP datagram"]),
            ),
            (
                netlink.clone(),
                read.clone(),
                Ok(Findings {
                    proxy_reached: false,
                    ..GOOD
                }),
                Err(&["cannot reach the proxy"]),
            ),
            (
                netlink.clone(),
                read.clone(),
                probe_failed(),
                Err(&["probe failed"]),
            ),
        ]
    }

    #[test]
    fn judge_table() {
        let cases = applied_cases()
            .into_iter()
            .chain(refused_cases())
            .chain(probe_cases());
        for (applied, readback, probe, want) in cases {
            match (judge(SCOPE, &applied, &readback, &probe), want) {
                (Verdict::Holds(d), Ok(says)) | (Verdict::DidNotHold(d), Err(says)) => {
                    for w in says {
                        assert!(d.contains(w), "{w:?} not in {d}");
                    }
                }
                (v, w) => panic!("{v:?} but wanted {w:?}"),
            }
        }
    }
}
