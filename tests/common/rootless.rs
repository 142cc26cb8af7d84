//! Rootless machines, for the launcher's tests: a plain user with
//! subordinate ids, the base image in their own storage, and machines
//! made and removed by them.

use super::machine::{image_id, machine_id, show, TestMachine, IMAGE};
use super::{text, warden_bin};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Instant;

/// A plain user with subordinate ids and the base image in their own
/// storage: the owner of rootless machines. Made once per test run (the
/// image is loaded again only when it changed).
pub struct Owner {
    pub name: &'static str,
    pub uid: u32,
    /// A copy of warden the owner can run wherever the checkout is.
    pub bin: PathBuf,
}

pub const OWNER: &str = "warden-owner";

pub fn owner() -> &'static Owner {
    static OWNER_ONCE: std::sync::OnceLock<Owner> = std::sync::OnceLock::new();
    OWNER_ONCE.get_or_init(|| {
        if Command::new("id")
            .arg(OWNER)
            .output()
            .unwrap()
            .status
            .code()
            != Some(0)
        {
            let out = Command::new("useradd")
                .args(["-m", "-s", "/bin/sh", OWNER])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", show("useradd", &out));
        }
        for file in ["/etc/subuid", "/etc/subgid"] {
            let listed = std::fs::read_to_string(file)
                .unwrap_or_default()
                .lines()
                .any(|l| l.starts_with(&format!("{OWNER}:")));
            if !listed {
                let out = Command::new("usermod")
                    .args(["--add-subuids", "400000-465535"])
                    .args(["--add-subgids", "400000-465535", OWNER])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", show("usermod", &out));
            }
        }
        let uid = text(
            &Command::new("id")
                .args(["-u", OWNER])
                .output()
                .unwrap()
                .stdout,
        )
        .trim()
        .parse()
        .unwrap();
        // One fixed copy, replaced by rename (a copy still running is kept
        // by its inode).
        let bin = PathBuf::from(format!("/var/tmp/{OWNER}-warden"));
        let fresh = PathBuf::from(format!("/var/tmp/{OWNER}-warden.{}", std::process::id()));
        std::fs::copy(warden_bin(), &fresh).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&fresh, &bin).unwrap();
        let owner = Owner {
            name: OWNER,
            uid,
            bin,
        };
        owner.load(IMAGE);
        owner
    })
}

impl Owner {
    /// Loads `image` from root's storage into the owner's, when theirs
    /// differs.
    pub fn load(&self, image: &str) {
        let theirs = text(
            &self
                .command(
                    "podman",
                    &["image", "inspect", "--format", "{{.Id}}", image],
                )
                .output()
                .unwrap()
                .stdout,
        );
        if theirs.trim() == image_id(image) {
            return;
        }
        let started = Instant::now();
        let out = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "podman save {image} | runuser -u {} -- podman load",
                    self.name
                ),
            ])
            .current_dir("/")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show("podman load", &out));
        eprintln!(
            "{image} loaded for {} in {:.1} s",
            self.name,
            started.elapsed().as_secs_f64()
        );
    }

    /// `program args` as the owner (runuser sets HOME and USER).
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new("runuser");
        command
            .args(["-u", self.name, "--", program])
            .args(args)
            .current_dir("/")
            .stdin(Stdio::null());
        command
    }

    pub fn warden(&self, args: &[&str]) -> Output {
        self.command(self.bin.to_str().unwrap(), args)
            .output()
            .unwrap()
    }

    pub fn state(&self, id: &str) -> PathBuf {
        PathBuf::from(format!(
            "/home/{}/.local/share/warden/machines/{id}",
            self.name
        ))
    }
}

/// A rootless machine, made and removed by the owner: its definition in a
/// folder the owner owns, with a folder lent for writing; `extra` is laid
/// over it.
pub fn rootless_machine(tag: &str, extra: serde_json::Value) -> TestMachine {
    let uid = nix::unistd::Uid::from_raw(owner().uid);
    let id = machine_id(tag);
    let state = owner().state(&id);
    let m = TestMachine::in_folder(
        id,
        tempfile::tempdir_in("/var/tmp").unwrap(),
        |args| owner().warden(args),
        state,
    );
    let out_dir = m.dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let mut definition = serde_json::json!({
        "image": IMAGE,
        "lend": [{"host": out_dir, "at": "/lent/out", "mode": "write"}],
    });
    if let (Some(d), Some(e)) = (definition.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    m.define(definition);
    for path in [m.dir.path(), &out_dir, &m.definition()] {
        nix::unistd::chown(path, Some(uid), None).unwrap();
    }
    m
}
