//! A test machine: warden as PID 1 of a fresh PID, mount and network
//! namespace, with its own copies of /etc/passwd and /etc/group bind-mounted
//! over the real ones (so the host's are never touched) and its layout in a
//! temp folder. `internet` builds a network for it to reach.
#![allow(dead_code)]

pub mod attacks;
pub mod docker;
pub mod internet;
pub mod kube;
pub mod machine;
pub mod net;
pub mod rootless;
pub mod serve;
pub mod vm;

use serde_json::{json, Value};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warden::wire::client::Client;

pub const RUNTIME_UID: u32 = 2000;
pub const SHELL_UID: u32 = 2001;

/// Privileged tests need root. Outside CI they skip, saying why; under
/// CI=true a missing prerequisite is a failure.
pub fn privileged(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: needs root, and CI=true forbids skipping");
    }
    skipped(&format!(
        "{test}: needs root (namespaces, bind mounts, setuid)"
    ));
    false
}

/// Says a test skipped, and why, where scripts/test counts it.
pub fn skipped(reason: &str) {
    eprintln!("SKIPPED {reason}");
    // cargo hides a passing test's output: scripts/test reads this file.
    if let Ok(path) = std::env::var("WARDEN_TEST_SKIPS") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
            let _ = writeln!(f, "{reason}");
        }
    }
}

/// Bytes a program printed, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What a command printed: its stdout, then its stderr.
pub fn printed(out: &impl Printed) -> String {
    let (stdout, stderr) = out.streams();
    text(stdout) + &text(stderr)
}

/// A command's output, run on the host or through warden.
pub trait Printed {
    fn streams(&self) -> (&[u8], &[u8]);
    /// Whether it exited with status 0.
    fn succeeded(&self) -> bool;
}

impl Printed for std::process::Output {
    fn streams(&self) -> (&[u8], &[u8]) {
        (&self.stdout, &self.stderr)
    }
    fn succeeded(&self) -> bool {
        self.status.code() == Some(0)
    }
}

impl Printed for warden::wire::client::Output {
    fn streams(&self) -> (&[u8], &[u8]) {
        (&self.stdout, &self.stderr)
    }
    fn succeeded(&self) -> bool {
        self.exit.status == 0
    }
}

pub fn warden_bin() -> &'static str {
    env!("CARGO_BIN_EXE_warden")
}

/// The key of `Machine::keyed`.
pub const HOST_KEY: &str = "test-key-0123456789abcdef0123456789abcdef";

pub struct Options {
    pub main: Vec<String>,
    /// Extra machine config fields.
    pub config: Value,
    /// Run as PID 1 of a new PID namespace (else: only a mount namespace).
    pub pid_namespace: bool,
    /// Lines appended to the machine's /etc/passwd copy before boot.
    pub passwd_extra: String,
    /// Extra environment for warden itself.
    pub env: Vec<(String, String)>,
    /// A network namespace to run in (`ip netns exec`), e.g. an
    /// `Internet`'s `machine_ns`. None: a fresh, empty one of its own, so
    /// that warden's firewall can never touch the host's.
    pub netns: Option<String>,
    /// Extra `mount --bind SOURCE TARGET`, done before warden starts (e.g.
    /// an `Internet`'s `resolv_conf()` over /etc/resolv.conf).
    pub binds: Vec<(PathBuf, PathBuf)>,
    /// Capabilities (like "net_admin") removed from warden's bounding set.
    pub drop_caps: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            main: Vec::new(),
            config: json!({}),
            pid_namespace: true,
            passwd_extra: String::new(),
            env: Vec::new(),
            netns: None,
            binds: Vec::new(),
            drop_caps: Vec::new(),
        }
    }
}

