//! The engine's `create` command for a machine, built by a pure function
//! from a plan (`CreatePlan`), so that every option it passes is
//! table-tested; and the static warden the launcher lends to an image that
//! has none of its own.

use super::agent::{KeepId, Restart};
use super::definition::{Lend, LendMode};
use super::error::LaunchError;
use super::this_host::Engine;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Warden needs these as PID 1: users and layout (CHOWN, DAC_OVERRIDE,
/// FOWNER, SETUID, SETGID, SETPCAP), signals (KILL), the firewall
/// (NET_ADMIN) and its mounts (SYS_ADMIN). Nothing else is granted.
pub const CAPS: [&str; 9] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "NET_ADMIN",
    "SYS_ADMIN",
];

/// Where the launcher's own warden is mounted in an image without one.
pub const LENT_WARDEN: &str = "/usr/local/lib/warden/warden";

/// The image's users' ids (machine/README.md; warden makes them at boot
/// in an image that lacks them).
pub const RUNTIME_UID: u32 = 2000;
pub const SHELL_UID: u32 = 2001;

/// How warden becomes the machine's PID 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// The image's own entrypoint is warden (an image built from the base
    /// image): the command, if any, follows it.
    Image,
    /// The image has no warden: this static binary is mounted read-only
    /// and is the entrypoint.
    Lent(PathBuf),
}

/// Everything `podman create` (or `docker create`) is given.
#[derive(Debug, Clone)]
pub struct CreatePlan<'a> {
    pub engine: Engine,
    pub name: &'a str,
    pub id: &'a str,
    pub owner: u32,
    pub digest: &'a str,
    pub network: String,
    pub data_volume: &'a str,
    /// A volume's name or a host folder.
    pub workspace: String,
    pub state: &'a Path,
    pub ulimits: &'a [String],
    pub keep_id: KeepId,
    pub lends: &'a [Lend],
    pub dns: &'a [IpAddr],
    pub env: Vec<(&'a str, &'a str)>,
    /// (host port on 127.0.0.1, 0: the engine's choice; the machine's port).
    pub ports: Vec<(u16, u16)>,
    pub restart: Restart,
    /// CPUs, memory (bytes) and processes, when the engine can hold them.
    pub size: Option<(f64, u64, u64)>,
    pub entry: Entry,
    pub command: Option<&'a [String]>,
    pub image: &'a str,
}

/// With keep-id, the owner's uid mapped to the user's inside, and warden
/// root inside; none without.
fn keep_id_args(keep_id: KeepId) -> Vec<String> {
    let mut out = Vec::new();
    let keep = match keep_id {
        KeepId::Off => None,
        KeepId::Shell => Some(("shell", SHELL_UID)),
        KeepId::Runtime => Some(("runtime", RUNTIME_UID)),
    };
    if let Some((user, uid)) = keep {
        // The owner's uid is this user's inside; root inside is the first
        // subordinate id. keep-id would also make that user the default
        // one (warden is root), and, in an image without the user, add it
        // to /etc/passwd under the owner's name: under warden's instead.
        out.push(format!("--userns=keep-id:uid={uid},gid={uid}"));
        out.push("--user=0:0".into());
        out.push(format!(
            "--passwd-entry={user}:x:{uid}:{uid}:warden {user}:/home/{user}:/bin/sh"
        ));
    }
    out
}

