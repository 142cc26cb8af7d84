//! warden's table applied over netlink (`nft_netlink`, the only way warden
//! applies it), in fresh network namespaces of the tests' own: the host's
//! `nft` reads it back and it must compare as the table `nft` itself
//! applies does; warden's own readback (`nft_readback`) must find every
//! change made behind it; and the rules must refuse a non-root uid standing
//! in for `shell` while root's traffic passes.

mod common;

use common::{privileged, skipped};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use warden::guest::net::firewall::{self, Scope};
use warden::guest::net::{nft_netlink, nft_readback};

const SHELL: u32 = common::SHELL_UID;
/// The scope of a machine's usual rules: shell's sockets, counted as
/// warden counts them, may reach the proxy on 3128.
const SHELLS: Scope = Scope {
    shell_uid: SHELL,
    network_uid: SHELL,
    runtime_network_uid: None,
    proxy_port: 3128,
};

/// The programs a test runs. Outside CI a missing one skips the test,
/// saying so; under CI=true it fails.
fn have(test: &str, tools: &[&str]) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !std::env::split_paths(&path)
                .chain(["/usr/sbin".into(), "/sbin".into()])
                .any(|d| d.join(t).is_file())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    let reason = format!("{test}: needs {}", missing.join(", "));
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason}, and CI=true forbids skipping");
    }
    skipped(&reason);
    false
}

/// A network namespace of the test's own, deleted when dropped.
struct Netns(String);