/// `text` as one sh word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The sh script that prepares the mount namespace, then execs warden
/// (through setpriv when capabilities are dropped: it execs too, so warden
/// stays PID 1).
fn boot_script(etc: &Path, opts: &Options) -> String {
    let etc = etc.to_str().unwrap();
    let mut binds = vec![
        (format!("{etc}/passwd"), "/etc/passwd".to_string()),
        (format!("{etc}/group"), "/etc/group".to_string()),
    ];
    binds.extend(
        opts.binds
            .iter()
            .map(|(src, dst)| (src.display().to_string(), dst.display().to_string())),
    );
    let mut script: Vec<String> = binds
        .iter()
        .map(|(src, dst)| format!("mount --bind {} {}", quote(src), quote(dst)))
        .collect();
    if opts.drop_caps.is_empty() {
        script.push("exec \"$@\"".into());
    } else {
        let caps: Vec<String> = opts.drop_caps.iter().map(|c| format!("-{c}")).collect();
        script.push(format!(
            "exec setpriv --bounding-set {} \"$@\"",
            quote(&caps.join(","))
        ));
    }
    script.join(" && ")
}

pub struct Machine {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub home: PathBuf,
    pub shell_home: PathBuf,
    child: Option<Child>,
    log: PathBuf,
}

impl Machine {
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A fresh machine folder, with its own /etc/passwd and /etc/group.
    pub fn folder(passwd_extra: &str) -> tempfile::TempDir {
        // Not under /tmp, which commands may write: the machine's files must
        // be out of Landlock's grants, as they are in a real machine.
        let dir = tempfile::Builder::new()
            .prefix("warden-test-")
            .tempdir_in("/var/tmp")
            .unwrap();
        // Other users (runtime, shell) must be able to pass through.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap() + passwd_extra;
        std::fs::write(etc.join("passwd"), passwd).unwrap();
        std::fs::copy("/etc/group", etc.join("group")).unwrap();
        dir
    }

    /// Starts warden; does not wait for it to be ready.
    pub fn start(opts: Options) -> Machine {
        let dir = Machine::folder(&opts.passwd_extra);
        Machine::start_in(dir, opts)
    }

