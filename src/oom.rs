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
/// machine has a memory cgroup of its own to read.
pub fn kills() -> Option<u64> {
    SOURCES.iter().find_map(|path| {
        std::fs::read_to_string(path)
            .ok()
            .as_deref()
            .and_then(parse_kills)
    })
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
}
