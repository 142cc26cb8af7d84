//! warden's connect gate, where nftables cannot hold (no CAP_NET_ADMIN): it
//! stands in for the firewall, acts on what it read (time of check against
//! time of use), lets no command listen on the network, and ends nothing
//! when shell aims signals at it.

use super::{boot_gated, firewall};
use crate::common::net::{boot, policy};
use crate::common::{self, privileged};
use serde_json::{json, Value};
use std::path::PathBuf;

/// Time of check against time of use: a second thread rewrites the address
/// (proxy or unix path, then the target), or also swaps the descriptor,
/// while the first connects, 2000 times each; nothing reaches the target.
#[test]
fn the_connect_gate_acts_on_what_it_read() {
    if !privileged("the_connect_gate_acts_on_what_it_read") {
        return;
    }
    let net = boot_gated();
    let (bin_dir, _) = common::attacks::build_attack_program();
    let bin = common::attacks::hand_to_shell(&net.machine, bin_dir.path());
    let v4 = net.internet.v4;
    for how in ["proxy", "unix", "fd"] {
        let line = format!("{} connect-race {how} {v4} 8080 3128", bin.display());
        let (status, text) = net.text(&line);
        assert_eq!(status, 0, "{how}: {text}");
        assert!(text.contains("blocked: connect race"), "{how}: {text}");
        if how == "proxy" {
            // Both sides of the race were seen: the gate connected some
            // to the proxy and refused others.
            assert!(!text.contains(" 0 to the proxy"), "{text}");
            assert!(!text.contains(" 0 refused"), "{text}");
        }
    }
    let seen = net.internet.connections();
    assert!(!seen.contains("tcp 8080"), "the target saw: {seen}");
    // Refusals by the thousand: a burst written whole (20 per 10 s for
    // each of the three commands), the rest counted into `suppressed`
    // lines.
    let whole = net.machine.audit_kinds("connect_refused").len();
    assert!(
        whole <= 3 * 40,
        "{whole} connect_refused lines written whole"
    );
}

/// Under the connect gate (no nftables: a rootless machine on the host's
/// network stands so) a command's listen on a network socket is refused by
/// warden too, also when another thread swaps a TCP socket under a unix
/// socket's number; a unix socket still listens, with shell as its peer.
#[test]
fn no_command_listens_on_the_network_through_the_connect_gate() {
    if !privileged("no_command_listens_on_the_network_through_the_connect_gate") {
        return;
    }
    let net = boot_gated();
    let status = net.machine.client().status().unwrap();
    let listen = common::layer(&status, "listen");
    assert!(
        listen.holds && listen.detail.contains("connect gate"),
        "{listen:?}"
    );
    let (bin_dir, _) = common::attacks::build_attack_program();
    let bin = common::attacks::hand_to_shell(&net.machine, bin_dir.path());
    for attempt in [
        "tcp-listen",
        "tcp6-listen",
        "listen-race /tmp/listen-race.sock 2000",
    ] {
        let (status, text) = net.text(&format!("{} {attempt}", bin.display()));
        eprintln!("{attempt}: {}", text.trim());
        assert_eq!(status, 0, "{attempt}: {text}");
        assert!(text.starts_with("blocked: "), "{attempt}: {text}");
    }
    let (_, text) = net.text(&format!("{} tcp-listen", bin.display()));
    assert!(text.contains("Permission denied"), "{text}");
    let (status, text) = net.text(&format!("{} unix-listen /tmp/unix.sock", bin.display()));
    assert_eq!(status, 0, "{text}");
    assert!(text.contains("unix listen works"), "{text}");
    // The gate, having listened as shell, connects to the proxy as before.
    let (status, text) = net.text(&format!(
        "curl -sS --max-time 20 --cacert {} https://allowed.test/after",
        net.ca().display()
    ));
    assert_eq!((status, text.trim()), (0, "hello allowed.test /after"));
}

