//! The tests' own internet works on its own, before any test leans on it to
//! prove what warden lets through: seen from the machine namespace as root,
//! without warden, its DNS answers from its table, HTTP, HTTPS and a git
//! clone work, /echo shows the headers that arrived (chunked or gzipped on
//! demand), /redirect redirects, a smart-HTTP git repository takes a clone
//! and a push, its bare ports answer, and it leaves nothing behind. Also:
//! the Machine harness puts warden in the network namespace it is given (or
//! a fresh one), with the binds and the bounding set it is given.

mod common;

use common::internet::{python, script, Internet, INTERNET_NAMES, REPO_FILE, SMART_REPO};
use common::{printed, privileged, Machine, Options};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn dns_answers_from_its_table_and_logs_each_query() {
    if !privileged("dns_answers_from_its_table_and_logs_each_query") {
        return;
    }
    let net = Internet::start();
    let (v4, v6) = (net.v4.to_string(), net.v6.to_string());
    for name in INTERNET_NAMES {
        assert_eq!(
            net.dns_query(name, "A"),
            format!("NOERROR\nA {v4}\n"),
            "{name}"
        );
        assert_eq!(
            net.dns_query(name, "AAAA"),
            format!("NOERROR\nAAAA {v6}\n"),
            "{name}"
        );
    }
    let expected = [
        ("rebind.test", "A", "NOERROR\nA 127.0.0.1\n".to_string()),
        ("rebind.test", "AAAA", "NOERROR\n".into()),
        ("private.test", "A", "NOERROR\nA 192.168.77.7\n".into()),
        ("mixed.test", "A", format!("NOERROR\nA 127.0.0.1\nA {v4}\n")),
        ("v6only.test", "A", "NOERROR\n".into()),
        ("v6only.test", "AAAA", format!("NOERROR\nAAAA {v6}\n")),
        ("ALLOWED.test", "A", format!("NOERROR\nA {v4}\n")),
        ("nothing.test", "A", "NXDOMAIN\n".into()),
        ("sub.denied.test", "A", "NXDOMAIN\n".into()),
    ];
    for (name, qtype, want) in &expected {
        assert_eq!(&net.dns_query(name, qtype), want, "{name} {qtype}");
    }
    // Over TCP too, and on the v6 address.
    let out = net
        .in_machine(python())
        .arg(script("dns_query.py"))
        .args([&v6, "allowed.test", "A", "--tcp"])
        .output()
        .unwrap();
    assert_eq!(printed(&out), format!("NOERROR\nA {v4}\n"));
    let log = net.dns_queries();
    let from = format!("from {}", net.machine_v4);
    assert!(
        log.contains(&format!("nothing.test A NXDOMAIN 0 {from}")),
        "{log}"
    );
    assert!(
        log.contains(&format!("mixed.test A NOERROR 2 {from}")),
        "{log}"
    );
    assert!(log.contains(&format!("from {}", net.machine_v6)), "{log}");
    // One line a query: the probes of `start` are not among them.
    let queries = 2 * INTERNET_NAMES.len() + expected.len() + 1;
    assert_eq!(log.lines().count(), queries, "{log}");
}

#[test]
fn http_and_https_answer_with_host_and_path() {
    if !privileged("http_and_https_answer_with_host_and_path") {
        return;
    }
    let net = Internet::start();
    assert_eq!(
        net.curl("http", "denied.test", "/a?b=c"),
        "hello denied.test /a?b=c"
    );
    assert_eq!(
        net.curl("https", "www.allowed.test", "/x"),
        "hello www.allowed.test /x"
    );
    for host in ["rebind.test", "private.test", "mixed.test", "v6only.test"] {
        assert_eq!(net.curl("https", host, "/"), format!("hello {host} /"));
    }
    assert_eq!(
        net.curl("https", "allowed.test", "/bytes/100000").len(),
        100_000
    );
    // The certificate is checked for real: a name not on it fails, and so
    // does the system's trust store, which lacks the test CA.
    let out = net.curl("https", "other.test", "/");
    assert!(out.contains("SSL"), "{out}");
    let out = net
        .in_machine("curl")
        .args(["-sS", "--max-time", "5", "--resolve"])
        .arg(format!("allowed.test:443:{}", net.v4))
        .arg("https://allowed.test/")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", printed(&out));
    // The server writes its side of a failed handshake once it sees it
    // fail, which may be just after curl gave up: waited for, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !net.http_requests().contains("TLS-FAILED") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = net.http_requests();
    let from = format!("from {}", net.machine_v4);
    assert!(
        log.contains(&format!("http GET denied.test /a?b=c {from}")),
        "{log}"
    );
    assert!(
        log.contains(&format!("https GET www.allowed.test /x {from}")),
        "{log}"
    );
    assert!(log.contains("TLS-FAILED"), "{log}");
}

