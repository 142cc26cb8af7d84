//! Docker, its machine built from a Dockerfile of this build's warden, on
//! "none" with a link from the internet laid into its namespace.

use super::{
    assert_credential_arrived, assert_masked_echo, assert_no_secret,
    assert_status_shows_the_opened_host, link_into, merged, opened, owners_files, RUNTIME_KEY,
};
use crate::common;
use crate::common::docker::{docker, ready as docker_ready, warden as docker_warden};
use crate::common::internet::Internet;
use crate::common::machine::{show, TestMachine, IMAGE};
use crate::common::{text, warden_bin};
use serde_json::json;
use std::time::Instant;

/// Docker, its machine built from a Dockerfile of this build's warden:
/// the credential from the owner's `.env` reaches the origin on shell's
/// plain curl, the echo comes back masked, and the runtime's `.env`
/// holds its own key only. The tests' daemon has no bridge (scripts/test
/// starts it with --bridge=none, keeping the host's network as it is) and
/// Docker cannot join a namespace by path: the machine is made on "none"
/// and a link from the internet laid into its namespace, as the bridge
/// would be; the name server the engine wrote in its resolv.conf is
/// answered by the internet's.
#[test]
fn a_docker_machine_adds_the_owners_credential() {
    let test = "a_docker_machine_adds_the_owners_credential";
    if !docker_ready(test) {
        return;
    }
    let started = Instant::now();
    let net = Internet::start();
    let id = common::machine::machine_id("dk-opened");
    let state = warden::host::machine::state_dir(&id);
    let m = TestMachine::in_folder(id, tempfile::tempdir().unwrap(), docker_warden, state);
    let ca = owners_files(m.dir.path(), &net);
    std::fs::copy(warden_bin(), m.dir.path().join("warden")).unwrap();
    std::fs::write(
        m.dir.path().join("Dockerfile"),
        format!("FROM {IMAGE}\nCOPY warden /sbin/warden\n"),
    )
    .unwrap();
    m.define(merged(
        opened(&ca),
        json!({
            "dockerfile": "Dockerfile",
            "network": "none",
            "allow_addresses": [format!("{}/32", net.v4), format!("{}/128", net.v6)],
        }),
    ));
    let out = m.up();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(said.contains("credentials handed to warden: 1"), "{said}");
    assert_no_secret("up", &said);
    let container = m.container();
    let out = docker(&["inspect", "--format", "{{.State.Pid}}", &container]);
    let pid = text(&out.stdout).trim().to_string();
    let out = docker(&["exec", &container, "cat", "/etc/resolv.conf"]);
    let name_servers: Vec<std::net::Ipv4Addr> = text(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("nameserver "))
        .filter_map(|a| a.trim().parse().ok())
        .collect();
    assert!(!name_servers.is_empty(), "{}", show("resolv.conf", &out));
    link_into(&net, &pid, &name_servers);

    let out = m.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "20",
        "https://allowed.test/echo",
    ]);
    assert_masked_echo("curl on Docker", &out, &|| {
        docker_warden(&["machine", "audit", &m.id])
    });
    assert_credential_arrived(&net, "/echo", 1);
    // The runtime's .env (read as the container's root): its key alone.
    let out = docker(&["exec", &container, "cat", "/home/runtime/.env"]);
    assert!(out.status.success(), "{}", show("cat .env", &out));
    assert_eq!(text(&out.stdout), format!("API_TOKEN={RUNTIME_KEY}\n"));
    assert_status_shows_the_opened_host(&docker_warden, &m.id, 1);
    let out = docker_warden(&["machine", "audit", &m.id]);
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(said.contains("chain intact"), "{said}");
    assert_no_secret("audit", &said);
    let out = docker_warden(&["machine", "logs", &m.id]);
    assert_no_secret("logs", &(text(&out.stdout) + &text(&out.stderr)));
    eprintln!("{test}: {:.2} s", started.elapsed().as_secs_f64());
}
