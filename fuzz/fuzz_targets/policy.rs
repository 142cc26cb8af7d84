//! The policy parser: the input is split into the four files at NUL
//! bytes. Never panics; a policy it accepts has only absolute paths.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use warden::shared::policy::Policy;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(4, '\0').map(String::from);
    let mut next = |name: &str| {
        (
            PathBuf::from(name),
            parts.next().unwrap_or_else(|| "{}".into()),
        )
    };
    let files = [
        next("landlock.json"),
        next("seccomp.json"),
        next("limits.json"),
        next("network.json"),
    ];
    if let Ok(p) = Policy::parse(&files) {
        let paths = p
            .landlock
            .read_exec
            .iter()
            .chain(&p.landlock.read_only)
            .chain(&p.landlock.read_write);
        for path in paths {
            assert!(path.is_absolute());
        }
        let _ = warden::guest::confine::rlimits(&p.limits);
    }
});