/// Pure: the engine's arguments for the plan.
pub fn create_args(plan: &CreatePlan) -> Vec<String> {
    let s = plan.state.display();
    let mut args: Vec<String> = vec![
        "create".into(),
        format!("--name={}", plan.name),
        format!("--label=warden.owner={}", plan.owner),
        format!("--label=warden.machine={}", plan.id),
        format!("--label=warden.inputs={}", plan.digest),
        format!("--hostname={}", plan.id),
        format!("--network={}", plan.network),
        "--cap-drop=ALL".into(),
        format!("--volume={}:/home/runtime/data", plan.data_volume),
        format!("--volume={}:/home/runtime/workspace", plan.workspace),
        format!("--volume={s}/etc/machine.json:/etc/warden/machine.json:ro"),
        format!("--volume={s}/etc/key:/etc/warden/key:ro"),
        format!("--volume={s}/etc/policy:/etc/warden/policy:ro"),
        format!("--volume={s}/run:/run/warden-host"),
    ];
    args.extend(CAPS.iter().map(|c| format!("--cap-add={c}")));
    args.extend(plan.ulimits.iter().cloned());
    args.extend(keep_id_args(plan.keep_id));
    for lend in plan.lends {
        let mode = match lend.mode {
            LendMode::Read => "ro",
            LendMode::Write => "rw",
        };
        args.push(format!(
            "--volume={}:{}:{mode}",
            lend.host.display(),
            lend.at.display()
        ));
    }
    args.extend(plan.dns.iter().map(|ip| format!("--dns={ip}")));
    args.extend(plan.env.iter().map(|(k, v)| format!("--env={k}={v}")));
    // The host's loopback only: the owner's copy reaches the runtime's
    // server, nobody else on the host's networks does.
    args.extend(plan.ports.iter().map(|(host, port)| match host {
        0 => format!("--publish=127.0.0.1::{port}/tcp"),
        host => format!("--publish=127.0.0.1:{host}:{port}/tcp"),
    }));
    if let Some((cpus, memory, pids)) = plan.size {
        // Memory and swap alike: no swap beyond the memory.
        args.extend([
            format!("--cpus={cpus}"),
            format!("--memory={memory}"),
            format!("--memory-swap={memory}"),
            format!("--pids-limit={pids}"),
        ]);
    }
    if plan.restart != Restart::No {
        args.push(format!("--restart={}", plan.restart.engine_value()));
    }
    match &plan.entry {
        Entry::Image => {
            args.push(plan.image.into());
            args.extend(plan.command.unwrap_or_default().iter().cloned());
        }
        Entry::Lent(binary) => {
            args.push(format!("--volume={}:{LENT_WARDEN}:ro", binary.display()));
            args.push(format!("--entrypoint={LENT_WARDEN}"));
            args.extend([plan.image.into(), "init".into(), "--".into()]);
            args.extend(plan.command.unwrap_or_default().iter().cloned());
        }
    }
    args
}

/// Pure: whether an image's entrypoint (as the engine's inspect prints it
/// in JSON) is warden.
pub fn entrypoint_is_warden(json: &str) -> bool {
    serde_json::from_str::<Option<Vec<String>>>(json.trim())
        .ok()
        .flatten()
        .and_then(|argv| argv.into_iter().next())
        .is_some_and(|first| Path::new(&first).file_name().is_some_and(|n| n == "warden"))
}

/// Pure: whether an ELF file (its first bytes) needs no program
/// interpreter, so that it runs in any image. False for what is not a
/// 64-bit little-endian ELF file.
pub fn is_static_elf(bytes: &[u8]) -> bool {
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return false;
    }
    let (Some(phoff), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        return false;
    };
    const PT_INTERP: u32 = 3;
    (0..count as usize).all(|i| {
        let at = phoff as usize + i * size as usize;
        u32_at(at).is_some_and(|kind| kind != PT_INTERP)
    })
}