impl Netns {
    fn new(what: &str) -> Netns {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "wdn-nl-{what}-{:x}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run(&["ip", "netns", "add", &name]);
        let ns = Netns(name);
        run(&["ip", "-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }

    /// Runs `f` on a thread moved into the namespace: what it opens
    /// (netlink sockets, listeners) belongs to the namespace.
    fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let file = std::fs::File::open(format!("/run/netns/{}", self.0)).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// `argv` run in the namespace.
    fn exec(&self, argv: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(argv)
            .output()
            .unwrap()
    }

    /// The host's `nft` in the namespace; its stdout, or Err with stderr.
    fn nft(&self, args: &[&str]) -> Result<String, String> {
        let mut argv = vec!["nft"];
        argv.extend(args);
        let out = self.exec(&argv);
        match out.status.success() {
            true => Ok(String::from_utf8(out.stdout).unwrap()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    }

    fn listing(&self) -> Result<String, String> {
        self.nft(&["-j", "list", "table", "inet", firewall::TABLE])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn run(argv: &[&str]) {
    let out = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    assert!(out.status.success(), "{argv:?}: {out:?}");
}

#[test]
fn netlink_applies_the_table_nft_lists() {
    let test = "netlink_applies_the_table_nft_lists";
    if !privileged(test) || !have(test, &["ip", "nft"]) {
        return;
    }
    let ns = Netns::new("apply");
    let scope = SHELLS;
    // Twice: the second apply leaves exactly one copy of each rule.
    for i in 0..2 {
        assert_eq!(ns.enter(|| nft_netlink::apply(scope)), Ok(()), "apply {i}");
        let listing = ns.listing().unwrap();
        assert_eq!(
            firewall::compare(&listing, scope).map_err(|e| e.to_string()),
            Ok(()),
            "{listing}"
        );
    }
    let text = ns.nft(&["list", "table", "inet", "warden"]).unwrap();
    assert_eq!(text.matches("meta skuid 2001").count(), 4, "{text}");
    // A rule added beside warden's is flushed by the next apply.
    ns.nft(&["insert", "rule", "inet", "warden", "output", "accept"])
        .unwrap();
    assert!(firewall::compare(&ns.listing().unwrap(), scope).is_err());
    assert_eq!(ns.enter(|| nft_netlink::apply(scope)), Ok(()));
    assert_eq!(
        firewall::compare(&ns.listing().unwrap(), scope).map_err(|e| e.to_string()),
        Ok(())
    );
    // Another scope replaces the rules: the listing names its uid and port.
    let other = Scope {
        shell_uid: 1234,
        network_uid: 101_234,
        runtime_network_uid: None,
        proxy_port: 8080,
    };
    assert_eq!(ns.enter(|| nft_netlink::apply(other)), Ok(()));
    assert_eq!(
        firewall::compare(&ns.listing().unwrap(), other).map_err(|e| e.to_string()),
        Ok(())
    );
    assert!(firewall::compare(&ns.listing().unwrap(), scope).is_err());
    // Deleting: the table is gone; deleting it again names the errno.
    assert_eq!(ns.enter(nft_netlink::delete_table), Ok(()));
    assert!(ns.listing().is_err());
    let again = ns.enter(nft_netlink::delete_table).unwrap_err();
    assert!(
        again
            .to_string()
            .contains("delete table inet warden: ENOENT"),
        "{again}"
    );
}

/// warden's own readback (`nft_readback`) against tables the host's nft
/// changed behind it: each change is found and named, and the table nft
/// lists as warden's is the one the readback accepts.
#[test]
fn the_readback_finds_what_was_changed_behind_warden() {
    let test = "the_readback_finds_what_was_changed_behind_warden";
    if !privileged(test) || !have(test, &["ip", "nft"]) {
        return;
    }
    let ns = Netns::new("readback");
    let scope = Scope {
        runtime_network_uid: Some(SHELL + 1),
        ..SHELLS
    };
    let read_back = |scope| ns.enter(|| nft_readback::read_back(scope));
    let gone = read_back(scope).unwrap_err();
    assert_eq!(gone.to_string(), "table inet warden is not there");
    let cases = changes_behind_warden();
    for (change, said) in cases {
        assert_eq!(ns.enter(|| nft_netlink::apply(scope)), Ok(()));
        assert_eq!(read_back(scope), Ok(()), "before {change:?}");
        let change: Vec<String> = change
            .iter()
            .map(|a| match *a {
                "HANDLE" => third_rule_handle(&ns),
                a => a.to_string(),
            })
            .collect();
        let args: Vec<&str> = change.iter().map(String::as_str).collect();
        // `delete chain` needs the chain empty first.
        if args[..2] == ["delete", "chain"] {
            ns.nft(&["flush", "chain", "inet", "warden", "output"])
                .unwrap();
        }
        ns.nft(&args).unwrap();
        match (read_back(scope), said) {
            (Ok(()), "") => {}
            (Err(e), said) if !said.is_empty() && e.to_string().contains(said) => {}
            (got, _) => panic!("after nft {args:?}: {got:?}, wanted {said:?}"),
        }
        ns.nft(&["delete", "table", "inet", "warden"]).unwrap();
    }
    // Another scope's table is not this scope's.
    assert_eq!(ns.enter(|| nft_netlink::apply(scope)), Ok(()));
    let other = Scope {
        proxy_port: 8080,
        ..scope
    };
    let differs = read_back(other).unwrap_err();
    assert!(differs.to_string().contains("rule 1 differs"), "{differs}");
}

/// What nft does to the freshly applied table, and what the readback
/// says of it (nothing: it holds); `HANDLE` stands for the third rule's
/// handle.
fn changes_behind_warden() -> [(&'static [&'static str], &'static str); 8] {
    // (what nft does to the freshly applied table, what the readback says)
    [
        (&["list", "tables"], ""),
        (
            &["insert", "rule", "inet", "warden", "output", "accept"],
            "9 rules found, 8 applied",
        ),
        (
            &["add", "rule", "inet", "warden", "output", "counter"],
            "an expression warden did not write: counter",
        ),
        (
            &[
                "add", "table", "inet", "warden", "{", "flags", "dormant", ";", "}",
            ],
            "table inet warden is dormant",
        ),
        (
            &["add", "chain", "inet", "warden", "spare"],
            "table inet warden has 2 chains, not 1",
        ),
        (
            &["delete", "chain", "inet", "warden", "output"],
            "table inet warden has no chain",
        ),
        (
            &[
                "replace",
                "rule",
                "inet",
                "warden",
                "output",
                "handle",
                "HANDLE",
                "meta",
                "skuid",
                "2001",
                "meta",
                "l4proto",
                "tcp",
                "reject",
                "with",
                "icmpx",
                "admin-prohibited",
            ],
            "rule 3 differs from what was applied",
        ),
        (
            &[
                "add", "chain", "inet", "warden", "output", "{", "type", "filter", "hook",
                "output", "priority", "0", ";", "policy", "drop", ";", "}",
            ],
            "is not hooked as applied",
        ),
    ]
}

/// The handle of the third rule of warden's chain, as `nft -a` lists it.
fn third_rule_handle(ns: &Netns) -> String {
    let listing = ns
        .nft(&["-a", "list", "chain", "inet", "warden", "output"])
        .unwrap();
    let rules: Vec<&str> = listing
        .lines()
        .filter(|l| l.contains("# handle") && !l.trim_start().starts_with("chain"))
        .collect();
    rules[2].rsplit(' ').next().unwrap().to_string()
}

#[test]
fn netlink_names_the_message_the_kernel_refused() {
    let test = "netlink_names_the_message_the_kernel_refused";
    if !privileged(test) || !have(test, &["ip", "nft"]) {
        return;
    }
    let ns = Netns::new("refused");
    // The chain is there, hooked elsewhere: the kernel refuses to re-hook
    // it, and the whole batch with it.
    ns.nft(&[
        "add table inet warden; add chain inet warden output { type filter hook input priority 0; }",
    ])
    .unwrap();
    let scope = SHELLS;
    let e = ns.enter(|| nft_netlink::apply(scope)).unwrap_err();
    assert!(
        e.to_string().starts_with("add chain inet warden output"),
        "{e}"
    );
    let text = ns.nft(&["list", "table", "inet", "warden"]).unwrap();
    assert!(
        !text.contains("skuid"),
        "nothing of the batch stays: {text}"
    );
    // Without CAP_NET_ADMIN (a thread of uid 65534 only: the others keep
    // root) the kernel refuses the batch as a whole.
    let e = ns.enter(|| {
        // SAFETY: the raw syscall changes only this thread's credentials
        // (glibc's setresuid would change every thread's); the thread ends
        // right after.
        let r = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
        assert_eq!(r, 0, "setresuid: {}", std::io::Error::last_os_error());
        nft_netlink::apply(scope)
    });
    assert_eq!(
        e.map_err(|e| e.to_string()),
        Err("the batch: EPERM: Operation not permitted".to_string())
    );
}

/// `line` run by bash in the namespace as `uid` (root: 0), within 5 s.
fn bash_as(ns: &Netns, uid: u32, line: &str) -> (Output, Duration) {
    let uid = uid.to_string();
    let mut argv = vec!["timeout", "5"];
    if uid != "0" {
        argv.extend([
            "setpriv",
            "--reuid",
            &uid,
            "--regid",
            &uid,
            "--clear-groups",
        ]);
    }
    argv.extend(["bash", "-c", line]);
    let start = Instant::now();
    let out = ns.exec(&argv);
    (out, start.elapsed())
}

#[test]
fn netlink_rules_refuse_shell_but_not_root() {
    let test = "netlink_rules_refuse_shell_but_not_root";
    if !privileged(test) || !have(test, &["ip", "nft", "setpriv", "bash", "timeout"]) {
        return;
    }
    use std::net::{TcpListener, UdpSocket};
    let ns = Netns::new("knock");
    // The ports to knock on, opened inside the namespace: a stand-in for
    // the proxy, another TCP port, a UDP port; and IPv6 where it is there.
    let (proxy, tcp, udp, tcp6) = ns.enter(|| {
        (
            TcpListener::bind("127.0.0.1:0").unwrap(),
            TcpListener::bind("127.0.0.1:0").unwrap(),
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            TcpListener::bind("[::1]:0").ok(),
        )
    });
    let port = |l: &TcpListener| l.local_addr().unwrap().port();
    let scope = Scope {
        proxy_port: port(&proxy),
        ..SHELLS
    };
    assert_eq!(ns.enter(|| nft_netlink::apply(scope)), Ok(()));
    udp.set_nonblocking(true).unwrap();
    let arrived = || {
        let mut buf = [0u8; 64];
        let mut n = 0;
        while udp.recv(&mut buf).is_ok() {
            n += 1;
        }
        n
    };
    let connect = |host: &str, p: u16| format!("exec 3<>/dev/tcp/{host}/{p}");
    let udp_line = format!(
        "echo knock >/dev/udp/127.0.0.1/{}",
        udp.local_addr().unwrap().port()
    );
    let mut tcp_cases = vec![
        (SHELL, connect("127.0.0.1", port(&tcp)), false),
        (SHELL, connect("127.0.0.1", port(&proxy)), true),
        (0, connect("127.0.0.1", port(&tcp)), true),
    ];
    if let Some(l6) = &tcp6 {
        tcp_cases.push((SHELL, connect("::1", port(l6)), false));
        tcp_cases.push((0, connect("::1", port(l6)), true));
    }
    for (uid, line, passes) in &tcp_cases {
        let (out, took) = bash_as(&ns, *uid, line);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), *passes, "uid {uid}: {line}: {out:?}");
        if !passes {
            // Refused at once by a reset, not left to time out.
            assert!(said.contains("Connection refused"), "{line}: {said}");
            assert!(took < Duration::from_secs(3), "{line}: {took:?}");
            assert_ne!(out.status.code(), Some(124), "{line}: timed out");
            assert_eq!(out.status.signal(), None);
        }
    }
    // UDP from shell is refused at the send and never arrives; root's does.
    let (out, _) = bash_as(&ns, SHELL, &udp_line);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(arrived(), 0);
    let (out, _) = bash_as(&ns, 0, &udp_line);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(arrived(), 1);
}

/// Where warden looks for `nft` (network.rs), as the files they are.
fn nft_files() -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        if let Ok(file) = std::path::Path::new(dir).join("nft").canonicalize() {
            if file.is_file() && !files.contains(&file) {
                files.push(file);
            }
        }
    }
    files
}

/// A machine in `ns` whose image has no nft: /dev/null over it, in
/// warden's mount namespace only (the test's own nft still reads the table
/// back).
fn without_nft(ns: &Netns) -> common::Options {
    common::Options {
        netns: Some(ns.0.clone()),
        binds: nft_files()
            .into_iter()
            .map(|f| ("/dev/null".into(), f))
            .collect(),
        ..Default::default()
    }
}

#[test]
fn warden_without_nft_applies_its_firewall_over_netlink() {
    let test = "warden_without_nft_applies_its_firewall_over_netlink";
    if !privileged(test) || !have(test, &["ip", "nft", "unshare"]) {
        return;
    }
    let ns = Netns::new("boot");
    let machine = common::Machine::boot(without_nft(&ns));
    let status = machine.client().status().unwrap();
    let fw = common::layer(&status, "firewall");
    assert!(fw.holds && fw.required, "{fw:?}\n{}", machine.log());
    assert!(
        fw.detail
            .contains("applied over netlink, read back and compared"),
        "{}",
        fw.detail
    );
    let network = machine.audit_kinds("network");
    assert_eq!(network[0]["firewall"], "applied", "{network:?}");
    assert_eq!(network[0]["firewall_via"], "netlink", "{network:?}");
    // Commands run, and the table is the one nft would have applied.
    let out = machine
        .client()
        .run(warden::wire::RunRequest {
            argv: Some(vec!["true".into()]),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(out.exit.status, 0);
    let scope = SHELLS;
    assert_eq!(
        firewall::compare(&ns.listing().unwrap(), scope).map_err(|e| e.to_string()),
        Ok(())
    );
    // At shutdown warden deletes its table over netlink too.
    let dir = machine.stop();
    let log = std::fs::read_to_string(dir.path().join("warden.log")).unwrap();
    assert!(ns.listing().is_err(), "the table outlived warden:\n{log}");
    assert!(!log.contains("cannot remove"), "{log}");
}

#[test]
fn without_nft_or_cap_net_admin_the_connect_gate_stands_in() {
    let test = "without_nft_or_cap_net_admin_the_connect_gate_stands_in";
    if !privileged(test) || !have(test, &["ip", "unshare", "setpriv"]) {
        return;
    }
    let ns = Netns::new("nocap");
    let opts = common::Options {
        drop_caps: vec!["net_admin".into()],
        ..without_nft(&ns)
    };
    let machine = common::Machine::boot(opts);
    let status = machine.client().status().unwrap();
    let fw = common::layer(&status, "firewall");
    // The table cannot be sent, and says why; warden's connect gate holds
    // in its place, so the required layer holds and commands run.
    assert!(fw.holds && fw.required, "{fw:?}");
    assert!(
        fw.detail.contains(
            "cannot apply the rules: over netlink: the batch: EPERM: Operation not permitted"
        ),
        "{}",
        fw.detail
    );
    assert!(fw.detail.contains("lacks CAP_NET_ADMIN"), "{}", fw.detail);
    assert!(
        fw.detail.contains("held by warden's connect gate"),
        "{}",
        fw.detail
    );
    let out = machine
        .client()
        .run(warden::wire::RunRequest {
            argv: Some(vec!["true".into()]),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(out.exit.status, 0);
}
