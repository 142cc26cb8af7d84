//! listen(2) of a command, where nftables holds: warden takes every one
//! (a seccomp user notification), refuses it on a network socket and does
//! it itself on a unix socket; the attack program's attempts, run as shell
//! through warden's API on a real warden.

mod common;

use common::attacks::{build_attack_program, hand_to_shell};
use common::{printed, privileged, Machine, Options};
use std::path::PathBuf;
use warden::wire::client::Output;
use warden::wire::RunRequest;

/// A machine, and the attack program handed to shell.
struct Listening {
    m: Machine,
    bin: PathBuf,
    _bin_dir: tempfile::TempDir,
}

impl Listening {
    fn new() -> Listening {
        let (bin_dir, _) = build_attack_program();
        let m = Machine::boot(Options::default());
        let bin = hand_to_shell(&m, bin_dir.path());
        Listening {
            m,
            bin,
            _bin_dir: bin_dir,
        }
    }

    fn run(&self, req: RunRequest) -> Output {
        self.m.client().run(req).unwrap()
    }

    fn attack(&self, args: &[&str]) -> Output {
        let mut argv = vec![self.bin.display().to_string()];
        argv.extend(args.iter().map(|s| s.to_string()));
        self.run(RunRequest {
            argv: Some(argv),
            ..Default::default()
        })
    }
}

fn sh(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.into()),
        ..Default::default()
    }
}

/// listen(2) binds an unbound TCP socket to a port on every address, which
/// Landlock's bind rule never sees. Here, where nftables holds, warden
/// refuses it on a network socket (EACCES, as a refused bind), also when
/// another thread swaps a TCP socket under a unix socket's number, and a
/// command's unix socket still listens and serves, with shell as its peer.
#[test]
fn a_command_listens_on_unix_sockets_and_never_on_the_network() {
    if !privileged("a_command_listens_on_unix_sockets_and_never_on_the_network") {
        return;
    }
    let s = Listening::new();
    let status = s.m.client().status().unwrap();
    let fw = common::layer(&status, "firewall");
    assert!(
        fw.holds && fw.detail.contains("table inet warden"),
        "{fw:?}"
    );
    let listen = common::layer(&status, "listen");
    assert!(
        listen.holds && listen.detail.contains("goes to warden"),
        "{listen:?}"
    );
    for family in ["tcp-listen", "tcp6-listen"] {
        let o = s.attack(&[family]);
        let said = printed(&o);
        eprintln!("{family}: {}", said.trim());
        assert!(said.starts_with("blocked: "), "{family}: {said}");
        assert!(said.contains("Permission denied"), "{family}: {said}");
    }
    let o = s.attack(&["listen-race", "/tmp/warden-listen-race.sock", "2000"]);
    eprintln!("{}", printed(&o).trim());
    assert!(printed(&o).starts_with("blocked: "), "{}", printed(&o));
    let refused = s.m.audit_kinds("listen_refused");
    assert!(
        refused
            .iter()
            .any(|l| l.to_string().contains("listen on a socket")),
        "{refused:?}"
    );

    let o = s.attack(&["unix-listen", "/tmp/warden-unix-listen.sock"]);
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    assert!(printed(&o).contains("unix listen works"), "{}", printed(&o));
    // What builds and test suites run: a server of Node's (threads of its
    // own) and tmux's, each on a unix socket.
    let node = r#"const net = require("net"); const p = "/tmp/warden-node.sock"; try { require("fs").unlinkSync(p); } catch {} const srv = net.createServer(c => c.end("served")).listen(p, () => net.connect(p).on("data", d => { console.log("node: " + d); srv.close(); }));"#;
    let o = s.run(sh(&format!("node -e '{node}'")));
    assert!(printed(&o).contains("node: served"), "{}", printed(&o));
    let o = s.run(sh(
        "tmux -S /tmp/warden-tmux.sock new-session -d 'sleep 5' && tmux -S /tmp/warden-tmux.sock list-sessions && tmux -S /tmp/warden-tmux.sock kill-server",
    ));
    assert_eq!(o.exit.status, 0, "{}", printed(&o));
    assert!(printed(&o).contains("windows"), "{}", printed(&o));
}
