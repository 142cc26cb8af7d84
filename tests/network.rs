//! The network layer, end to end: warden as PID 1 in a machine namespace
//! routed to the tests' own internet (tests/common/internet.rs), and real
//! clients (curl, git, python) run as `shell` through the API. The tests
//! are in tests/network/, by concern; the machines they share are booted
//! here.

mod common;

#[path = "network/connect_gate.rs"]
mod connect_gate;
#[path = "network/firewall_rules.rs"]
mod firewall_rules;
#[path = "network/reach.rs"]
mod reach;
#[path = "network/refusals.rs"]
mod refusals;
#[path = "network/runtime.rs"]
mod runtime;

use common::net::{boot, policy, Net};

/// A listed machine without CAP_NET_ADMIN: its firewall cannot hold, and
/// warden's connect gate stands in (checked here, so every test on it
/// knows which layer it exercises).
fn boot_gated() -> Net {
    let net = boot(policy, |o| o.drop_caps = vec!["net_admin".into()]);
    let fw = firewall(&net.machine.client().status().unwrap());
    assert!(fw.holds, "{fw:?}");
    assert!(
        fw.detail.contains("held by warden's connect gate"),
        "{}",
        fw.detail
    );
    net
}

fn boot_listed() -> Net {
    boot(policy, |_| {})
}

fn firewall(status: &warden::wire::Status) -> warden::wire::LayerState {
    common::layer(status, "firewall").clone()
}
