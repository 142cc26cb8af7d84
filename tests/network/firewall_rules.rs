//! The firewall's own rules: its self-test sees rules changed behind its
//! back, a firewall off by policy gets no gate, and applying the rules
//! twice leaves one copy.

use super::{boot_listed, firewall};
use crate::common::net::boot;
use crate::common::privileged;
use serde_json::json;

#[test]
fn the_firewall_self_test_sees_rules_removed_behind_its_back() {
    if !privileged("the_firewall_self_test_sees_rules_removed_behind_its_back") {
        return;
    }
    let net = boot_listed();
    let first = firewall(&net.machine.client().status().unwrap());
    assert!(first.holds && first.required, "{first:?}");
    let nft = |args: &str| {
        let out = net
            .internet
            .in_machine("nft")
            .args(args.split(' '))
            .output()
            .unwrap();
        assert!(out.status.success(), "nft {args}: {out:?}");
    };
    // An accept-all rule slipped in first: the probe gets through.
    nft("insert rule inet warden output accept");
    let s = net.machine.client().status().unwrap();
    let fw = firewall(&s);
    assert!(!fw.holds, "{fw:?}");
    assert!(
        fw.detail.contains("5 rules found, 4 applied"),
        "{}",
        fw.detail
    );
    assert!(fw.detail.contains("connected over TCP"), "{}", fw.detail);
    assert!(
        fw.detail.contains("still holding: Landlock"),
        "{}",
        fw.detail
    );
    assert!(s.refusing.unwrap().contains("firewall did not hold"));
    // Commands are refused, naming the firewall.
    let e = net.refused_run();
    assert!(e.contains("firewall"), "{e}");
    // The table deleted whole.
    nft("delete table inet warden");
    let fw = firewall(&net.machine.client().status().unwrap());
    assert!(!fw.holds);
    assert!(
        fw.detail.contains("table inet warden is not there"),
        "{}",
        fw.detail
    );
}

/// With the firewall off by policy, the gate does not stand in either:
/// what is left (Landlock's port, seccomp's sockets) is said.
#[test]
fn a_firewall_off_by_policy_gets_no_gate() {
    if !privileged("a_firewall_off_by_policy_gets_no_gate") {
        return;
    }
    let p = json!({"hosts": ["allowed.test"], "firewall": "off"});
    let net = boot(move |_| p, |o| o.drop_caps = vec!["net_admin".into()]);
    let fw = firewall(&net.machine.client().status().unwrap());
    assert!(!fw.holds && !fw.required, "{fw:?}");
    assert!(fw.detail.contains("off by policy"), "{}", fw.detail);
    assert!(fw.detail.contains("no UDP"), "{}", fw.detail);
    assert!(
        fw.detail
            .contains("Not limited: TCP to port 3128 of any address"),
        "{}",
        fw.detail
    );
    assert!(!net.machine.log().contains("connect gate stands in"));
    assert_eq!(net.text("echo ran").1.trim(), "ran");
}

#[test]
fn applying_the_rules_twice_leaves_one_copy() {
    if !privileged("applying_the_rules_twice_leaves_one_copy") {
        return;
    }
    use std::io::Write;
    use warden::guest::net::firewall::{self, Scope};
    let ns = format!("wdn-fw-{:x}", std::process::id());
    let ip = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    ip(&["netns", "add", &ns]);
    let scope = Scope {
        shell_uid: 2001,
        network_uid: 2001,
        runtime_network_uid: None,
        proxy_port: 3128,
    };
    let batch = serde_json::to_string(&firewall::batch(scope)).unwrap();
    let nft = |args: &[&str], input: &str| {
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", &ns, "nft"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "nft {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    for _ in 0..2 {
        nft(&["-j", "-f", "-"], &batch);
    }
    let listing = nft(&["-j", "list", "table", "inet", "warden"], "");
    let result = firewall::compare(&listing, scope);
    // A rule added by someone else is flushed by the next apply.
    nft(
        &["insert", "rule", "inet", "warden", "output", "accept"],
        "",
    );
    assert!(
        firewall::compare(&nft(&["-j", "list", "table", "inet", "warden"], ""), scope).is_err()
    );
    nft(&["-j", "-f", "-"], &batch);
    let again = firewall::compare(&nft(&["-j", "list", "table", "inet", "warden"], ""), scope);
    ip(&["netns", "del", &ns]);
    assert_eq!(result.map_err(|e| e.to_string()), Ok(()));
    assert_eq!(again.map_err(|e| e.to_string()), Ok(()));
}