#[test]
fn the_resolv_conf_and_hosts_files_send_lookups_to_the_internet() {
    if !privileged("the_resolv_conf_and_hosts_files_send_lookups_to_the_internet") {
        return;
    }
    let net = Internet::start();
    let ca = net.ca.display().to_string();
    let out = net
        .in_machine_sh(&format!(
            "curl -sS --max-time 5 --cacert {ca} https://www.allowed.test/p && \
             curl -sS --max-time 5 -6 http://allowed.test/six"
        ))
        .output()
        .unwrap();
    assert_eq!(
        printed(&out),
        "hello www.allowed.test /phello allowed.test /six"
    );
    assert!(net.dns_queries().contains("www.allowed.test A NOERROR"));
    let log = net.http_requests();
    assert!(log.contains(&format!("from {}", net.machine_v6)), "{log}");
    assert_eq!(
        std::fs::read_to_string(net.hosts()).unwrap(),
        "127.0.0.1 localhost\n::1 localhost\n"
    );
}

#[test]
fn git_clones_the_repository_over_https() {
    if !privileged("git_clones_the_repository_over_https") {
        return;
    }
    let net = Internet::start();
    let dest = tempfile::tempdir().unwrap();
    let clone = dest.path().join("repo");
    let out = net
        .in_machine_sh(&format!(
            "timeout 30 git clone -q https://git.allowed.test/repo.git {}",
            clone.display()
        ))
        .env("GIT_SSL_CAINFO", &net.ca)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", printed(&out));
    let file = std::fs::read_to_string(clone.join(REPO_FILE.0)).unwrap();
    assert_eq!(file, REPO_FILE.1);
    let log = net.http_requests();
    assert!(
        log.contains("https GET git.allowed.test /repo.git/info/refs"),
        "{log}"
    );
}

/// curl from the machine namespace to `https://<host><path>` (allowed.test
/// and www.allowed.test pinned, the test CA trusted), with `args` before
/// the URL: what it printed, head first when `args` ask for it.
fn curl_https(net: &Internet, args: &[&str], host: &str, path: &str) -> Vec<u8> {
    let mut cmd = net.in_machine("curl");
    cmd.args(["-sS", "--max-time", "5", "--noproxy", "*", "--cacert"])
        .arg(&net.ca);
    for name in ["allowed.test", "www.allowed.test"] {
        cmd.arg("--resolve").arg(format!("{name}:443:{}", net.v4));
    }
    let out = cmd
        .args(args)
        .arg(format!("https://{host}{path}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", printed(&out));
    out.stdout
}

#[test]
fn echo_shows_the_headers_received_in_its_body_its_head_and_its_log() {
    if !privileged("echo_shows_the_headers_received_in_its_body_its_head_and_its_log") {
        return;
    }
    let net = Internet::start();
    let args = [
        "-D",
        "-",
        "-H",
        "X-Probe: one  two",
        "-H",
        "Authorization: Bearer s3cr/t+",
    ];
    let out = curl_https(&net, &args, "allowed.test", "/echo/a?b64=1&url=1");
    let out = String::from_utf8(out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("\r\nX-Echo-X-Probe: one  two\r\n"), "{head}");
    assert!(head.contains("\r\nX-Echo-Host: allowed.test\r\n"), "{head}");
    assert!(body.starts_with("Host: allowed.test\n"), "{body}");
    assert!(body.contains("\nX-Probe: one  two\n"), "{body}");
    assert!(
        body.ends_with("\nb64=czNjci90Kw==\nurl=s3cr%2Ft%2B\n"),
        "{body}"
    );
    let log = net.headers_log();
    let (line, json) = log.split_at(log.find('{').unwrap());
    assert_eq!(line, "https GET /echo/a?b64=1&url=1 ", "{log}");
    let headers: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(headers["X-Probe"], "one  two", "{log}");
    assert_eq!(headers["Authorization"], "Bearer s3cr/t+", "{log}");
    assert!(net
        .http_requests()
        .contains("https GET allowed.test /echo/a?b64=1&url=1"));
}

#[test]
fn echo_answers_chunked_or_gzipped_when_asked() {
    if !privileged("echo_answers_chunked_or_gzipped_when_asked") {
        return;
    }
    let net = Internet::start();
    let raw = curl_https(
        &net,
        &["--raw", "-D", "-"],
        "allowed.test",
        "/echo?chunked=1",
    );
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("\r\nTransfer-Encoding: chunked"), "{head}");
    // Chunks of 5 bytes: "Host: allowed.test\n" is cut after "Host:".
    assert!(body.starts_with("5\r\nHost:\r\n5\r\n allo\r\n"), "{body}");
    assert!(body.ends_with("\r\n0\r\n\r\n"), "{body}");
    // Gzipped though curl asked for no encoding.
    let out = curl_https(&net, &["-D", "-"], "allowed.test", "/echo?gzip=1");
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&out[..at]);
    assert!(head.contains("\r\nContent-Encoding: gzip\r\n"), "{head}");
    assert_eq!(&out[at + 4..at + 6], [0x1f, 0x8b], "{head}");
    let plain = curl_https(&net, &["--compressed"], "allowed.test", "/echo?gzip=1");
    let plain = String::from_utf8(plain).unwrap();
    assert!(plain.starts_with("Host: allowed.test\n"), "{plain}");
}