#[test]
fn without_cap_net_admin_the_connect_gate_stands_in() {
    if !privileged("without_cap_net_admin_the_connect_gate_stands_in") {
        return;
    }
    // required (the default): the gate satisfies it, commands run.
    let net = boot_gated();
    let fw = firewall(&net.machine.client().status().unwrap());
    assert!(fw.required, "{fw:?}");
    // Why nftables could not, and what the gate has done.
    assert!(
        fw.detail.contains("cannot apply the rules"),
        "{}",
        fw.detail
    );
    assert!(
        fw.detail.contains("sockets connected to the proxy"),
        "{}",
        fw.detail
    );
    assert!(
        fw.detail.contains("could make no UDP socket"),
        "{}",
        fw.detail
    );
    assert!(
        net.machine
            .log()
            .contains("warden's connect gate stands in"),
        "{}",
        net.machine.log()
    );
    let boot_line = &net.machine.audit_kinds("boot")[0];
    let layers = boot_line["layers"].as_array().unwrap();
    assert!(layers
        .iter()
        .any(|l| l["layer"] == "firewall" && l["holds"] == true));
    assert_eq!(net.text("echo ran").1.trim(), "ran");
    // Landlock's own refusal, under the gate: proven by the probe.
    let status = net.machine.client().status().unwrap();
    let landlock = common::layer(&status, "landlock");
    assert!(landlock.holds, "{landlock:?}");
    // A unix socket is still connected as made (the gate lets it through).
    let (code, text) = net.text(
        "python3 -c 'import socket,os; s=socket.socket(socket.AF_UNIX); s.bind(\"/tmp/u.sock\"); s.listen(); c=socket.socket(socket.AF_UNIX); c.connect(\"/tmp/u.sock\"); print(\"unix ok\")'",
    );
    assert_eq!((code, text.trim()), (0, "unix ok"), "{text}");
}

/// Connects in a loop on one thread, and on another aims every signal
/// at every thread of PID 1 (tgkill), for 3 s; prints how many the kernel
/// took and how many connects were made.
const SIGNAL_STORM: &str = r#"
import ctypes, signal, socket, threading, time
libc = ctypes.CDLL(None, use_errno=True)
TGKILL = 234
stop = time.time() + 3
made = 0
def connects():
    global made
    while time.time() < stop:
        s = socket.socket()
        s.connect(("127.0.0.1", 3128))
        s.close()
        made += 1
t = threading.Thread(target=connects)
t.start()
sigs = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
        signal.SIGPIPE, signal.SIGALRM, signal.SIGCHLD, signal.SIGKILL, signal.SIGSTOP]
taken = 0
while time.time() < stop:
    for tid in range(1, 64):
        for sig in sigs:
            if libc.syscall(TGKILL, 1, tid, sig) == 0:
                taken += 1
t.join()
print("taken", taken, "made", made)
"#;

/// On every connect the gate's thread takes shell's real ids for a few
/// syscalls, and while it does shell may signal it. A command that
/// connects in a loop while it aims every signal at every thread of PID 1
/// ends nothing, stops nothing, and the gate goes on serving.
#[test]
fn signals_aimed_at_the_gate_end_nothing() {
    if !privileged("signals_aimed_at_the_gate_end_nothing") {
        return;
    }
    // Landlock's signal scope (Linux 6.12) would refuse shell every signal
    // to warden: off, so that what is tested is the gate's own guard.
    let net = boot(policy, |o| {
        o.drop_caps = vec!["net_admin".into()];
        let dir = PathBuf::from(o.config["policy_dir"].as_str().unwrap());
        let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/policy/landlock.json");
        let mut landlock: Value =
            serde_json::from_str(&std::fs::read_to_string(shipped).unwrap()).unwrap();
        landlock["scopes"] = json!(false);
        std::fs::write(dir.join("landlock.json"), landlock.to_string()).unwrap();
    });
    assert!(firewall(&net.machine.client().status().unwrap()).holds);
    let (code, text) = net.text(&format!("python3 -c '{SIGNAL_STORM}'"));
    assert_eq!(code, 0, "{text}");
    let counts: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [taken, made] = counts[..] else {
        panic!("{text}")
    };
    println!("signals the kernel took: {taken}, connects made meanwhile: {made}");
    // The storm reached the gate's thread while it acted as shell (else
    // the kernel would have refused every one), and connects went on.
    assert!(taken > 0 && made > 0, "{text}");
    // warden is whole: it serves, its gate connects, it did not stop.
    let (code, text) = net.text(&format!(
        "curl -sS --max-time 20 --cacert {} https://allowed.test/after",
        net.ca.display()
    ));
    assert_eq!(
        (code, text.trim()),
        (0, "hello allowed.test /after"),
        "{text}"
    );
    let status = net.machine.client().status().unwrap();
    assert!(firewall(&status).holds);
    assert!(
        !net.machine.log().contains("shutting down"),
        "{}",
        net.machine.log()
    );
}
