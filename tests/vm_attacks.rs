//! The attack suite in a VM machine with every launcher field a VM takes
//! in use: a network behind the proxy and the host's relay, `dns`,
//! `hosts`, `allow_addresses`, lent folders (read and write), `setup`,
//! `keys`, `env`, the main process and its published port, `restart`,
//! `cpus` and `memory`. Software emulation, under the AF_VSOCK guard.

mod common;

use common::attacks::*;
use common::internet::Internet;
use common::machine::TestMachine;
use common::text;
use common::vm;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn warden(args: &[&str]) -> Output {
    Command::new(common::warden_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `warden machine exec ID ARGS`.
fn exec(id: &str, args: &[&str]) -> Output {
    let mut argv = vec!["machine", "exec", id];
    argv.extend(args);
    warden(&argv)
}

fn show(what: &str, o: &Output) -> String {
    format!(
        "{what}: {:?}\n{}{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

#[test]
fn the_attack_suite_fails_in_a_vm_with_every_field_in_use() {
    let Some(_one) = vm::ready("the_attack_suite_fails_in_a_vm_with_every_field_in_use") else {
        return;
    };
    let net = Internet::start();
    let m = common::machine::TestMachine::new("vm-attack");
    let (tools, _bin_dir) = define_a_vm_with_every_field(&m, &net);
    let id = m.id.clone();
    let up = warden(&["machine", "up", m.definition().to_str().unwrap()]);
    assert!(up.status.success(), "{}", show("up", &up));
    let said = text(&up.stdout);
    assert!(said.contains("setup.sh ran"), "{said}");
    assert!(said.contains("published: 3000/tcp -> 127.0.0.1:"), "{said}");

    let main = the_vm_is_what_it_was_asked_to_be(&id);

    let targets = Targets {
        home: "/home/runtime".into(),
        main,
        audit: "/home/runtime/data/audit/warden.jsonl".into(),
        config: "/etc/warden/machine.json".into(),
        socket: "/run/warden/api.sock".into(),
        // The runtime's published server, on the guest's loopback.
        port: "3000".into(),
        abstract_name: None,
    };
    let tried = every_attack_fails_in_the_vm(&id, &targets);

    nothing_was_planted(&id, &tools);
    eprintln!("{tried} attacks tried in a VM with every field in use, all stopped");
    assert!(tried >= 40, "{tried}");

    what_the_suite_found_is_what_warden_says(&id);
}

/// `m` defined as a VM with every field a VM takes in use, on `net`: the
/// attack program (static: the guest's C library is the image's) lent
/// read-only in a folder of tools, a folder lent for writing, a setup, a
/// key, `env`, a main process that plants the canaries as the runtime and
/// serves, a published port, a restart rule and a size. The tools folder,
/// and the program's own.
fn define_a_vm_with_every_field(m: &TestMachine, net: &Internet) -> (PathBuf, tempfile::TempDir) {
    // The attack program, static (the guest's C library is the image's),
    // lent read-only; a folder lent for writing.
    let (bin_dir, bin) = build_attack_program_with(&["-static"]);
    let tools = m.dir.path().join("tools");
    let out_dir = m.dir.path().join("out");
    std::fs::create_dir(&tools).unwrap();
    std::fs::copy(&bin, tools.join("attack")).unwrap();
    std::fs::set_permissions(tools.join("attack"), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir(&out_dir).unwrap();
    nix::unistd::chown(&out_dir, Some(2001.into()), Some(2001.into())).unwrap();
    std::fs::write(
        m.dir.path().join(".env"),
        format!("API_TOKEN={ENV_CANARY}\n"),
    )
    .unwrap();
    std::fs::write(
        m.dir.path().join("setup.sh"),
        "echo set-up > \"$HOME/workspace/setup-ran\"\n",
    )
    .unwrap();
    // The main process plants the canaries as the runtime, then serves.
    let plant = format!(
        "umask 022; echo {DATA_CANARY} > $HOME/data/memory.txt && \
         printf %s {ROUTINE_CANARY} > $HOME/workspace/routines/agent.md && \
         mkdir -p $HOME/workspace/runtime-notes && echo notes > $HOME/workspace/runtime-notes/n.txt && \
         exec python3 -m http.server 3000 --bind 127.0.0.1 --directory $HOME/workspace/runtime-notes"
    );
    m.define(serde_json::json!({
        "image": "localhost/warden-machine:latest", "kind": "vm",
        "network": format!("/run/netns/{}", net.machine_ns),
        "dns": [net.v4.to_string()],
        "hosts": ["allowed.test"],
        "allow_addresses": [format!("{}/32", net.v4)],
        "lend": [
            {"host": tools, "at": "/lent/tools", "mode": "read"},
            {"host": out_dir, "at": "/home/me/out", "mode": "write"},
        ],
        "setup": "setup.sh",
        "keys": ["API_TOKEN"],
        "env": {"GREETING": "hello"},
        "command": ["sh", "-c", plant],
        "ports": [{"port": 3000, "host": "auto", "from": 18500}],
        "restart": "on-failure",
        "cpus": 2, "memory": "1024m",
    }));
    (tools, bin_dir)
}

/// The machine is what it was asked to be, before it is attacked; its
/// attack program copied where shell may run it. The runtime's main
/// process.
fn the_vm_is_what_it_was_asked_to_be(id: &str) -> String {
    let o = exec(
        id,
        &[
            "--shell",
            "nproc; curl -sS --max-time 30 http://allowed.test/vm-attack",
        ],
    );
    assert_eq!(
        text(&o.stdout),
        "2\nhello allowed.test /vm-attack",
        "{}",
        show("ready", &o)
    );
    let status_out = warden(&["machine", "status", id, "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status_out.stdout).unwrap();
    let main = status["main"]["pid"]
        .as_i64()
        .expect("a main process")
        .to_string();
    let o = exec(id, &["--folder", "attacks", "--", "true"]);
    assert!(o.status.success(), "{}", show("folder", &o));
    // A lent folder is read, not run: shell copies the program into its
    // own /tmp, where it may run what it made.
    let o = exec(id, &[
        "--shell",
        "mkdir -p /tmp/warden-attack && cp /lent/tools/attack /tmp/warden-attack/ && chmod 755 /tmp/warden-attack/attack",
    ]);
    assert!(o.status.success(), "{}", show("copy", &o));
    main
}

/// Every attack, as shell lines and as the program, fails in the VM and
/// shows no secret; how many were tried.
fn every_attack_fails_in_the_vm(id: &str, targets: &Targets) -> usize {
    let mut tried = 0;
    for (name, line) in shell_lines(targets) {
        let o = exec(id, &["--folder", "attacks", "--shell", &line]);
        // 125 is warden's own refusal or a failed way in: proves nothing.
        let code = o.status.code();
        assert!(
            code.is_some_and(|c| c != 0 && c != 125),
            "{name} succeeded, or never ran: {}",
            show(name, &o)
        );
        assert_no_secret(name, &o);
        tried += 1;
    }
    for (name, args) in programs(targets) {
        let mut argv = vec!["--folder", "attacks", "--", "/tmp/warden-attack/attack"];
        argv.extend(args.iter().map(String::as_str));
        let o = exec(id, &argv);
        assert_blocked(name, &o);
        tried += 1;
    }
    tried
}

/// Nothing those attempts tried changed anything.
fn nothing_was_planted(id: &str, tools: &Path) {
    for (path, there) in [
        ("/home/runtime/workspace/routines/planted", false),
        ("/var/tmp/planted-by-shell", false),
        ("/etc/planted", false),
        ("/lent/tools/planted", false),
    ] {
        let o = exec(id, &["--", "test", "-e", path]);
        assert_eq!(o.status.success(), there, "{path}");
    }
    let o = exec(id, &["--shell", "touch /lent/tools/planted"]);
    assert!(
        text(&o.stderr).contains("Read-only file system"),
        "{}",
        show("lent", &o)
    );
    assert!(!tools.join("planted").exists());
}

/// What the suite found is what warden says.
fn what_the_suite_found_is_what_warden_says(id: &str) {
    let status_out = warden(&["machine", "status", id, "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status_out.stdout).unwrap();
    for l in status["layers"].as_array().unwrap() {
        if l["required"] == true {
            assert_eq!(l["holds"], true, "{l}");
        }
    }
    let audit = warden(&["machine", "audit", id]);
    assert!(
        text(&audit.stdout).contains("chain intact"),
        "{}",
        show("audit", &audit)
    );
    assert!(!text(&audit.stdout).contains(ENV_CANARY));
}