#[test]
fn redirect_answers_302_with_the_location_asked_for() {
    if !privileged("redirect_answers_302_with_the_location_asked_for") {
        return;
    }
    let net = Internet::start();
    let to = "/redirect?to=https%3A%2F%2Fwww.allowed.test%2Fthere";
    let head = curl_https(&net, &["-D", "-", "-o", "/dev/null"], "allowed.test", to);
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 302 "), "{head}");
    assert!(
        head.contains("\r\nLocation: https://www.allowed.test/there\r\n"),
        "{head}"
    );
    let followed = curl_https(&net, &["-L"], "allowed.test", to);
    assert_eq!(followed, b"hello www.allowed.test /there");
}

#[test]
fn git_clones_and_pushes_over_smart_https() {
    if !privileged("git_clones_and_pushes_over_smart_https") {
        return;
    }
    let net = Internet::start();
    let home = tempfile::tempdir().unwrap();
    // A push bigger than http.postBuffer goes chunked: serve.py decodes it.
    let script = format!(
        "cd {home} && g='timeout 30 git -c http.sslCAInfo={ca} -c user.name=t -c user.email=t@t' && \
         $g clone -q https://git.allowed.test{SMART_REPO} c && cd c && cat {file} && \
         head -c 200000 /dev/urandom > big && $g add big && $g commit -q -m pushed && \
         GIT_TRACE_CURL=1 GIT_TRACE_CURL_NO_DATA=1 $g -c http.postBuffer=65536 push -q origin main",
        home = home.path().display(),
        ca = net.ca.display(),
        file = REPO_FILE.0,
    );
    // The host's GIT_SSL_CAINFO would override http.sslCAInfo.
    let out = net
        .in_machine_sh(&script)
        .env_remove("GIT_SSL_CAINFO")
        .env("HOME", home.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    let text = printed(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with(REPO_FILE.1), "{text}");
    assert!(text.contains("Transfer-Encoding: chunked"), "{text}");
    let pushed = std::process::Command::new("git")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .arg("--git-dir")
        .arg(net.smart_repository())
        .args(["log", "--format=%s", "main"])
        .output()
        .unwrap();
    assert_eq!(printed(&pushed), "pushed\nfirst commit\n");
    let log = net.http_requests();
    let post = format!("https POST git.allowed.test {SMART_REPO}/git-receive-pack");
    assert!(log.contains(&post), "{log}");
}

#[test]
fn the_bare_ports_answer_a_direct_connection() {
    if !privileged("the_bare_ports_answer_a_direct_connection") {
        return;
    }
    let net = Internet::start();
    // What a test will prove does NOT get through once warden is there.
    let probe = format!(
        "import socket\n\
         for port in (22, 8080):\n    \
             s = socket.create_connection(('{v4}', port), timeout=5)\n    \
             print(s.recv(100).decode().strip())\n\
         u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n\
         u.settimeout(5)\n\
         u.sendto(b'ping', ('{v6}', 9999))\n\
         print(u.recv(100).decode())\n",
        v4 = net.v4,
        v6 = net.v6
    );
    let out = net
        .in_machine(python())
        .args(["-c", &probe])
        .output()
        .unwrap();
    assert_eq!(
        printed(&out),
        "SSH-2.0-internet.test\nhello from 8080\nping\n"
    );
    let log = net.connections();
    let m4 = net.machine_v4;
    assert!(log.contains(&format!("tcp 22 from {m4}")), "{log}");
    assert!(log.contains(&format!("tcp 8080 from {m4}")), "{log}");
    assert!(
        log.contains(&format!("udp 9999 from {}", net.machine_v6)),
        "{log}"
    );
}

#[test]
fn two_internets_coexist_and_dropping_one_deletes_its_namespaces() {
    if !privileged("two_internets_coexist_and_dropping_one_deletes_its_namespaces") {
        return;
    }
    let (a, b) = (Internet::start(), Internet::start());
    assert_ne!(a.machine_ns, b.machine_ns);
    assert!(a.machine_ns.len() <= 15 && a.internet_ns.len() <= 15);
    let names = [a.machine_ns.clone(), a.internet_ns.clone()];
    let dir = a.dir.path().to_path_buf();
    drop(a);
    for ns in &names {
        assert!(!Path::new("/run/netns").join(ns).exists(), "{ns} remains");
    }
    assert!(!dir.exists());
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let list = printed(&list);
    assert!(
        !list.contains(&names[0]) && !list.contains(&names[1]),
        "{list}"
    );
    assert!(list.contains(&b.machine_ns), "{list}");
    assert_eq!(b.curl("http", "allowed.test", "/"), "hello allowed.test /");
}

/// The inode of a network namespace, to compare two.
fn netns_inode(path: &str) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

#[test]
fn a_machine_runs_in_the_given_network_namespace_with_its_binds() {
    if !privileged("a_machine_runs_in_the_given_network_namespace_with_its_binds") {
        return;
    }
    let net = Internet::start();
    let m = Machine::boot(Options {
        netns: Some(net.machine_ns.clone()),
        binds: vec![
            (net.resolv_conf(), "/etc/resolv.conf".into()),
            (net.hosts(), "/etc/hosts".into()),
        ],
        drop_caps: vec!["net_admin".into(), "sys_module".into()],
        ..Default::default()
    });
    let pid = m.warden_pid();
    assert_eq!(
        netns_inode(&format!("/proc/{pid}/ns/net")),
        netns_inode(&format!("/run/netns/{}", net.machine_ns))
    );
    let resolv = std::fs::read_to_string(format!("/proc/{pid}/root/etc/resolv.conf")).unwrap();
    assert_eq!(resolv, format!("nameserver {}\n", net.v4));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    const NET_ADMIN: u64 = 1 << 12;
    const SYS_MODULE: u64 = 1 << 16;
    const SYS_ADMIN: u64 = 1 << 21;
    assert_eq!(bounding & (NET_ADMIN | SYS_MODULE), 0, "{bounding:x}");
    assert_ne!(bounding & SYS_ADMIN, 0, "{bounding:x}");
    // The API answers a moment before the line is written.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !m.log().contains("warden: ready") {
        assert!(Instant::now() < deadline, "{}", m.log());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_machine_has_a_fresh_network_namespace_by_default() {
    if !privileged("a_machine_has_a_fresh_network_namespace_by_default") {
        return;
    }
    let m = Machine::boot(Options::default());
    let pid = m.warden_pid();
    assert_ne!(
        netns_inode(&format!("/proc/{pid}/ns/net")),
        netns_inode("/proc/self/ns/net")
    );
    let nomap = Options {
        pid_namespace: false,
        ..Default::default()
    };
    // Abstract unix sockets belong to a network namespace too: one made in
    // the machine's is reached from there only (see `Machine::in_netns`).
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
    let name = format!("warden-smoke-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = m.in_netns(|| UnixListener::bind_addr(&addr).unwrap());
    assert!(UnixStream::connect_addr(&addr).is_err());
    assert!(m.in_netns(|| UnixStream::connect_addr(&addr)).is_ok());
    let m2 = Machine::boot(nomap);
    let pid2 = m2.warden_pid();
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid2}/exe"))
            .unwrap()
            .file_name()
            .unwrap(),
        "warden"
    );
    assert_ne!(
        netns_inode(&format!("/proc/{pid2}/ns/net")),
        netns_inode(&format!("/proc/{pid}/ns/net"))
    );
}
