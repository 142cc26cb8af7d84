//! The tests' own small internet. Tests may send traffic only to loopback or
//! to namespaces they made themselves, so a test that needs "the internet"
//! builds one: two network namespaces joined by a veth pair, the "internet"
//! (DNS, HTTP, HTTPS with a test CA, git repositories over dumb and smart
//! HTTP, a header echo, a redirect, a few bare TCP/UDP ports:
//! tests/internet/serve.py) and the "machine" (empty but for its
//! address and default routes, to run warden in with `Options::netns`).
//! Root only: callers check `common::privileged` first.

use serde_json::json;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Names that resolve to the internet's own addresses (v4 and v6).
pub const INTERNET_NAMES: [&str; 6] = [
    "allowed.test",
    "www.allowed.test",
    "denied.test",
    "git.allowed.test",
    "anthropic.allowed.test",
    "openai.allowed.test",
];
/// Names on the server's certificate.
const CERT_NAMES: [&str; 7] = [
    "allowed.test",
    "*.allowed.test",
    "denied.test",
    "rebind.test",
    "private.test",
    "mixed.test",
    "v6only.test",
];
/// The one file in the commit of `/repo.git`, and its content.
pub const REPO_FILE: (&str, &str) = ("README.md", "hello from repo.git\n");
/// A bare repository served over smart HTTP (git http-backend), which a
/// clone and a push may use; its one commit holds `REPO_FILE` too.
pub const SMART_REPO: &str = "/smart/project.git";
/// How long `start` may take before it gives up.
const READY_LIMIT: Duration = Duration::from_secs(20);
/// Environment that would send curl or git through some proxy of the host.
const PROXY_VARS: [&str; 8] = [
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
];

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct Internet {
    pub machine_ns: String,
    pub internet_ns: String,
    /// The internet side's addresses: every service listens on both.
    pub v4: Ipv4Addr,
    pub v6: Ipv6Addr,
    /// The machine side's addresses (the source of its requests in the logs).
    pub machine_v4: Ipv4Addr,
    pub machine_v6: Ipv6Addr,
    /// The test CA's certificate (PEM), readable by every user.
    pub ca: PathBuf,
    pub dir: TempDir,
    server: Option<Child>,
}

/// A file of tests/internet/.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/internet")
        .join(name)
}

pub fn python() -> &'static str {
    // Debian's, when there: a version manager's shim on root's PATH adds
    // latency and depends on root's environment.
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Runs a command to completion; panics with its output if it fails.
fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

fn git(args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    // The host's own git configuration must not change what is made.
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(args);
    cmd
}

