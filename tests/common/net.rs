//! A test machine on the tests' own internet (`internet`): warden as PID 1
//! in the internet's machine namespace, with a network policy of the
//! test's, and real clients run as shell through the API.

use super::internet::Internet;
use super::{Machine, Options};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use warden::wire::client::Output;
use warden::wire::RunRequest;

/// A machine on the internet, with the network policy `network`.
pub struct Net {
    pub internet: Internet,
    pub machine: Machine,
    pub policy_dir: PathBuf,
    pub ca: PathBuf,
}

pub fn policy(internet: &Internet) -> Value {
    json!({
        "hosts": ["allowed.test", "*.allowed.test", "rebind.test", "private.test",
                  "mixed.test", "v6only.test", "git.allowed.test:22"],
        // The internet's addresses are private ones: listed, as an owner
        // would list an internal mirror.
        "allow_addresses": [format!("{}/32", internet.v4), format!("{}/128", internet.v6)],
    })
}

pub fn boot(network: impl FnOnce(&Internet) -> Value, tweak: impl FnOnce(&mut Options)) -> Net {
    let internet = Internet::start();
    let policy_dir = internet.dir.path().join("policy");
    std::fs::create_dir_all(&policy_dir).unwrap();
    std::fs::write(
        policy_dir.join("network.json"),
        network(&internet).to_string(),
    )
    .unwrap();
    let mut opts = Options {
        config: json!({"policy_dir": policy_dir}),
        netns: Some(internet.machine_ns.clone()),
        binds: vec![
            (internet.resolv_conf(), "/etc/resolv.conf".into()),
            (internet.hosts(), "/etc/hosts".into()),
        ],
        ..Options::default()
    };
    tweak(&mut opts);
    let machine = Machine::boot(opts);
    // Where shell may read it (Landlock grants shell its home).
    let ca = machine.shell_home.join("ca.pem");
    std::fs::copy(&internet.ca, &ca).unwrap();
    std::os::unix::fs::chown(&ca, Some(super::SHELL_UID), Some(super::SHELL_UID)).unwrap();
    Net {
        internet,
        machine,
        policy_dir,
        ca,
    }
}

impl Net {
    pub fn sh(&self, line: &str) -> Output {
        self.machine
            .client()
            .run(RunRequest {
                shell: Some(line.into()),
                timeout_ms: Some(60_000),
                ..Default::default()
            })
            .unwrap()
    }

    /// stdout and stderr of a line run as shell, with its status.
    pub fn text(&self, line: &str) -> (i32, String) {
        let out = self.sh(line);
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.exit.status, text)
    }

    pub fn ca(&self) -> &Path {
        &self.ca
    }

    /// The error a command gets when warden refuses to run it.
    pub fn refused_run(&self) -> String {
        self.machine
            .client()
            .run(RunRequest {
                argv: Some(vec!["true".into()]),
                ..Default::default()
            })
            .unwrap_err()
            .to_string()
    }

    pub fn egress(&self) -> Vec<Value> {
        self.machine.audit_kinds("egress")
    }

    /// The egress lines once there is one for each of `hosts` (a line is
    /// written when its connection ends, a moment after the client saw
    /// it end), waiting at most 10 s.
    pub fn egress_for(&self, hosts: &[&str]) -> Vec<Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let lines = self.egress();
            let all = hosts.iter().all(|h| lines.iter().any(|l| l["host"] == *h));
            if all || std::time::Instant::now() > deadline {
                return lines;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