/// The static warden lent to images without one: `WARDEN_MACHINE_BINARY`
/// when set, else this very program when it is static.
pub fn static_warden() -> Result<PathBuf, LaunchError> {
    let (path, from) = match std::env::var_os("WARDEN_MACHINE_BINARY") {
        Some(path) => (PathBuf::from(path), "WARDEN_MACHINE_BINARY"),
        None => (
            std::fs::read_link("/proc/self/exe")
                .map_err(|e| LaunchError::new("this program", e.to_string()))?,
            "this warden",
        ),
    };
    let mut head = vec![0u8; 64 * 1024];
    let read = std::fs::File::open(&path).and_then(|mut f| {
        use std::io::Read;
        let n = f.read(&mut head)?;
        Ok(n)
    });
    match read {
        Ok(n) if is_static_elf(&head[..n]) => Ok(path),
        Ok(_) => Err(LaunchError::new(
            format!(
                "the image has no warden, and {from} ({}) is not a static binary to lend it",
                path.display()
            ),
            "set WARDEN_MACHINE_BINARY to a static warden (the release build is one)",
        )),
        Err(e) => Err(LaunchError::new(
            format!("{from} {}", path.display()),
            e.to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan<'a>(
        state: &'a Path,
        lends: &'a [Lend],
        command: Option<&'a [String]>,
    ) -> CreatePlan<'a> {
        CreatePlan {
            engine: Engine::Podman,
            name: "warden-a",
            id: "a",
            owner: 0,
            digest: "d",
            network: "bridge".into(),
            data_volume: "warden-a-data",
            workspace: "warden-a-work".into(),
            state,
            ulimits: &[],
            keep_id: KeepId::Off,
            lends,
            dns: &[],
            env: vec![],
            ports: vec![],
            restart: Restart::No,
            size: None,
            entry: Entry::Image,
            command,
            image: "img",
        }
    }

    fn has(args: &[String], want: &str) -> bool {
        args.iter().any(|a| a == want)
    }

    /// (plan, options args must hold, how args must end)
    type PlanCase<'a> = (CreatePlan<'a>, Vec<&'static str>, Vec<&'static str>);

    fn plans<'a>(state: &'a Path, lends: &'a [Lend], argv: &'a [String]) -> Vec<PlanCase<'a>> {
        vec![
            (
                CreatePlan {
                    ports: vec![(3100, 3000)],
                    restart: Restart::OnFailure,
                    ..plan(state, &[], None)
                },
                vec!["--publish=127.0.0.1:3100:3000/tcp", "--restart=on-failure"],
                vec![],
            ),
            (
                CreatePlan {
                    keep_id: KeepId::Runtime,
                    ..plan(state, lends, None)
                },
                vec![
                    "--userns=keep-id:uid=2000,gid=2000",
                    "--user=0:0",
                    "--passwd-entry=runtime:x:2000:2000:warden runtime:/home/runtime:/bin/sh",
                    "--volume=/home/me/p:/home/me/p:rw",
                ],
                vec![],
            ),
            (
                CreatePlan {
                    keep_id: KeepId::Shell,
                    ..plan(state, &[], None)
                },
                vec!["--userns=keep-id:uid=2001,gid=2001"],
                vec![],
            ),
            (
                CreatePlan {
                    entry: Entry::Lent("/opt/warden".into()),
                    ..plan(state, &[], Some(argv))
                },
                vec![
                    "--volume=/opt/warden:/usr/local/lib/warden/warden:ro",
                    "--entrypoint=/usr/local/lib/warden/warden",
                ],
                vec!["img", "init", "--", "node", "server.js"],
            ),
            (
                plan(state, &[], Some(argv)),
                vec![],
                vec!["img", "node", "server.js"],
            ),
        ]
    }

    #[test]
    fn create_args_table() {
        let state = Path::new("/s");
        let lends = [Lend {
            host: "/home/me/p".into(),
            at: "/home/me/p".into(),
            mode: LendMode::Write,
        }];
        let argv = vec!["node".to_string(), "server.js".to_string()];
        let base = create_args(&plan(state, &[], None));
        assert_eq!(
            base.last().map(String::as_str),
            Some("img"),
            "no command: the image's own"
        );
        assert!(has(&base, "--cap-drop=ALL"));
        assert_eq!(
            base.iter().filter(|a| a.starts_with("--cap-add=")).count(),
            CAPS.len()
        );
        assert!(!base
            .iter()
            .any(|a| a.starts_with("--publish") || a.starts_with("--restart")));
        for (plan, options, tail) in plans(state, &lends, &argv) {
            let args = create_args(&plan);
            for option in &options {
                assert!(has(&args, option), "{option} missing from {args:?}");
            }
            assert!(
                args.ends_with(&tail.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
                "{args:?} ends {tail:?}"
            );
        }
    }

    #[test]
    fn entrypoints_table() {
        let cases = [
            (r#"["/sbin/warden","init","--"]"#, true),
            (r#"["/usr/local/lib/warden/warden"]"#, true),
            (r#"["docker-entrypoint.sh"]"#, false),
            ("null", false),
            ("[]", false),
            ("<no value>", false),
        ];
        for (json, want) in cases {
            assert_eq!(entrypoint_is_warden(json), want, "{json}");
        }
    }

    #[test]
    fn static_elf_is_told_from_dynamic() {
        // Debian's programs are dynamic.
        let sh = std::fs::read("/bin/sh").unwrap();
        assert!(!is_static_elf(&sh));
        assert!(!is_static_elf(b"#!/bin/sh\n"));
        assert!(!is_static_elf(b"\x7fELF\x02\x01"));
        let release = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/x86_64-unknown-linux-gnu/release/warden");
        if let Ok(bytes) = std::fs::read(release) {
            assert!(is_static_elf(&bytes), "the release build is static");
        }
    }
}
