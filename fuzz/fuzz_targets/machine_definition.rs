//! The machine definition parser: never panics; every refusal names the
//! file; a definition it accepts has a valid id, lends at absolute,
//! normalized places that shadow no system path, no user's home (but the
//! agent's routines folder) and no other lend, absolute dockerfile, setup
//! and workspace paths, and valid names.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::{Component, Path, PathBuf};
use warden::host::definition::{Definition, Source, Workspace};

/// Written out again here (not taken from the parser) so the target
/// checks the rule, not the parser's copy of it.
const SYSTEM: [&str; 15] = [
    "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys",
    "/dev", "/run", "/var", "/boot", "/root",
];

/// The users' homes: a lend may be neither in one nor above one, but for
/// the agent's routines folder. The rest of /home is free, so a project
/// can sit at the path it has on the host.
const HOMES: [&str; 2] = ["/home/runtime", "/home/shell"];
const ROUTINES: &str = "/home/runtime/workspace/routines";

fn name_ok(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && !["PATH", "HOME", "USER", "LOGNAME", "LANG"].contains(&name)
        && !name.to_lowercase().ends_with("_proxy")
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = Path::new("/defs/fuzz.json");
    let d = match Definition::parse(file, text) {
        Ok(d) => d,
        Err(e) => {
            assert!(e.to_string().starts_with("/defs/fuzz.json: "));
            return;
        }
    };
    let id = d.id.as_bytes();
    assert!((1..=31).contains(&id.len()), "{:?}", d.id);
    assert!(id[0].is_ascii_lowercase() || id[0].is_ascii_digit());
    assert!(id
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-'));
    assert_eq!(d.container("p"), format!("p-{}", d.id));

    for (i, lend) in d.lend.iter().enumerate() {
        assert!(lend.host.is_absolute());
        assert!(lend.at.is_absolute());
        // Normalized: rebuilding from components changes nothing, and
        // there is no `..`.
        let rebuilt: PathBuf = lend.at.components().collect();
        assert_eq!(rebuilt.as_os_str(), lend.at.as_os_str(), "{:?}", lend.at);
        assert!(lend
            .at
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_))));
        assert_ne!(lend.at, Path::new("/"));
        for system in SYSTEM {
            assert!(!lend.at.starts_with(system), "{:?}", lend.at);
        }
        if lend.at != Path::new(ROUTINES) {
            for home in HOMES {
                let home = Path::new(home);
                assert!(
                    !lend.at.starts_with(home) && !home.starts_with(&lend.at),
                    "{:?}",
                    lend.at
                );
            }
        }
        for other in &d.lend[..i] {
            assert!(!lend.at.starts_with(&other.at) && !other.at.starts_with(&lend.at));
        }
        for side in [&lend.host, &lend.at] {
            let s = side.to_str().unwrap();
            assert!(!s.contains([':', ',']) && !s.chars().any(char::is_control));
        }
    }
    match &d.source {
        Source::Dockerfile(p) => assert!(p.is_absolute()),
        Source::Image(i) => {
            assert!(!i.is_empty() && !i.chars().any(|c| c.is_whitespace() || c.is_control()))
        }
    }
    if let Some(setup) = &d.setup {
        assert!(setup.is_absolute());
    }
    if let Workspace::Folder(p) = &d.workspace {
        assert!(p.is_absolute());
    }
    assert!(d.env.keys().all(|n| name_ok(n)));
    assert!(d.env.values().all(|v| !v.contains('\0')));
    assert!(d.keys.len() <= 64 && d.keys.iter().all(|k| name_ok(k) && !d.env.contains_key(k)));
    for (i, k) in d.keys.iter().enumerate() {
        assert!(!d.keys[..i].contains(k));
    }
    if let Some(hosts) = &d.hosts {
        assert!(warden::shared::egress::hosts::HostList::parse(hosts, &[80, 443]).is_ok());
    }
    // Pure: the same text gives the same definition.
    assert_eq!(Definition::parse(file, text).ok(), Some(d));
});