    /// Starts warden in a folder made by `folder` (perhaps booted before).
    pub fn start_in(dir: tempfile::TempDir, opts: Options) -> Machine {
        let root = dir.path().to_path_buf();
        let etc = root.join("etc");
        let home = root.join("home/runtime");
        let shell_home = root.join("home/shell");
        let socket = root.join("run/api.sock");
        let mut config = json!({
            "runtime": {"name": "runtime", "uid": RUNTIME_UID, "gid": RUNTIME_UID, "home": home},
            "shell": {"name": "shell", "uid": SHELL_UID, "gid": SHELL_UID, "home": shell_home},
            "socket": socket,
            "shell_tmp": root.join("var/shell-tmp"),
            "grace_period_ms": 2000,
            "drain_ms": 500,
        });
        if let (Value::Object(base), Value::Object(extra)) = (&mut config, &opts.config) {
            base.extend(extra.clone());
        }
        let config_path = root.join("machine.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let log = root.join("warden.log");
        let script = boot_script(&etc, &opts);
        // `ip netns exec` execs unshare: the child's pid stays unshare's.
        let mut cmd = match &opts.netns {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns, "unshare"]);
                cmd
            }
            None => {
                let mut cmd = Command::new("unshare");
                cmd.arg("--net");
                cmd
            }
        };
        if opts.pid_namespace {
            cmd.args(["--pid", "--fork", "--mount-proc"]);
        }
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(warden_bin())
        .args(["init", "--config"])
        .arg(&config_path)
        .arg("--")
        .args(&opts.main)
        .envs(opts.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::options().append(true).open(&log).unwrap());
        let child = cmd.spawn().expect("unshare");
        Machine {
            dir,
            socket,
            home,
            shell_home,
            child: Some(child),
            log,
        }
    }

    /// Starts warden and waits until its API answers.
    pub fn boot(opts: Options) -> Machine {
        let m = Machine::start(opts);
        m.wait_ready();
        m
    }

    /// Boots with default options and waits until warden has worked out
    /// its default hosts (which it does as shell, with the machine's
    /// tools): from then on shell's processes are the test's alone.
    pub fn boot_quiet() -> Machine {
        let m = Machine::boot(Options::default());
        let deadline = Instant::now() + Duration::from_secs(30);
        while m
            .client()
            .status()
            .unwrap()
            .proxy
            .is_some_and(|p| p.hosts_from.contains("being worked out"))
        {
            assert!(
                Instant::now() < deadline,
                "the default hosts were never worked out"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    /// A machine with a host socket and a key file (`HOST_KEY`, mode
    /// `key_mode`); the host socket's path. Started, not yet waited for.
    pub fn keyed(key_mode: u32) -> (Machine, PathBuf) {
        let dir = Machine::folder("");
        let key = dir.path().join("key");
        std::fs::write(&key, format!("{HOST_KEY}\n")).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(key_mode)).unwrap();
        let host = dir.path().join("host/api.sock");
        std::fs::create_dir(dir.path().join("host")).unwrap();
        let m = Machine::start_in(
            dir,
            Options {
                config: json!({"host_socket": host, "key_file": key}),
                ..Default::default()
            },
        );
        (m, host)
    }

    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if Client::connect(&self.socket).is_ok() {
                return;
            }
            if Instant::now() > deadline {
                panic!("warden did not become ready; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until status lists at least `n` running commands.
    pub fn wait_running(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.client().status().unwrap().running.len() < n {
            assert!(
                Instant::now() < deadline,
                "fewer than {n} commands started\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket)
            .unwrap_or_else(|e| panic!("connect: {e}\nlog:\n{}", self.log()))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// warden's pid on the host (the only child of unshare --fork, or the
    /// unshare process itself, which execs it, without a PID namespace).
    pub fn warden_pid(&self) -> i32 {
        let unshare = self.child.as_ref().unwrap().id() as i32;
        let children = format!("/proc/{unshare}/task/{unshare}/children");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&children).unwrap_or_default();
            if let Some(pid) = text.split_whitespace().next() {
                return pid.parse().unwrap();
            }
            let exe = std::fs::read_link(format!("/proc/{unshare}/exe")).unwrap_or_default();
            if exe.ends_with("warden") {
                return unshare;
            }
            if Instant::now() > deadline {
                panic!("cannot find warden's pid; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Runs `f` on a thread moved into warden's network namespace. What
    /// belongs to a network namespace (IP, and abstract unix sockets too)
    /// is out of reach of the test's own thread.
    pub fn in_netns<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let ns = std::fs::File::open(format!("/proc/{}/ns/net", self.warden_pid())).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                // Only this short-lived thread changes namespace.
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    pub fn kill(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.warden_pid()), sig).unwrap();
    }

    /// Waits for warden to exit; returns its exit code.
    pub fn wait(&mut self, limit: Duration) -> i32 {
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                use std::os::unix::process::ExitStatusExt;
                return status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("warden did not exit within {limit:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for warden to exit and hands back its folder, to boot again.
    pub fn stop(mut self) -> tempfile::TempDir {
        if self.child.is_some() {
            self.kill(nix::sys::signal::Signal::SIGTERM);
            self.wait(Duration::from_secs(30));
        }
        let placeholder = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, placeholder)
    }

    pub fn audit_path(&self) -> PathBuf {
        self.home.join("data/audit/warden.jsonl")
    }

    pub fn audit(&self) -> Vec<Value> {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(self.audit_path()) {
            f.read_to_string(&mut text).unwrap();
        }
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn audit_kinds(&self, kind: &str) -> Vec<Value> {
        self.audit()
            .into_iter()
            .filter(|v| v["kind"] == kind)
            .collect()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL of PID 1 ends its whole namespace.
            let unshare = child.id();
            let children = format!("/proc/{unshare}/task/{unshare}/children");
            let text = std::fs::read_to_string(children).unwrap_or_default();
            for pid in text
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How many processes of `uid` on the host run exactly `argv` (the test
/// machines' processes are all visible from the host's PID namespace).
pub fn processes_of(uid: u32, argv: &[&str]) -> usize {
    use std::os::unix::fs::MetadataExt;
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want))
        .count()
}

pub fn sh(line: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), line.into()]
}

/// The layer `name` of a status (every status lists every layer).
pub fn layer<'a>(status: &'a warden::wire::Status, name: &str) -> &'a warden::wire::LayerState {
    status
        .layers
        .iter()
        .find(|l| l.layer == name)
        .unwrap_or_else(|| panic!("no layer {name} in {:?}", status.layers))
}
