//! Rootless machines, end to end: a plain user with subordinate ids makes
//! machines with rootless podman; what shell writes in a lent folder is the
//! owner's with `keep_id`, any image runs, and on the host's network
//! warden's connect gate holds.

mod common;

use common::machine::{ps_row, ready, show, TestMachine};
use common::rootless::{owner, rootless_machine};
use common::text;
use std::path::PathBuf;

#[test]
fn a_rootless_owner_gets_what_shell_writes_with_keep_id() {
    if !ready("a_rootless_owner_gets_what_shell_writes_with_keep_id") {
        return;
    }
    let owner = owner();
    let m = rootless_machine("keepid", serde_json::json!({"keep_id": true}));
    let id = &m.id;

    let out = owner.warden(&["machine", "check"]);
    let facts = text(&out.stdout);
    assert!(out.status.success(), "{}", show("check", &out));
    assert!(
        facts.contains(&format!("rootless (uid {})", owner.uid)),
        "{facts}"
    );
    assert!(facts.contains("subordinate ids of warden-owner"), "{facts}");

    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let out = m.exec(&["id", "-un"]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("id", &out));
    let out = m.exec(&["sh", "-c", "echo from-shell > /lent/out/made && id -u"]);
    assert_eq!(text(&out.stdout).trim(), "2001", "{}", show("write", &out));
    let made = std::fs::metadata(m.dir.path().join("out/made")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        made.uid(),
        owner.uid,
        "shell's file belongs to the owner on the host"
    );

    // keep-id makes the owner's files shell's inside: the key warden reads
    // was handed to the machine's root, and shell cannot read it, not even
    // after an `up` that keeps the machine (which must not touch the files
    // the machine has mounted).
    let out = m.up();
    assert!(
        text(&out.stdout).contains("unchanged, kept"),
        "{}",
        show("up again", &out)
    );
    let out = m.exec(&["cat", "/etc/warden/key"]);
    assert!(!out.status.success(), "{}", show("cat key", &out));
    let key = std::fs::read_to_string(owner.state(id).join("key")).unwrap();
    assert!(!text(&out.stdout).contains(key.trim()));

    let out = owner.warden(&["machine", "status", id]);
    let status = text(&out.stdout);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("layer firewall") && l.contains(" holds ")),
        "{status}"
    );
    let out = owner.warden(&["machine", "ps"]);
    let row = ps_row(&text(&out.stdout), id);
    assert!(
        row.is_some_and(|r| r[1] == "container" && r[4] == "running"),
        "{}",
        show("ps", &out)
    );

    let out = owner.warden(&["machine", "rm", id, "--volumes"]);
    assert!(out.status.success(), "{}", show("rm", &out));
    assert!(!owner.state(id).exists(), "the state folder is gone");
}

/// The Python framework's case: a container of the agent's own from an
/// image with no warden in it, the project lent at the path it has on the
/// host (in the owner's home), `requires` checked, keep-id as shell: what a
/// command writes there is the owner's.
#[test]
fn a_container_of_the_agents_own_from_any_image_writes_as_the_owner() {
    let test = "a_container_of_the_agents_own_from_any_image_writes_as_the_owner";
    if !ready(test) || !common::machine::ready_with(test, common::machine::ROOTFS) {
        return;
    }
    let owner = owner();
    owner.load(common::machine::ROOTFS);
    let project = PathBuf::from(format!("/home/{}/proj-{}", owner.name, std::process::id()));
    let _gone = common::machine::Gone(project.clone());
    let out = owner
        .command("mkdir", &["-p", project.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("mkdir", &out));
    let m = rootless_machine(
        "pyfw",
        serde_json::json!({
            "image": common::machine::ROOTFS,
            "keep_id": "shell",
            "requires": ["python3", "git"],
            "lend": [{"host": project, "at": project, "mode": "write"}],
        }),
    );
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let line = format!(
        "cd {} && python3 -c 'open(\"from-python.txt\", \"w\").write(\"py\")' && id -un",
        project.display()
    );
    let out = owner.warden(&["machine", "exec", id, "--shell", &line]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("exec", &out));
    use std::os::unix::fs::MetadataExt;
    let made = std::fs::metadata(project.join("from-python.txt")).unwrap();
    assert_eq!(
        made.uid(),
        owner.uid,
        "the command's file is the owner's on the host"
    );
    let out = owner.warden(&["machine", "status", id]);
    let status = text(&out.stdout);
    for line in status
        .lines()
        .filter(|l| l.starts_with("layer ") && l.contains("(required)"))
    {
        assert!(line.contains(" holds "), "{status}");
    }
    let out = owner.warden(&["machine", "rm", id, "--volumes"]);
    assert!(out.status.success(), "{}", show("rm", &out));
    assert!(
        project.join("from-python.txt").exists(),
        "the project stays"
    );
}

/// The Node runtime's case, rootless: keep-id as runtime, its agent folder
/// lent for writing at routines: what the agent writes there (its
/// self-changes) is the owner's on the host, and shell still cannot write.
#[test]
fn keep_id_runtime_makes_the_agents_own_changes_the_owners() {
    let test = "keep_id_runtime_makes_the_agents_own_changes_the_owners";
    if !ready(test) {
        return;
    }
    let owner = owner();
    let agent = PathBuf::from(format!("/home/{}/agent-{}", owner.name, std::process::id()));
    let _gone = common::machine::Gone(agent.clone());
    let out = owner
        .command("mkdir", &["-p", agent.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("mkdir", &out));
    let routines = "/home/runtime/workspace/routines";
    let m = rootless_machine(
        "keeprt",
        serde_json::json!({
            "keep_id": "runtime",
            "command": ["sleep", "infinity"],
            "lend": [{"host": agent, "at": routines, "mode": "write"}],
        }),
    );
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    // The agent (runtime) changes its own routines.
    let container = format!("warden-{id}");
    let line = format!("echo self-change > {routines}/skill.md && id -un");
    let out = owner
        .command(
            "podman",
            &["exec", "-u", "2000", &container, "sh", "-c", &line],
        )
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout).trim(),
        "runtime",
        "{}",
        show("exec as runtime", &out)
    );
    use std::os::unix::fs::MetadataExt;
    let made = std::fs::metadata(agent.join("skill.md")).unwrap();
    assert_eq!(
        made.uid(),
        owner.uid,
        "the agent's change is the owner's on the host"
    );
    // shell cannot write them, nor change what the agent wrote.
    let line = format!(
        "touch {routines}/planted; echo evil >> {routines}/skill.md; cat {routines}/skill.md"
    );
    let out = owner.warden(&["machine", "exec", id, "--shell", &line]);
    assert_eq!(
        text(&out.stdout),
        "self-change\n",
        "{}",
        show("shell", &out)
    );
    assert!(!agent.join("planted").exists());
    assert_eq!(
        std::fs::read_to_string(agent.join("skill.md")).unwrap(),
        "self-change\n"
    );
}