/// Namespaces left by a test process that died without dropping its
/// Internet (SIGKILL, abort): deleted, so they do not pile up.
fn delete_stale_namespaces() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for name in entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
    {
        let parts: Vec<&str> = name.split('-').collect();
        let ours = parts.len() == 4 && parts[0] == "wdn" && matches!(parts[1], "i" | "m");
        let Some(pid) = ours
            .then(|| u32::from_str_radix(parts[2], 16).ok())
            .flatten()
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip")
                .args(["netns", "del", &name])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Internet {
    /// Builds the namespaces, starts the servers and waits until DNS, HTTP
    /// and HTTPS answer from the machine namespace.
    pub fn start() -> Internet {
        delete_stale_namespaces();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Names are hex so they stay within 15 characters, like interface
        // names; the pid in them lets a later process find stale ones.
        let id = format!("{:x}-{n:x}", std::process::id());
        // Each pair of namespaces is isolated, so the subnets need not be
        // unique; distinct ones keep logs of several instances apart.
        let net = (n % 254 + 1) as u8;
        let dir = tempfile::Builder::new()
            .prefix("warden-internet-")
            .tempdir_in("/var/tmp")
            .unwrap();
        // shell (uid 2001) must reach the CA certificate, resolv.conf, hosts.
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
        let mut internet = Internet {
            machine_ns: format!("wdn-m-{id}"),
            internet_ns: format!("wdn-i-{id}"),
            v4: Ipv4Addr::new(10, 200, net, 1),
            v6: Ipv6Addr::new(0xfd20, 0, 0, net.into(), 0, 0, 0, 1),
            machine_v4: Ipv4Addr::new(10, 200, net, 2),
            machine_v6: Ipv6Addr::new(0xfd20, 0, 0, net.into(), 0, 0, 0, 2),
            ca: dir.path().join("ca.pem"),
            dir,
            server: None,
        };
        // From here on a panic drops `internet`, which cleans up.
        internet.make_network();
        internet.make_files();
        internet.make_certificates();
        internet.make_repository();
        internet.start_server();
        internet.wait_ready();
        internet
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn make_network(&self) {
        let (i, m) = (self.internet_ns.as_str(), self.machine_ns.as_str());
        ip(&["netns", "add", i]);
        ip(&["netns", "add", m]);
        // Created straight into the namespaces: "eth0" in each, no name on
        // the host to collide with another test's.
        ip(&[
            "-n", i, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", m,
        ]);
        for (ns, v4, v6) in [(i, self.v4, self.v6), (m, self.machine_v4, self.machine_v6)] {
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", "eth0"]);
            // nodad: usable at once, not after duplicate address detection.
            let v6 = format!("{v6}/64");
            ip(&["-n", ns, "addr", "add", &v6, "dev", "eth0", "nodad"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
        }
        let (v4, v6) = (self.v4.to_string(), self.v6.to_string());
        ip(&["-n", m, "route", "add", "default", "via", &v4]);
        ip(&["-n", m, "-6", "route", "add", "default", "via", &v6]);
    }

    fn make_files(&self) {
        let write = |name: &str, text: String| std::fs::write(self.path(name), text).unwrap();
        write("resolv.conf", format!("nameserver {}\n", self.v4));
        write("hosts", "127.0.0.1 localhost\n::1 localhost\n".into());
        let (v4, v6) = (self.v4.to_string(), self.v6.to_string());
        let mut zone = serde_json::Map::new();
        for name in INTERNET_NAMES {
            zone.insert(name.into(), json!({"A": [v4], "AAAA": [v6]}));
        }
        zone.insert("rebind.test".into(), json!({"A": ["127.0.0.1"]}));
        zone.insert("private.test".into(), json!({"A": ["192.168.77.7"]}));
        zone.insert("mixed.test".into(), json!({"A": ["127.0.0.1", v4]}));
        zone.insert("v6only.test".into(), json!({"AAAA": [v6]}));
        write("zone.json", serde_json::Value::Object(zone).to_string());
    }

    fn make_certificates(&self) {
        let sans: Vec<String> = CERT_NAMES.iter().map(|n| format!("DNS:{n}")).collect();
        // Extensions a strict verifier (webpki) wants: a CA marked as one,
        // a leaf for server auth with its names in subjectAltName.
        let config = format!(
            "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = warden test CA\n\
             [ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n\
             subjectKeyIdentifier = hash\n\
             [leaf]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature\n\
             extendedKeyUsage = serverAuth\nsubjectAltName = {}\n\
             subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n",
            sans.join(",")
        );
        std::fs::write(self.path("openssl.cnf"), config).unwrap();
        // Run in the folder, so every path is a plain word of `args`.
        let openssl = |args: &str| {
            run(Command::new("openssl")
                .current_dir(self.dir.path())
                .args(args.split_whitespace()));
        };
        let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        let req = "req -config openssl.cnf";
        openssl(&format!(
            "{req} -x509 -extensions ca {key} -keyout ca.key -out ca.pem -days 30"
        ));
        openssl(&format!(
            "{req} -new -subj /CN=allowed.test {key} -keyout server.key -out server.csr"
        ));
        openssl(
            "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 2 -days 30 \
             -extfile openssl.cnf -extensions leaf -out server.pem",
        );
        for key in ["ca.key", "server.key"] {
            std::fs::set_permissions(self.path(key), PermissionsExt::from_mode(0o600)).unwrap();
        }
        std::fs::set_permissions(&self.ca, PermissionsExt::from_mode(0o644)).unwrap();
    }

    /// A bare repository with one commit, served as static files: what a
    /// dumb-HTTP clone needs (`update-server-info` writes info/refs). The
    /// same commit in `SMART_REPO`, under the folder given as --git-root.
    fn make_repository(&self) {
        let (bare, work) = (self.path("www/repo.git"), self.path("work"));
        let (bare, work) = (bare.to_str().unwrap(), work.to_str().unwrap());
        run(&mut git(&["init", "-q", "--bare", "-b", "main", bare]));
        run(&mut git(&["init", "-q", "-b", "main", work]));
        std::fs::write(Path::new(work).join(REPO_FILE.0), REPO_FILE.1).unwrap();
        run(&mut git(&["-C", work, "add", REPO_FILE.0]));
        run(&mut git(&[
            "-C",
            work,
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@internet.test",
            "commit",
            "-q",
            "-m",
            "first commit",
        ]));
        run(&mut git(&["-C", work, "push", "-q", bare, "main"]));
        run(&mut git(&["--git-dir", bare, "update-server-info"]));
        let smart = self.smart_repository();
        let smart = smart.to_str().unwrap();
        run(&mut git(&["init", "-q", "--bare", "-b", "main", smart]));
        run(&mut git(&["-C", work, "push", "-q", smart, "main"]));
    }

    /// Where `SMART_REPO` lives on the internet's side, to look into it.
    pub fn smart_repository(&self) -> PathBuf {
        let name = SMART_REPO.strip_prefix("/smart/").unwrap();
        self.path("git").join(name)
    }

    fn start_server(&mut self) {
        let log = std::fs::File::create(self.path("serve.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.internet_ns, python()])
            .arg(script("serve.py"))
            .args(["--v4", &self.v4.to_string(), "--v6", &self.v6.to_string()])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--cert")
            .arg(self.path("server.pem"))
            .arg("--key")
            .arg(self.path("server.key"))
            .arg("--www")
            .arg(self.path("www"))
            .arg("--zone")
            .arg(self.path("zone.json"))
            .arg("--git-root")
            .arg(self.path("git"))
            .args(["--parent", &std::process::id().to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("ip netns exec python3 serve.py");
        self.server = Some(child);
    }

    /// Waits for the server's sockets, then for answers seen from the
    /// machine namespace; then empties the logs, so they hold only what
    /// the test itself caused.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_LIMIT;
        while !self.path("ready").exists() {
            if let Some(status) = self.server.as_mut().unwrap().try_wait().unwrap() {
                panic!("serve.py exited ({status}):\n{}", self.read("serve.log"));
            }
            assert!(
                Instant::now() < deadline,
                "serve.py not ready within {READY_LIMIT:?}:\n{}",
                self.read("serve.log")
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut failure = String::new();
        while Instant::now() < deadline {
            match self.probe() {
                Ok(()) => {
                    for log in [
                        "dns.log",
                        "http.log",
                        "connections.log",
                        "headers.log",
                        "provider.log",
                    ] {
                        std::fs::write(self.path(log), "").unwrap();
                    }
                    return;
                }
                Err(e) => failure = e,
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the internet did not answer within {READY_LIMIT:?}: {failure}\nserve.log:\n{}",
            self.read("serve.log")
        );
    }

    fn probe(&self) -> Result<(), String> {
        let checks = [
            (
                self.dns_query("allowed.test", "A"),
                format!("A {}", self.v4),
            ),
            (
                self.curl("http", "allowed.test", "/"),
                "hello allowed.test /".into(),
            ),
            (
                self.curl("https", "allowed.test", "/"),
                "hello allowed.test /".into(),
            ),
        ];
        for (got, want) in checks {
            if !got.contains(&want) {
                return Err(format!("wanted {want:?}, got {got:?}"));
            }
        }
        Ok(())
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// A command run in the machine namespace (as root, without warden),
    /// with no proxy from the host's environment.
    pub fn in_machine(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.machine_ns, program]);
        for var in PROXY_VARS {
            cmd.env_remove(var);
        }
        cmd
    }

    /// `sh -c line` in the machine namespace (as root, without warden), in
    /// a mount namespace of its own where /etc/resolv.conf and /etc/hosts
    /// are this internet's: names resolve as they will for warden.
    pub fn in_machine_sh(&self, line: &str) -> Command {
        let script = format!(
            "mount --bind '{}' /etc/resolv.conf && mount --bind '{}' /etc/hosts && {line}",
            self.resolv_conf().display(),
            self.hosts().display()
        );
        let mut cmd = self.in_machine("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
        cmd
    }

    /// Asks the internet's DNS server, from the machine namespace, for
    /// `qtype` ("A" or "AAAA") records of `name`: the rcode, then one
    /// "TYPE ADDRESS" line per answer (tests/internet/dns_query.py).
    pub fn dns_query(&self, name: &str, qtype: &str) -> String {
        let out = self
            .in_machine(python())
            .arg(script("dns_query.py"))
            .args([&self.v4.to_string(), name, qtype])
            .output()
            .expect("dns_query.py");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// curl from the machine namespace, with `host` pinned to the
    /// internet's v4 address and the test CA trusted: the body, or curl's
    /// error.
    pub fn curl(&self, scheme: &str, host: &str, path: &str) -> String {
        let port = if scheme == "https" { 443 } else { 80 };
        let out = self
            .in_machine("curl")
            .args(["-sS", "--max-time", "5", "--noproxy", "*", "--cacert"])
            .arg(&self.ca)
            .arg("--resolve")
            .arg(format!("{host}:{port}:{}", self.v4))
            .arg(format!("{scheme}://{host}{path}"))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// A file holding `nameserver <v4>`, to bind over the machine's
    /// /etc/resolv.conf.
    pub fn resolv_conf(&self) -> PathBuf {
        self.path("resolv.conf")
    }

    /// A file naming only localhost, to bind over the machine's /etc/hosts.
    pub fn hosts(&self) -> PathBuf {
        self.path("hosts")
    }

    /// Every DNS query answered since `start`, one a line:
    /// `<name> <type> <rcode> <answers> from <client address>`.
    pub fn dns_queries(&self) -> String {
        self.read("dns.log")
    }

    /// Every HTTP(S) request seen since `start`, one a line:
    /// `<http|https> <method> <Host> <path> from <client address>`.
    pub fn http_requests(&self) -> String {
        self.read("http.log")
    }

    /// The headers of every request to /echo... since `start`, one a line:
    /// `<http|https> <method> <path> <JSON object: name as received ->
    /// value>` (a repeated name's values joined with ", ").
    pub fn headers_log(&self) -> String {
        self.read("headers.log")
    }

    /// Every request the internet's model providers answered since
    /// `start`: one JSON object a line (`path`, `model`, `key`, `stream`),
    /// and `cut_by_client` where a stream's reader went away.
    pub fn provider_log(&self) -> Vec<serde_json::Value> {
        self.read("provider.log")
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Every connection to TCP 22 or 8080 and datagram to UDP 9999 since
    /// `start`: `<tcp|udp> <port> from <client address>`.
    pub fn connections(&self) -> String {
        self.read("connections.log")
    }
}

impl Drop for Internet {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        for ns in [&self.machine_ns, &self.internet_ns] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A TCP listener that takes connections and says so (a line `accepted`
/// each), on `addr:port` in a namespace or the host's: proof that nothing
/// reached a place. Killed when dropped.
pub struct Listener(Option<Child>);

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Listener {
    /// Listens on `addr:port`, in the namespace `netns` or the host's.
    pub fn start(netns: Option<&str>, addr: &str, port: u16) -> Listener {
        use std::io::BufRead;
        let script = format!(
            "import socket\n\
             s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('{addr}', {port})); s.listen(); print('ready', flush=True)\n\
             while True:\n    c,_=s.accept(); print('accepted', flush=True); c.close()\n"
        );
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, python()]);
                c
            }
            None => Command::new(python()),
        };
        let mut child = cmd
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert_eq!(first.trim(), "ready");
        Listener(Some(child))
    }

    /// Ends it; fails the test if it took a connection.
    pub fn took_nothing(mut self, what: &str) {
        let mut child = self.0.take().unwrap();
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let taken = String::from_utf8_lossy(&out.stdout);
        assert!(!taken.contains("accepted"), "{what}: {taken}");
    }
}
