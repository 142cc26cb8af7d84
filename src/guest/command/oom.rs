//! Whether the kernel's OOM killer struck inside the machine's memory
//! limit: the count of its kills in the machine's own cgroup (`oom_kill`
//! in cgroup v2's `memory.events`, or in v1's `memory.oom_control`). A
//! command killed by SIGKILL while the count grew was stopped by the
//! machine's memory limit: its exit says `limit: memory`.

/// Where the count is, in the order looked at.
const SOURCES: [&str; 2] = [
    "/sys/fs/cgroup/memory.events",
    "/sys/fs/cgroup/memory/memory.oom_control",
];

/// Pure: the `oom_kill` count in either file's text.
pub fn parse_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// The OOM killer's kills in this machine's cgroup so far, when the
/// machine has a memory cgroup of its own to read. Asked before every
/// command: the file is found and opened once, then read again from its
/// start (a cgroup file is made anew at each read from offset 0).
pub fn kills() -> Option<u64> {
    static SOURCE: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    if let Some(file) = SOURCE.get() {
        return read_kills(file);
    }
    // Not kept while there is none: a cgroup mounted later is found.
    let file = SOURCES.iter().find_map(|p| std::fs::File::open(p).ok())?;
    read_kills(SOURCE.get_or_init(|| file))
}

/// The count in `file`, read from its start.
fn read_kills(file: &std::fs::File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    // memory.events is about 80 bytes, memory.oom_control about 40.
    let mut buf = [0u8; 512];
    let n = file.read_at(&mut buf, 0).ok()?;
    parse_kills(std::str::from_utf8(&buf[..n]).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let cases = [
            ("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", Some(3)),
            (
                "low 0\nhigh 0\nmax 2\noom 2\noom_kill 2\noom_group_kill 0\n",
                Some(2),
            ),
            ("oom_kill_disable 0\nunder_oom 0\n", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_kills(text), want, "{text:?}");
        }
    }

    #[test]
    fn an_open_file_is_read_again_from_its_start() {
        use std::io::{Seek, Write};
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
            .unwrap();
        assert_eq!(read_kills(&file), Some(3));
        file.set_len(0).unwrap();
        file.rewind().unwrap();
        file.write_all(b"low 0\nhigh 0\nmax 0\noom 7\noom_kill 7\n")
            .unwrap();
        assert_eq!(read_kills(&file), Some(7));
    }

    #[test]
    fn this_machines_own_count_reads_the_same_twice() {
        // Where a memory cgroup file is there (a machine with a limit),
        // the kernel makes it anew for each read from its start.
        match SOURCES.iter().find_map(|p| std::fs::File::open(p).ok()) {
            Some(file) => {
                let first = read_kills(&file);
                assert!(first.is_some(), "no oom_kill line in {SOURCES:?}");
                assert!(read_kills(&file) >= first);
            }
            None => eprintln!("no memory cgroup file here ({SOURCES:?}): nothing to read twice"),
        }
    }
}