#[test]
fn a_rootless_machine_on_the_hosts_network_is_held_by_the_connect_gate() {
    let test = "a_rootless_machine_on_the_hosts_network_is_held_by_the_connect_gate";
    if !ready(test) {
        return;
    }
    let owner = owner();
    let m = rootless_machine("hostnet", serde_json::json!({"network": "host"}));
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));

    // nftables cannot hold on a network the machine does not own; warden's
    // connect gate stands in, so the required layer holds and commands run.
    let out = owner.warden(&["machine", "status", id]);
    let status = text(&out.stdout);
    let firewall = status
        .lines()
        .find(|l| l.starts_with("layer firewall"))
        .unwrap_or_default()
        .to_string();
    assert!(
        firewall.contains("held by warden's connect gate"),
        "{status}"
    );
    assert!(
        firewall.contains("shares a network it does not own"),
        "{status}"
    );
    assert!(!status.contains("REFUSING COMMANDS"), "{status}");
    let out = m.exec(&["id", "-un"]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("exec", &out));

    nothing_of_shells_reaches_the_hosts_loopback(&m);

    shell_listens_on_unix_sockets_only(&m);
}

/// On the host's own loopback: shell makes no UDP socket at all
/// (nothing arrives), and its TCP connect to a host port is refused by
/// the gate (nothing is accepted).
fn nothing_of_shells_reaches_the_hosts_loopback(m: &TestMachine) {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let (udp_port, tcp_port) = (
        udp.local_addr().unwrap().port(),
        tcp.local_addr().unwrap().port(),
    );
    let line = format!("echo hi > /dev/udp/127.0.0.1/{udp_port}");
    let out = m.exec(&["bash", "-c", &line]);
    assert!(!out.status.success(), "{}", show("udp", &out));
    assert!(
        text(&out.stderr).contains("Operation not permitted"),
        "{}",
        show("udp", &out)
    );
    for port in [tcp_port, 3128] {
        let line = format!(
            "echo hi > /dev/tcp/127.0.0.{}/{port}",
            if port == 3128 { 2 } else { 1 }
        );
        let out = m.exec(&["bash", "-c", &line]);
        assert!(!out.status.success(), "{}", show("tcp", &out));
        assert!(
            text(&out.stderr).contains("Permission denied"),
            "{}",
            show("tcp", &out)
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut buf = [0u8; 16];
    assert!(udp.recv(&mut buf).is_err(), "a datagram from shell arrived");
    assert!(tcp.accept().is_err(), "shell connected to a host port");
}

/// listen(2) without bind(2) would bind a port on every address of the
/// host's network, a server its processes reach: warden refuses it,
/// and a unix socket still listens.
fn shell_listens_on_unix_sockets_only(m: &TestMachine) {
    let listen =
        "import socket; s = socket.socket(); s.listen(); print('listening on', s.getsockname())";
    let out = m.exec(&["python3", "-c", listen]);
    eprintln!("listen: {}", show("listen", &out));
    assert!(!out.status.success(), "{}", show("listen", &out));
    assert!(
        text(&out.stderr).contains("[Errno 13] Permission denied"),
        "{}",
        show("listen", &out)
    );
    let unix = "import socket; s = socket.socket(socket.AF_UNIX); s.bind('/tmp/u.sock'); s.listen(); c = socket.socket(socket.AF_UNIX); c.connect('/tmp/u.sock'); print('unix listens')";
    let out = m.exec(&["python3", "-c", unix]);
    assert!(
        text(&out.stdout).contains("unix listens"),
        "{}",
        show("unix listen", &out)
    );
}
