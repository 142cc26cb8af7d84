//! Rootless podman, as the owner `warden-owner`, its machine built from a
//! Dockerfile of this build's warden, on "none" with a link from the
//! internet laid into its namespace by the host's root.

use super::{
    assert_credential_arrived, assert_masked_echo, assert_no_secret,
    assert_status_shows_the_opened_host, link_into, merged, opened, owners_files, RUNTIME_KEY,
};
use crate::common;
use crate::common::internet::Internet;
use crate::common::machine::{ready, show, TestMachine, IMAGE};
use crate::common::rootless::Owner;
use crate::common::{text, warden_bin};
use serde_json::json;
use std::time::Instant;

/// Rootless podman, as the owner `warden-owner` (tests/common/rootless.rs),
/// its machine built from a Dockerfile of this build's warden: the
/// credential from the owner's `.env` reaches the origin on shell's plain
/// curl, the echo comes back masked, and the runtime's `.env` holds its
/// own key only. A rootless owner cannot join the internet's namespace
/// (root's: the launcher refuses it), and "private" (slirp4netns) reaches
/// only the host's own networks, which the tests may not send to: the
/// machine is made on "none", its image naming the internet's name
/// server, and a link from the internet laid into its namespace by the
/// host's root, with a route to the internet's address through it. (Here
/// "private" is refused anyway: the owner cannot open /dev/net/tun.)
#[test]
fn a_rootless_machine_adds_the_owners_credential() {
    let test = "a_rootless_machine_adds_the_owners_credential";
    if !ready(test) {
        return;
    }
    let started = Instant::now();
    let owner = common::rootless::owner();
    let net = Internet::start();
    let m = common::rootless::rootless_machine("rl-opened", json!({}));
    the_owners_project(&m, &net, owner);
    eprintln!(
        "owner and internet: {:.2} s",
        started.elapsed().as_secs_f64()
    );

    let out = m.up();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(said.contains("credentials handed to warden: 1"), "{said}");
    assert_no_secret("up", &said);
    let container = m.container();
    let as_owner = |args: &[&str]| owner.command("podman", args).output().unwrap();
    let out = as_owner(&["inspect", "--format", "{{.State.Pid}}", &container]);
    let pid = text(&out.stdout).trim().to_string();
    assert!(!pid.is_empty(), "{}", show("inspect", &out));
    link_into(&net, &pid, &[]);

    let out = m.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "20",
        "https://allowed.test/echo",
    ]);
    assert_masked_echo("curl rootless", &out, &|| {
        owner.warden(&["machine", "audit", &m.id])
    });
    assert_credential_arrived(&net, "/echo", 1);
    let out = as_owner(&["exec", "-u", "0", &container, "cat", "/home/runtime/.env"]);
    assert!(out.status.success(), "{}", show("cat .env", &out));
    assert_eq!(text(&out.stdout), format!("API_TOKEN={RUNTIME_KEY}\n"));
    assert_status_shows_the_opened_host(&|args: &[&str]| owner.warden(args), &m.id, 1);
    let out = owner.warden(&["machine", "audit", &m.id]);
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(said.contains("chain intact"), "{said}");
    assert_no_secret("audit", &said);
    let out = owner.warden(&["machine", "logs", &m.id]);
    assert_no_secret("logs", &(text(&out.stdout) + &text(&out.stderr)));
    eprintln!("{test}: {:.2} s", started.elapsed().as_secs_f64());
}

/// The owner's files beside `m`'s definition, with a Dockerfile of this
/// build's warden and the internet's name server, and the definition
/// opened on "none"; all of it the owner's.
fn the_owners_project(m: &TestMachine, net: &Internet, owner: &Owner) {
    let ca = owners_files(m.dir.path(), net);
    std::fs::copy(warden_bin(), m.dir.path().join("warden")).unwrap();
    // The internet's name server in the image's own resolv.conf, which
    // podman leaves in place on "none" (it writes none there, and the
    // definition's `dns` needs a network of the machine's own).
    std::fs::write(
        m.dir.path().join("resolv.conf"),
        format!("nameserver {}\n", net.v4),
    )
    .unwrap();
    std::fs::write(
        m.dir.path().join("Dockerfile"),
        format!("FROM {IMAGE}\nCOPY warden /sbin/warden\nCOPY resolv.conf /etc/resolv.conf\n"),
    )
    .unwrap();
    m.edit(|d| {
        d.as_object_mut().unwrap().remove("image");
        let fields = merged(
            opened(&ca),
            json!({
                "dockerfile": "Dockerfile",
                "network": "none",
                "allow_addresses": [format!("{}/32", net.v4), format!("{}/128", net.v6)],
            }),
        );
        d.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
    });
    // All of it the owner's, as their own project would be.
    let out = std::process::Command::new("chown")
        .args(["-R", &owner.uid.to_string()])
        .arg(m.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("chown", &out));
}
