//! A VM machine with a network, under software emulation and the AF_VSOCK
//! guard: it has no network device, and its proxy reaches the tests' own
//! internet only through the host's egress relay, which decides again.

mod common;

use common::internet::{Internet, Listener, REPO_FILE};
use common::machine::TestMachine;
use common::text;
use common::vm;
use std::process::{Command, Stdio};

fn warden(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::warden_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// `warden machine exec ID --shell LINE`.
fn exec(id: &str, line: &str) -> (bool, String, String) {
    warden(&["machine", "exec", id, "--shell", line])
}

/// The runtime's server is published on the host's loopback over vsock;
/// `setup` runs as the runtime and reaches a listed host through the
/// proxy; `curl` and `git clone` through the proxy reach a listed host; an
/// unlisted one is refused by the guest's proxy, a name that resolves to
/// loopback by the host's relay; a direct connection fails at once (there
/// is no network device); nothing reaches the host's loopback nor the
/// relay namespace's; the egress lines are in the log read through warden
/// while the VM runs.
#[test]
fn a_vm_reaches_listed_hosts_through_its_proxy_and_the_hosts_relay_only() {
    let Some(_one) =
        vm::ready("a_vm_reaches_listed_hosts_through_its_proxy_and_the_hosts_relay_only")
    else {
        return;
    };
    let net = Internet::start();
    let m = define_a_vm_on_the_internet(&net);
    let id = &m.id;
    let (ok, up, err) = warden(&["machine", "up", m.definition().to_str().unwrap()]);
    assert!(ok, "up: {up}{err}");
    assert!(up.contains("the VM's relay listening"), "{up}");
    assert!(up.contains("setup.sh ran"), "{up}");
    the_runtimes_server_is_published_on_the_hosts_loopback(id, &up);
    let ca = format!("/lent/ca/{}", net.ca.file_name().unwrap().to_string_lossy());
    let curl = format!("curl -sS --max-time 30 --cacert {ca}");
    the_setup_ran_as_the_runtime_through_the_proxy(id);
    listed_hosts_are_reached_and_others_refused(id, &net, &curl);
    nothing_goes_around_the_proxy(id, &net, &curl);
    the_internet_saw_the_listed_requests_only(&net);
    status_and_the_logs_say_each_decision(id);
    stopped_the_relay_is_gone_with_the_vm(id);
}

/// A VM on `net`'s machine namespace, listing allowed.test and
/// rebind.test, lent the internet's CA, with a setup that fetches through
/// the proxy and a main process that serves a page on a published port.
fn define_a_vm_on_the_internet(net: &Internet) -> TestMachine {
    let ca_dir = net.ca.parent().unwrap().to_path_buf();
    let m = TestMachine::defined(
        "vm-net",
        serde_json::json!({
            "image": "localhost/warden-machine:latest", "kind": "vm",
            "network": format!("/run/netns/{}", net.machine_ns),
            "dns": [net.v4.to_string()],
            "hosts": ["allowed.test", "rebind.test"],
            // The tests' internet uses private addresses.
            "allow_addresses": [format!("{}/32", net.v4), format!("{}/128", net.v6)],
            "lend": [{"host": ca_dir, "at": "/lent/ca", "mode": "read"}],
            "setup": "setup.sh",
            // The runtime's own server, published on the host's loopback.
            "command": ["sh", "-c", "mkdir -p $HOME/www && echo page-from-vm > $HOME/www/index.html && exec python3 -m http.server 3000 --bind 127.0.0.1 --directory $HOME/www"],
            "ports": [{"port": 3000, "host": "auto", "from": 18300}],
        }),
    );
    // The setup runs as the runtime, in its workspace, through the proxy.
    let ca_name = net.ca.file_name().unwrap().to_string_lossy().to_string();
    std::fs::write(
        m.dir.path().join("setup.sh"),
        format!(
            "set -e\numask 022\ncd \"$HOME/workspace\" && mkdir -p from-setup && cd from-setup\nid -un > user.txt\n\
             curl -sS --max-time 30 --cacert /lent/ca/{ca_name} https://allowed.test/from-setup > page.txt\n"
        ),
    )
    .unwrap();
    m
}

/// The runtime's server, from the host, through the VM's vsock.
fn the_runtimes_server_is_published_on_the_hosts_loopback(id: &str, up: &str) {
    let published = up
        .lines()
        .find_map(|l| l.split("published: 3000/tcp -> 127.0.0.1:").nth(1))
        .unwrap_or_else(|| panic!("{up}"));
    let host_port: u16 = published.trim().parse().unwrap();
    let page = common::machine::http_get(host_port, "/", std::time::Duration::from_secs(30));
    assert_eq!(page.as_deref(), Ok("page-from-vm\n"));
    let (_, status, _) = warden(&["machine", "status", id]);
    assert!(
        status.contains(&format!("published: 3000/tcp -> 127.0.0.1:{host_port}")),
        "{status}"
    );
    let (_, ps, _) = warden(&["machine", "ps"]);
    assert!(ps.contains(&format!("127.0.0.1:{host_port}")), "{ps}");
}

/// The setup ran as the runtime, and its fetch through the proxy came
/// back.
fn the_setup_ran_as_the_runtime_through_the_proxy(id: &str) {
    let (ok, made, err) = warden(&[
        "machine",
        "exec",
        id,
        "--folder",
        "from-setup",
        "--shell",
        "cat user.txt page.txt",
    ]);
    assert!(ok, "{err}");
    assert_eq!(made, "runtime\nhello allowed.test /from-setup");
}

/// Listed hosts are reached (TLS end to end, git); an unlisted one is
/// refused by the guest's proxy, one resolving to loopback by the host's
/// relay.
fn listed_hosts_are_reached_and_others_refused(id: &str, net: &Internet, curl: &str) {
    // Listed, over TLS end to end.
    let (ok, body, err) = exec(id, &format!("{curl} https://allowed.test/from-vm"));
    assert!(ok, "{err}");
    assert_eq!(body, "hello allowed.test /from-vm");
    // git, as shell's tools are pointed at the proxy.
    let (ok, out, err) = exec(
        id,
        "git clone -q http://allowed.test/repo.git r && cat r/README.md",
    );
    assert!(ok, "{out}{err}");
    assert_eq!(out, REPO_FILE.1);

    // Not listed: the guest's proxy refuses, with its reason.
    let (_, head, _) = exec(id, &format!("{curl} -i http://denied.test/"));
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        head.contains("denied.test:80 is not on the host list"),
        "{head}"
    );

    // Listed, but resolving to loopback: the host's relay refuses, and
    // nothing reaches the loopback of the namespace it connects from.
    let relay_loopback = Listener::start(Some(&net.machine_ns), "127.0.0.1", 80);
    let (_, head, _) = exec(id, &format!("{curl} -i http://rebind.test/"));
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        head.contains("the host's relay: rebind.test resolves to 127.0.0.1, a loopback address"),
        "{head}"
    );
    relay_loopback.took_nothing("the relay namespace's loopback");
}

