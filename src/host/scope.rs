//! Where systemd runs, what the launcher starts that must outlive it (a
//! VM's QEMU and relay, a machine `warden machine serve` starts) goes into
//! a systemd scope of its own, not the cgroup of the owner's program.

use std::path::Path;

/// Whether systemd manages this host (and `systemd-run` is here).
pub fn systemd_runs() -> bool {
    Path::new("/run/systemd/system").is_dir()
        && std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| dir.join("systemd-run").is_file())
        })
}

/// Pure: the command that runs `program args` in a systemd scope of its
/// own where systemd runs, so that stopping or restarting the owner's
/// program (its unit's cgroup) does not stop the VM; as given elsewhere
/// (the processes are in sessions of their own either way).
pub fn in_own_scope(
    systemd: bool,
    unit: &str,
    program: &str,
    args: Vec<String>,
) -> (String, Vec<String>) {
    if !systemd {
        return (program.to_string(), args);
    }
    let mut scoped = vec![
        "--scope".to_string(),
        "--quiet".into(),
        "--collect".into(),
        format!("--unit={unit}"),
        "--".into(),
        program.to_string(),
    ];
    scoped.extend(args);
    ("systemd-run".into(), scoped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_of_its_own_only_where_systemd_runs() {
        let args = vec!["-m".to_string(), "512".into()];
        assert_eq!(
            in_own_scope(false, "warden-a-qemu", "/usr/bin/qemu", args.clone()),
            ("/usr/bin/qemu".to_string(), args.clone())
        );
        let (program, scoped) = in_own_scope(true, "warden-a-qemu", "/usr/bin/qemu", args);
        assert_eq!(program, "systemd-run");
        assert_eq!(
            scoped,
            [
                "--scope",
                "--quiet",
                "--collect",
                "--unit=warden-a-qemu",
                "--",
                "/usr/bin/qemu",
                "-m",
                "512"
            ]
        );
    }
}