/// Around the proxy: no network device, so a direct connection fails
/// at once (curl's 7, not a timeout's 28), to the internet and to
/// the host's loopback alike; an address through the proxy is refused.
fn nothing_goes_around_the_proxy(id: &str, net: &Internet, curl: &str) {
    let host_loopback = Listener::start(None, "127.0.0.1", 18_081);
    for target in [
        format!("http://{}/direct", net.v4),
        "http://10.0.2.2:18081/".to_string(),
        // The runtime's server is not shell's to reach either.
        "http://127.0.0.1:3000/".to_string(),
    ] {
        let (ok, out, err) = exec(id, &format!("{curl} --noproxy '*' {target}; echo exit=$?"));
        assert!(ok, "{err}");
        assert!(out.contains("exit=7"), "{target}: {out}{err}");
    }
    // (--noproxy "": through the proxy although NO_PROXY names loopback.)
    let (_, head, err) = exec(
        id,
        &format!("{curl} --noproxy '' -i http://127.0.0.1:18081/"),
    );
    assert!(head.starts_with("HTTP/1.1 403"), "{head}{err}");
    host_loopback.took_nothing("the host's loopback");
    // Nor can shell speak to the relay itself: no vsock socket for it.
    let (_, out, err) = exec(
        id,
        "python3 -c 'import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)' 2>&1; echo exit=$?",
    );
    assert!(
        out.contains("PermissionError") && out.contains("exit=1"),
        "{out}{err}"
    );
    let (_, ifaces, _) = exec(id, "ls /sys/class/net");
    assert_eq!(
        ifaces.split_whitespace().collect::<Vec<_>>(),
        ["lo"],
        "{ifaces}"
    );
}

/// The internet saw the listed requests and nothing else.
fn the_internet_saw_the_listed_requests_only(net: &Internet) {
    let seen = net.http_requests();
    assert!(seen.contains("https GET allowed.test /from-vm"), "{seen}");
    assert!(
        seen.contains("https GET allowed.test /from-setup"),
        "{seen}"
    );
    assert!(seen.contains("/repo.git/info/refs"), "{seen}");
    assert!(
        !seen.contains("denied.test") && !seen.contains("/direct"),
        "{seen}"
    );
}

/// Status says the firewall holds; the log, read through warden while
/// the VM runs, has each decision; the host's side kept its own lines.
fn status_and_the_logs_say_each_decision(id: &str) {
    // Status says the firewall holds; the log, read through warden while
    // the VM runs, has each decision.
    let (_, status, _) = warden(&["machine", "status", id]);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("layer firewall") && l.contains(" holds ")),
        "{status}"
    );
    let (ok, audit, err) = warden(&["machine", "audit", id]);
    assert!(ok, "{audit}{err}");
    assert!(audit.contains("chain intact"), "{audit}");
    assert!(!audit.contains("may lack its last lines"), "{audit}");
    let copy = warden::host::machine::state_dir(id).join("audit-copy");
    let log = std::fs::read_dir(&copy)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    let egress: Vec<&str> = log.lines().filter(|l| l.contains("\"egress\"")).collect();
    assert!(
        egress
            .iter()
            .any(|l| l.contains("\"allowed\":true") && l.contains("allowed.test")),
        "{egress:?}"
    );
    assert!(
        egress
            .iter()
            .any(|l| l.contains("refused_address") && l.contains("the host's relay")),
        "{egress:?}"
    );

    // The host's side kept its own lines.
    let relay_log = std::fs::read_to_string(
        warden::host::machine::state_dir(id)
            .join("vm")
            .join("relay.log"),
    )
    .unwrap_or_default();
    assert!(
        relay_log.contains("\"refusal\":\"refused_address\""),
        "{relay_log}"
    );
}

/// Stopped, the relay is gone with the VM.
fn stopped_the_relay_is_gone_with_the_vm(id: &str) {
    let (ok, out, err) = warden(&["machine", "stop", id]);
    assert!(ok, "{out}{err}");
    let relay_pid = warden::host::machine::state_dir(id)
        .join("vm")
        .join("relay.pid");
    assert!(!relay_pid.exists());
    let left = Command::new("pgrep")
        .args(["-f", &format!("{id}/vm/relay.json")])
        .output()
        .unwrap();
    assert!(text(&left.stdout).trim().is_empty(), "a relay is left");
}
